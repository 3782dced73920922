"""Compare cost models on the same held-out shapes, per layout and per class (CPU only).

    python3 bench/costmodel_compare.py --store bench/results/h200-sm90 \
        --model bench/results/h200-sm90/costmodel/cost_h200_59bcd57.pt --model /tmp/cost_new.pt

`cudal2 train` prints one model's held-out figures; a retrained model's figure is over a different,
larger split, so it cannot say whether the new model is better. This reads the stores once, takes
the hash split of `cudal2 train` (same --holdout and --seed: a shape's side depends on the shape
alone, so shapes held out before stay held out) and scores every model on the held-out shapes that
NONE of the models trained on (each checkpoint lists its training shapes), by the same figures
(rl/costtrain.figures: top1, the measured speedup of the first pick over the shape's best stored,
geomean; rho, Spearman of score and measured speedup, mean), over all shapes, per layout and per
class of ../shared/classes.py. Writes a markdown table to stdout and, with --out, a JSON.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections import Counter
from pathlib import Path

from cudal2.stats import SHAPE_CLASSES as CLASSES, shape_class   # the package's copy of ../shared/classes.py





def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", action="append", required=True, help="as cudal2 train --store; repeat")
    ap.add_argument("--model", action="append", required=True, help="a cost-model checkpoint; repeat")
    ap.add_argument("--device", default="h200-sm90")
    ap.add_argument("--holdout", type=float, default=0.2, help="as cudal2 train --holdout")
    ap.add_argument("--seed", type=int, default=0, help="as cudal2 train --seed (the hash split's)")
    ap.add_argument("--holdout-shapes", help="as cudal2 train --holdout-shapes: these shapes instead of the hash split")
    ap.add_argument("--out", help="also write the figures here (JSON)")
    a = ap.parse_args(argv)
    from cudal2.cli.train import _read
    from cudal2.rl.costmodel import CostModel
    from cudal2.rl.costtrain import by_shape, figures, merge, rows_from, split

    with contextlib.redirect_stderr(io.StringIO()):
        sources, _ = _read(a.store)
    rows = merge([rows_from([r for r in recs if r["device"] in (a.device, None)], Counter()) for _, recs in sources])
    from cudal2.problems import parse_shapes
    held = None if a.holdout_shapes is None else {p.text for p in parse_shapes(a.holdout_shapes)}
    _, val = split(rows, a.holdout, a.seed, held)
    models = [(Path(m).name, CostModel.load(m)) for m in a.model]
    seen = set().union(*(set(m.info.get("train_shapes", ())) for _, m in models))
    val = [r for r in val if r.problem.text not in seen]
    groups = {"all": lambda r: True, "nn": lambda r: r.problem.layout == "nn",
              "nt": lambda r: r.problem.layout == "nt"}
    for c in CLASSES:
        groups[c] = (lambda c: lambda r: shape_class(r.problem.M, r.problem.N, r.problem.K) == c)(c)
    figs = {g: {name: figures([r for r in val if pred(r)], m.score) for name, m in models}
            for g, pred in groups.items()}
    how = "--holdout-shapes" if held is not None else f"holdout {a.holdout}, seed {a.seed}"
    print(f"held-out shapes none of the models trained on: {len(by_shape(val))} ({len(val)} rows; "
          f"stores {', '.join(a.store)}, {how})\n")
    print("| set | shapes | " + " | ".join(f"{n} top1 / rho" for n, _ in models) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in models) + " |")
    for g, per in figs.items():
        n = next(iter(per.values()))["shapes"]
        print(f"| {g} | {n} | " + " | ".join(f"{f['top1']:.3f} / {f['rho']:+.3f}" for f in per.values()) + " |")
    if a.out:
        from cudal2.versions import source_commit
        commit = source_commit()
        Path(a.out).write_text(json.dumps({"command": " ".join(sys.argv), "commit": commit,
                                           "models": a.model, "figures": figs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
