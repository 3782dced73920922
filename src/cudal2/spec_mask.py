"""The policy's action mask over cudal2.spec's rules: which values of the next field some valid
spec extends (`valid_values`), and every valid spec (`enumerate_valid`). Sampling field by field
from the mask can never reach a dead end, so every sampled spec passes `spec.validate`."""
from __future__ import annotations

import functools
from typing import Iterable

from .device import DeviceInfo
from .problems import Problem
from .spec import CHOICES, DEFAULTS, FIELDS, RULES, KernelSpec


def _prefix_ok(s: dict, problem: Problem, device: DeviceInfo) -> bool:
    """Apply every rule whose fields are all chosen in the partial spec `s`."""
    full = {**DEFAULTS, "warp_spec": None, **s}     # see _any_schedule
    for _field, needs, check in RULES:
        if all(n in s for n in needs) and check(full, problem, device):
            return False
    return True


def _completable(s: dict, order: tuple[str, ...], problem: Problem, device: DeviceInfo) -> bool:
    """The reference form of the mask (every rule re-applied at every node); valid_values runs the
    incremental form below, and tests/test_spec.py holds the two equal."""
    if not _prefix_ok(s, problem, device):
        return False
    if len(s) == len(order):
        return True
    nxt = order[len(s)]
    return any(_completable({**s, nxt: v}, order, problem, device) for v in CHOICES[nxt])


@functools.lru_cache(maxsize=None)
def _rules_at(order: tuple[str, ...], depth: int) -> tuple:
    """The checks that can change verdict when order[depth] is chosen after order[:depth]: those
    that become applicable there (the field is in their `needs`, the rest already chosen) and, at
    warp_spec, the `_any_schedule` rules already applicable (they read it before it is chosen).
    Sound because a rule's verdict depends only on its `needs` (and warp_spec for an `_any_schedule`
    rule): tests/test_spec.py checks that contract for every rule."""
    chosen, f = set(order[:depth + 1]), order[depth]
    return tuple(check for _field, needs, check in RULES
                 if set(needs) <= chosen and (f in needs or (f == "warp_spec" and getattr(check, "reads_schedule", False))))


def _extends(full: dict, depth: int, order: tuple[str, ...], problem: Problem, device: DeviceInfo) -> bool:
    """Whether `full` (order[:depth] chosen, every rule applicable so far passed; unchosen fields at
    their defaults, warp_spec None) extends to a valid spec. Only the rules a field can change are
    run at each node (_rules_at): 2026-12-04, a CPU replay of 20 grid nt shapes spent 1.3 s per
    shape in the mask re-running all 29 rules at every node."""
    if depth == len(order):
        return True
    f = order[depth]
    checks = _rules_at(order, depth)
    before = full[f]
    try:
        for v in CHOICES[f]:
            full[f] = v
            if not any(check(full, problem, device) for check in checks) and \
                    _extends(full, depth + 1, order, problem, device):
                return True
        return False
    finally:
        full[f] = before


def valid_values(prefix: dict, field: str, problem: Problem, device: DeviceInfo,
                 order: tuple[str, ...] = FIELDS) -> list:
    """Values of `field` (the next field in `order` after `prefix`) that some valid spec extends.

    This is the policy's action mask: sampling only from these can never reach a dead end, so every
    sampled spec passes `validate`.
    """
    n = len(prefix)
    if set(prefix) != set(order[:n]):
        raise ValueError(f"prefix fields {list(prefix)} are not the first {n} of {list(order)}")
    if order[n] != field:
        raise ValueError(f"next field after {list(prefix)} is {order[n]}, not {field}")
    if not _prefix_ok(prefix, problem, device):
        return []
    full = {**DEFAULTS, "warp_spec": None, **prefix}     # as _prefix_ok builds it
    checks = _rules_at(order, n)
    out = []
    for v in CHOICES[field]:
        full[field] = v
        if not any(check(full, problem, device) for check in checks) and _extends(full, n + 1, order, problem, device):
            out.append(v)
    return out


def enumerate_valid(problem: Problem, device: DeviceInfo, backend: str | None = None,
                    family: str | None = None) -> Iterable[KernelSpec]:
    """Every valid spec (optionally of one backend/family), in FIELDS order."""
    def rec(s):
        if not _prefix_ok(s, problem, device):
            return
        if len(s) == len(FIELDS):
            yield KernelSpec(**s)
            return
        nxt = FIELDS[len(s)]
        vals = CHOICES[nxt]
        if nxt == "backend" and backend:
            vals = (backend,)
        if nxt == "family" and family:
            vals = (family,)
        for v in vals:
            yield from rec({**s, nxt: v})
    yield from rec({})
