"""Search efficiency (issue 5): best speedup over best-cuBLAS within 8/16/32/64 evaluations on
held-out shapes, for the trained policy vs uniform random sampling vs a fixed autotune list.

  # on a GPU (every evaluation stored; re-run the same command after a time limit to go on):
  python bench/search_efficiency.py --shapes grid:10 --train 16 --test 6 --train-budget 16 \\
      --store bench/results/search_efficiency.db --out bench/results/search_efficiency_h200
  # on a CPU, replaying a store of GPU measurements:
  python bench/search_efficiency.py --replay bench/results/search_efficiency.db --shapes grid:10 ...
  # a dry run of the machinery on the stub clock (numbers are a model, never a result):
  python bench/search_efficiency.py --synthetic --shapes grid:50 --train 12 --test 6

Writes OUT.json (every shape, method, budget) and OUT.md (the geomean table).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="grid:10", help="grid | grid:N | FILE | MxNxK,... (train and test are drawn from these)")
    ap.add_argument("--layout", default="nn", choices=("nn", "nt"))
    ap.add_argument("--train", type=int, default=16, help="shapes to train on")
    ap.add_argument("--test", type=int, default=6, help="held-out shapes to measure on")
    ap.add_argument("--budgets", default="8,16,32,64", help="evaluation budgets to report")
    ap.add_argument("--train-budget", type=int, default=16, help="evaluations per training shape")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the training shapes")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--backend", default="both", choices=("triton", "cuda", "both"))
    ap.add_argument("--seed", type=int, default=0)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--replay", help="a store of measurements to replay (CPU)")
    src.add_argument("--synthetic", action="store_true", help="stub clock (tests the machinery only)")
    ap.add_argument("--cluster", default=None, help="ray or ray:ADDRESS for the GPU evaluator")
    ap.add_argument("--store", default="bench/results/search_efficiency.db", help="GPU runs: store of every evaluation")
    ap.add_argument("--out", default=None, help="output prefix (default bench/results/search_efficiency_<device>)")
    a = ap.parse_args(argv)

    from cudal2.problems import ProblemError, parse_shapes
    from cudal2.rl import efficiency as eff
    try:
        problems = parse_shapes(a.shapes, a.layout)
        budgets = tuple(int(x) for x in a.budgets.split(","))
        train, test = eff.split(problems, a.train, a.test, a.seed)
    except (ProblemError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    backends = None if a.backend == "both" else (a.backend,)
    if a.synthetic:
        from cudal2.device import DeviceInfo
        from cudal2.rl.replay import ReplayEvaluator
        device = DeviceInfo.target("sm_90a")
        evaluator = ReplayEvaluator(eff.synthetic_measurements(train + test, device, n_specs=200, seed=a.seed))
        label = "synthetic stub clock (a model, not a measurement)"
    elif a.replay:
        from cudal2.registry import target_for_key
        from cudal2.rl.replay import ReplayEvaluator
        from cudal2.store import Store
        evaluator = ReplayEvaluator(Store(a.replay))
        device = target_for_key(evaluator.device_key)
        label = f"replay of {a.replay}"
    else:
        from cudal2.device import gpu_available
        if not gpu_available() and not a.cluster:
            print("error: no CUDA GPU visible: run on a GPU, or use --replay STORE / --synthetic", file=sys.stderr)
            return 3
        from cudal2.evaluate import make_evaluator
        from cudal2.store import Store
        inner = make_evaluator(a.cluster)
        device = inner.device
        store = Store(a.store)
        run = store.new_run({"command": "search_efficiency", **vars(a)}, device=device.key, versions=inner.versions)
        evaluator = eff.CachedEvaluator(inner, store, run, device.key)
        label = f"GPU evaluator on {device.name}"

    def on_event(kind, **kw):
        if kind == "study_shape":
            r = kw["row"]
            print(f"{r['problem']:>22}  " + "  ".join(
                f"{m} " + "/".join(f"{r[m][str(b)]:.3f}" for b in budgets) for m in eff.METHODS), flush=True)
    t0 = time.time()
    try:
        res = eff.study(train, test, evaluator, device, budgets=budgets, group=a.group,
                        train_budget=a.train_budget, epochs=a.epochs, seed=a.seed, backends=backends,
                        on_event=on_event)
    finally:
        evaluator.close()
    res["source"] = label
    res["wall_s"] = time.time() - t0
    res["cached_evaluations"] = getattr(evaluator, "cached", 0)
    if a.replay is None and not a.synthetic:
        res["evaluator_phase_s"] = getattr(inner, "phase_s", None)   # compile / prepare / check / time
    out = Path(a.out or f"bench/results/search_efficiency_{res['device'] or device.key}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    md = f"# Search efficiency ({label})\n\n" + eff.markdown(res) + "\n"
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
