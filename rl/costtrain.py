"""Training and held-out validation of the cost model (rl/costmodel.py) on stored measurements.

Rows: one per (problem, spec) with its measured log speedup over best-cublas (PROTOCOL's ratio, both
times from the same run). `ok` rows give log(best_cublas_us / time_us); `slow` rows (stopped early,
at least ~3x slower than the best known) give their reward (rl/reward.py, at most -1.1); failures
(compile errors, wrong results, crashes) give none: the model ranks speed, the checker judges
correctness. Within one source a key measured several times (the screen and the full pass) is
averaged; across sources the later source's value wins (as in the replay: the latest measurement).

Validation is on held-out SHAPES, never random rows: a row of a shape the model trained on tells
it that shape's level, which the search never knows in advance. Per held-out shape with two or
more rows the figures are: `rho` (Spearman rank correlation of score and measured speedup, mean
over shapes) and `top1` (measured speedup of the model's first pick / the shape's best stored one,
geomean over shapes: 1.0 = it always picks the best of what was measured).
"""
from __future__ import annotations

import hashlib
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from cudal2.problems import Problem
from cudal2.spec import KernelSpec, SpecError
from cudal2.stats import spearman
from cudal2.tiles import estimate

from .costmodel import CostModel, features
from .reward import reward

Y_RANGE = (-3.0, 1.0)      # reward's floor; no stored kernel is e-times faster than cuBLAS


@dataclass(frozen=True)
class Row:
    problem: Problem
    spec: KernelSpec
    y: float                # log speedup over best-cublas


def _target(status, time_us, best_us, ratio=None) -> float | None:
    if status == "ok" and time_us and best_us:
        y = math.log(best_us / time_us)
    elif status == "slow":
        y = reward({"status": "slow", "ratio": ratio, "time_us": time_us, "best_cublas_us": best_us})
    else:
        return None
    return min(max(y, Y_RANGE[0]), Y_RANGE[1])


def rows_from(records: Iterable[dict], skipped: Counter) -> list[Row]:
    """Rows of one source, averaged per (problem, spec). A record: problem, spec, status, time_us,
    best_cublas_us (and ratio for slow ones): a Measurement's fields, or a sweep CSV's row mapped
    by the caller. What cannot be used is counted in `skipped` by reason."""
    acc: dict[tuple[str, str], list] = defaultdict(list)
    parsed: dict[tuple[str, str], tuple[Problem, KernelSpec]] = {}
    for r in records:
        y = _target(r.get("status"), r.get("time_us"), r.get("best_cublas_us"), r.get("ratio"))
        if y is None:
            skipped[f"status {r.get('status')}"] += 1
            continue
        try:
            p, s = Problem.parse(str(r["problem"])), KernelSpec.parse(str(r["spec"]))
        except (ValueError, SpecError):
            skipped["unparseable problem or spec"] += 1
            continue
        parsed[(p.text, s.text)] = (p, s)
        acc[(p.text, s.text)].append(y)
    return [Row(*parsed[k], statistics.fmean(v)) for k, v in acc.items()]


def merge(sources: list[list[Row]]) -> list[Row]:
    """One row per (problem, spec); a later source replaces an earlier one's value."""
    out: dict[tuple[str, str], Row] = {}
    for rows in sources:
        for r in rows:
            out[(r.problem.text, r.spec.text)] = r
    return list(out.values())


