"""Replay environment: the evaluator interface answered from stored measurements, no GPU.

`ReplayEvaluator(store).evaluate(problem, specs)` returns, per spec, the stored Measurement of
(spec, problem, device). A spec that was never measured on that problem gets the documented fallback:

  nearest measured spec of the SAME backend and family on the SAME problem and device, by
  distance = sum over the integer knobs of |log2 a - log2 b| (bm, bn, bk, warps, stages, group_m,
  split_k, subtile, cluster: a factor 2 on one knob is 1; group_m by its size) + 1 per differing
  warp_spec + 1 where group_m's direction differs (tile rows against tile columns);
  ties go to the earliest stored row. The returned Measurement is the stored one (its `spec` is the
  spec that was really measured, never the one asked for), with meta["replay"] saying what was
  asked and how far it was. No measured spec of that backend+family: None (excluded: the search
  drops the sample, it costs no evaluation and earns no reward). `max_distance` bounds the fallback.

Several rows of one key (re-measured in several runs): the latest one wins, as a resumed search would see.
"""
from __future__ import annotations

import copy
import math
from collections import defaultdict

from cudal2.measurement import Measurement
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, SpecError

LOG2_FIELDS = ("bm", "bn", "bk", "warps", "stages", "group_m", "split_k", "subtile", "cluster")


def spec_distance(a: KernelSpec, b: KernelSpec) -> float:
    if (a.backend, a.family) != (b.backend, b.family):
        return math.inf
    d = sum(abs(math.log2(abs(getattr(a, f))) - math.log2(abs(getattr(b, f)))) for f in LOG2_FIELDS)
    return d + (a.warp_spec != b.warp_spec) + ((a.group_m < 0) != (b.group_m < 0))


class ReplayEvaluator:
    """Drop-in for Evaluator on a CPU: `evaluate(problem, specs) -> list[Measurement | None]`."""

    replay = True

    def __init__(self, source, device_key: str | None = None, max_distance: float = math.inf):
        rows = source.measurements() if hasattr(source, "measurements") else list(source)
        devices = sorted({m.device for m in rows})
        if device_key is None:
            if len(devices) != 1:
                raise ValueError(f"the replay store holds {len(devices)} devices ({', '.join(devices) or 'none'}); "
                                 "name one with device_key")
            device_key = devices[0]
        elif device_key not in devices:
            raise ValueError(f"the replay store has no measurements on {device_key} (it has {', '.join(devices)})")
        self.device_key = device_key
        self.max_distance = max_distance
        self.table: dict[str, dict[str, Measurement]] = defaultdict(dict)
        self.parsed: dict[str, dict[tuple, list[tuple[KernelSpec, str]]]] = defaultdict(lambda: defaultdict(list))
        for m in rows:
            if m.device != device_key:
                continue
            try:
                spec = KernelSpec.parse(m.spec)
            except SpecError:
                continue       # a raw text that never parsed cannot be a neighbour of anything
            if m.spec not in self.table[m.problem]:
                self.parsed[m.problem][(spec.backend, spec.family)].append((spec, m.spec))
            self.table[m.problem][m.spec] = m
        self.calls = 0

    def problems(self) -> list[Problem]:
        return [Problem.parse(p) for p in sorted(self.table)]

    def lookup(self, problem: Problem, spec: KernelSpec) -> Measurement | None:
        rows = self.table.get(problem.text, {})
        if spec.text in rows:
            return copy.deepcopy(rows[spec.text])
        best, best_d = None, math.inf
        for cand, text in self.parsed.get(problem.text, {}).get((spec.backend, spec.family), []):
            d = spec_distance(spec, cand)
            if d < best_d:
                best, best_d = text, d
        if best is None or best_d > self.max_distance:
            return None
        m = copy.deepcopy(rows[best])
        m.meta = {**m.meta, "replay": {"asked": spec.text, "distance": best_d}}
        return m

    def evaluate(self, problem: Problem, specs: list[KernelSpec]) -> list[Measurement | None]:
        self.calls += 1
        return [self.lookup(problem, s) for s in specs]

    def close(self) -> None:
        pass
