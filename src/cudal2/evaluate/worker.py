"""The body of the GPU worker process (the evaluator's side is in evaluator.py).

The worker owns the CUDA context. A kernel that corrupts it (an illegal address is sticky: every
later CUDA call fails) must take only this process down, so the evaluator keeps the worker apart
and restarts it. Protocol over a multiprocessing Pipe, one request at a time:

  worker -> ("ready", device_dict, versions)            once, at start
  parent -> ("problem", problem_text, cfg)               make inputs, prepare baselines
  parent -> ("check", artifact, cfg)                     load + run the checker
  parent -> ("time", [artifacts], cfg, best_us)          time the passing ones with the baselines
  parent -> ("stop",)
  worker -> ("ok", payload) | ("error", text, fatal)

A reply with fatal=True (or a check result with "fatal": True) means the context is gone: the worker
exits right after sending it and the parent starts a new one.

Two handlers speak it: GpuHandler here (torch, the checker, cudal2.timing, cudal2.baselines) and
ClockHandler in cudal2.testing.standin, a CPU stand-in whose times and faults come from a stub clock
(tests, Ray dry runs); `serve` and `time_batch` are shared by both.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from ..backends.base import Artifact
from ..problems import Problem

FATAL_EXIT = 70   # exit status of a worker that found its CUDA context dead


def versions() -> dict[str, str]:
    """Package versions and the source commit, read where the kernels run."""
    from ..versions import packages, source_commit
    return {**packages(), "commit": source_commit()}


# ---- the timing algorithm, shared by both handlers ------------------------------------------------
def time_batch(timer, cands: list[str], baselines: list[str], cfg: dict, best_us: float | None) -> dict:
    """Early pass (all candidates and baselines interleaved, a few calls), drop the ones slower than
    `early_stop` x the best time known, then the full offline run of the survivors beside the
    baselines, then any extra modes. Returns per-candidate status/times and the baseline medians."""
    out: dict[str, dict] = {}
    survivors = list(cands)
    factor = cfg.get("early_stop")
    if factor and cands:
        st = timer.offline(cands + baselines, min_calls=cfg["early_calls"], min_ms=cfg["early_ms"], warmup=1)
        known = [s["median_us"] for s in st.values()] + ([best_us] if best_us else [])
        best = min(known)
        survivors = []
        for c in cands:
            ratio = st[c]["median_us"] / best
            if ratio > factor:
                out[c] = {"status": "slow", "ratio": ratio, "times": {"early": st[c]}}
            else:
                survivors.append(c)
    base_us: dict[str, float] = {}
    if survivors or baselines:
        # max_calls caps a function's calls where min_ms would ask for thousands of a tiny kernel:
        # each call costs ~20-40 us of host time however short the kernel (NOTES.md, 2026-12-03).
        cap = {"max_calls": cfg["max_calls"]} if cfg.get("max_calls") else {}
        full = timer.offline(survivors + baselines, min_calls=cfg["min_calls"], min_ms=cfg["min_ms"],
                             warmup=cfg["warmup"], **cap)
        base_us = {b: full[b]["median_us"] for b in baselines}
        for c in survivors:
            out[c] = {"status": "ok", "times": {"offline": full[c]}}
        for mode in cfg.get("modes", ()):
            if mode != "offline" and survivors:
                for c, s in timer.mode(mode, survivors + baselines).items():
                    if c in out:
                        out[c]["times"][mode] = s
    return {"results": out, "baselines_us": base_us}


# ---- the request loop -----------------------------------------------------------------------------
def serve(conn, handler_factory: Callable[[dict], Any], cfg: dict) -> None:
    try:
        handler = handler_factory(cfg)
        conn.send(("ready", handler.device.to_dict(), handler.versions()))
    except BaseException as e:
        conn.send(("error", f"worker failed to start: {type(e).__name__}: {e}".splitlines()[0], True))
        os._exit(FATAL_EXIT)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            os._exit(0)   # the parent is gone
        op = msg[0]
        if op == "stop":
            conn.close()
            os._exit(0)
        try:
            if op == "problem":
                payload = handler.set_problem(Problem.parse(msg[1]), msg[2])
            elif op == "check":
                payload = handler.check(msg[1], msg[2])
            elif op == "time":
                payload = handler.time(msg[1], msg[2], msg[3])
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception as e:
            fatal = not handler.healthy()
            conn.send(("error", f"{type(e).__name__}: {e}".splitlines()[0][:400], fatal))
            if fatal:
                os._exit(FATAL_EXIT)
            continue
        conn.send(("ok", payload))
        if isinstance(payload, dict) and payload.get("fatal"):
            os._exit(FATAL_EXIT)


# ---- the real GPU handler -------------------------------------------------------------------------
class GpuHandler:
    def __init__(self, cfg: dict):
        import torch
        from ..device import current
        self.torch = torch
        if cfg.get("device_index") is not None:
            torch.cuda.set_device(int(cfg["device_index"]))
        self.device = current()
        self.problem: Problem | None = None
        self.kernels: dict[str, Any] = {}
        self.base: dict[str, Callable[[], None]] = {}

    def versions(self) -> dict:
        from ..versions import gpu
        return {**versions(), **gpu()}

    def healthy(self) -> bool:
        """Whether the CUDA context still works (an illegal address poisons it for good)."""
        torch = self.torch
        try:
            torch.cuda.synchronize()
            return (torch.ones(1, device="cuda") + 1).item() == 2.0
        except Exception:
            return False

    def set_problem(self, problem: Problem, cfg: dict) -> dict:
        torch = self.torch
        # PROTOCOL: randn inputs, fresh per shape, never zeros. Drawn on the GPU: a CPU randn of a
        # large operand (67M elements for 64x16384x4096) takes ~0.5 s, paid at every problem switch.
        g = torch.Generator(device="cuda").manual_seed(int(cfg.get("seed", 0)))
        self.a = torch.randn((problem.M, problem.K), generator=g, device="cuda").half()
        self.b = torch.randn(problem.b_shape(), generator=g, device="cuda").half()
        self.c = torch.empty((problem.M, problem.N), dtype=torch.float16, device="cuda")
        self.problem = problem
        self.kernels.clear()
        self.base = {}
        left_out: dict[str, str] = {}
        if cfg.get("baselines"):
            from .. import baselines
            # A baseline that cannot serve this layout (cublas-nn for nt ...) or fails its own check
            # is left out with its reason; the others still set the bar.
            self.base = baselines.prepare(tuple(cfg["baselines"]), problem, self.a, self.b, self.c,
                                          reasons=left_out)
        torch.cuda.synchronize()
        return {"baselines": sorted(self.base), "left_out": left_out}

    def _load(self, art: Artifact):
        k = self.kernels.get(art.binary_hash)
        if k is None:
            from ..backends import get_backend
            k = self.kernels[art.binary_hash] = get_backend(art.backend).load(art)
        return k

    def check(self, art: Artifact, cfg: dict) -> dict:
        from ..check import check_kernel
        try:
            kernel = self._load(art)
        except Exception as e:
            return {"load_error": f"{type(e).__name__}: {e}".splitlines()[0][:400], "fatal": not self.healthy()}
        rep = check_kernel(kernel, self.problem, "cuda", seed=int(cfg.get("seed", 0)), checks=cfg["checks"])
        return {"report": rep.to_dict(), "fatal": (not rep.passed) and not self.healthy()}

    def time(self, arts: list[Artifact], cfg: dict, best_us: float | None) -> dict:
        a, b, c = self.a, self.b, self.c
        fns = dict(self.base)
        for art in arts:
            k = self._load(art)
            fns[art.binary_hash] = lambda k=k: k(a, b, c)
        return time_batch(_GpuTimer(fns), [x.binary_hash for x in arts], sorted(self.base), cfg, best_us)


class _GpuTimer:
    def __init__(self, fns: dict):
        self.fns = fns

    def offline(self, names, **kw) -> dict:
        from ..timing import offline
        return {n: s.to_dict() for n, s in offline({n: self.fns[n] for n in names}, **kw).items()}

    def mode(self, mode: str, names) -> dict:
        from .. import timing
        if mode == "server":
            return {n: s.to_dict() for n, s in timing.server({n: self.fns[n] for n in names}).items()}
        if mode == "eager":
            return {n: timing.eager(self.fns[n]).to_dict() for n in names}
        raise ValueError(f"unknown timing mode {mode!r} (offline, server, eager)")


def main(conn, cfg: dict) -> None:
    """The default worker target: the real GPU handler."""
    serve(conn, GpuHandler, cfg)
