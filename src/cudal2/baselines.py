"""The five baselines of PROTOCOL.md, bound to prepared tensors, each checked before it is timed.

Row-major C[M,N] = A @ B is, in cuBLAS's column-major view, C^T[N,M] = B^T A^T: the row-major
buffers of A ([M,K]) and C ([M,N]) read as column-major A^T (K x M, ld K) and C^T (N x M, ld N), so
every call here passes cuBLAS (m, n, k) = (N, M, K), first operand the B buffer, second the A buffer.
The B buffer then reads as:
  nn  b [K,N] row-major = column-major B^T (N x K, ld N)  -> op N on it: cublasGemmEx(N, N)
  nt  b [N,K] row-major = column-major B   (K x N, ld K)  -> op T on it: cublasGemmEx(T, N)
PROTOCOL's names: `cublas-nn` is B row-major (the nn problem, the (N,N) call) and `cublas-tn` is B
column-major (the nt problem, the (T,N) call, what the peer calls TN). Each serves one layout: the
other would need a transposed copy of B inside the timed call, so it is excluded for that layout
(`serves` says why). `torch` and the cuBLASLt baselines serve both layouts.

cuBLAS and cuBLASLt are reached through nvmath-python's low-level bindings (nvmath.bindings.cublas,
nvmath.bindings.cublasLt) rather than nvmath.linalg.advanced.Matmul: the bindings let one handle
serve the whole process, expose the heuristic's full candidate list and the raw algorithm struct
(which we cache on disk), and add no per-call operand checks to the eager-latency column.
nvmath is imported lazily; without it those baselines report themselves unavailable.

One cuBLAS handle and one cuBLASLt handle per device serve every prepared callable; a callable runs
on torch's current stream at the time it was prepared (for GemmEx: the stream of the latest prepare,
since the stream is handle state), so prepare on the stream you will time on.
"""
from __future__ import annotations

import json
import math
import os
import weakref
from pathlib import Path
from typing import Callable, Mapping

import torch

from .check import REL_TOL, reference, rel_error
from .problems import Problem

NAMES = ("torch", "cublas-nn", "cublas-tn", "cublaslt-heuristic", "cublaslt-autotune")
# A real workspace: cuBLASLt's split-K and stream-K algorithms need up to tens of MiB on Hopper; a
# zero-byte workspace silently restricts (or, in one harness, breaks) the algorithm choice.
WORKSPACE_BYTES = 32 << 20
MAX_CANDIDATES = 100

Fn = Callable[[], None]


class BaselineUnavailable(RuntimeError):
    """The baseline cannot run here (library missing, layout it cannot serve without a copy)."""


class BaselineInvalid(RuntimeError):
    """The baseline ran but its output failed the check against the fp32 reference."""


def serves(name: str, layout: str) -> str | None:
    """None if `name` computes C = A @ B for `layout` without copying; else the reason it cannot."""
    if name == "cublas-nn" and layout != "nn":
        return "unavailable: cublas-nn takes B row-major [K,N]; an nt B would need a transposed copy"
    if name == "cublas-tn" and layout != "nt":
        return "unavailable: cublas-tn takes B column-major ([N,K] row-major); an nn B would need a transposed copy"
    return None


_NVMATH = None


def nvmath_libs():
    global _NVMATH
    if _NVMATH is None:
        import importlib.util
        if importlib.util.find_spec("nvmath") is None:
            raise BaselineUnavailable("unavailable: nvmath-python not installed")
        try:
            import nvmath
            from nvmath.bindings import cublas, cublasLt
        except Exception as e:  # e.g. a cuda-core / cuda-pathfinder too old for it, or no libcublas
            msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            raise BaselineUnavailable(f"unavailable: nvmath-python failed to import ({msg})") from None
        _NVMATH = (nvmath, cublas, cublasLt)
    return _NVMATH


def library_versions() -> dict:
    out: dict = {}
    try:
        nvmath, _, lt = nvmath_libs()
        out["nvmath"] = getattr(nvmath, "__version__", "?")
        out["cublasLt"] = int(lt.get_version())
    except Exception:
        pass
    return out


# ---- process-wide resources (one handle, one workspace per device) ---------------------------------
_RES: dict[int, dict] = {}


def resources() -> dict:
    dev = torch.cuda.current_device()
    if dev not in _RES:
        _, cublas, lt = nvmath_libs()
        ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        h = cublas.create()
        lth = lt.create()
        _RES[dev] = {"cublas": h, "lt": lth, "ws": ws}
    return _RES[dev]


