"""Processes of the evaluator: the GPU worker handle and the CPU compile pool (both 'spawn').

Kept apart from evaluator.py so the evaluation logic reads on its own. Nothing here imports torch.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor, TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from ..backends.base import Artifact, CompileError
from ..device import DeviceInfo
from ..problems import Problem
from ..spec import KernelSpec

LOG_LINES = 12
LOG_LIMIT = 1 << 20     # bytes of a compile log kept (Measurement.meta["compile_log"])


class EvaluatorError(RuntimeError):
    """The evaluator itself cannot go on (no worker starts, wrong device, baselines fail)."""


class WorkerDied(Exception):
    pass


class WorkerTimeout(Exception):
    pass


def first_lines(text: str, n: int = LOG_LINES, limit: int = 2000) -> str:
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    return "\n".join(lines[:n])[:limit]


def first_line(text: str, limit: int = 300) -> str:
    """The first non-blank line of an error, stripped and cut to `limit` characters: what a compile
    failure reports (its full log goes to Measurement.meta["compile_log"], and so to the store)."""
    return first_lines(text, 1, limit).strip() or "compile failed (no message)"


def compile_failure(text: str, output: str = "") -> tuple:
    """("error", first line, full log): a compile failure as the compile pools return it."""
    log = str(text)
    if output.strip():
        log += "\n--- compiler output (stdout/stderr) ---\n" + output
    return ("error", first_line(text), log[:LOG_LIMIT])


class _CapturedOutput:
    """Redirects file descriptors 1 and 2 to a temporary file (what a compiler's C++ side prints,
    e.g. Triton's MLIR dump of a failed pass, which Python's sys.stderr never sees); `text` is it.
    Used only in a compile worker process: the descriptors are process-wide."""

    def __enter__(self):
        import sys
        import tempfile
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        self._saved = [os.dup(1), os.dup(2)]
        os.dup2(self._tmp.fileno(), 1)
        os.dup2(self._tmp.fileno(), 2)
        self.text = ""
        return self

    def __exit__(self, *exc):
        import sys
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        self._tmp.seek(0)
        self.text = self._tmp.read()[:LOG_LIMIT].decode("utf-8", "replace")
        self._tmp.close()
        return False


def available_cpus() -> int:
    """CPU cores this process may use: its affinity mask, bounded by a cgroup v2 quota (a container
    can see every core of its host in os.cpu_count())."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, n)


def backend_compile(spec: KernelSpec, problem: Problem, device: DeviceInfo) -> Artifact:
    from ..backends import get_backend
    return get_backend(spec.backend).compile(spec, problem, device)


def compile_one(compile_fn, spec, problem, device):
    """Runs in a compile worker: an Artifact, or ("error", first line, full log) - exceptions stay
    in here. In a worker process the compiler's own stdout/stderr is captured into the log, so a
    failed candidate prints nothing (the caller reports one line; the log goes to the store)."""
    import contextlib
    cap = _CapturedOutput() if mp.parent_process() is not None else contextlib.nullcontext()
    err = None
    with cap:
        try:
            return compile_fn(spec, problem, device)
        except CompileError as e:
            err = str(e)
        except Exception as e:   # a backend bug is this candidate's failure, not the run's
            err = f"{type(e).__name__}: {e}"
    return compile_failure(err, getattr(cap, "text", ""))


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class WorkerProcess:
    """One GPU worker process and its pipe."""

    def __init__(self, target: Callable, cfg: dict, start_timeout: float):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=target, args=(child, cfg), daemon=True, name="cudal2-gpu-worker")
        self.proc.start()
        child.close()
        try:
            reply = self.request(None, start_timeout)
        except (WorkerDied, WorkerTimeout) as e:
            raise EvaluatorError(f"the GPU worker did not start: {e}") from None
        if reply[0] != "ready":
            self.kill()
            raise EvaluatorError(f"the GPU worker did not start: {reply[1]}")
        self.device = DeviceInfo.from_dict(reply[1])
        self.versions = reply[2]

    def request(self, msg, timeout: float):
        if msg is not None:
            try:
                self.conn.send(msg)
            except (BrokenPipeError, OSError):
                self.proc.join(1.0)
                raise WorkerDied(f"worker gone ({_exit_text(self.proc.exitcode)})") from None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerTimeout(f"no answer within {timeout:g} s")
            try:
                if self.conn.poll(min(left, 0.2)):
                    return self.conn.recv()
            except (EOFError, OSError):
                pass
            else:
                if self.proc.is_alive():
                    continue
                if self.conn.poll(0):    # it answered, then exited
                    try:
                        return self.conn.recv()
                    except (EOFError, OSError):
                        pass
            self.proc.join(2.0)
            raise WorkerDied(f"worker died ({_exit_text(self.proc.exitcode)})")

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5.0)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
            self.proc.join(5.0)
        except (BrokenPipeError, OSError):
            pass
        self.kill()



