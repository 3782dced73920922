"""Eager latency of cudal2.matmul vs torch.matmul, and patched vs unpatched HF forward passes.

  python bench/eager_latency.py                              # registry: $CUDAL2_REGISTRY or shipped
  python bench/eager_latency.py --default-kernels tiled      # a temp registry of default kernels
  python bench/eager_latency.py --default-kernels mma --calls 1000 --tokens 1,16,128,512

Part 1, per small shape: host wall µs per call (PROTOCOL "eager latency": N calls then one sync,
cudal2.timing.eager) and offline GPU µs (cudal2.timing.offline, interleaved) of cudal2.matmul and
torch.matmul, with the plan that served cudal2 (exact / nearest kernel, or torch).
Part 2, a small Llama built from a config (random fp16 weights, nothing downloaded): GPU time and
eager wall time of a forward pass, patched (cudal2.patch_linear) vs unpatched, per token count.

--default-kernels builds a registry in a temp directory holding the family's default spec for
every benchmarked problem (no times recorded: it measures dispatch and launch cost, not tuning).
Writes bench/results/<device key>/eager_latency.{json,csv}.
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
from cudal2 import ops, timing
from cudal2.device import current
from cudal2.problems import Problem, parse_shapes, problems_from_hf_config

SHAPES = "64x64x64,128x128x128,256x256x256,512x512x512,1x4096x4096:nt,16x4096x4096:nt,128x4096x4096:nt"
LLAMA = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
             num_key_value_heads=4, vocab_size=8192, max_position_embeddings=4096)


def build_registry(root: Path, family: str, problems, dev) -> None:
    from cudal2.backends import get_backend
    from cudal2.registry import Entry, Registry
    from cudal2.spec import default_spec
    reg = Registry.load(root)
    for p in problems:
        spec = default_spec(family, p, dev)
        reg.add(Entry(problem=p.text, device=dev.key, backend=spec.backend, spec=spec.text),
                get_backend(spec.backend).render(spec, p))


def operands(p: Problem):
    a = torch.randn(p.M, p.K, device="cuda", dtype=torch.float16)
    b = torch.randn(*p.b_shape(), device="cuda", dtype=torch.float16)
    return a, b


def bench_shapes(problems, calls: int) -> list[dict]:
    rows = []
    for p in problems:
        a, b = operands(p)
        c1 = torch.empty(p.M, p.N, device="cuda", dtype=torch.float16)
        c2 = torch.empty_like(c1)
        bt = b.t() if p.layout == "nt" else b
        fns = {"cudal2": lambda: cudal2.matmul(a, b, layout=p.layout, out=c1),
               "torch": lambda: torch.matmul(a, bt, out=c2)}
        fns["cudal2"]()                                  # build the plan outside the clock
        served = ops.plan_info(a, b, p.layout)
        eager = {n: timing.eager(f, calls=calls) for n, f in fns.items()}
        gpu = timing.offline(fns)
        row = {"problem": p.text, "served_by": served}
        for n in fns:
            row[f"{n}_eager_us"] = eager[n].median_us
            row[f"{n}_eager_spread"] = eager[n].spread
            row[f"{n}_gpu_us"] = gpu[n].median_us
        row["eager_ratio"] = row["cudal2_eager_us"] / row["torch_eager_us"]
        row["gpu_speedup"] = row["torch_gpu_us"] / row["cudal2_gpu_us"]
        rows.append(row)
        print(f"{p.text:>20}  eager {row['cudal2_eager_us']:7.2f} vs {row['torch_eager_us']:7.2f} µs   "
              f"gpu {row['cudal2_gpu_us']:8.2f} vs {row['torch_gpu_us']:8.2f} µs   {served}", flush=True)
    return rows


def bench_model(tokens, calls: int) -> list[dict]:
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
        kern = sum(isinstance(pl, ops._KernelPlan) for pl in ops._PLANS.values())
        row = {"tokens": t, "patched_layers": n, "kernel_plans_total": kern, "rel_err_vs_unpatched": err,
               **{f"{k}_gpu_us": v.median_us for k, v in gpu.items()},
               **{f"{k}_eager_us": v.median_us for k, v in eager.items()}}
        row["gpu_speedup"] = row["unpatched_gpu_us"] / row["patched_gpu_us"]
        rows.append(row)
        print(f"tokens {t:5d}  forward gpu {row['patched_gpu_us']:9.1f} vs {row['unpatched_gpu_us']:9.1f} µs "
              f"(x{row['gpu_speedup']:.3f})  eager {row['patched_eager_us']:9.1f} vs {row['unpatched_eager_us']:9.1f} µs  "
              f"rel err {err:.2e}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES, help="shapes for part 1 (MxNxK[:layout],...)")
    ap.add_argument("--tokens", default="1,16,128,512", help="token counts for part 2 ('' skips it)")
    ap.add_argument("--calls", type=int, default=1000, help="calls per eager measurement")
    ap.add_argument("--registry", default=None, help="registry root (default: $CUDAL2_REGISTRY or shipped)")
    ap.add_argument("--default-kernels", choices=["none", "tiled", "persistent", "mma", "wgmma"], default="none",
                    help="serve from a temp registry of this family's default specs")
    ap.add_argument("--out", default=None, help="output directory (default bench/results/<device>)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = current()
    problems = parse_shapes(args.shapes)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    model_probs = problems_from_hf_config(LLAMA, tokens) if tokens else []
    tmp = None
    if args.default_kernels != "none":
        tmp = tempfile.TemporaryDirectory(prefix="cudal2-bench-reg-")
        build_registry(Path(tmp.name), args.default_kernels, list(dict.fromkeys(problems + model_probs)), dev)
        ops.set_registry(tmp.name)
    elif args.registry:
        ops.set_registry(args.registry)
    reg = ops.get_registry()
    meta = {"device": dev.key, "gpu": dev.name, "torch": torch.__version__, "calls": args.calls,
            "registry": str(reg.root) if reg else None, "default_kernels": args.default_kernels,
            "llama_config": LLAMA, "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        import triton
        meta["triton"] = triton.__version__
    except ImportError:
        pass
    shapes = bench_shapes(problems, args.calls)
    model = bench_model(tokens, args.calls) if tokens else []
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / dev.key
    out.mkdir(parents=True, exist_ok=True)
    stem = "eager_latency" + ("" if args.default_kernels == "none" else f"_{args.default_kernels}")
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "shapes": shapes, "model": model}, indent=1))
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(shapes[0]) if shapes else ["problem"])
        w.writeheader()
        w.writerows(shapes)
    if model:
        with open(out / f"{stem}_model.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(model[0]))
            w.writeheader()
            w.writerows(model)
    print(f"wrote {out}/{stem}.json, .csv" + (", _model.csv" if model else ""))
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
