"""One-launch split-K (kernels_triton/splitk_serial.py) against the tiled family's two-launch split-K
and cuBLAS, on the grid's starved deep-K shapes. Decides whether splitk_serial becomes a family.

Per shape: every config of a small sweep (tile x split) is built both ways with the same knobs;
each one-launch kernel passes the full checker (six checks, fresh inputs and edges included), the
two-launch one the random check (it is the searched family, checked in full there); then all of
them and the four nn baselines are timed together, interleaved (cudal2.timing.offline: GPU time).
Writes one CSV row per shape and a JSON with every timing, keyed by card and commit:

  python3 bench/splitk_serial.py --out bench/results/h200-sm90 [--shapes MxNxK,...] [--time-limit 420]
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import torch

from cudal2 import timing
from cudal2.baselines import best, prepare
from cudal2.check import CHECKS, check_kernel, make_inputs
from cudal2.device import current
from cudal2.problems import Problem, parse_shapes
from cudal2.spec import KernelSpec, is_valid
from cudal2.versions import collect, source_commit

# Starved shapes of the H200 grid search (2026-12-03: output tiles cannot fill the SMs, K >= 2048),
# where the search's best kernel was furthest below best-cublas (search_log.csv, 0.12-0.78x).
SHAPES = ("64x64x16384,64x64x8192,128x256x8192,256x128x12288,128x1024x12288,64x2048x8192,512x256x16384,"
          "512x64x12288,1024x64x12288,256x256x8192,1024x1024x4096,4096x256x4096")
TILES = ("bm=64 bn=64 bk=64 warps=4 stages=4", "bm=64 bn=128 bk=64 warps=4 stages=4",
         "bm=128 bn=64 bk=64 warps=4 stages=4", "bm=128 bn=128 bk=64 warps=8 stages=3",
         "bm=64 bn=64 bk=128 warps=4 stages=3", "bm=32 bn=64 bk=128 warps=4 stages=4")
SPLITS = (2, 4, 8, 16)
BASELINES = ("torch", "cublas-nn", "cublaslt-heuristic", "cublaslt-autotune")


def _launcher(mod, spec: KernelSpec, layout: str):
    from cudal2.backends.triton import spec_knobs      # the spec -> constexpr / launch-option mapping
    cex, opts = spec_knobs(spec, mod)
    return lambda a, b, c: mod.launch(a, b, c, layout, cex, opts)


def bench_shape(p: Problem, dev, log, min_ms: float, *, tiles=TILES, splits=SPLITS, where: str = "cuda",
                clock=None, serial_checks=CHECKS, min_calls: int = 30) -> dict:
    """One CSV row for p (plus every timing under "timings"). `where` / `clock` / `serial_checks`:
    the device, the clock and the one-launch kernel's checks (tests run it on CPU tensors under the
    Triton interpreter with a host clock, and leave out the edge shapes: 40 s each interpreted)."""
    from cudal2.kernels_triton import splitk_serial, tiled
    a, b = make_inputs(p, where, torch.Generator(device=where).manual_seed(p.M * 7 + p.N * 3 + p.K))
    c_base = torch.empty(p.M, p.N, dtype=torch.float16, device=where)
    reasons: dict = {}
    fns = dict(prepare(BASELINES, p, a, b, c_base, reasons=reasons))
    for n, why in reasons.items():
        log(f"  baseline {n}: {why}")
    checked = {}
    for tile in tiles:
        for split in splits:
            spec = KernelSpec.parse(f"backend=triton family=tiled {tile} group_m=4 split_k={split}")
            if not is_valid(spec, p, dev):
                continue
            for way, mod, checks in (("serial", splitk_serial, serial_checks), ("twolaunch", tiled, ("random",))):
                fn = _launcher(mod, spec, p.layout)
                rep = check_kernel(fn, p, where, checks=checks)
                name = f"{way} {tile} split_k={split}"
                checked[name] = rep.passed
                if not rep.passed:
                    log(f"  {name}: check failed: {rep.reason}")
                    continue
                c = torch.empty(p.M, p.N, dtype=torch.float16, device=where)
                fns[name] = (lambda fn=fn, c=c: fn(a, b, c))
    stats = timing.offline(fns, min_calls=min_calls, min_ms=min_ms, clock=clock)
    base_name, base_us = best({n: s for n, s in stats.items() if n in BASELINES})
    row = {"shape": p.text, "gflop": round(p.flops / 1e9, 4), "best_cublas": base_name,
           "best_cublas_us": round(base_us, 3), "torch_us": round(stats["torch"].median_us, 3)}
    pairs = []
    for way in ("serial", "twolaunch"):
        mine = {n: s for n, s in stats.items() if n.startswith(way + " ")}
        if mine:
            n = min(mine, key=lambda k: mine[k].median_us)
            row[f"{way}_us"], row[f"{way}_spec"] = round(mine[n].median_us, 3), n.split(" ", 1)[1]
            row[f"{way}_vs_best_cublas"] = round(base_us / mine[n].median_us, 4)
    for n, s in stats.items():      # the same knobs both ways: what the one launch saves
        if n.startswith("serial ") and "twolaunch " + n[7:] in stats:
            pairs.append(stats["twolaunch " + n[7:]].median_us / s.median_us)
    row["serial_over_twolaunch_same_knobs"] = (round(math.exp(sum(map(math.log, pairs)) / len(pairs)), 4)
                                               if pairs else None)
    row["checks_failed"] = sum(not v for v in checked.values())
    row["timings"] = {n: {"median_us": round(s.median_us, 3), "spread": round(s.spread, 4)} for n, s in stats.items()}
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/h200-sm90")
    ap.add_argument("--shapes", default=SHAPES, help="comma-separated MxNxK (nn)")
    ap.add_argument("--tiles", default=";".join(TILES), help="tile configs, ';'-separated spec fields")
    ap.add_argument("--splits", default=",".join(map(str, SPLITS)), help="split_k values")
    ap.add_argument("--min-ms", type=float, default=15.0, help="offline timing per function, at least")
    ap.add_argument("--min-calls", type=int, default=30, help="offline calls per function, at least")
    ap.add_argument("--time-limit", type=float, default=420.0, help="start no shape after this many seconds")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark times kernels on the GPU", file=sys.stderr)
        return 3
    dev = current()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"splitk_serial_{source_commit()}"
    tiles = tuple(t.strip() for t in args.tiles.split(";") if t.strip())
    splits = tuple(int(x) for x in args.splits.split(",") if x.strip())
    t0 = time.monotonic()
    rows = []
    for p in parse_shapes(args.shapes):
        if time.monotonic() - t0 > args.time_limit:
            print(f"time limit: stopped before {p}", flush=True)
            break
        print(f"{p}", flush=True)
        r = bench_shape(p, dev, lambda m: print(m, flush=True), args.min_ms, tiles=tiles, splits=splits,
                        min_calls=args.min_calls)
        rows.append(r)
        print(f"  best-cublas {r['best_cublas_us']} us ({r['best_cublas']}); serial {r.get('serial_us')} "
              f"({r.get('serial_vs_best_cublas')}x); two-launch {r.get('twolaunch_us')} "
              f"({r.get('twolaunch_vs_best_cublas')}x); same knobs serial/two-launch "
              f"{r['serial_over_twolaunch_same_knobs']}x", flush=True)
    cols = [k for k in rows[0] if k != "timings"] if rows else []
    with open(out / f"{tag}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    meta = {"device": dev.key, "versions": collect(), "min_ms": args.min_ms, "min_calls": args.min_calls,
            "tiles": tiles, "splits": splits}
    (out / f"{tag}.json").write_text(json.dumps({**meta, "rows": rows}, indent=1))

    def geo(key):
        xs = [r[key] for r in rows if r.get(key)]
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
    print(f"{len(rows)} shapes in {time.monotonic() - t0:.0f} s: vs best-cublas geomean serial "
          f"{geo('serial_vs_best_cublas'):.3f}x, two-launch {geo('twolaunch_vs_best_cublas'):.3f}x; "
          f"serial / two-launch at the same knobs {geo('serial_over_twolaunch_same_knobs'):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
