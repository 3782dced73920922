"""Eager latency of cudal2.matmul vs torch.matmul (and of the bare kernel launch), and patched vs
unpatched HF forward passes.

  source bench/device_env.sh && python3 bench/eager_latency.py --tokens ''   # issue 18's check, shipped registry
  python bench/eager_latency.py                                   # registry: $CUDAL2_REGISTRY or shipped
  python bench/eager_latency.py --default-kernels tiled --out /tmp/out
  python bench/eager_latency.py --default-kernels tiled,persistent,mma,wgmma --tokens 1,16,128 --out $OUT

Part 1, per small shape and per kernel family: host wall µs per call (PROTOCOL "eager latency": N
calls then one sync, cudal2.timing.eager) of
  cudal2 / cudal2_out       cudal2.matmul(a, b, layout=...) without / with out=
  torch / torch_out         torch.matmul(a, b or b.t()) without / with out= (nt: b.t() made once,
                            outside the timed call, as before issue 18)
  torch_t / linear          nt only: torch.matmul(a, b.t()) with the transpose in the call, and
                            F.linear(a, b): what a caller holding the same (a, b) writes
  launch                    the bare kernel launch the plan makes (bound launcher, output given)
  jit                       Triton only: the same launch through the JIT (JITFunction[grid](...)),
                            the path every call took before the direct launch (issue 6)
and offline GPU µs (cudal2.timing.offline, interleaved) of cudal2 and torch, with the plan that
served cudal2 (exact / scoped kernel, or torch) and, for Triton, whether the direct path was taken.
Part 2, a small Llama built from a config (random fp16 weights, nothing downloaded): GPU time and
eager wall time of a forward pass, patched (cudal2.patch_linear) vs unpatched, per token count
(served by the first family of --default-kernels, or the registry).

--default-kernels builds, per family, a registry in a temp directory holding the family's default
spec for every benchmarked problem (no times recorded: it measures dispatch and launch cost, not
tuning). Writes exactly two files, <out>/<stem>.csv (part 1 and part 2 rows, a `part` column; every
row carries the device key, the commit and the command) and <out>/<stem>.json (the same plus meta),
stem = eager_latency_<device key>_<commit>[_<families>]; --out defaults to bench/results/<device key>.
The last lines printed say, for 64x64x64:nn and 1x4096x4096:nt (issue 18), whether cudal2.matmul's
eager time is at most torch.matmul's.
"""
from __future__ import annotations

import argparse
import copy
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

import cudal2
from cudal2 import ops, plans, timing
from cudal2.device import current
from cudal2.problems import Problem, parse_shapes, problems_from_hf_config

SHAPES = ("1x4096x4096:nt,16x4096x4096:nt,128x4096x4096:nt,1x4096x4096:nn,16x4096x4096:nn,"
          "64x64x64:nn,512x512x512:nn")
LLAMA = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
             num_key_value_heads=4, vocab_size=8192, max_position_embeddings=4096)


def build_registry(root: Path, family: str, problems, dev) -> list[str]:
    """The family's default spec for each problem; returns the problems it has no valid spec for."""
    from cudal2.backends import get_backend
    from cudal2.registry import Entry, Registry
    from cudal2.spec import SpecError, default_spec
    reg = Registry.load(root, create=True)
    skipped = []
    for p in problems:
        try:
            spec = default_spec(family, p, dev)
        except SpecError:
            skipped.append(p.text)
            continue
        reg.add(Entry(problem=p.text, device=dev.key, backend=spec.backend, spec=spec.text),
                get_backend(spec.backend).render(spec, p))
    return skipped


def operands(p: Problem):
    a = torch.randn(p.M, p.K, device="cuda", dtype=torch.float16)
    b = torch.randn(*p.b_shape(), device="cuda", dtype=torch.float16)
    return a, b


def _plan(a, b, layout):
    return ops._PLANS.get((a.shape, b.shape, a.dtype, b.dtype, a.device, b.device, layout, False))


