"""Dispatch where cuBLAS won: run the cuBLAS call that won the measurement, not just torch.matmul.

A registry "cublas" entry records every baseline's time (`baselines_us`) and, where cuBLASLt's
autotune won, the algorithm it chose (`lt_algo`: the raw cublasLtMatmulAlgo_t words and the
cuBLASLt version that produced them). On the first H200 grid registry (377 shapes, 2026-12-03)
torch.matmul ran at 0.970x best-cublas (geomean offline) and cuBLASLt autotune at 0.995x, up to
1.31x faster than torch on short-K wide shapes: that gap is what this module serves.

`choose(entry, lt_version)` picks, by the registry's rule (cudal2.registry.evidence: a cuBLASLt
call only where it beat torch.matmul by a margin in every recorded timing), a call that runs here:
  cublaslt-autotune   the stored algorithm, only under the cuBLASLt version that chose it
  cublaslt-heuristic  the heuristic's first algorithm, asked once per plan
  torch               always (also the answer when nvmath-python is missing)
cublas-nn / cublas-tn are not dispatch targets (torch.matmul is cuBLAS already).

`LtKernel` is the backends' Kernel contract (backends/base.py) for one problem, so plans.BoundPlan
does the argument checks. The algorithm was chosen for 256-byte aligned operands (fresh tensors in
the evaluator); a launch whose pointers are less aligned computes through torch.matmul instead, so
a view at an offset is never misread. Each plan checks one launch against the fp32 reference
before serving (a wrong algorithm is refused, not used). One workspace per (device, stream):
cuBLASLt's split-K algorithms write it, and two streams sharing one would race.
"""
from __future__ import annotations

import torch

from .problems import Problem

TARGETS = ("cublaslt-autotune", "cublaslt-heuristic", "torch")
_ALIGN_MASK = 255


def lt_version() -> int | None:
    """The installed cuBLASLt's version, or None when nvmath-python (or the library) is missing."""
    from .baselines import nvmath_libs
    try:
        return int(nvmath_libs()[2].get_version())
    except Exception:       # BaselineUnavailable, or a library that will not load
        return None


def choose(entry, version: int | None) -> tuple[str, list[int] | None, str]:
    """(target, algo words or None, why) for a cublas entry, by the registry's rule
    (cudal2.registry.evidence): the first of the entry's qualified calls - those that beat
    torch.matmul by the margin in every recorded timing - that can run with cuBLASLt `version`
    (None: no cuBLASLt here); else torch.matmul. An entry filed before dispatch records existed
    gets the same rule over its one recorded timing (`legacy_choice`)."""
    from .registry import legacy_choice, qualified_calls
    algo = entry.lt_algo or {}
    blocked = {}
    if version is None:
        blocked["cublaslt-heuristic"] = blocked["cublaslt-autotune"] = "no cuBLASLt here (nvmath-python)"
    elif not algo.get("data"):
        blocked["cublaslt-autotune"] = "autotune's algorithm not stored"
    elif algo.get("cublasLt") != version:
        blocked["cublaslt-autotune"] = f"autotune's algorithm is for cuBLASLt {algo.get('cublasLt')}, not {version}"
    rec = entry.dispatch if entry.dispatch is not None else legacy_choice(entry.baselines_us, blocked)
    best = next((t for t in qualified_calls(rec) if t not in blocked and t in TARGETS), "torch")
    why = rec.get("why", "")
    if best != rec["target"]:
        why = f"{best}, as {rec['target']} cannot run here ({blocked.get(rec['target'], '?')}); filed: {why}"
    return best, (list(algo["data"]) if best == "cublaslt-autotune" else None), why


def read_tune_cache(path) -> tuple[str, dict]:
    """(device key, {problem text: lt_algo}) from cudal2.baselines' autotune cache file
    (lt-autotune-<device>.json, keys "<problem>|cublasLt<version>"). Where one problem was tuned
    under several cuBLASLt versions, the newest is kept."""
    import json
    import re
    from pathlib import Path
    path = Path(path)
    m = re.fullmatch(r"lt-autotune-(.+)\.json", path.name)
    if not m:
        raise ValueError(f"{path}: not an autotune cache (expected lt-autotune-<device>.json)")
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable ({e})") from None
    out: dict = {}
    for key, v in raw.items():
        problem, _, ver = key.partition("|cublasLt")
        if not ver.isdigit() or not isinstance(v, dict) or len(v.get("algo") or ()) != 8:
            raise ValueError(f"{path}: entry {key!r} is not a tuned algorithm")
        cand = {"data": [int(w) for w in v["algo"]], "cublasLt": int(ver)}
        if problem not in out or out[problem]["cublasLt"] < cand["cublasLt"]:
            out[problem] = cand
    return m.group(1), out