def _stream() -> int:
    return torch.cuda.current_stream().cuda_stream


def _on_gpu(*ts) -> bool:
    return all(t.is_cuda for t in ts)


def _device_key() -> str:
    from .device import current
    return current().key


def _f32(x: float):
    import numpy as np
    return np.array([x], dtype=np.float32)


# ---- cuBLAS GemmEx ---------------------------------------------------------------------------------
def _cublas_fn(problem: Problem, a, b, c) -> Fn:
    nvmath, cublas, _ = nvmath_libs()
    res = resources()
    h = res["cublas"]
    cublas.set_stream(h, _stream())
    cublas.set_workspace(h, res["ws"].data_ptr(), WORKSPACE_BYTES)
    M, N, K = problem.M, problem.N, problem.K
    op_b, ldb = (cublas.Operation.N, N) if problem.layout == "nn" else (cublas.Operation.T, K)
    alpha, beta = _f32(1.0), _f32(0.0)
    f16 = nvmath.CudaDataType.CUDA_R_16F
    args = (h, op_b, cublas.Operation.N, N, M, K, alpha.ctypes.data, b.data_ptr(), f16, ldb,
            a.data_ptr(), f16, K, beta.ctypes.data, c.data_ptr(), f16, N,
            cublas.ComputeType.COMPUTE_32F, cublas.GemmAlgo.DEFAULT)
    gemm = cublas.gemm_ex

    def fn(_keep=(alpha, beta)):
        gemm(*args)
    return fn


# ---- cuBLASLt --------------------------------------------------------------------------------------
class LtPlan:
    """Descriptors for one problem and the heuristic's candidates; launches one algorithm."""

    def __init__(self, problem: Problem, a=None, b=None, c=None):
        """a, b, c: the tensors fn() will bind (their alignment is told to the heuristic); None for
        a plan whose launches take pointers per call (cudal2.lt_dispatch: 256-byte aligned ones)."""
        import numpy as np
        nvmath, cublas, lt = nvmath_libs()
        self.np, self.lt = np, lt
        res = resources()
        self.handle, self.ws = res["lt"], res["ws"]
        M, N, K = problem.M, problem.N, problem.K
        f16, f32 = nvmath.CudaDataType.CUDA_R_16F, nvmath.CudaDataType.CUDA_R_32F
        # cublasLtMatmulDescCreate takes a cublasComputeType_t (the cublas enum; nvmath.ComputeType
        # is a different library's enum with other values).
        self.desc = lt.matmul_desc_create(cublas.ComputeType.COMPUTE_32F, f32)
        trans_b = 0 if problem.layout == "nn" else 1     # CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
        for attr, v in ((lt.MatmulDescAttribute.TRANSA, trans_b), (lt.MatmulDescAttribute.TRANSB, 0)):
            buf = np.array([v], dtype=lt.get_matmul_desc_attribute_dtype(attr))
            lt.matmul_desc_set_attribute(self.desc, attr, buf.ctypes.data, buf.nbytes)
        rows_b, cols_b, ld_b = (N, K, N) if problem.layout == "nn" else (K, N, K)
        self.bdesc = lt.matrix_layout_create(f16, rows_b, cols_b, ld_b)   # first operand: the B buffer
        self.adesc = lt.matrix_layout_create(f16, K, M, K)                # second: the A buffer
        self.cdesc = lt.matrix_layout_create(f16, N, M, N)
        self.pref = lt.matmul_preference_create()
        attr = lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES
        wsb = np.array([WORKSPACE_BYTES], dtype=lt.get_matmul_preference_attribute_dtype(attr))
        lt.matmul_preference_set_attribute(self.pref, attr, wsb.ctypes.data, wsb.nbytes)
        # The heuristic assumes 256-byte-aligned operands unless told otherwise; a view at an offset
        # (the checker's guard bands) would then get an algorithm that reads it wrong.
        P = lt.MatmulPreferenceAttribute
        for attr, t in ((P.MIN_ALIGNMENT_A_BYTES, b), (P.MIN_ALIGNMENT_B_BYTES, a),
                        (P.MIN_ALIGNMENT_C_BYTES, c), (P.MIN_ALIGNMENT_D_BYTES, c)):
            ptr = t.data_ptr() if t is not None else 0
            al = np.array([min(256, ptr & -ptr if ptr else 256)],
                          dtype=lt.get_matmul_preference_attribute_dtype(attr))
            lt.matmul_preference_set_attribute(self.pref, attr, al.ctypes.data, al.nbytes)
        self.alpha, self.beta = _f32(1.0), _f32(0.0)
        self.ptrs = (b.data_ptr(), a.data_ptr(), c.data_ptr()) if c is not None else None
        self.stream = _stream()
        weakref.finalize(self, _lt_destroy, lt, self.desc, (self.adesc, self.bdesc, self.cdesc), self.pref)

    def candidates(self, count: int) -> list:
        """Up to `count` heuristic algorithms (struct arrays) that fit the workspace, best first."""
        np, lt = self.np, self.lt
        results = np.zeros(count, dtype=lt.matmul_heuristic_result_dtype)
        got = np.zeros(1, dtype=np.int32)
        lt.matmul_algo_get_heuristic(self.handle, self.desc, self.bdesc, self.adesc, self.cdesc, self.cdesc,
                                     self.pref, count, results.ctypes.data, got.ctypes.data)
        out = []
        for r in results[: int(got[0])]:
            if int(r["state"]) == 0 and int(r["workspace_size"]) <= WORKSPACE_BYTES:
                out.append(self.algo_from_data(r["algo"]["data_"]))
        return out

    def algo_from_data(self, data):
        algo = self.np.zeros(1, dtype=self.lt.matmul_algo_dtype)
        algo["data_"][0] = self.np.asarray(data, dtype=self.np.uint64)
        return algo

    def fn(self, algo) -> Fn:
        lt = self.lt
        b, a, c = self.ptrs
        args = (self.handle, self.desc, self.alpha.ctypes.data, b, self.bdesc, a, self.adesc,
                self.beta.ctypes.data, c, self.cdesc, c, self.cdesc, algo.ctypes.data,
                self.ws.data_ptr(), WORKSPACE_BYTES, self.stream)
        matmul = lt.matmul

        def fn(_keep=(self, algo)):
            matmul(*args)
        return fn


