"""The evaluator: validate, compile in parallel on the CPU, dedup, check and time in a GPU worker.

  evaluate(problem, specs) -> one Measurement per spec, in order, whatever happened to it:
    invalid        cudal2.spec.validate rejected it (reason: the SpecError message)
    compile_error  the backend's compile (in a 'spawn' process pool) raised; reason: first log lines
    crash          the GPU worker died or found its CUDA context dead while this candidate ran
    timeout        the worker gave no answer within timeout_s; it is killed and restarted
    wrong          the checker failed it (reason: the failing check)
    slow           its first timed calls were > early_stop x the best known time (ratio kept)
    ok             checked, then timed offline interleaved with the baselines in one run
  Candidates with the same binary (Artifact.binary_hash) are run once; the others copy its result.

Profiles: `add_profile(name, checks=..., min_ms=..., ...)` names another setting of the checks and
timing knobs beside the constructor's ("default"), e.g. a cheap screening pass and the full
PROTOCOL pass for its winners; `evaluate(problem, specs, profile=name)` picks one. Both share the
worker, its inputs and baselines and the compile pools; dedup and the early-stop bar are per profile.

Compile ahead: `prefetch(problem, specs)` starts compiles that a later evaluate will need in a second,
lower-priority pool, so the CPU compiles while the GPU checks and times; evaluate takes them from there.

The parent never touches CUDA: the worker process (worker.py) owns the context and reports the
device, so it can be killed and started again at any time. Checks go one candidate per request, so a
crash is charged to the candidate in flight; a crash while timing a group re-times its members one
by one for the same reason.
"""
from __future__ import annotations

import functools
import time
from typing import Callable, Iterable, Sequence

from ..backends.base import Artifact
from ..device import DeviceInfo
from ..measurement import STATUSES, KernelCrash, KernelHang, Measurement, WrongResult
from ..problems import Problem
from ..spec import KernelSpec, SpecError, validate
from .procs import (CompilePool, EvaluatorError, WorkerDied, WorkerProcess, WorkerTimeout, available_cpus,
                    backend_compile, first_line)

# The same names as cudal2.baselines.NAMES and cudal2.check.CHECKS, repeated here so the parent
# process need not import torch.
DEFAULT_BASELINES = ("torch", "cublas-nn", "cublas-tn", "cublaslt-heuristic", "cublaslt-autotune")
DEFAULT_CHECKS = ("random", "exact", "poison", "guard", "fresh", "edges")
# The timing knobs a profile may set (worker.time_batch reads them).
TIMING_KEYS = ("early_stop", "early_calls", "early_ms", "min_calls", "min_ms", "max_calls", "warmup", "modes")


def _check_early_stop(early_stop) -> None:
    if early_stop is not None and early_stop <= 1.0:
        raise ValueError(f"early_stop must be > 1 (a ratio to the best time) or None, got {early_stop}")


def profile_cfgs(check_cfg: dict, time_cfg: dict, checks=None, timing: dict | None = None) -> tuple[dict, dict]:
    """(check cfg, time cfg) of a profile: `check_cfg` / `time_cfg` with `checks` and `timing` over them."""
    timing = dict(timing or {})
    bad = sorted(set(timing) - set(TIMING_KEYS))
    if bad:
        raise ValueError(f"unknown timing knob(s) {', '.join(bad)}; the knobs are {', '.join(TIMING_KEYS)}")
    if checks is not None:
        checks = tuple(checks)
        unknown = [c for c in checks if c not in DEFAULT_CHECKS]
        if unknown or not checks:
            raise ValueError(f"checks {list(checks)}: name one or more of {', '.join(DEFAULT_CHECKS)}")
    tim = {**time_cfg, **timing}
    tim["modes"] = tuple(tim.get("modes", ()))
    _check_early_stop(tim.get("early_stop"))
    if tim.get("min_calls", 1) < 1 or tim.get("min_ms", 0.0) < 0:
        raise ValueError("min_calls must be >= 1 and min_ms >= 0")
    if tim.get("max_calls") is not None and tim["max_calls"] < tim.get("min_calls", 1):
        raise ValueError(f"max_calls ({tim['max_calls']}) must be >= min_calls ({tim.get('min_calls', 1)})")
    chk = {**check_cfg, "checks": checks if checks is not None else tuple(check_cfg["checks"])}
    return chk, tim