def cached_algo(device_key: str, problem_text: str) -> dict | None:
    """The lt_algo autotune chose for a problem on this machine (cudal2.baselines' cache), if any."""
    from .timing import default_cache_dir      # where cudal2.baselines keeps autotune's choices
    try:
        _, algos = read_tune_cache(default_cache_dir() / f"lt-autotune-{device_key}.json")
    except ValueError:
        return None     # no cache yet (nvmath missing, autotune never ran here)
    return algos.get(problem_text)


class LtKernel:
    """C = A @ B for one problem through cublasLtMatmul with a fixed algorithm."""

    def __init__(self, problem: Problem, algo_words: list[int] | None):
        from .baselines import WORKSPACE_BYTES, BaselineUnavailable, LtPlan, resources
        self.problem = problem
        self.via = "cublaslt-heuristic" if algo_words is None else "cublaslt-autotune"
        self.plan = LtPlan(problem)           # descriptors; heuristic told 256-byte alignment
        if algo_words is None:
            algos = self.plan.candidates(1)
            if not algos:
                raise BaselineUnavailable("cuBLASLt heuristic returned no algorithm")
            self.algo = algos[0]
        else:
            self.algo = self.plan.algo_from_data(algo_words)
        self.handle = resources()["lt"]
        self.ws_bytes = WORKSPACE_BYTES
        self._ws: dict = {}
        self._ws_ptr: dict = {}
        self._self_check()

    def _self_check(self) -> None:
        """One launch on random operands against the checker's fp32 reference before the plan is
        used: a stored algorithm this library takes but computes wrong (or a binding mismatch)
        refuses the plan, and ops falls back to torch.matmul. Costs one GEMM per shape, once."""
        from .check import REL_TOL, reference, rel_error
        p = self.problem
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(p.M, p.K, device="cuda", dtype=torch.float16, generator=g)
        b = torch.randn(*p.b_shape(), device="cuda", dtype=torch.float16, generator=g)
        c = torch.full((p.M, p.N), float("nan"), device="cuda", dtype=torch.float16)
        self(a, b, c)
        err = rel_error(c, reference(a, b, p.layout))
        if not err <= REL_TOL:      # NaN (unwritten) fails too
            raise RuntimeError(f"{self.via} for {p}: self-check failed, relative error {err:.2e} > {REL_TOL:g}")

    def supports(self, problem: Problem) -> bool:
        return problem == self.problem

    def __call__(self, a, b, c, stream=None) -> None:
        p = self.problem
        if a.dtype != torch.float16 or b.dtype != torch.float16 or c.dtype != torch.float16:
            raise ValueError("LtKernel takes float16 a, b, c")
        if a.numel() != p.M * p.K or b.numel() != p.N * p.K or c.numel() != p.M * p.N:
            raise ValueError(f"LtKernel for {p}: got a {tuple(a.shape)}, b {tuple(b.shape)}, c {tuple(c.shape)}")
        if not (a.is_contiguous() and b.is_contiguous() and c.is_contiguous()):
            raise ValueError("LtKernel takes dense tensors")
        self.bind(p.M, p.N, p.K)(a, b, c)

    def bind(self, M: int, N: int, K: int):
        if (M, N, K) != (self.problem.M, self.problem.N, self.problem.K):
            raise ValueError(f"LtKernel for {self.problem} cannot run {M}x{N}x{K}")
        from .backends.base import device_getter, stream_getter
        plan, lt = self.plan, self.plan.lt
        matmul, handle, desc, algo = lt.matmul, self.handle, plan.desc, self.algo.ctypes.data
        alpha, beta = plan.alpha.ctypes.data, plan.beta.ctypes.data
        bdesc, adesc, cdesc = plan.bdesc, plan.adesc, plan.cdesc
        nt = self.problem.layout == "nt"
        get_dev, get_stream, ws_for, wsb = device_getter(), stream_getter(), self._workspace, self.ws_bytes
        ws_ptrs = self._ws_ptr       # (device, stream) -> pointer, read inline: no method call per launch

        def launch(a, b, c):
            pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
            if (pa | pb | pc) & _ALIGN_MASK:
                bm = b.view(N, K).t() if nt else b.view(K, N)
                torch.matmul(a.view(M, K), bm, out=c.view(M, N))
                return
            dev = get_dev()
            s = get_stream(dev)
            ws = ws_ptrs.get((dev, s)) or ws_for(dev, s)
            matmul(handle, desc, alpha, pb, bdesc, pa, adesc, beta, pc, cdesc, pc, cdesc, algo, ws, wsb, s)
        return launch

    def _workspace(self, dev: int, stream: int) -> int:
        w = self._ws.get((dev, stream))
        if w is None:
            w = self._ws[(dev, stream)] = torch.empty(self.ws_bytes, dtype=torch.uint8, device=f"cuda:{dev}")
            self._ws_ptr[(dev, stream)] = w.data_ptr()
        return w.data_ptr()
