"""Where a family's figure on one layout is a gap in the search, not the kernels: per grid shape, the
other layout's best spec of the family that the stores never measured on this layout, as
`hopper_sweep.py --pairs` lines. No GPU; reads `cudal2 generate` stores (plain or .gz).

  python3 bench/nn_family_gaps.py --stores bench/results/h200-sm90/grid_search/grid_store.db.gz \
      bench/results/h200-sm90/grid_search/grid_nn_leads_store.db.gz --out bench/nn_wgmma_gaps.txt

Why (H200 stores, 2026-12-07, CPU): issue 19's wgmma figure is 0.893 nn / 0.953 nt on starved and
0.985 / 1.030 on small. The same spec on the same shape ran nn / nt 0.96-1.0 of its ratio (starved
0.960, small 0.995: 203 and 234 shapes), but the nn search measured a median of 2 distinct wgmma
specs a shape where nt measured 7, and on 97 nn shapes it never ran the nt-best wgmma spec (its
grid-nn-leads pass led with the nt best of *any* family): there the nn family best is 0.49x of the
nt one on 12 starved shapes and 0.78x on 59 small ones. Timing those pairs measures the family
where the search did not look.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def measured(stores: list[str], device: str, family: str) -> dict:
    """{problem: {spec: best ratio (best-cublas µs / kernel µs of one measurement)}} of `family`."""
    from family_best import store_ratios
    out: dict = {}
    for spec, problem, r in store_ratios(stores, device):
        if f" family={family} " in f" {spec} ":
            d = out.setdefault(problem, {})
            d[spec] = max(d.get(spec, 0.0), r)
    return out


def gaps(m: dict, layout: str, other: str, device: str, top: int = 1) -> list[tuple]:
    """(class, problem, spec, its ratio on `other`, this layout's family best) for each grid shape
    whose `top` best `other` specs include one never measured on `layout` and valid there."""
    from cudal2.problems import Problem, grid
    from cudal2.registry import target_for_key
    from cudal2.spec import KernelSpec, violations
    from cudal2.stats import shape_class
    tgt = target_for_key(device)
    out = []
    for q in grid():
        here, there = f"{q.shape}:{layout}", m.get(f"{q.shape}:{other}")
        if not there:
            continue
        have = m.get(here, {})
        for spec, r in sorted(there.items(), key=lambda kv: -kv[1])[:top]:
            if spec in have or violations(KernelSpec.parse(spec), Problem.parse(here), tgt):
                continue
            out.append((shape_class(q.M, q.N, q.K), here, spec, r, max(have.values(), default=0.0)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", nargs="+", required=True)
    ap.add_argument("--device", default="h200-sm90")
    ap.add_argument("--family", default="wgmma")
    ap.add_argument("--layout", default="nn", choices=("nn", "nt"))
    ap.add_argument("--top", type=int, default=1, help="the other layout's best N specs a shape")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.top < 1:
        ap.error("--top >= 1")
    other = "nt" if args.layout == "nn" else "nn"
    from family_best import no_rows, read_stores
    have = read_stores(lambda: measured(args.stores, args.device, args.family))
    if not have:
        no_rows(args.device, f"ok {args.family} measurement")
    rows = gaps(have, args.layout, other, args.device, args.top)
    head = [f"# {' '.join(['python3', *sys.argv])}",
            f"# {len(rows)} pairs: per {args.layout} grid shape, the {other} search's best {args.top} "
            f"{args.family} spec(s) never measured on {args.layout} ({args.device}); "
            "after '#': class, its ratio on the other layout, this layout's family best"]
    lines = [f"{p}|{spec}  # {cls} {r:.3f} {best:.3f}" for cls, p, spec, r, best in rows]
    Path(args.out).write_text("\n".join(head + lines) + "\n")
    by = Counter(r[0] for r in rows)
    print(f"{len(rows)} pairs -> {args.out}: " + ", ".join(f"{c} {n}" for c, n in by.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