def parse_and_validate(s, problem: Problem, device: DeviceInfo) -> tuple[str, KernelSpec | None, str]:
    """(text, spec or None, reason): the one validity gate of every evaluator."""
    text = s.text if isinstance(s, KernelSpec) else str(s)
    try:
        spec = s if isinstance(s, KernelSpec) else KernelSpec.parse(text)
        return spec.text, validate(spec, problem, device), ""
    except SpecError as e:
        return text, None, str(e)


def duplicate_of(orig: Measurement, text: str) -> Measurement:
    """The result of `orig`'s binary, recorded for the spec `text` that compiled to the same one."""
    d = Measurement.from_dict({**orig.to_dict(), "spec": text, "ts": time.time(), "run_id": None})
    d.reason = f"duplicate binary of {orig.spec}" + (f"; {orig.reason}" if orig.reason else "")
    return d


def apply_times(res: dict, ms: dict[str, Measurement]) -> float | None:
    """worker.time_batch's reply into the measurements (binary hash -> Measurement) it timed;
    returns best-cublas, the fastest baseline's median."""
    base = res["baselines_us"]
    best_cublas = min(base.values()) if base else None
    for h, m in ms.items():
        r = res["results"][h]
        m.status, m.times, m.baselines_us, m.best_cublas_us = r["status"], r["times"], base, best_cublas
        if r["status"] == "ok":
            m.time_us = r["times"]["offline"]["median_us"]
        else:
            m.ratio = r["ratio"]
            m.reason = f"early stop: {r['ratio']:.2f}x the best time known"
    return best_cublas


def _layout_excluded(name: str, layout: str) -> bool:
    """cudal2.baselines.serves' rule (repeated: this module does not import torch): cublas-nn serves
    only nn, cublas-tn only nt; leaving one out for the other layout does not lower the bar."""
    return (name == "cublas-nn" and layout != "nn") or (name == "cublas-tn" and layout != "nt")


