"""FakeEvaluator: the evaluator's CPU stand-in (cudal2.evaluate), for tests and dry runs.

The same interface as cudal2.evaluate.Evaluator (profiles, dedup, early stop, evaluate_many), with no
GPU and no processes: times and failures come from a clock. It shares the Evaluator's profile and
result bookkeeping (the methods and helpers imported below) and the worker's timing code
(cudal2.evaluate.worker.time_batch), so what it reports follows the same rules as a measurement.
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable, Sequence

from ..backends.base import CompileError
from ..device import DeviceInfo
from ..evaluate.evaluator import (DEFAULT_BASELINES, DEFAULT_CHECKS, Evaluator, apply_times, duplicate_of,
                                  parse_and_validate)
from ..measurement import KernelCrash, KernelHang, Measurement, WrongResult
from ..problems import Problem
from ..evaluate.procs import EvaluatorError, first_line
from ..spec import KernelSpec


class FakeEvaluator:
    """Same interface, no GPU and no processes: times and failures come from `clock(spec, problem)`
    (µs, or raises CompileError / WrongResult / KernelCrash / KernelHang). Early stop and dedup work
    as in the Evaluator, with the stand-in's binaries (one per spec text)."""

    def __init__(self, clock: Callable, device: DeviceInfo | None = None, early_stop: float | None = 3.0,
                 baselines: Sequence[str] = DEFAULT_BASELINES, checks: Sequence[str] = DEFAULT_CHECKS,
                 device_key: str | None = None):
        self.clock = clock
        self.device = device or DeviceInfo.target("sm_90a")
        self.early_stop, self.baselines, self.checks = early_stop, tuple(baselines), tuple(checks)
        self.versions = {"stand_in": "FakeEvaluator"}
        self.calls = 0
        self.check_cfg = {"checks": self.checks, "seed": 0}
        self.time_cfg = {"early_stop": early_stop, "early_calls": 5, "early_ms": 5.0, "min_calls": 30,
                         "min_ms": 100.0, "warmup": 3, "modes": ()}
        self.problem_cfg = {"baselines": self.baselines, "seed": 0}
        self.profiles: dict[str, tuple[dict, dict]] = {"default": (self.check_cfg, self.time_cfg)}
        self._best: dict = {}
        self._seen: dict[tuple[str, str, str], Measurement] = {}
        if device_key and device_key != self.device.key:
            raise EvaluatorError(f"FakeEvaluator device is {self.device.key}, not {device_key}")

    add_profile = Evaluator.add_profile
    profile_config = Evaluator.profile_config
    _profile = Evaluator._profile
    _bkey = staticmethod(Evaluator._bkey)

    def prefetch(self, problem, specs) -> int:
        return 0          # nothing to compile ahead: the stand-in's compile is a hash

    def evaluate(self, problem: Problem | str, specs: Iterable[KernelSpec | str],
                 profile: str = "default") -> list[Measurement]:
        """As Evaluator.evaluate. A clock with a `fails(spec, problem, checks) -> "check: why" | None`
        method fails candidates in some checks only (e.g. edges: passes a screen, not the full check)."""
        from ..evaluate.worker import time_batch
        from .standin import TableTimer, clock_compile, stub_report
        problem = problem if isinstance(problem, Problem) else Problem.parse(problem)
        check_cfg, time_cfg = self._profile(profile)
        checks = check_cfg["checks"]
        fails = getattr(self.clock, "fails", None)
        mk = functools.partial(Measurement, problem=problem.text, device=self.device.key, versions=self.versions)
        out, timed, dups = [], {}, []
        for s in specs:
            text, spec, reason = parse_and_validate(s, problem, self.device)
            if spec is None:
                out.append(mk(spec=text, status="invalid", reason=reason))
                continue
            h = clock_compile(spec, problem, self.device).binary_hash
            if (profile, problem.text, h) in self._seen or h in timed:
                dups.append((len(out), text, h))
                out.append(None)
                continue
            m = mk(spec=text, status="ok", binary_hash=h)
            out.append(m)
            self.calls += 1
            try:
                t = float(self.clock(spec, problem))
                why = fails(spec, problem, checks) if fails else None
                if why:
                    raise WrongResult(why)
                timed[h] = (t, m)
                m.check = stub_report(problem, checks)
            except CompileError as e:   # as in the Evaluator: no binary, nothing to copy later
                m.status, m.reason, m.binary_hash = "compile_error", first_line(str(e)), ""
                m.meta = {"compile_log": str(e)}
                continue
            except WrongResult as e:
                m.check = stub_report(problem, checks, str(e))
                m.status, m.reason = "wrong", m.check["reason"]
            except (KernelCrash, KernelHang, TimeoutError) as e:
                m.status = "timeout" if isinstance(e, (KernelHang, TimeoutError)) else "crash"
                m.reason = f"{type(e).__name__}: {e}"
            self._seen[(profile, problem.text, h)] = m
        get = getattr(self.clock, "baselines", None)
        base = {n: t for n, t in (get(problem) if get else {}).items() if n in self.baselines}
        bkey = self._bkey(profile, problem.text)
        best = self._best.get(bkey)
        res = time_batch(TableTimer({**base, **{h: t for h, (t, _) in timed.items()}}),
                         list(timed), sorted(base), time_cfg, best)
        bc = apply_times(res, {h: m for h, (_, m) in timed.items()})
        known = [m.time_us for _, m in timed.values() if m.time_us] + [x for x in (bc, best) if x]
        if known:
            self._best[bkey] = min(known)
        for i, text, h in dups:
            out[i] = duplicate_of(self._seen[(profile, problem.text, h)], text)
        return out

    evaluate_many = Evaluator.evaluate_many

    def unbuildable_baselines(self) -> dict[str, str]:
        """{}: the stand-in times every baseline it is given (from its clock), nvmath or not."""
        return {}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
