"""Is a class held back by the family or by the search? Time a fixed list of specs on shapes the
search lost, beside the four nn baselines, and see whether any of them beats best-cublas.

Per shape: every spec valid there is built (a build failure is a row, not an outage), given the
checker's random check (the full checker is the search's job), then all of them and the baselines
are timed together, interleaved (cudal2.timing.offline: GPU time). One CSV row per (shape, spec)
and a JSON keyed by card and commit:

  python3 bench/spec_sweep.py --out $OUT [--shapes MxNxK,...] [--specs "spec;spec;..."] [--time-limit 240]
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

# Where the search's best was 0.82-0.98x of best-cublas and the kernel profile (kernel_profile.md,
# 2026-12-03) shows cuBLAS on 128x128 tiles, 6 stages, persistent: short-K shapes that fill the SMs.
SHAPES = "4096x4096x512,4096x2048x512,2048x4096x1024,2048x2048x2048,4096x1024x2048,8192x8192x1024,4096x4096x4096"
SPECS = ";".join(f"backend=triton family=persistent {t} group_m=8" for t in (
    "bm=128 bn=256 bk=64 warps=8 stages=3 subtile=2",          # the search's best at 4096x4096x512
    "bm=128 bn=256 bk=64 warps=8 stages=4 subtile=2",
    "bm=128 bn=256 bk=64 warps=8 stages=3 subtile=2 warp_spec=1",
    "bm=256 bn=128 bk=64 warps=8 stages=3 subtile=2",
    "bm=128 bn=128 bk=64 warps=8 stages=4 subtile=2",
    "bm=128 bn=128 bk=64 warps=8 stages=6 subtile=2",
    "bm=128 bn=128 bk=64 warps=8 stages=4 subtile=2 warp_spec=1",
    "bm=128 bn=128 bk=64 warps=4 stages=5 subtile=1",
    "bm=128 bn=128 bk=128 warps=8 stages=3 subtile=2")) + (
    ";backend=triton family=tiled bm=128 bn=128 bk=64 warps=8 stages=4 group_m=8"
    ";backend=triton family=tiled bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8"
    ";backend=cuda family=wgmma bm=128 bn=128 bk=64 warps=12 stages=5 group_m=8"
    ";backend=cuda family=wgmma bm=128 bn=256 bk=64 warps=12 stages=3 group_m=8")
BASELINES = ("torch", "cublas-nn", "cublaslt-heuristic", "cublaslt-autotune")


def shape_rows(shape: str, statuses: dict, stats: dict, base_name: str, base_us: float) -> list[dict]:
    """One row per spec of a shape: its status ("ok" or why not), time and ratio to best-cublas."""
    rows = []
    for spec, status in statuses.items():
        s = stats.get(spec) if status == "ok" else None
        rows.append({"shape": shape, "spec": spec, "status": status, "best_cublas": base_name,
                     "best_cublas_us": round(base_us, 3),
                     "us": round(s.median_us, 3) if s else None, "spread": round(s.spread, 4) if s else None,
                     "vs_best_cublas": round(base_us / s.median_us, 4) if s else None})
    return rows


def sweep_shape(p, specs, dev, min_ms: float, log) -> list[dict]:
    import torch

    from cudal2 import timing
    from cudal2.backends import build_kernel
    from cudal2.baselines import best, prepare
    from cudal2.check import check_kernel, make_inputs
    from cudal2.spec import KernelSpec, SpecError, is_valid
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(p.M * 7 + p.N * 3 + p.K))
    c0 = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    reasons: dict = {}
    fns = dict(prepare(BASELINES, p, a, b, c0, reasons=reasons))
    statuses = {}
    for text in specs:
        try:
            spec = KernelSpec.parse(text)
        except SpecError as e:
            statuses[text] = f"bad spec: {e}"
            continue
        if not is_valid(spec, p, dev):
            statuses[spec.text] = "not valid on this shape"
            continue
        try:
            k = build_kernel(spec, p, dev)
        except Exception as e:        # a config that fails to build is a result
            statuses[spec.text] = f"build failed: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}"
            continue
        rep = check_kernel(k, p, "cuda", checks=("random",))
        if not rep.passed:
            statuses[spec.text] = f"check failed: {rep.reason}"
            continue
        c = torch.empty_like(c0)
        fns[spec.text] = lambda k=k, c=c: k(a, b, c)
        statuses[spec.text] = "ok"
    for n, why in reasons.items():
        log(f"  baseline {n}: {why}")
    stats = timing.offline(fns, min_ms=min_ms)
    base_name, base_us = best({n: s for n, s in stats.items() if n in BASELINES})
    return shape_rows(p.text, statuses, stats, base_name, base_us)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/h200-sm90")
    ap.add_argument("--shapes", default=SHAPES, help="comma-separated MxNxK (nn)")
    ap.add_argument("--specs", default=SPECS, help="';'-separated spec texts")
    ap.add_argument("--min-ms", type=float, default=15.0, help="offline timing per function, at least")
    ap.add_argument("--time-limit", type=float, default=240.0, help="start no shape after this many seconds")
    args = ap.parse_args()
    import torch

    from cudal2.device import current
    from cudal2.problems import parse_shapes
    from cudal2.versions import collect, source_commit
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark times kernels on the GPU", file=sys.stderr)
        return 3
    specs = [s.strip() for s in args.specs.split(";") if s.strip()]
    dev, out, t0, rows = current(), Path(args.out), time.monotonic(), []
    out.mkdir(parents=True, exist_ok=True)
    tag = f"spec_sweep_{source_commit()}"
    for p in parse_shapes(args.shapes):
        if time.monotonic() - t0 > args.time_limit:
            print(f"time limit: stopped before {p}", flush=True)
            break
        got = sweep_shape(p, specs, dev, args.min_ms, lambda m: print(m, flush=True))
        rows += got
        ok = sorted((r for r in got if r["vs_best_cublas"]), key=lambda r: -r["vs_best_cublas"])
        print(f"{p}: best-cublas {got[0]['best_cublas_us']} us ({got[0]['best_cublas']}); "
              + "; ".join(f"{r['vs_best_cublas']}x {r['spec'].split(' ', 2)[1]} {r['spec'].split(' ', 2)[2][:60]}"
                          for r in ok[:3]), flush=True)
        with open(out / f"{tag}.csv", "w", newline="") as f:      # rewritten per shape: a cut run keeps it
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        (out / f"{tag}.json").write_text(json.dumps({"device": dev.key, "versions": collect(),
                                                     "min_ms": args.min_ms, "rows": rows}, indent=1))
    wins = [r for r in rows if (r["vs_best_cublas"] or 0) > 1.0]
    best_per = {}
    for r in rows:
        if r["vs_best_cublas"]:
            best_per[r["shape"]] = max(best_per.get(r["shape"], 0), r["vs_best_cublas"])
    geo = math.exp(sum(map(math.log, best_per.values())) / len(best_per)) if best_per else float("nan")
    print(f"{len(best_per)} shapes in {time.monotonic() - t0:.0f} s: best spec per shape vs best-cublas "
          f"geomean {geo:.3f}x; {len(wins)} (shape, spec) pairs beat it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
