"""Offline start for the default policy: reward-weighted likelihood on stored measurements.

`cudal2 train --policy-out PATH` runs it after the cost model; `cudal2 generate --init-policy PATH`
starts GRPO from the result (its KL reference is then that start, not a fresh network).

Per stored shape, the measured specs that are still valid under today's rules become samples
(their tokens and the action mask at each field); each gets weight softmax(y / tau) over the
shape's specs (y = log speedup over best-cublas, rl/costtrain.py rows), and the loss is minus the
weighted log-likelihood of their choices. tau 0.05: a spec 5% slower than the shape's best gets
about a third of its weight, one 20% slower ~2%, so the policy learns the shape's best region,
not one point, and nothing from the many poor rows. Unlike GRPO this needs no fresh samples: it
learns from every row of every shape the store has.
"""
from __future__ import annotations

import random
from typing import Callable

import torch

from cudal2.spec import FIELDS, is_valid

from .costtrain import Row, Scorer, by_shape
from .policy import Sample, allowed_values, few_threads
from .vocab import VOCAB


def sample_of(row: Row, device) -> Sample | None:
    """The spec as a policy sample (tokens and the mask at each step), None if no longer valid."""
    spec, p = row.spec, row.problem
    if not is_valid(spec, p, device):
        return None
    vals = [getattr(spec, f) for f in FIELDS]
    allowed = [[VOCAB.id(f, v) for v in allowed_values(tuple(vals[:i]), p, device, None)]
               for i, f in enumerate(FIELDS)]
    return Sample(spec=spec, tokens=VOCAB.encode(spec), allowed=allowed)


def pretrain(policy, rows: list[Row], device, *, epochs: int = 3, tau: float = 0.05, lr: float = 1e-3,
             seed: int = 0, report: Callable[[int, float], None] | None = None) -> int:
    """Train `policy` (SpecPolicy) in place, one Adam step per shape per epoch; returns the rows used."""
    groups = []
    for group in by_shape(rows).values():
        pairs = [(s, r.y) for r in group if (s := sample_of(r, device)) is not None]
        if len(pairs) >= 2:
            w = torch.softmax(torch.tensor([y for _, y in pairs]) / tau, 0)
            groups.append((group[0].problem, [s for s, _ in pairs], w))
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    rng = random.Random(seed)
    policy.train()
    with few_threads(policy.device):
        for ep in range(1, epochs + 1):
            rng.shuffle(groups)
            total = 0.0
            for problem, samples, w in groups:
                logp, choice = policy.token_logprobs(problem, device, samples)
                loss = -(w.to(logp.device) * (logp * choice.float()).sum(1)).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item()
            if report:
                report(ep, total / max(len(groups), 1))
    policy.eval()
    return sum(len(s) for _, s, _ in groups)


def policy_scorer(policy, device) -> Scorer:
    """Rank specs by the policy's log-probability (for costtrain.figures on held-out shapes)."""
    def score(problem, specs):
        return [policy.spec_logprob(problem, device, s) if is_valid(s, problem, device) else float("-inf")
                for s in specs]
    return score
