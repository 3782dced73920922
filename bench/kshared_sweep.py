"""Issue 19: the K-shared consumers (wgmma warp_spec 3) against the one-consumer kernels they would
replace, beside cuBLAS, on the card's own registry.

A wgmma tile one warpgroup tall (warps 8, cooperative) runs one MMA chain per SM: on the H100 a
64x128x64 k-tile took ~340 SM cycles at every K (run 105, 1024x1024xK, K 2048-16384) where two
chains (128x128, two consumers) took ~525 for twice the work. The K-shared twin of such a spec
(`cudal2.tiles.kshared_twin`: warps 12, two warpgroups on alternate k-tiles of the same tile, summed
through shared memory; split_k and cluster 1) keeps the tile and its CTA count.

  python3 bench/kshared_sweep.py --out $OUT [--classes starved,mid,shortK] [--layouts nn,nt]
      [--stride 1] [--max-seconds 300] [--min-ms 10]

Per registry entry of this card whose kernel, or for a cuBLAS entry the best kernel its filing
timed, is a one-consumer wgmma spec: that spec, its twin and the entry's best-cublas call (and
torch.matmul) each pass the checker's random check and are timed together, interleaved
(cudal2.timing.offline). Pairs are compiled first in parallel processes. Writes
kshared_sweep_<card>_<commit>.csv (a row per entry) and .json (the command, versions, rows, and per
class and layout: geomean of one / twin and of best-cublas / twin, wins and losses past 1%),
rewritten after every entry.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from cudal2.report import write_rows_csv


def one_consumer_spec(e) -> str | None:
    """The one-consumer wgmma spec an entry holds (its kernel, or the best kernel a cuBLAS entry's
    filing timed), else None."""
    from cudal2.spec import KernelSpec
    text = e.spec if e.backend == "cuda" else str((e.times or {}).get("best_kernel_spec") or "")
    if " family=wgmma " not in f" {text} ":
        return None
    s = KernelSpec.parse(text)
    return s.text if s.warps == 8 and s.warp_spec == 1 else None


def pairs(registry, device, layouts, classes, stride: int) -> list[tuple]:
    """(entry, one-consumer spec text, twin text) for the card's entries of the layouts and classes."""
    from cudal2.spec import KernelSpec
    from cudal2.stats import shape_class
    from cudal2.tiles import kshared_twin
    out = []
    for e in sorted(registry.all(device.key), key=lambda e: e.problem):
        one = one_consumer_spec(e)
        p = e.prob
        if one is None or p.layout not in layouts or (classes and shape_class(p.M, p.N, p.K) not in classes):
            continue
        twin = kshared_twin(KernelSpec.parse(one), p, device)
        if twin is not None:
            out.append((e, one, twin.text))
    return out[::stride]


def _compile(job):
    """(problem text, spec text) -> error or None: NVRTC in a worker, into the backend's disk cache."""
    from cudal2.backends.cuda import BACKEND
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    ptext, text = job
    try:
        p = Problem.parse(ptext)
        BACKEND.compile_source(KernelSpec.parse(text), BACKEND.render(KernelSpec.parse(text), p), "sm_90a", p.layout)
        return None
    except Exception as ex:
        return (str(ex).splitlines() or [type(ex).__name__])[0][:200]


def precompile(todo: list, procs: int) -> dict:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    jobs = sorted({(e.problem, t) for e, one, twin in todo for t in (one, twin)})
    with ProcessPoolExecutor(max(1, procs), mp_context=mp.get_context("spawn")) as ex:
        return {j: err for j, err in zip(jobs, ex.map(_compile, jobs)) if err}


def bench_pair(e, one: str, twin: str, dev, min_ms: float, errors: dict) -> dict:
    import torch

    from cudal2 import timing
    from cudal2.backends import build_kernel
    from cudal2.baselines import NAMES, prepare
    from cudal2.check import check_kernel, make_inputs
    from cudal2.spec import KernelSpec
    from cudal2.stats import shape_class
    p = e.prob
    row = {"problem": p.text, "layout": p.layout, "class": shape_class(p.M, p.N, p.K), "served": e.backend,
           "one": one, "twin": twin}
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(p.M + 3 * p.N + 7 * p.K))
    c0 = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    bars = [n for n in dict.fromkeys((e.best_cublas, "torch")) if n in NAMES]
    reasons: dict = {}
    fns = {f"bar:{n}": f for n, f in prepare(bars, p, a, b, c0, reasons=reasons).items()}
    for name, text in (("one", one), ("twin", twin)):
        if (p.text, text) in errors:
            row[f"{name} note"] = f"compile failed: {errors[(p.text, text)]}"
            continue
        k = build_kernel(KernelSpec.parse(text), p, dev)
        rep = check_kernel(k, p, "cuda", checks=("random",))
        if not rep.passed:
            row[f"{name} note"] = f"check failed: {rep.reason}"
            continue
        c = torch.empty_like(c0)
        fns[name] = lambda k=k, c=c: k(a, b, c)
    stats = timing.offline(fns, min_ms=min_ms)
    for n, st in stats.items():
        row[f"{n} us"] = round(st.median_us, 3)
    bar = min((st.median_us for n, st in stats.items() if n.startswith("bar:")), default=None)
    if bar is not None:
        row["best_cublas_us"] = round(bar, 3)
    if "twin" in stats:
        t = stats["twin"].median_us
        if "one" in stats:
            row["one/twin"] = round(stats["one"].median_us / t, 4)
        if bar is not None:
            row["cublas/twin"] = round(bar / t, 4)
    if "one" in stats and bar is not None:
        row["cublas/one"] = round(bar / stats["one"].median_us, 4)
    return row


