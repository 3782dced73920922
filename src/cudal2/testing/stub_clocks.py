"""Stub clocks with a planted structure, and measurements made on them: for tests and dry runs only.

`StubClock` / `StudyStubClock` (a FakeEvaluator clock) and `synthetic_measurements` are a model with
a planted structure (so a test can tell learning from luck), never a result to report; the study
(bench/efficiency.py, bench/search_efficiency.py --synthetic) and the rl tests use them.
"""
from __future__ import annotations

import hashlib
import math

import torch

from ..backends.base import CompileError
from ..measurement import Measurement, WrongResult
from ..problems import Problem
from ..rl.policy import UniformPolicy
from .fake_evaluator import FakeEvaluator


def _jitter(text: str) -> float:
    h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return 1.0 + 0.04 * (h - 0.5)        # +-2%, a deterministic function of (spec, problem)


class StubClock:
    """A FakeEvaluator clock with planted structure: small problems (M*N <= 2^18) favour cuda/mma
    with small tiles; large ones cuda/wgmma and triton/persistent with large tiles; tile waste on
    ragged edges costs; stages near 4 are best; mma with split_k = 8 computes wrong results;
    rings of 6 stages of 128x256 tiles fail to compile. best-cuBLAS is 1.05x the ideal time."""

    def __call__(self, spec, p: Problem) -> float:
        if spec.family == "mma" and spec.split_k == 8:
            raise WrongResult("stub clock: planted split-K race")
        if spec.stages >= 6 and spec.bm * spec.bn >= 128 * 256:
            raise CompileError("stub clock: planted ptxas failure")
        small = p.M * p.N <= 1 << 18
        fam = ({"mma": 1.0, "tiled": 1.25, "persistent": 1.5, "wgmma": 1.7} if small
               else {"wgmma": 1.0, "persistent": 1.05, "tiled": 1.3, "mma": 1.6}).get(spec.family, 1.4)
        waste = (math.ceil(p.M / spec.bm) * spec.bm * math.ceil(p.N / spec.bn) * spec.bn) / (p.M * p.N)
        size = (spec.bm * spec.bn / (128 * 128)) ** (0.15 if small else -0.15)
        return self.ideal(p) * fam * waste * size * (1 + 0.05 * abs(spec.stages - 4)) * _jitter(spec.text + p.text)

    @staticmethod
    def ideal(p: Problem) -> float:
        return p.flops / 7e8 + 3.0                      # ~700 TFLOP/s plus a 3 us launch

    def baselines(self, p: Problem) -> dict[str, float]:
        return {"torch": 1.08 * self.ideal(p), "cublas-nn": 1.05 * self.ideal(p)}


class StudyStubClock(StubClock):
    """StubClock plus a planted failure that only the full check finds: ~10% of specs (by a hash of
    spec and problem) compute wrong results off the tile grid, so they pass the screen (no edges) and
    fail the re-check; the study's fallback to the next screened candidate runs on it."""

    def fails(self, spec, p: Problem, checks) -> str | None:
        if "edges" in checks and _jitter("edges|" + spec.text + p.text) < 0.984:
            return "edges: stub clock: planted wrong result off the tile grid"
        return None


def synthetic_measurements(problems: list[Problem], device, n_specs: int = 200, seed: int = 0,
                           clock=None) -> list[Measurement]:
    """n_specs uniformly sampled valid specs per problem, measured by a FakeEvaluator on `clock`
    (StubClock by default); early stop is off so every correct spec gets its time."""
    ev = FakeEvaluator(clock or StubClock(), device, early_stop=None)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for p in problems:
        specs = list({x.spec.text: x.spec for x in UniformPolicy().sample(p, device, n_specs, generator=gen)}.values())
        out += ev.evaluate(p, specs)
    return out
