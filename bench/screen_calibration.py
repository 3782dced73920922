"""How cheap can the search's screen be? Re-time stored candidates under several screen settings and
the PROTOCOL's timing, and report agreement and timing cost per shape class.

  python3 bench/screen_calibration.py --store run/grid.db --shapes 24 --max-calls 300 --out $OUT

For `--shapes` grid shapes already searched in the store (spread over the GFLOP range), the specs
the search screened there and found correct are timed again under three profiles, in one evaluator
(same worker, inputs and baselines), the profiles interleaved per shape:
  screen   the search's screen timing (--screen-ms, >= 30 calls)
  capped   the same with --max-calls calls per function at most (generate --screen-max-calls)
  ref      the PROTOCOL's offline figure (100 ms, >= 30 calls): the yardstick
Only the `random` check runs (every spec passed the screen's five already): the cost compared is
the timing's. Reported per profile and class: timing seconds per shape (the evaluator's `time`
phase), whether the profile's fastest spec is ref's fastest (top-1), and how far its speedups over
best-cublas are from ref's (median and worst |ratio - 1|). Why: on the H200 (2026-12-03) the screen
spent 2.5 s per shape timing under 1 GFLOP, thousands of calls of 5 µs kernels at ~30 µs of host
time each (NOTES.md); a cap is only worth it if the ranking survives.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cudal2.stats import CLASSES, flop_class


def pick(store, device: str, n: int, per_shape: int = 8) -> list[tuple]:
    """(problem, [spec text]) for n searched shapes evenly spread in GFLOP order, each with the
    (at most per_shape) screened specs that passed."""
    from cudal2.problems import Problem
    shapes = sorted(store.shapes(device), key=lambda t: Problem.parse(t).flops)
    if not shapes:
        raise SystemExit(f"error: the store has no searched shapes on {device}")
    step = max(1, len(shapes) / max(1, n))
    chosen = [shapes[min(len(shapes) - 1, int(i * step))] for i in range(min(n, len(shapes)))]
    out = []
    for t in dict.fromkeys(chosen):
        ok = [m.spec for m in store.measurements(problem=t, device=device)
              if m.status == "ok" and (m.meta.get("profile") or {}).get("name") == "screen"]
        specs = list(dict.fromkeys(ok))[:per_shape]
        if len(specs) >= 2:
            out.append((Problem.parse(t), specs))
    return out


def agreement(times: dict[str, float], ref: dict[str, float], best_cublas: float, ref_best: float) -> dict:
    """top-1 agreement and the |ratio - 1| of speedups (per spec: this profile's t_best/t against ref's)."""
    common = [s for s in ref if s in times]
    dev = [abs((best_cublas / times[s]) / (ref_best / ref[s]) - 1.0) for s in common]
    return {"top1": min(common, key=times.get) == min(common, key=ref.get),
            "median_dev": sorted(dev)[len(dev) // 2], "worst_dev": max(dev)}


def measure(evaluator, p, specs: list[str], names) -> dict:
    """One shape under every profile (already added to the evaluator), in the order given."""
    row = {"shape": p.shape, "gflop": p.flops / 1e9, "class": flop_class(p.flops), "specs": len(specs)}
    got = {}
    for name in names:
        t0 = dict(getattr(evaluator, "phase_s", {}) or {})
        ms = evaluator.evaluate(p, specs, profile=name)
        t1 = dict(getattr(evaluator, "phase_s", {}) or {})
        ok = {m.spec: m.time_us for m in ms if m.status == "ok" and m.time_us}
        got[name] = (ok, next((m.best_cublas_us for m in ms if m.best_cublas_us), None))
        row[f"{name}_time_s"] = round(t1.get("time", 0.0) - t0.get("time", 0.0), 4)
    ref, ref_bc = got["ref"]
    for name in names:
        if name != "ref" and ref and got[name][0] and ref_bc and got[name][1]:
            row[name] = agreement(got[name][0], ref, got[name][1], ref_bc)
    return row


def summary(rows: list[dict], profiles) -> dict:
    out = {}
    for c in ("all", *CLASSES):
        sel = [r for r in rows if c == "all" or r["class"] == c]
        if not sel:
            continue
        d = {"shapes": len(sel)}
        for name in profiles:
            d[f"{name}_time_s_per_shape"] = round(sum(r[f"{name}_time_s"] for r in sel) / len(sel), 3)
            ag = [r[name] for r in sel if name in r]
            if ag:
                d[f"{name}_top1"] = round(sum(a["top1"] for a in ag) / len(ag), 3)
                d[f"{name}_median_dev"] = round(sorted(a["median_dev"] for a in ag)[len(ag) // 2], 4)
                d[f"{name}_worst_dev"] = round(max(a["worst_dev"] for a in ag), 4)
        out[c] = d
    return out


def main(argv=None, evaluator=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--device", default="h200-sm90")
    ap.add_argument("--shapes", type=int, default=24)
    ap.add_argument("--screen-ms", type=float, default=10.0)
    ap.add_argument("--max-calls", type=int, default=300)
    ap.add_argument("--ref-ms", type=float, default=100.0)
    ap.add_argument("--time-limit", type=float, default=400.0, help="stop before a new shape after this many seconds")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from cudal2.store import Store
    with Store(args.store) as st:
        shapes = pick(st, args.device, args.shapes)
    base = {"checks": ("random",), "min_calls": 30, "warmup": 3, "early_stop": None}
    profiles = {"screen": {**base, "min_ms": args.screen_ms},
                "capped": {**base, "min_ms": args.screen_ms, "max_calls": args.max_calls},
                "ref": {**base, "min_ms": args.ref_ms}}
    own = evaluator is None
    if own:
        from cudal2.evaluate import Evaluator
        evaluator = Evaluator(device_key=args.device, early_stop=None)
    for name, cfg in profiles.items():
        evaluator.add_profile(name, **cfg)
    t0 = time.monotonic()
    rows: list[dict] = []
    try:
        for p, specs in shapes:
            if time.monotonic() - t0 > args.time_limit:
                break
            rows.append(measure(evaluator, p, specs, list(profiles)))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if own:
            evaluator.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"config": vars(args), "profiles": {k: {**v, "checks": list(v["checks"])} for k, v in profiles.items()},
           "rows": rows, "summary": summary(rows, profiles), "wall_s": round(time.monotonic() - t0, 1),
           "complete": len(rows) == len(shapes)}
    (out / "screen_calibration.json").write_text(json.dumps(res, indent=1))
    for c, d in res["summary"].items():
        print(c, d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
