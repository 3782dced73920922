"""The shapes of the efficiency study (issue 21, item 3): the held-out set and the training split.

Held out = shapes the committed cost model and a `cudal2 train --policy-out` policy never trained on:
costtrain's hash split `_in_holdout(problem, 0.2, 0)` (a fifth of the shapes by a hash of
`MxNxK:layout`, seed 0: the split of `cudal2 train`'s defaults, which made
bench/results/h200-sm90/costmodel/cost_h200_9583f7e.pt). `choose_heldout` picks, among the grid
shapes that split holds out, ROUNDS shapes per class of ../shared/classes.py (cudal2.stats.shape_class)
and layout, seeded (large ones at most MAX_GFLOP), plus the off-grid LLM shapes of LLM (bench/model_set.txt, nt, also held out by
the split). The file lists them in rounds, so a prefix is balanced:
  rounds 1-2 (24 grid shapes: 2 per class and layout), the 6 LLM shapes (30: the issue's minimum,
  >= 4 per class, both layouts, >= 6 off-grid), then rounds 3-4 (24 more: 4 per class and layout).
`--limit N` of bench/search_efficiency.py takes the first N.

Training shapes (the online policy's GRPO) come from the grid in both layouts, on the training side
of the same split, one per (class, layout) in turn.

  python3 bench/study_shapes.py --write bench/efficiency_heldout.txt    # (re)write the committed file
  python3 bench/study_shapes.py bench/efficiency_heldout.txt            # counts per class and layout
"""
from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

from cudal2.problems import Problem, grid, read_shape_file
from cudal2.rl.costtrain import _in_holdout
from cudal2.stats import SHAPE_CLASSES, shape_class

HERE = Path(__file__).resolve().parent
DEFAULT_FILE = HERE / "efficiency_heldout.txt"
HOLDOUT = (0.2, 0)            # costtrain's split: fraction, seed (cudal2 train's defaults)
ROUNDS = 4                    # grid shapes per (class, layout)
# Large grid shapes go up to 8.8 TFLOP; a poor random spec there runs for tens of ms a call, and the
# study times every proposal (no early stop): the picks stay under this (4096x4096x16384 = 550).
MAX_GFLOP = 600
LAYOUTS = ("nn", "nt")
GRID_SIZES = frozenset((64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384))
# Off-grid shapes of bench/model_set.txt that the split holds out, one per class the set has
# (it has no shortK: K <= 512 with the tiles to fill the SMs), two decode sizes under 1 GFLOP.
LLM = ("1x8192x8192:nt", "16x3584x3584:nt", "32x14336x4096:nt", "128x14336x4096:nt",
       "1024x3584x3584:nt", "4096x3584x3584:nt")


def cls(p: Problem) -> str:
    return shape_class(p.M, p.N, p.K)


def offgrid(p: Problem) -> bool:
    return not {p.M, p.N, p.K} <= GRID_SIZES


def held_out(p: Problem) -> bool:
    return _in_holdout(p, *HOLDOUT)


def choose_heldout(seed: int = 0, rounds: int = ROUNDS) -> list[Problem]:
    """The committed held-out list, reproducibly (see the module docstring for the order)."""
    picks: dict[tuple[str, str], list[Problem]] = {}
    for lay in LAYOUTS:
        for c in SHAPE_CLASSES:
            cands = sorted((p for p in grid(lay) if held_out(p) and cls(p) == c and p.flops <= MAX_GFLOP * 1e9),
                           key=lambda p: p.text)
            picks[(lay, c)] = random.Random(f"{seed}|{lay}|{c}").sample(cands, min(rounds, len(cands)))

    def rnd(r: int) -> list[Problem]:
        return [picks[(lay, c)][r] for c in SHAPE_CLASSES for lay in LAYOUTS if r < len(picks[(lay, c)])]
    first = [p for r in range(min(2, rounds)) for p in rnd(r)]
    return first + [Problem.parse(s) for s in LLM] + [p for r in range(2, rounds) for p in rnd(r)]


def read_heldout(path: str | Path = DEFAULT_FILE, limit: int | None = None) -> list[Problem]:
    ps = read_shape_file(str(path), "nn")
    return ps[:limit] if limit else ps


def train_split(n: int, exclude, seed: int = 0, layouts=LAYOUTS) -> list[Problem]:
    """n grid shapes on the training side of the split (never in `exclude`), one per (class, layout)
    in turn, each drawn at random (seeded) from that cell."""
    ex = {p.text for p in exclude}
    rng = random.Random(f"train|{seed}")
    cells = {}
    for lay in layouts:
        for c in SHAPE_CLASSES:
            ps = sorted((p for p in grid(lay) if not held_out(p) and p.text not in ex and cls(p) == c),
                        key=lambda p: p.text)
            rng.shuffle(ps)
            cells[(c, lay)] = ps
    out: list[Problem] = []
    while len(out) < n and any(cells.values()):
        for key in cells:
            if cells[key] and len(out) < n:
                out.append(cells[key].pop())
    return out


def counts(ps: list[Problem]) -> dict:
    """Counts per class and layout, and the off-grid ones."""
    c = Counter((cls(p), p.layout) for p in ps)
    return {"shapes": len(ps), "offgrid": sum(map(offgrid, ps)),
            "by_class": {k: sum(v for (kk, _), v in c.items() if kk == k) for k in SHAPE_CLASSES},
            "by_class_layout": {f"{k}:{lay}": c[(k, lay)] for k in SHAPE_CLASSES for lay in LAYOUTS}}


def write(path: Path, ps: list[Problem]) -> None:
    lines = ["# Held-out shapes of the search-efficiency study (issue 21, item 3), written by",
             "#   python3 bench/study_shapes.py --write bench/efficiency_heldout.txt",
             "# Every one held out by costtrain's hash split _in_holdout(p, 0.2, 0) (the committed cost model's",
             "# and `cudal2 train --policy-out`'s). Rounds 1-2 (2 per class and layout), 6 off-grid LLM shapes",
             "# (bench/model_set.txt), rounds 3-4: the first 30 lines are the issue's minimum set."]
    lines += [f"{p.text:<22} # {cls(p)}{' off-grid' if offgrid(p) else ''}" for p in ps]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--write"]:
        dest = Path(args[1] if len(args) > 1 else DEFAULT_FILE)
        write(dest, choose_heldout())
        print(f"wrote {dest}")
        args = [str(dest)]
    for a in args or [str(DEFAULT_FILE)]:
        print(a, counts(read_heldout(a)))