def _lower_priority(nice: int) -> None:
    """Pool initializer: compile-ahead workers yield the CPU to the GPU worker and the on-demand pool
    (a starved GPU worker would let the timing loop's queue drain)."""
    try:
        os.nice(nice)
    except OSError:
        pass


def end_pool(pool: ProcessPoolExecutor, join_s: float = 10.0) -> None:
    """Ends a pool now: queued work cancelled, its processes killed (a hung compile never returns;
    ProcessPoolExecutor has no public kill), its manager thread joined. The processes are read
    before shutdown: shutdown(wait=False) drops the pool's `_processes`, so a kill after it found
    none, and a manager thread left waiting on a running compile kept the interpreter from exiting
    (CI of stop 59, 2026-12-07: bench/hopper_sweep.py's time box, tests passed, exit hung)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(join_s)
    if manager is not None:
        manager.join(join_s)


class CompilePool:
    """Compiles specs in parallel in spawned processes; `workers=0` compiles in this process.
    `nice` > 0 lowers the workers' CPU priority (the evaluator's compile-ahead pool)."""

    def __init__(self, compile_fn: Callable, workers: int, timeout_s: float, nice: int = 0):
        self.compile_fn, self.workers, self.compile_timeout_s = compile_fn, workers, timeout_s
        self.nice = int(nice)
        self._pool: ProcessPoolExecutor | None = None

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            kw = {"initializer": _lower_priority, "initargs": (self.nice,)} if self.nice > 0 else {}
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"), **kw)
        return self._pool

    def submit(self, specs: list[KernelSpec], problem: Problem, device: DeviceInfo) -> list[Future]:
        """Start compiles without waiting (compile ahead); collect each with `result`."""
        if self.workers == 0:
            raise ValueError("submit needs worker processes (workers > 0)")
        pool = self._get_pool()
        futs = [pool.submit(compile_one, self.compile_fn, s, problem, device) for s in specs]
        for f in futs:
            f.cudal2_pool = pool    # so a failure of an old pool never closes a newer one
        return futs

    def result(self, fut: Future, timeout: float | None = None):
        """A submitted compile's Artifact or ("error", reason); None if the pool failed it (died,
        timed out, cancelled): the caller compiles that spec again the ordinary way, which finds out
        whether the spec itself kills its compiler."""
        try:
            return fut.result(timeout=self.compile_timeout_s if timeout is None else timeout)
        except (FutureTimeout, CancelledError):
            return None
        except BrokenProcessPool:
            if getattr(fut, "cudal2_pool", None) is self._pool:
                self.close()
            return None

    def close(self) -> None:
        if self._pool is not None:
            end_pool(self._pool)
            self._pool = None

    def map(self, specs: list[KernelSpec], problem: Problem, device: DeviceInfo) -> list:
        """Artifact or ("error", reason) per spec."""
        if not specs:
            return []
        if self.workers == 0:
            return [compile_one(self.compile_fn, s, problem, device) for s in specs]
        futs = [self._get_pool().submit(compile_one, self.compile_fn, s, problem, device) for s in specs]
        deadline = time.monotonic() + self.compile_timeout_s
        out, broken, bad_pool = [], [], False
        for i, f in enumerate(futs):
            try:
                out.append(f.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                out.append(("error", f"compile did not finish within {self.compile_timeout_s:g} s"))
                bad_pool = True
            except BrokenProcessPool:
                out.append(None)
                broken.append(i)
        if bad_pool or broken:
            self.close()
        for i in broken:   # the pool died under all of them: find the one that kills it, alone
            out[i] = self._compile_alone(specs[i], problem, device)
        return out

    def _compile_alone(self, spec, problem, device):
        pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
        try:
            return pool.submit(compile_one, self.compile_fn, spec, problem, device).result(self.compile_timeout_s)
        except BrokenProcessPool:
            return ("error", "the compile worker process died while compiling this spec")
        except FutureTimeout:
            return ("error", f"compile did not finish within {self.compile_timeout_s:g} s")
        finally:
            end_pool(pool)