def _lt_destroy(lt, desc, layouts, pref) -> None:
    try:
        lt.matmul_preference_destroy(pref)
        for d in layouts:
            lt.matrix_layout_destroy(d)
        lt.matmul_desc_destroy(desc)
    except Exception:
        pass  # interpreter shutdown: the library may be gone already


# ---- autotune cache --------------------------------------------------------------------------------
def _tune_cache_path(cache_dir) -> Path:
    from .timing import default_cache_dir   # one default cache folder for the roofline and this
    base = Path(cache_dir) if cache_dir else default_cache_dir()
    return base / f"lt-autotune-{_device_key()}.json"


def _tune_key(problem: Problem) -> str:
    # The algorithm struct is only meaningful to the cuBLASLt version that produced it.
    return f"{problem.text}|cublasLt{library_versions().get('cublasLt', '?')}"


def _load_cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _autotune_fn(plan: LtPlan, problem: Problem, c, ref, *, calls: int, cache_dir, retune: bool) -> Fn:
    from .timing import offline
    path = _tune_cache_path(cache_dir)
    key = _tune_key(problem)
    cache = _load_cache(path)
    if not retune and key in cache:
        fn = plan.fn(plan.algo_from_data(cache[key]["algo"]))
        _validate("cublaslt-autotune (cached)", fn, c, ref)
        fn.lt_algo = [int(x) for x in cache[key]["algo"]]
        return fn
    algos = plan.candidates(MAX_CANDIDATES)
    if not algos:
        raise BaselineUnavailable("unavailable: cuBLASLt heuristic returned no algorithm")
    fns = {str(i): plan.fn(al) for i, al in enumerate(algos)}
    # A bounded tune: `calls` timed calls per candidate, interleaved, no time floor.
    st = offline(fns, min_calls=calls, min_ms=0.0, warmup=1)
    errors = []
    for i in sorted(st, key=lambda k: st[k].median_us):
        try:
            _validate("cublaslt-autotune", fns[i], c, ref)
        except BaselineInvalid as e:
            errors.append(str(e))
            continue
        cache = _load_cache(path)  # another process may have written meanwhile
        cache[key] = {"algo": [int(x) for x in algos[int(i)]["data_"][0]], "median_us": st[i].median_us,
                      "rank": int(i), "candidates": len(algos), "calls": calls}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
        tmp.replace(path)
        # which algorithm this column times: a compare row records it, so registry evidence counts
        # a timing only where it is of the algorithm a cuBLAS entry stores (registry/fill.py)
        fns[i].lt_algo = cache[key]["algo"]
        return fns[i]
    raise BaselineInvalid(f"invalid: all {len(algos)} cuBLASLt candidates failed the check ({errors[0]})")


