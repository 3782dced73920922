"""`--seed-list cost:N`: a shape's first N evaluations are the cost model's best of a large pool.

The pool (`pool`): the fixed autotune list (every entry, not its first few), the wgmma family's
wave-model candidates (cudal2.tiles) on Hopper, split-K variants on starved shapes, and `n_random`
uniform draws from the valid space (each family equally, then each knob uniformly, kept if
`is_valid`; seeded by the shape, so the same shape gets the same pool). A few hundred to a
thousand specs per shape, scored on the CPU in milliseconds; no GPU time is spent on any of them
before the model has ranked them.

Why draws and not `enumerate_valid` or the policy's masked sampler: both cost ~5-10 ms per spec on
2 cores (enumerate_valid walks 46,720 specs at 4096^3 in ~5 s), seconds per shape against a 2.4 s
search; a draw + validity check costs ~8 us (2026-12-04; ~22 us before the dict draws).

`pick` (rl/costmodel.py) takes the N best-scored specs with distinct (family, bm, bn, split_k): N
stage or group variants of one tile would spend the seeds on one guess (the model's error on one
tile is shared by all its variants).
"""
from __future__ import annotations

import functools
import hashlib
import random

from cudal2.problems import Problem
from cudal2.spec import (CHOICES, COLUMN_GROUP_FAMILIES, FAMILIES, PINNED, POW2_BN_FAMILIES, WARPS, WGMMA_TILE,
                          KernelSpec, is_valid)

from .costmodel import CostModel, pick

N_RANDOM = 512


@functools.lru_cache(maxsize=None)
def _options(family: str) -> tuple[tuple[str, tuple], ...]:
    """(field, the values a draw picks from) for every field but backend and family, in CHOICES
    order: uniform over the family's own values (pinned, its warps, wgmma's tile, power-of-two bn,
    tile columns grouped along N only where the template renders it)."""
    out = []
    for f in CHOICES:
        if f in ("backend", "family"):
            continue
        opts = CHOICES[f]
        if f in PINNED[family]:
            opts = (PINNED[family][f],)
        elif f == "warps":
            opts = WARPS[family]
        elif family == "wgmma" and f in WGMMA_TILE:
            opts = WGMMA_TILE[f]
        elif f == "bn" and family in POW2_BN_FAMILIES:
            opts = tuple(b for b in opts if not b & (b - 1))
        elif f == "group_m" and family not in COLUMN_GROUP_FAMILIES:
            opts = tuple(g for g in opts if g > 0)
        out.append((f, opts))
    return tuple(out)


def _draw(rng: random.Random, family: str) -> dict:
    """One draw's fields as a dict: ~93% of draws are invalid, and a KernelSpec (a frozen dataclass)
    costs more to build than the validity check that rejects it. Every field takes one rng.choice,
    a pinned one too, so the rng's sequence (and every later draw) stays what it always was."""
    vals = {"backend": next(b for b, fs in FAMILIES.items() if family in fs), "family": family}
    for f, opts in _options(family):
        vals[f] = rng.choice(opts)
    return vals


def random_valid(problem: Problem, device, n: int, backends=None, tries: int = 40) -> list[KernelSpec]:
    """Up to n distinct valid specs, an equal share per family (a family whose knobs are rarely
    valid together, e.g. wgmma's deep rings, still gets its share); at most `tries` draws per spec.
    A CPU replay of 20 grid nt shapes (2026-12-04) spent 0.17 s per shape here (~7,400 draws each);
    tests/test_cost_model.py holds the list equal to the draw-a-KernelSpec-then-check form."""
    fams = [f for b, fs in FAMILIES.items() if not backends or b in backends for f in fs]
    rng = random.Random(int(hashlib.sha256(problem.text.encode()).hexdigest()[:8], 16))
    out: dict[str, KernelSpec] = {}
    for k, fam in enumerate(fams):
        quota = (n * (k + 1)) // len(fams) - (n * k) // len(fams)
        got = 0
        for _ in range(quota * tries):
            if got >= quota:
                break
            vals = _draw(rng, fam)
            if is_valid(vals, problem, device):
                s = KernelSpec(**vals)
                if s.text not in out:
                    out[s.text] = s
                    got += 1
    return list(out.values())


def pool(problem: Problem, device, backends=None, extra=(), n_random: int = N_RANDOM) -> list[KernelSpec]:
    """The fixed list, `extra` (rl/staged.py hands in the wave-model and split-K seeds), the draws."""
    from .search import FixedListPolicy
    specs = FixedListPolicy.candidates(problem, device, backends) + list(extra)
    specs += random_valid(problem, device, n_random, backends)
    return list({s.text: s for s in specs}.values())


def cost_seeds(n: int, problem: Problem, device, backends, model: CostModel, extra=(),
               n_random: int = N_RANDOM) -> list[KernelSpec]:
    if n <= 0:
        return []
    return pick(model.rank(problem, pool(problem, device, backends, extra, n_random)), n)