class Evaluator:
    def __init__(self, device_key: str | None = None, workers: int | None = None, timeout_s: float = 120.0,
                 early_stop: float | None = 3.0, *, checks: Sequence[str] = DEFAULT_CHECKS,
                 baselines: Sequence[str] = DEFAULT_BASELINES, modes: Sequence[str] = ("offline",),
                 min_calls: int = 30, min_ms: float = 100.0, warmup: int = 3, early_calls: int = 5,
                 early_ms: float = 5.0, seed: int = 0, compile_timeout_s: float = 600.0,
                 start_timeout_s: float = 300.0, prepare_timeout_s: float = 600.0, device_index: int | None = None,
                 worker_target: Callable | None = None, worker_config: dict | None = None,
                 compile_fn: Callable | None = None, prefetch_workers: int | None = None,
                 strict_baselines: bool = False):
        _check_early_stop(early_stop)
        # strict_baselines: a baseline that serves the problem's layout but could not be prepared
        # (nvmath missing, a cuBLASLt failure) is an EvaluatorError, not a quietly lower bar.
        self.strict_baselines = bool(strict_baselines)
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        from .worker import main
        self.device_key = device_key
        self.workers = available_cpus() if workers is None else int(workers)
        self.timeout_s = float(timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.prepare_timeout_s = float(prepare_timeout_s)
        self.check_cfg = {"checks": tuple(checks), "seed": seed}
        self.problem_cfg = {"baselines": tuple(baselines), "seed": seed}
        self.time_cfg = {"early_stop": early_stop, "early_calls": early_calls, "early_ms": early_ms,
                         "min_calls": min_calls, "min_ms": min_ms, "warmup": warmup, "modes": tuple(modes)}
        self.worker_target = worker_target or main
        self.worker_cfg = {"device_index": device_index, **(worker_config or {})}
        self._compiler = CompilePool(compile_fn or backend_compile, self.workers, float(compile_timeout_s))
        # Compile ahead (prefetch): a second pool at lower CPU priority; by default half the cores.
        n_ahead = (max(1, self.workers // 2) if self.workers > 0 else 0) if prefetch_workers is None \
            else int(prefetch_workers)
        self.prefetch_workers = n_ahead
        self._ahead = CompilePool(compile_fn or backend_compile, n_ahead, float(compile_timeout_s), nice=10) \
            if n_ahead > 0 else None
        self._pending: dict[tuple[str, str, str], object] = {}   # (problem, device, spec) -> Future
        self.compiled_ahead = 0                  # evaluated specs whose compile came from prefetch
        self.profiles: dict[str, tuple[dict, dict]] = {"default": (self.check_cfg, self.time_cfg)}
        self.restarts = 0
        # Wall seconds spent per phase over this evaluator's life: where an evaluation's time goes
        # (on the H200, 2026-12-02, ~1.8 s per evaluation, split unknown; NOTES.md).
        self.phase_s = {"compile": 0.0, "prepare": 0.0, "check": 0.0, "time": 0.0}
        self.baselines_left_out: dict[str, dict[str, str]] = {}   # problem -> baseline -> why
        self._w: WorkerProcess | None = None
        self._device: DeviceInfo | None = None
        self._versions: dict = {}
        self._problem: str | None = None
        # problem (default profile) or (profile, problem) -> best time known (early stop)
        self._best: dict = {}
        self._seen: dict[tuple[str, str, str], Measurement] = {}   # (profile, problem, binary hash) -> result

    # ---- profiles ---------------------------------------------------------------------------------
    def add_profile(self, name: str, *, checks: Sequence[str] | None = None, **timing) -> dict:
        """Another named setting of the checks and timing knobs (TIMING_KEYS), the rest as constructed."""
        self.profiles[name] = profile_cfgs(self.check_cfg, self.time_cfg, checks, timing)
        return self.profile_config(name)

    def profile_config(self, name: str = "default") -> dict:
        """Everything that decides a profile's measurements (JSON-able)."""
        chk, tim = self._profile(name)
        return {"checks": list(chk["checks"]), **{k: list(v) if isinstance(v, tuple) else v for k, v in tim.items()},
                "baselines": list(self.problem_cfg["baselines"]), "seed": chk["seed"]}

    def _profile(self, name: str) -> tuple[dict, dict]:
        try:
            return self.profiles[name]
        except KeyError:
            raise ValueError(f"unknown evaluation profile {name!r} (have {', '.join(self.profiles)})") from None

    @staticmethod
    def _bkey(profile: str, problem: str):
        return problem if profile == "default" else (profile, problem)

    # ---- the worker -------------------------------------------------------------------------------
    def _start(self) -> WorkerProcess:
        w = WorkerProcess(self.worker_target, self.worker_cfg, self.start_timeout_s)
        if self.device_key and w.device.key != self.device_key:
            w.stop()
            raise EvaluatorError(f"the GPU worker runs on {w.device.key}, but device_key={self.device_key} "
                                 "was asked for (results of different GPU models are never mixed)")
        self._device, self._versions = w.device, w.versions
        return w

    @property
    def device(self) -> DeviceInfo:
        """The GPU's DeviceInfo, as the worker reports it (starts the first worker)."""
        if self._device is None:
            self._w = self._start()
        return self._device

    @property
    def versions(self) -> dict:
        self.device  # noqa: B018 (starts the worker)
        return dict(self._versions)

    def unbuildable_baselines(self) -> dict[str, str]:
        """{baseline: reason} for this evaluator's baselines that cannot be built here, found on the
        CPU before any worker starts (cudal2.baselines.unbuildable); {} for a stand-in worker, which
        times its own baselines."""
        from .worker import main
        if self.worker_target is not main:
            return {}
        from ..baselines import unbuildable
        return unbuildable(self.problem_cfg["baselines"])

    def _ready(self, problem: Problem) -> WorkerProcess:
        """A live worker with `problem`'s inputs and baselines prepared."""
        if self._w is None:
            self._w = self._start()
            self._problem = None
        if self._problem != problem.text:
            t0 = time.perf_counter()
            try:
                reply = self._w.request(("problem", problem.text, self.problem_cfg), self.prepare_timeout_s)
            except (WorkerDied, WorkerTimeout) as e:
                self._dead()
                raise EvaluatorError(f"{problem}: preparing inputs and baselines failed: {e}") from None
            if reply[0] != "ok":
                if reply[2]:
                    self._dead()
                raise EvaluatorError(f"{problem}: preparing inputs and baselines failed: {reply[1]}")
            self._problem = problem.text
            self.baselines_left_out[problem.text] = reply[1]["left_out"]
            dropped = {n: why for n, why in reply[1]["left_out"].items() if not _layout_excluded(n, problem.layout)}
            if self.strict_baselines and dropped:
                n, why = next(iter(dropped.items()))
                raise EvaluatorError(f"{problem}: best-cublas cannot be formed: baseline {n} could not be built "
                                     f"({why}); name the baselines to run without it (--baselines ...)")
            self.phase_s["prepare"] += time.perf_counter() - t0
        return self._w

    def _dead(self) -> None:
        if self._w is not None:
            self._w.kill()
        self._w, self._problem = None, None
        self.restarts += 1

    def _ask(self, problem: Problem, msg, timeout: float):
        """("ok", payload) | ("error", text) | ("crash", text) | ("timeout", text); restarts on death."""
        w = self._ready(problem)
        try:
            reply = w.request(msg, timeout)
        except WorkerDied as e:
            self._dead()
            return ("crash", str(e))
        except WorkerTimeout as e:
            self._dead()
            return ("timeout", str(e))
        if reply[0] == "error":
            if reply[2]:
                self._dead()
                return ("crash", f"CUDA context lost: {reply[1]}")
            return ("error", reply[1])
        if isinstance(reply[1], dict) and reply[1].get("fatal"):
            self._dead()
        return reply

    # ---- evaluate ---------------------------------------------------------------------------------
    def evaluate(self, problem: Problem | str, specs: Iterable[KernelSpec | str],
                 profile: str = "default") -> list[Measurement]:
        problem = problem if isinstance(problem, Problem) else Problem.parse(problem)
        self._profile(profile)
        dev = self.device
        checked = [parse_and_validate(s, problem, dev) for s in specs]
        good = [spec for _, spec, _ in checked if spec is not None]
        compiled = iter(self._compile(good, problem, dev))
        items = [(t, None, r) if spec is None else (t, spec, next(compiled)) for t, spec, r in checked]
        return self.run_compiled(problem, items, profile)

    def _compile(self, specs: list[KernelSpec], problem: Problem, dev: DeviceInfo) -> list:
        """Artifact or ("error", reason) per spec: prefetched ones from the compile-ahead pool (waiting
        for them if need be), the others in the on-demand pool meanwhile."""
        t0 = time.perf_counter()
        ahead = [self._pending.pop((problem.text, dev.key, s.text), None) for s in specs]
        now = iter(list(self._compiler.map([s for s, f in zip(specs, ahead) if f is None], problem, dev)))
        out = [next(now) if f is None else self._ahead.result(f) for f in ahead]
        self.compiled_ahead += sum(f is not None and r is not None for f, r in zip(ahead, out))
        again = [i for i, r in enumerate(out) if r is None]     # the ahead pool failed them: compile here
        for i, r in zip(again, self._compiler.map([specs[i] for i in again], problem, dev)):
            out[i] = r
        self.phase_s["compile"] += time.perf_counter() - t0
        return out

    def prefetch(self, problem: Problem | str, specs: Iterable[KernelSpec | str]) -> int:
        """Start compiling specs a later `evaluate(problem, ...)` will ask for (compile ahead); returns
        how many compiles were started (invalid specs and ones already pending are skipped). A spec
        that is never evaluated costs only CPU time in the lower-priority pool."""
        if self._ahead is None:
            return 0
        problem = problem if isinstance(problem, Problem) else Problem.parse(problem)
        dev = self.device
        new: dict[str, KernelSpec] = {}
        for s in specs:
            text, spec, _ = parse_and_validate(s, problem, dev)
            if spec is not None and (problem.text, dev.key, text) not in self._pending:
                new.setdefault(text, spec)
        for (text, spec), fut in zip(new.items(), self._ahead.submit(list(new.values()), problem, dev)):
            self._pending[(problem.text, dev.key, text)] = fut
        return len(new)

    def run_compiled(self, problem: Problem, items: list[tuple], profile: str = "default") -> list[Measurement]:
        """items: (spec text, spec or None, Artifact | ("error", reason) | invalid reason)."""
        check_cfg, _ = self._profile(profile)
        dev, ver = self.device.key, self.versions
        mk = functools.partial(Measurement, problem=problem.text, device=dev, versions=ver)
        out: list[Measurement | None] = [None] * len(items)
        first: dict[str, int] = {}     # binary hash -> index of the candidate that runs
        dups: list[tuple[int, str]] = []
        for i, (text, spec, res) in enumerate(items):
            if spec is None:
                out[i] = mk(spec=text, status="invalid", reason=res)
            elif isinstance(res, tuple):
                out[i] = mk(spec=text, status="compile_error", reason=first_line(res[1]),
                            meta={"compile_log": res[2]} if len(res) > 2 else {})
            elif (profile, problem.text, res.binary_hash) in self._seen or res.binary_hash in first:
                dups.append((i, res.binary_hash))
            else:
                first[res.binary_hash] = i
        passing: list[int] = []
        for h, i in first.items():
            art = items[i][2]
            t0, p0 = time.perf_counter(), self.phase_s["prepare"]
            reply = self._ask(problem, ("check", art, check_cfg), self.timeout_s)
            dt = time.perf_counter() - t0 - (self.phase_s["prepare"] - p0)   # less a first prepare
            self.phase_s["check"] += dt
            m = mk(spec=items[i][0], status="ok", binary_hash=h, meta={**art.meta, "check_s": round(dt, 4)})
            out[i] = m
            if reply[0] in ("crash", "timeout"):
                m.status, m.reason = reply[0], f"{reply[1]} (during the check)"
            elif reply[0] == "error":
                m.status, m.reason = "crash", f"worker error during the check: {reply[1]}"
            elif "load_error" in reply[1]:
                m.status = "crash" if reply[1]["fatal"] else "compile_error"
                m.reason = f"load failed: {reply[1]['load_error']}"
            else:
                m.check = reply[1]["report"]
                if not m.check["passed"]:
                    m.status = "crash" if reply[1]["fatal"] else "wrong"
                    m.reason = m.check["reason"]
                else:
                    passing.append(i)
        if passing:
            self._time(problem, [items[i][2] for i in passing], [out[i] for i in passing], profile)
        for i in first.values():
            self._seen[(profile, problem.text, out[i].binary_hash)] = out[i]
        for i, h in dups:
            out[i] = duplicate_of(self._seen[(profile, problem.text, h)], items[i][0])
        return out

    def _time(self, problem: Problem, arts: list[Artifact], ms: list[Measurement], profile: str = "default") -> None:
        _, time_cfg = self._profile(profile)
        bkey = self._bkey(profile, problem.text)
        best = self._best.get(bkey)
        # A group's timing scales with its size; a quarter of timeout_s per member is far above what
        # timing one checked kernel takes (min_ms of GPU time plus warm-up and the early pass).
        limit = self.timeout_s * (1 + len(arts) / 4)
        t0 = time.perf_counter()
        reply = self._ask(problem, ("time", arts, time_cfg, best), limit)
        self.phase_s["time"] += time.perf_counter() - t0
        if reply[0] != "ok":
            if len(arts) > 1:   # somebody in the group broke the worker: find out who, one by one
                for art, m in zip(arts, ms):
                    self._time(problem, [art], [m], profile)
                return
            ms[0].status = "crash" if reply[0] == "error" else reply[0]
            ms[0].reason = f"{reply[1]} (while timing)"
            return
        best_cublas = apply_times(reply[1], {art.binary_hash: m for art, m in zip(arts, ms)})
        known = [m.time_us for m in ms if m.time_us] + ([best_cublas] if best_cublas else []) + ([best] if best else [])
        if known:
            self._best[bkey] = min(known)

    def best_known(self, problem: Problem | str, us: float | None = None) -> float | None:
        """The best time known for a problem (the early-stop bar); `us` lowers it (a time measured
        elsewhere, e.g. on another GPU of the same model)."""
        key = str(problem)
        if us is not None:
            self._best[key] = min(us, self._best.get(key, us))
        return self._best.get(key)

    def evaluate_many(self, batches: Iterable[tuple], store=None, run_id: int | None = None,
                      on_result: Callable | None = None) -> list[list[Measurement]]:
        """Evaluate (problem, specs) batches in turn; each finished batch goes to `store` (one
        transaction) and `on_result(index, measurements)` before the next starts."""
        out = []
        for k, (problem, specs) in enumerate(batches):
            ms = self.evaluate(problem, specs)
            if store is not None:
                store.add(ms, run_id)
            if on_result is not None:
                on_result(k, ms)
            out.append(ms)
        return out

    def close(self) -> None:
        if self._w is not None:
            self._w.stop()
            self._w = None
        for fut in self._pending.values():
            fut.cancel()
        self._pending.clear()
        self._compiler.close()
        if self._ahead is not None:
            self._ahead.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