# ---- the check and prepare -------------------------------------------------------------------------
def _validate(name: str, fn: Fn, c: torch.Tensor, ref: torch.Tensor) -> None:
    """Poison C, run once, compare with the fp32 reference: catches baselines that write nothing."""
    c.fill_(float("nan"))
    fn()
    if c.is_cuda:
        torch.cuda.synchronize()
    bad = int((~torch.isfinite(c)).sum().item())
    if bad:
        raise BaselineInvalid(f"invalid: {name} left {bad} of {c.numel()} outputs non-finite (unwritten)")
    err = rel_error(c, ref)
    if not math.isfinite(err) or err > REL_TOL:
        raise BaselineInvalid(f"invalid: {name} relative error {err:.3g} > {REL_TOL:g}")


def _build(name: str, problem: Problem, a, b, c, ref, tune_calls, cache_dir, retune) -> Fn:
    why = serves(name, problem.layout)
    if why:
        raise BaselineUnavailable(why)
    if name != "torch" and not _on_gpu(a, b, c):
        raise BaselineUnavailable(f"unavailable: {name} needs CUDA tensors")
    if name == "torch":
        bb = b if problem.layout == "nn" else b.t()   # a view: no copy, no per-call allocation
        fn = lambda: torch.matmul(a, bb, out=c)  # noqa: E731
    elif name in ("cublas-nn", "cublas-tn"):
        fn = _cublas_fn(problem, a, b, c)
    elif name == "cublaslt-heuristic":
        plan = LtPlan(problem, a, b, c)
        algos = plan.candidates(1)
        if not algos:
            raise BaselineUnavailable("unavailable: cuBLASLt heuristic returned no algorithm")
        fn = plan.fn(algos[0])
    elif name == "cublaslt-autotune":
        return _autotune_fn(LtPlan(problem, a, b, c), problem, c, ref, calls=tune_calls,
                            cache_dir=cache_dir, retune=retune)
    else:
        raise ValueError(f"unknown baseline {name!r}; baselines are {', '.join(NAMES)}")
    _validate(name, fn, c, ref)
    return fn


def prepare(names, problem: Problem, a, b, c, *, ref: torch.Tensor | None = None,
            reasons: dict | None = None, tune_calls: int = 5, cache_dir=None,
            retune: bool = False) -> dict[str, Fn]:
    """One checked callable per baseline that can run, bound to a, b (problem's layout) and c.

    A baseline that cannot run (nvmath missing, a layout it cannot serve) or whose output fails the
    check is left out with its reason in `reasons`; without a `reasons` dict an invalid one raises
    BaselineInvalid, so no caller can time a baseline that computes nothing by accident.
    """
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown baseline {unknown[0]!r}; baselines are {', '.join(NAMES)}")
    if ref is None:
        ref = reference(a, b, problem.layout)
    out = {}
    for name in names:
        try:
            out[name] = _build(name, problem, a, b, c, ref, tune_calls, cache_dir, retune)
        except BaselineUnavailable as e:
            if reasons is not None:
                reasons[name] = str(e)
        except BaselineInvalid as e:
            if reasons is None:
                raise
            reasons[name] = str(e)
    return out


def unbuildable(names) -> dict[str, str]:
    """{name: reason} for the baselines in `names` that cannot be built in this process, found
    without touching a GPU: the cuBLAS and cuBLASLt ones need nvmath-python (importable, with its
    cublas and cublasLt bindings). `cudal2 generate` and `compare` refuse to run on such a bar
    unless the user names the baselines (issue 21: the bar cannot drop silently)."""
    need = [n for n in names if n != "torch"]
    if not need:
        return {}
    try:
        nvmath_libs()
    except BaselineUnavailable as e:
        return {n: str(e) for n in need}
    return {}


def refusal(missing: Mapping[str, str]) -> str:
    """The one-line refusal for baselines that cannot form best-cublas (see `unbuildable`)."""
    names = ", ".join(missing)
    why = next(iter(missing.values())).removeprefix("unavailable: ")
    return (f"best-cublas cannot be formed: {names} cannot be built ({why}); install nvmath-python "
            f"(pip install nvmath-python) or name the baselines to run without them (--baselines torch)")


def best(stats: Mapping) -> tuple[str, float]:
    """best-cublas: the fastest (offline median) of the baselines present in `stats`."""
    cand = {n: s for n, s in stats.items() if n in NAMES}
    if not cand:
        raise ValueError("no baseline timings to choose best-cublas from")
    name = min(cand, key=lambda n: cand[n].median_us)
    return name, cand[name].median_us
