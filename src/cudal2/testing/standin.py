"""The GPU worker's CPU stand-in: a stub clock, its compile, its checker report and its handler.

`standin` is a worker target for Evaluator(worker_target=standin, worker_config={"clock": clock},
compile_fn=functools.partial(clock_compile, clock=clock)): the real worker loop
(cudal2.evaluate.worker.serve) and timing algorithm (time_batch), with times and faults from the
clock. Its faults are real: a KernelCrash from the clock ends the process, a KernelHang blocks it.
For tests and CPU dry runs only; the runtime never imports this module.
"""
from __future__ import annotations

import hashlib
import os
import time

from ..backends.base import Artifact, CompileError
from ..device import DeviceInfo
from ..evaluate.worker import serve, time_batch, versions
from ..measurement import KernelCrash, KernelHang, WrongResult
from ..problems import Problem


class HashClock:
    """A deterministic stub clock: µs from a hash of (spec, problem), planted faults by spec text.

    faults: {spec text: "compile" | "compile_crash" (clock_compile ends its process) |
             "compile_noisy" (clock_compile prints an MLIR-like dump to fd 1/2, then fails) | "wrong" |
    "wrong_edges" (fails only where the checks include "edges": passes a screen without them) |
    "crash" | "crash_timing" (the stand-in worker dies when timing it) | "hang" | "slow" (10x its
    hashed time)}; delay_s: seconds each call takes
    (to make a run last long enough to interrupt). Picklable, so it can travel to worker processes
    and Ray actors.
    """

    def __init__(self, faults: dict[str, str] | None = None, delay_s: float = 0.0, scale_us: float = 100.0):
        from ..spec import KernelSpec, SpecError

        def canon(t):   # faults may name a spec in any field order
            try:
                return KernelSpec.parse(t).text
            except SpecError:
                return t
        self.faults = {canon(k): v for k, v in (faults or {}).items()}
        self.delay_s = delay_s
        self.scale_us = scale_us

    def __call__(self, spec, problem) -> float:
        kind = self.faults.get(str(spec))
        if kind in ("compile", "compile_crash"):
            raise CompileError("planted compile error", log=f"stub: {spec} does not compile")
        if self.delay_s:
            time.sleep(self.delay_s)
        if kind == "wrong":
            raise WrongResult("planted wrong result")
        if kind == "crash":
            raise KernelCrash("planted illegal address")
        if kind == "hang":
            raise KernelHang("planted hang")
        p = Problem.parse(str(problem))
        h = int.from_bytes(hashlib.sha256(f"{spec}|{p.text}".encode()).digest()[:4], "little")
        # Proportional to the work, with a spread of 1x..4x between specs.
        t = self.scale_us * (1.0 + p.flops / 2**30) * (1.0 + 3.0 * h / 2**32)
        return 10.0 * t if kind == "slow" else t

    def fails(self, spec, problem, checks) -> str | None:
        """The planted failure of a check that only some check sets run (FakeEvaluator's hook)."""
        if self.faults.get(str(spec)) == "wrong_edges" and "edges" in checks:
            return "edges: planted wrong result off the tile grid"
        return None

    def baselines(self, problem) -> dict[str, float]:
        p = Problem.parse(str(problem))
        t = self.scale_us * (1.0 + p.flops / 2**30)
        return {"torch": 1.9 * t, "cublas-nn": 1.8 * t}


def clock_compile(spec, problem, device, clock=None) -> Artifact:
    """Stand-in compile: raises the clock's planted CompileError, else an Artifact whose source is
    the spec text (so distinct specs are distinct binaries)."""
    if clock is not None:
        if getattr(clock, "faults", {}).get(spec.text) == "compile_crash":
            os._exit(11)   # as a segfaulting compiler would
        if getattr(clock, "faults", {}).get(spec.text) == "compile_noisy":
            # As Triton's MLIR passes fail: pages of IR on the process's stderr, then a long error.
            os.write(2, b"".join(b"%%%d = tt.load %%arg%d : tensor<128x64xf16> // MLIR_DUMP\n" % (i, i)
                                 for i in range(400)))
            os.write(1, b"MLIR_DUMP on stdout too\n")
            raise CompileError("PassManager::run failed: out of shared memory",
                               log="\n".join(f"MLIR_LOG line {i}" for i in range(200)))
        try:
            clock(spec, problem)
        except CompileError:
            raise
        except Exception:   # other faults belong to the GPU side; they fire in the worker
            pass
    return Artifact(backend=spec.backend, spec=spec, source=f"// stand-in for {spec.text}\n",
                    meta={"stand_in": True})