def summarize(rows: list[dict]) -> dict:
    groups: dict[str, list] = {"all": rows}
    for r in rows:
        groups.setdefault(f"{r['class']}:{r['layout']}", []).append(r)
    out = {}
    for g, rs in groups.items():
        out[g] = {}
        for key in ("one/twin", "cublas/twin", "cublas/one"):
            xs = [r[key] for r in rs if r.get(key)]
            out[g][key] = {"n": len(xs), "geomean": math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None,
                           "wins": sum(x > 1.01 for x in xs), "losses": sum(x < 0.99 for x in xs)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--registry", help="a registry directory (default: the shipped one)")
    ap.add_argument("--layouts", default="nn,nt")
    ap.add_argument("--classes", default="starved,mid,shortK", help="shape classes of ../shared/classes.py ('' for all)")
    ap.add_argument("--stride", type=int, default=1, help="every N-th pair")
    ap.add_argument("--min-ms", type=float, default=10.0, help="offline timing per function, at least")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="start no pair after this many seconds")
    ap.add_argument("--procs", type=int, default=min(16, os.cpu_count() or 1), help="compile processes")
    args = ap.parse_args(argv)
    from cudal2.stats import SHAPE_CLASSES
    layouts = [x for x in args.layouts.split(",") if x]
    classes = [x for x in args.classes.split(",") if x]
    if not set(layouts) <= {"nn", "nt"} or not set(classes) <= set(SHAPE_CLASSES) or args.stride < 1:
        ap.error(f"--layouts from nn,nt; --classes from {','.join(SHAPE_CLASSES)}; --stride >= 1")
    t0 = time.monotonic()
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark times kernels on the GPU", file=sys.stderr)
        return 3
    from cudal2.device import current
    from cudal2.registry import Registry
    from cudal2.versions import collect, source_commit
    dev = current()
    todo = pairs(Registry.load(args.registry), dev, layouts, classes, args.stride)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"kshared_sweep_{dev.key}_{source_commit()}"
    meta = {"command": " ".join([sys.executable, *sys.argv]), "device": dev.key, "versions": collect(),
            "pairs": len(todo)}
    errors = precompile(todo, args.procs)
    print(f"{len(todo)} pairs compiled in {time.monotonic() - t0:.0f} s ({len(errors)} failed)", flush=True)
    rows: list[dict] = []
    for i, (e, one, twin) in enumerate(todo):
        if time.monotonic() - t0 > args.max_seconds:
            meta["stopped_early"] = f"{i} of {len(todo)}"
            print(f"--max-seconds: stopped before {e.problem} ({i} of {len(todo)})", flush=True)
            break
        try:
            row = bench_pair(e, one, twin, dev, args.min_ms, errors)
        except Exception as ex:                       # one pair's failure is a row, not an outage
            row = {"problem": e.problem, "one": one, "twin": twin, "note": f"error: {type(ex).__name__}: {str(ex)[:160]}"}
        rows.append(row)
        print(f"[{i + 1}/{len(todo)}] {e.problem} {row.get('class')}: one/twin {row.get('one/twin')} "
              f"cublas/twin {row.get('cublas/twin')} cublas/one {row.get('cublas/one')}", flush=True)
        write_rows_csv(out / f"{tag}.csv", rows, (meta["command"], f"device {dev.key} commit {source_commit()}"))
        (out / f"{tag}.json").write_text(json.dumps({**meta, "summary": summarize([r for r in rows if "class" in r]),
                                                     "rows": rows}, indent=1))
    for g, per in summarize([r for r in rows if "class" in r]).items():
        print(g, "; ".join(f"{k} {v['geomean'] and round(v['geomean'], 4)} over {v['n']} ({v['wins']} > 1.01, "
                           f"{v['losses']} < 0.99)" for k, v in per.items()))
    print(f"{len(rows)} pairs in {time.monotonic() - t0:.0f} s -> {out / tag}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