def _in_holdout(problem: Problem, fraction: float, seed: int) -> bool:
    h = int(hashlib.sha256(f"{seed}|{problem.text}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return h < fraction


def split(rows: list[Row], fraction: float = 0.2, seed: int = 0,
          shapes: set[str] | None = None) -> tuple[list[Row], list[Row]]:
    """(train, held-out) by shape: the shapes named in `shapes` (Problem texts) if given, else a
    `fraction` of the shapes chosen by a hash of (seed, shape), so the split is stable."""
    held = (lambda p: p.text in shapes) if shapes is not None else (lambda p: _in_holdout(p, fraction, seed))
    train = [r for r in rows if not held(r.problem)]
    return train, [r for r in rows if held(r.problem)]


def by_shape(rows: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        out[r.problem.text].append(r)
    return out


Scorer = Callable[[Problem, list[KernelSpec]], list[float]]


def figures(rows: list[Row], scorer: Scorer | None) -> dict:
    """rho and top1 of a scorer (higher = better) over the shapes of `rows` with >= 2 rows and
    distinct speedups; scorer None = a uniformly random order (its expectation: rho 0, top1 the
    geomean of the mean ratio to the best)."""
    rhos, logs = [], []
    for group in by_shape(rows).values():
        ys = [r.y for r in group]
        if len(group) < 2 or max(ys) - min(ys) < 1e-9:
            continue
        if scorer is None:
            rhos.append(0.0)
            logs.append(math.log(statistics.fmean(math.exp(y - max(ys)) for y in ys)))
            continue
        s = scorer(group[0].problem, [r.spec for r in group])
        pick = max(range(len(group)), key=lambda i: (s[i], -i))
        rhos.append(spearman(s, ys))
        logs.append(ys[pick] - max(ys))
    if not rhos:
        return {"shapes": 0, "rho": float("nan"), "top1": float("nan")}
    return {"shapes": len(rhos), "rho": statistics.fmean(rhos), "top1": math.exp(statistics.fmean(logs))}


def wave_scorer(sms: int) -> Scorer:
    """cudal2.tiles' wave model alone (lower modelled time = higher score): a physical baseline."""
    return lambda p, specs: [-estimate(p, s.bm, s.bn, s.split_k, sms) for s in specs]


def list_scorer(order: Callable[[Problem], list[KernelSpec]]) -> Scorer:
    """Rank by position in a fixed list (e.g. FixedListPolicy.candidates); unlisted specs last."""
    def score(p, specs):
        pos = {s.text: i for i, s in enumerate(order(p))}
        return [-float(pos.get(s.text, len(pos))) for s in specs]
    return score


def _tensors(model: CostModel, rows: list[Row]):
    x = torch.tensor([features(r.problem, r.spec, model.sms) for r in rows], dtype=torch.float32)
    y = torch.tensor([r.y for r in rows], dtype=torch.float32)
    ids = {t: i for i, t in enumerate(sorted({r.problem.text for r in rows}))}
    g = torch.tensor([ids[r.problem.text] for r in rows])
    return x, y, g, len(ids)


def _centred(v: torch.Tensor, g: torch.Tensor, n: int) -> torch.Tensor:
    """v minus its shape's mean (v: [members, rows])."""
    sums = torch.zeros(v.shape[0], n).index_add_(1, g, v)
    cnt = torch.zeros(n).index_add_(0, g, torch.ones_like(g, dtype=v.dtype)).clamp_min(1)
    return v - (sums / cnt)[:, g]


def fit(model: CostModel, train: list[Row], *, epochs: int = 400, lr: float = 3e-3, weight_decay: float = 1e-4,
        rank_weight: float = 1.0, report: Callable[[int, float], None] | None = None, every: int = 100) -> float:
    """Full-batch AdamW on MSE of the log speedup plus `rank_weight` x MSE of the speedup
    centred per shape (the within-shape order is what ranking needs; the level alone is what plain
    MSE mostly learns). Each member sees its own bootstrap of the shapes, so the members disagree
    where the data is thin. `report(epoch, loss)` every `every` epochs. Returns the last loss."""
    x, y, g, n = _tensors(model, train)
    model.set_norm(x)
    gen = torch.Generator().manual_seed(model.hparams["seed"])
    members = len(model.nets)
    # Bootstrap over shapes: weight of each shape per member = how often it was drawn.
    w = torch.stack([torch.bincount(torch.randint(n, (n,), generator=gen), minlength=n).float()
                     for _ in range(members)])[:, g] if members > 1 else torch.ones(1, len(train))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    loss = torch.tensor(0.0)
    for ep in range(1, epochs + 1):
        opt.zero_grad()
        pred = model(x)
        err = (pred - y) ** 2 + rank_weight * (_centred(pred, g, n) - _centred(y.expand_as(pred), g, n)) ** 2
        loss = (w * err).sum() / w.sum()
        loss.backward()
        opt.step()
        if report and (ep % every == 0 or ep == epochs):
            report(ep, loss.item())
    model.eval()
    return loss.item()
