"""Where cudal2.matmul's eager host time goes, piece by piece, beside torch's (issue 18, item 6).

bench/eager_latency.py measured cudal2.matmul slower than torch.matmul in eager mode where both
run the same GPU work (H200, 2026-12-03: 64³ nn 21.9 vs 16.8 µs; 1x4096x4096 nt 24.3 vs 17.5 µs),
while with `out=` the 64³ call was at par (14.0 vs 13.9). This times the parts of the call on
the same inputs, each as N calls then one sync (cudal2.timing.eager), in two passes of opposite
order (an order effect shows as a difference between the passes):

  torch       torch.matmul(a, b) (nn) / F.linear(a, b) (nt): what a user would call
  cudal2      cudal2.matmul(a, b, layout=...)
  cudal2_out  the same with out=
  plan_new    the cached plan's no-out path called directly (no matmul frame, no key)
  plan_key    building and hashing the plan key alone
  empty       torch.empty of the output alone
  launch      the plan's bound launch into a fixed output (kernel plans)

  python3 bench/eager_breakdown.py --shapes 64x64x64:nn,1x4096x4096:nt --out $OUT
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def pieces(p, a, b):
    import torch
    import torch.nn.functional as F

    import cudal2
    from cudal2 import ops
    nt = p.layout == "nt"
    c = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    cudal2.matmul(a, b, layout=p.layout)                              # builds and caches the plan
    key = (a.shape, b.shape, a.dtype, b.dtype, a.device, b.device, p.layout, False)
    plan = ops._PLANS[key]
    fns = {
        "torch": (lambda: F.linear(a, b)) if nt else (lambda: torch.matmul(a, b)),
        "cudal2": lambda: cudal2.matmul(a, b, layout=p.layout),
        "cudal2_out": lambda: cudal2.matmul(a, b, layout=p.layout, out=c),
        "plan_new": lambda: plan.new(a, b),
        "plan_key": lambda: hash((a.shape, b.shape, a.dtype, b.dtype, a.device, b.device, p.layout, False)),
        "empty": lambda: torch.empty(p.M, p.N, dtype=torch.float16, device=a.device),
    }
    if getattr(plan, "launch", None) is not None:
        fns["launch"] = lambda: plan.launch(a, b, c)
    return fns, getattr(plan, "info", type(plan).__name__)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="64x64x64:nn,1x4096x4096:nt")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--out", default="bench/results/h200-sm90")
    args = ap.parse_args()
    import torch

    from cudal2 import timing
    from cudal2.check import make_inputs
    from cudal2.device import current
    from cudal2.problems import parse_shapes
    from cudal2.versions import collect, source_commit
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark times host work around GPU launches", file=sys.stderr)
        return 3
    rows = []
    for p in parse_shapes(args.shapes):
        a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(0))
        fns, info = pieces(p, a, b)
        passes = []
        for order in (list(fns), list(reversed(fns))):
            passes.append({n: timing.eager(fns[n], calls=args.calls).median_us for n in order})
        row = {"problem": p.text, "plan": info,
               **{n: round(min(ps[n] for ps in passes), 3) for n in fns},
               "passes": [{n: round(v, 3) for n, v in ps.items()} for ps in passes]}
        rows.append(row)
        print(p.text, info)
        print("  " + "  ".join(f"{n} {row[n]:.2f}" for n in fns) + "  (µs, min of two passes)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"eager_breakdown_{current().key}_{source_commit()}"
    (out / f"{tag}.json").write_text(json.dumps({"command": " ".join(sys.argv), "versions": collect(),
                                                 "calls": args.calls, "rows": rows}, indent=1))
    print(f"wrote {out / tag}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