def bench_shapes(problems, calls: int, family: str) -> list[dict]:
    rows = []
    for p in problems:
        a, b = operands(p)
        c1 = torch.empty(p.M, p.N, device="cuda", dtype=torch.float16)
        c2, c3 = torch.empty_like(c1), torch.empty_like(c1)
        bt = b.t() if p.layout == "nt" else b
        lay = p.layout
        fns = {"cudal2": lambda: cudal2.matmul(a, b, layout=lay),
               "cudal2_out": lambda: cudal2.matmul(a, b, layout=lay, out=c1),
               "torch": lambda: torch.matmul(a, bt),
               "torch_out": lambda: torch.matmul(a, bt, out=c2)}
        if lay == "nt":
            fns["torch_t"] = lambda: torch.matmul(a, b.t())
            fns["linear"] = lambda: torch.nn.functional.linear(a, b)
        for _ in range(3):                               # plan, first (JIT) launch, then direct
            fns["cudal2"]()
            fns["cudal2_out"]()
        torch.cuda.synchronize()
        plan = _plan(a, b, lay)
        served = getattr(plan, "info", "no plan")
        kern = getattr(plan, "kernel", None)
        launch = getattr(plan, "launch", None) or getattr(plan, "kern", None)
        if isinstance(plan, plans.KernelPlan) and launch is not None:
            fns["launch"] = lambda: launch(a, b, c3)
        if kern is not None and hasattr(kern, "_jit_launch"):
            fns["jit"] = lambda: kern._jit_launch(a, b, c3)
        eager = {n: timing.eager(f, calls=calls) for n, f in fns.items()}
        gpu = timing.offline({"cudal2": fns["cudal2_out"], "torch": fns["torch_out"]})
        row = {"part": 1, "family": family, "problem": p.text, "served_by": served,
               "direct": kern.direct_status(p.M, p.N, p.K) if hasattr(kern, "direct_status") else ""}
        for n in fns:
            row[f"{n}_eager_us"] = eager[n].median_us
            row[f"{n}_eager_spread"] = eager[n].spread
        for n in ("cudal2", "torch"):
            row[f"{n}_gpu_us"] = gpu[n].median_us
        row["eager_ratio"] = row["cudal2_eager_us"] / row["torch_eager_us"]
        row["gpu_speedup"] = row["torch_gpu_us"] / row["cudal2_gpu_us"]
        rows.append(row)
        extra = "".join(f"  {n} {row[f'{n}_eager_us']:6.2f}" for n in ("torch_t", "linear", "launch", "jit") if n in fns)
        print(f"{family:>10} {p.text:>18}  eager {row['cudal2_eager_us']:6.2f} (out {row['cudal2_out_eager_us']:6.2f})"
              f" vs torch {row['torch_eager_us']:6.2f} (out {row['torch_out_eager_us']:6.2f}) µs{extra}   "
              f"gpu {row['cudal2_gpu_us']:7.2f} vs {row['torch_gpu_us']:7.2f} µs   {row['direct']}  {served}",
              flush=True)
    return rows