def stub_report(problem: Problem, checks, error: str | None = None) -> dict:
    """A CheckReport.to_dict() look-alike for the stand-in (the real checker needs torch). An error
    "name: detail" naming one of the checks fails that check, any other fails "random"."""
    if error is not None:
        name, _, detail = error.partition(": ")
        if name not in checks or not detail:
            name, detail = "random", error
        res = [{"name": name, "passed": False, "value": None, "limit": None, "detail": detail}]
        return {"problem": problem.text, "passed": False, "reason": f"{name}: {detail}", "results": res}
    res = [{"name": n, "passed": True, "value": None, "limit": None, "detail": "stand-in"} for n in checks]
    return {"problem": problem.text, "passed": True, "reason": "", "results": res}


class ClockHandler:
    """GPU-handler stand-in: the clock's faults happen for real in this process."""

    def __init__(self, cfg: dict):
        self.clock = cfg["clock"]
        d = cfg.get("device")
        if cfg.get("devices"):   # a mixed cluster, simulated: the device by the GPU Ray gave us
            gpu = int((os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0])
            d = cfg["devices"][gpu % len(cfg["devices"])]
        self.device = DeviceInfo.from_dict(d) if d else DeviceInfo.target("sm_90a")
        self.times: dict[str, float] = {}

    def versions(self) -> dict:
        return {**versions(), "stand_in": "ClockHandler"}

    def healthy(self) -> bool:
        return True

    def set_problem(self, problem: Problem, cfg: dict) -> dict:
        self.problem = problem
        self.times.clear()
        get = getattr(self.clock, "baselines", None)
        self.base = {n: t for n, t in (get(problem) if get else {}).items() if n in cfg.get("baselines", ())}
        # A clock may plant baselines that could not be built: {name: reason} (clock.left_out).
        left_out = {n: why for n, why in (getattr(self.clock, "left_out", None) or {}).items()
                    if n in cfg.get("baselines", ())}
        for n in left_out:
            self.base.pop(n, None)
        return {"baselines": sorted(self.base), "left_out": left_out}

    def _run(self, art: Artifact) -> float:
        try:
            return float(self.clock(art.spec, self.problem))
        except KernelCrash:
            os._exit(134)     # what an illegal address does to a CUDA process: it is gone
        except KernelHang:
            while True:
                time.sleep(3600)

    def check(self, art: Artifact, cfg: dict) -> dict:
        try:
            self.times[art.binary_hash] = self._run(art)
            fails = getattr(self.clock, "fails", None)
            why = fails(art.spec, self.problem, cfg["checks"]) if fails else None
            if why:
                raise WrongResult(why)
        except WrongResult as e:
            return {"report": stub_report(self.problem, cfg["checks"], str(e)), "fatal": False}
        return {"report": stub_report(self.problem, cfg["checks"]), "fatal": False}

    def time(self, arts: list[Artifact], cfg: dict, best_us: float | None) -> dict:
        for art in arts:
            if getattr(self.clock, "faults", {}).get(art.spec.text) == "crash_timing":
                os._exit(134)   # passed its checks, dies when timed with the others
            if art.binary_hash not in self.times:   # a restarted worker times what it never checked
                self.times[art.binary_hash] = self._run(art)
        table = {**self.base, **{a.binary_hash: self.times[a.binary_hash] for a in arts}}
        return time_batch(TableTimer(table), [a.binary_hash for a in arts], sorted(self.base), cfg, best_us)


class TableTimer:
    def __init__(self, table: dict[str, float]):
        self.table = table

    def _stats(self, t: float, n: int) -> dict:
        return {"median_us": t, "mean_us": t, "p50_us": t, "p99_us": t, "min_us": t, "spread": 0.0, "n": n}

    def offline(self, names, min_calls=30, **kw) -> dict:
        return {n: self._stats(self.table[n], min_calls) for n in names}

    def mode(self, mode: str, names) -> dict:
        return {n: self._stats(self.table[n], 1) for n in names}


def standin(conn, cfg: dict) -> None:
    """Worker target for the CPU stand-in (cfg["clock"] is the stub clock)."""
    serve(conn, ClockHandler, cfg)
