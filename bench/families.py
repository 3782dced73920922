"""Sweep a modest config list per kernel family over a grid subset; best per shape vs torch.matmul.

Issue #2 / #3 measurement. Per shape: randn inputs, every valid config of every family built and
given the checker's random check (the full checker runs in tests/test_backends_gpu.py), then all
passing configs and torch.matmul timed together, interleaved, by cudal2.timing.offline (GPU time,
CUDA events behind a queued sleep). Writes one CSV row per (shape, family) with the best config.

  python bench/families.py --out bench/results/h200-sm90 [--families tiled,persistent,mma,wgmma]
                           [--shapes bench|grid:N|MxNxK,...] [--max-seconds 480]
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

from cudal2.backends import CompileError, build_kernel
from cudal2.check import check_kernel, make_inputs
from cudal2.device import current
from cudal2.problems import Problem, parse_shapes
from cudal2.spec import KernelSpec, SpecError, is_valid
from cudal2 import timing
from cudal2.versions import collect, source_commit

# Shapes: the two large cubes of the targets, and grid shapes from each FLOP class.
BENCH_SHAPES = ("4096x4096x4096,8192x8192x8192,64x64x64,64x128x256,128x128x128,128x256x512,256x256x256,"
                "64x1024x1024,256x512x1024,512x512x512,1024x64x1024,512x256x2048,1024x1024x256,"
                "64x4096x4096,2048x2048x2048,1024x4096x1024,16384x64x1024,4096x4096x1024,"
                "8192x2048x4096,12288x12288x4096,16384x16384x1024")

CONFIGS = {
    "tiled": ["bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8", "bm=128 bn=128 bk=64 warps=8 stages=4 group_m=8",
              "bm=128 bn=128 bk=64 warps=4 stages=4 group_m=8", "bm=64 bn=128 bk=64 warps=4 stages=4 group_m=8",
              "bm=64 bn=64 bk=64 warps=4 stages=4", "bm=64 bn=64 bk=128 warps=4 stages=3",
              "bm=32 bn=64 bk=128 warps=4 stages=4", "bm=16 bn=64 bk=128 warps=2 stages=4",
              "bm=64 bn=64 bk=64 warps=4 stages=4 split_k=4", "bm=32 bn=64 bk=64 warps=4 stages=4 split_k=8"],
    "persistent": ["bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8 subtile=2",
                   "bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8 subtile=2 warp_spec=1",
                   "bm=128 bn=128 bk=64 warps=8 stages=4 group_m=8 subtile=2",
                   "bm=128 bn=128 bk=64 warps=4 stages=4 group_m=8",
                   "bm=64 bn=128 bk=64 warps=4 stages=4 group_m=8", "bm=64 bn=64 bk=64 warps=4 stages=5",
                   "bm=64 bn=64 bk=128 warps=4 stages=3"],
    "mma": ["bm=128 bn=128 bk=32 warps=8 stages=4 group_m=8", "bm=128 bn=256 bk=32 warps=8 stages=3 group_m=8",
            "bm=64 bn=128 bk=32 warps=4 stages=4 group_m=8", "bm=64 bn=64 bk=64 warps=4 stages=3",
            "bm=32 bn=64 bk=64 warps=2 stages=4", "bm=16 bn=64 bk=64 warps=2 stages=4",
            "bm=64 bn=64 bk=32 warps=4 stages=4 split_k=4"],
    "wgmma": ["bm=128 bn=256 bk=64 warps=12 stages=4 group_m=8", "bm=128 bn=128 bk=64 warps=12 stages=5 group_m=8",
              "bm=128 bn=256 bk=64 warps=12 stages=4 group_m=8 cluster=2", "bm=128 bn=128 bk=64 warps=8 stages=6",
              "bm=64 bn=128 bk=64 warps=8 stages=6", "bm=64 bn=64 bk=64 warps=8 stages=6"],
}
BACKEND = {"tiled": "triton", "persistent": "triton", "mma": "cuda", "wgmma": "cuda"}


def bench_shape(p: Problem, families, dev, kernels: dict, log) -> list[dict]:
    a, b = make_inputs(p, "cuda", torch.Generator().manual_seed(p.M * 7 + p.N * 3 + p.K))
    c_ref = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    bt = b if p.layout == "nn" else b.t()
    fns = {"torch": lambda: torch.matmul(a, bt, out=c_ref)}
    outs = {}
    for fam in families:
        for text in CONFIGS[fam]:
            spec = KernelSpec.parse(f"backend={BACKEND[fam]} family={fam} {text}")
            if not is_valid(spec, p, dev):
                continue
            key = spec.text
            try:
                if key not in kernels:
                    kernels[key] = build_kernel(spec, p, dev)
                k = kernels[key]
            except (CompileError, SpecError, Exception) as e:  # a config that fails is a result
                kernels[key] = None
                log(f"  {fam} {text}: build failed: {str(e).splitlines()[0][:160]}")
                continue
            if k is None:
                continue
            rep = check_kernel(k, p, "cuda", checks=("random",))
            if not rep.passed:
                log(f"  {fam} {text}: check failed: {rep.reason}")
                continue
            c = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
            outs[key] = c
            fns[key] = (lambda k=k, c=c: k(a, b, c))
    stats = timing.offline(fns)
    t_torch = stats["torch"].median_us
    rows = []
    for fam in families:
        best = min(((s, k) for k, s in stats.items() if k != "torch" and f"family={fam} " in k),
                   key=lambda x: x[0].median_us, default=None)
        if best is None:
            rows.append({"shape": p.text, "family": fam, "torch_us": t_torch, "best_us": None,
                         "speedup": None, "tflops": None, "spec": "", "spread": None})
            continue
        s, key = best
        rows.append({"shape": p.text, "family": fam, "torch_us": round(t_torch, 3),
                     "best_us": round(s.median_us, 3), "speedup": round(t_torch / s.median_us, 4),
                     "tflops": round(p.flops / s.median_us / 1e6, 1), "spec": key,
                     "spread": round(s.spread, 4)})
    return rows


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/h200-sm90")
    ap.add_argument("--families", default="tiled,persistent,mma,wgmma")
    ap.add_argument("--shapes", default="bench")
    ap.add_argument("--layouts", default="nn,nt")
    ap.add_argument("--max-seconds", type=float, default=480.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA GPU: this benchmark times kernels on the GPU")
    dev = current()
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in CONFIGS]
    if unknown:
        sys.exit(f"error: unknown families {unknown}; known: {list(CONFIGS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"families_{source_commit()}"
    logf = open(out / f"{tag}.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()
    t0 = time.time()
    kernels: dict = {}
    rows = []
    shapes_arg = BENCH_SHAPES if args.shapes == "bench" else args.shapes
    with open(out / f"{tag}.csv", "w", newline="") as f:
        w = None
        for layout in args.layouts.split(","):
            for p in parse_shapes(shapes_arg, layout):
                if time.time() - t0 > args.max_seconds:
                    log(f"stopping: --max-seconds {args.max_seconds} reached")
                    break
                for r in bench_shape(p, families, dev, kernels, log):
                    rows.append(r)
                    if w is None:
                        w = csv.DictWriter(f, fieldnames=list(r))
                        w.writeheader()
                    w.writerow(r)
                    f.flush()
                    log(f"{r['shape']:>22} {r['family']:<10} torch {r['torch_us']:>9} us  best {r['best_us']} us "
                        f"x{r['speedup']}  {r['tflops']} TF/s  {r['spec']}")
    summary = {"device": dev.to_dict(), "commit": source_commit(), "versions": collect(),
               "wall_s": round(time.time() - t0, 1), "families": {}}
    for fam in families:
        fr = [r for r in rows if r["family"] == fam]
        small = [r["speedup"] for r in fr if Problem.parse(r["shape"]).flops < 1e9]
        big = {r["shape"]: r for r in fr if r["shape"].split(":")[0] in ("4096x4096x4096", "8192x8192x8192")}
        summary["families"][fam] = {
            "geomean_vs_torch": geomean([r["speedup"] for r in fr]),
            "geomean_under_1gflop": geomean(small),
            "failed_shapes": sum(1 for r in fr if r["speedup"] is None),
            "large": {k: {"speedup": v["speedup"], "tflops": v["tflops"], "spec": v["spec"]} for k, v in big.items()},
        }
    best_any = {}
    for r in rows:
        if r["speedup"] and r["speedup"] > best_any.get(r["shape"], 0):
            best_any[r["shape"]] = r["speedup"]
    summary["best_of_all_geomean"] = geomean(list(best_any.values()))
    (out / f"{tag}.json").write_text(json.dumps(summary, indent=2))
    log(json.dumps(summary["families"], indent=1))


if __name__ == "__main__":
    main()