def bench_model(tokens, calls: int, family: str) -> list[dict]:
    import transformers
    cfg = transformers.LlamaConfig(**LLAMA)
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(cfg).to("cuda", torch.float16).eval()
    patched = copy.deepcopy(base)
    n = cudal2.patch_linear(patched)
    rows = []
    for t in tokens:
        ids = torch.randint(0, cfg.vocab_size, (1, t), device="cuda")
        with torch.no_grad():
            fns = {"unpatched": lambda: base(ids), "patched": lambda: patched(ids)}
            want, got = base(ids).logits.float(), patched(ids).logits.float()
            err = (torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)).item()
            gpu = timing.offline(fns, min_calls=10, min_ms=50.0)
            eager = {k: timing.eager(f, calls=max(10, calls // 20)) for k, f in fns.items()}
        kern = sum(isinstance(pl, plans.KernelPlan) for pl in ops._PLANS.values())
        row = {"part": 2, "family": family, "tokens": t, "patched_layers": n, "kernel_plans_total": kern,
               "rel_err_vs_unpatched": err,
               **{f"{k}_gpu_us": v.median_us for k, v in gpu.items()},
               **{f"{k}_eager_us": v.median_us for k, v in eager.items()}}
        row["gpu_speedup"] = row["unpatched_gpu_us"] / row["patched_gpu_us"]
        rows.append(row)
        print(f"tokens {t:5d}  forward gpu {row['patched_gpu_us']:9.1f} vs {row['unpatched_gpu_us']:9.1f} µs "
              f"(x{row['gpu_speedup']:.3f})  eager {row['patched_eager_us']:9.1f} vs {row['unpatched_eager_us']:9.1f} µs  "
              f"rel err {err:.2e}", flush=True)
    return rows


def _nvmath_status() -> str:
    """Whether cuBLAS entries can dispatch to cuBLASLt here (else they go to torch.matmul)."""
    from cudal2.lt_dispatch import lt_version
    v = lt_version()
    return f"cuBLASLt {v}" if v is not None else "unavailable (cuBLAS entries use torch.matmul)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES, help="shapes for part 1 (MxNxK[:layout],...)")
    ap.add_argument("--tokens", default="1,16,128,512", help="token counts for part 2 ('' skips it)")
    ap.add_argument("--calls", type=int, default=1000, help="calls per eager measurement")
    ap.add_argument("--registry", default=None, help="registry root (default: $CUDAL2_REGISTRY or shipped)")
    ap.add_argument("--default-kernels", default="none",
                    help="comma list of families (tiled, persistent, mma, wgmma): part 1 runs once per "
                         "family from a temp registry of its default specs; 'none' uses the registry")
    ap.add_argument("--out", default=None, help="output directory (default bench/results/<device>)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    families = [f for f in args.default_kernels.split(",") if f and f != "none"]
    bad = [f for f in families if f not in ("tiled", "persistent", "mma", "wgmma")]
    if bad:
        print(f"error: unknown families {bad}", file=sys.stderr)
        return 2
    dev = current()
    problems = parse_shapes(args.shapes)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    model_probs = problems_from_hf_config(LLAMA, tokens) if tokens else []
    meta = {"device": dev.key, "gpu": dev.name, "torch": torch.__version__, "calls": args.calls,
            "default_kernels": families or "none", "llama_config": LLAMA, "shapes": args.shapes,
            "tokens": tokens, "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "skipped": {}}
    try:
        import triton
        meta["triton"] = triton.__version__
        from cudal2.backends.triton_direct import direct_unsupported
        meta["triton_direct"] = direct_unsupported() or "on"
    except ImportError:
        pass
    shapes, model = [], []
    tmps = []
    for i, fam in enumerate(families or [None]):
        if fam is not None:
            tmp = tempfile.TemporaryDirectory(prefix=f"cudal2-bench-reg-{fam}-")
            tmps.append(tmp)
            probs = list(dict.fromkeys(problems + (model_probs if i == 0 else [])))
            meta["skipped"][fam] = build_registry(Path(tmp.name), fam, probs, dev)
            ops.set_registry(tmp.name)
        elif args.registry:
            ops.set_registry(args.registry)
        reg = ops.get_registry()
        meta.setdefault("registries", {})[fam or "registry"] = str(reg.root) if reg else None
        shapes += bench_shapes(problems, args.calls, fam or "registry")
        if i == 0 and tokens:
            model = bench_model(tokens, args.calls, fam or "registry")
    from cudal2.versions import source_commit
    import shlex
    commit = source_commit()
    command = shlex.join(["python3", sys.argv[0], *(sys.argv[1:] if argv is None else argv)])
    meta.update(commit=commit, command=command, nvmath=_nvmath_status())
    for r in shapes + model:
        r.update(device=dev.key, commit=commit, command=command)
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / dev.key
    out.mkdir(parents=True, exist_ok=True)
    stem = f"eager_latency_{dev.key}_{commit}" + ("" if not families else "_" + "-".join(families))
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "shapes": shapes, "model": model}, indent=1))
    rows = shapes + model
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)) or ["part"])
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out}/{stem}.json, .csv")
    for r in shapes:        # issue 18's target: cudal2.matmul's eager time at most torch.matmul's
        if r["problem"] in ("64x64x64:nn", "1x4096x4096:nt"):
            ok = r["cudal2_eager_us"] <= r["torch_eager_us"]
            print(f"{r['family']} {r['problem']}: cudal2 {r['cudal2_eager_us']:.2f} µs vs torch {r['torch_eager_us']:.2f} µs "
                  f"-> {'<= torch' if ok else 'SLOWER than torch'} ({r['served_by']})")
    for tmp in tmps:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
