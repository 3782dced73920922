"""The order a set's search visits its shapes: the likeliest wins first (CPU only).

    python3 bench/search_order.py --layout nn --out bench/grid_nn2_order.txt \
        --leads-out bench/grid_nn2_leads.txt                                       # grid nn re-search
    python3 bench/search_order.py --layout nt --out bench/grid_nt_order.txt      # grid nt, the rest

A device session holds ~30 minutes and the grid search takes ~3 s per shape, so a set of 1000 shapes
spans sessions; the spread order (--stride 7) spends its first sessions on shapes as likely to stay
cuBLAS as not. This orders the 1000-shape grid by a prior of the best kernel's speedup over
best-cublas, highest first:
  1. the other layout's registry entry, when it was searched with today's families: its best
     kernel (filed, or the best a cuBLAS entry's search found: `times.best_kernel_us`) over its
     best-cublas. On the Hopper sweeps of runs 24-60 (406 shapes measured in both layouts, best spec
     per shape and layout vs best-cublas) nn and nt agree: Spearman 0.75; where nt won by > 1%, nn
     did too on 179 of 216 shapes.
  2. else the cost model's best score over the shape's candidate pool (rl/costrank.pool; the
     ensemble's mean minus spread, as `cost:N` ranks): on the 145 grid nt shapes the committed model
     held out, the top quarter by this score held 28 of the 55 kernel wins (AUC 0.74; the pool
     as cost:N ranks it on the card).
The two priors share one sort though they differ in kind (a measured best against the model's
conservative estimate, which sits lower): in a mixed order the model's shapes tend to come later.
Only the nt entries were searched with the wgmma and stream families (nn's first search predates
them), so prior 1 serves nn (`--other-prior auto`) and not nt. Shapes a store already finished are
skipped by `generate --resume`, so one order file serves every session; generate visits it in order
with --stride 1. The file lists MxNxK:layout, one per line, each with its prior as a comment.

--leads-out: with prior 1, also the other layout's best kernel spec per shape as a `generate
--lead-specs` file, so the search evaluates it first: on the same sweeps the nt-best spec was the
nn-best on 401 of 539 shapes and within 2% of it on 480 (nn time of the nt-best over the nn-best:
geomean 0.994).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def best_kernel(entry: dict | None) -> tuple[float, str] | None:
    """(best-cublas / time, spec) of the best kernel the entry's search found (filed, or the best a
    cuBLAS entry's search timed: `times.best_kernel_us` / `best_kernel_spec`), else None."""
    if not entry or not entry.get("best_cublas_us"):
        return None
    if entry.get("backend") != "cublas":
        t, spec = entry.get("time_us"), entry.get("spec")
    else:
        times = entry.get("times") or {}
        t, spec = times.get("best_kernel_us"), times.get("best_kernel_spec")
    return (entry["best_cublas_us"] / t, spec or None) if t else None


def other_key(p) -> str:
    return f"{p.shape}:{'nt' if p.layout == 'nn' else 'nn'}"


def order(problems, entries: dict, use_other: bool, scorer) -> list[tuple[float, str, object]]:
    """[(prior, source, problem)], highest prior first; ties keep the grid's order."""
    out = []
    for i, p in enumerate(problems):
        best = best_kernel(entries.get(other_key(p))) if use_other else None
        if best is not None:
            out.append((best[0], "other", i, p))
        else:
            out.append((scorer(p), "model", i, p))
    out.sort(key=lambda r: (-r[0], r[2]))
    return [(prior, src, p) for prior, src, _, p in out]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layout", choices=("nn", "nt"), required=True)
    ap.add_argument("--registry", default=str(ROOT / "src/cudal2/registry/index.json"))
    ap.add_argument("--device", default="h200-sm90")
    ap.add_argument("--cost-model", default=str(ROOT / "bench/results/h200-sm90/costmodel/cost_h200_2859efc.pt"))
    ap.add_argument("--other-prior", choices=("auto", "yes", "no"), default="auto",
                    help="use the other layout's entry as the prior (auto: for nn, whose first search predates wgmma)")
    ap.add_argument("--out", required=True, help="the order file (MxNxK:layout per line)")
    ap.add_argument("--leads-out", help="also write the other layout's best kernel spec per shape here "
                    "(a generate --lead-specs file); needs the other layout's prior")
    a = ap.parse_args(argv)
    from cudal2.problems import grid
    from cudal2.rl.costmodel import CostModel
    from cudal2.rl.costrank import pool
    from cudal2.rl.staged import cost_extras
    from cudal2.versions import source_commit
    from cudal2.registry import target_for_key

    idx = json.loads(Path(a.registry).read_text())
    if a.device not in idx.get("devices", {}):
        ap.error(f"--device {a.device}: the registry holds {', '.join(sorted(idx.get('devices', {}))) or 'no device'}")
    entries = idx["devices"][a.device]["entries"]
    model = CostModel.load(a.cost_model)
    if model.device_key != a.device:
        ap.error(f"--cost-model {a.cost_model} is for {model.device_key}, not {a.device}")
    # The card's SM count (the model's): the pool is then the one `--seed-list cost:N` ranks there.
    dev = dataclasses.replace(target_for_key(a.device), sm_count=model.sms)
    both = ("cuda", "triton")

    def scorer(p):
        return math.exp(max(model.score(p, pool(p, dev, both, cost_extras(p, dev, both)))))

    use_other = a.other_prior == "yes" or (a.other_prior == "auto" and a.layout == "nn")
    if a.leads_out and not use_other:
        ap.error("--leads-out takes the other layout's specs: it needs --other-prior yes (or auto with --layout nn)")
    rows = order(grid(a.layout), entries, use_other, scorer)
    cmd = "python3 bench/search_order.py " + " ".join(argv if argv is not None else sys.argv[1:])
    commit = source_commit()
    lines = [f"# {cmd}  (commit {commit})",
             "# the grid in the order of a prior of its best kernel's speedup over best-cublas, highest first:",
             "# 'other' = the other layout's searched entry, 'model' = the cost model's best score over the pool"]
    lines += [f"{p.text}  # {src} {prior:.3f}" for prior, src, p in rows]
    Path(a.out).write_text("\n".join(lines) + "\n")
    if a.leads_out:
        leads = [(p, (best_kernel(entries.get(other_key(p))) or (0, None))[1]) for _, _, p in rows]
        leads = [(p, t) for p, t in leads if t]
        Path(a.leads_out).write_text("\n".join(
            [f"# {cmd}  (commit {commit})",
             "# per shape, in the order file's order: the other layout's best kernel spec (generate --lead-specs)"]
            + [f"{p.text}|{t}" for p, t in leads]) + "\n")
        print(f"{a.leads_out}: {len(leads)} lead specs")
    n_other = sum(src == "other" for _, src, _ in rows)
    print(f"{a.out}: {len(rows)} shapes ({n_other} by the other layout's entry, {len(rows) - n_other} by the model); "
          f"prior > 1.01: {sum(p > 1.01 for p, _, _ in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
