"""Dispatch: `cudal2.matmul` and the `cudal2::hgemm` torch op, served from the registry.

Per (a.shape, b.shape, dtypes, devices, layout, strict) the first call builds a *plan* (validate,
look up the registry: the problem's own entry, else a kernel entry whose measured scope holds this
size (cudal2.registry.evidence: it was measured not to lose to best-cublas at the scope's corners),
else cuBLAS through torch.matmul; compile and load the kernel) and caches it. Every later call is
one dict lookup plus the plan: contiguity/alignment tests, an output from the caching allocator
(graph-safe) and a launch on torch's current stream. No host sync, no .item(), so a warmed-up call
can be captured in a CUDA graph.

Under torch.compile, matmul routes through `torch.ops.cudal2.hgemm` (a custom op with a fake
implementation), so `fullgraph=True` traces it as one opaque node.

Fallbacks never compute something else silently: CPU tensors and dtypes other than float16 use
torch.matmul and warn once per reason (strict=True raises instead); a registry entry whose source
is missing, edited or no longer what its backend renders is refused with a warning naming it, and
the next candidate (or torch) serves the call.
"""
from __future__ import annotations

import math
import os
import warnings

import torch

from .plans import TorchPlan, kernel_plan
from .problems import LAYOUTS, Problem
from .registry import Registry, RegistryError, check_render

_PLANS: dict = {}
_KERNELS: dict = {}      # (entry key, sha256, device index) -> Kernel, or the refusal message
_WARNED: set = set()
_REG: list = []          # [Registry | None] once loaded
_F16 = torch.float16
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


def _warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=4)


# ---- registry handle --------------------------------------------------------------------------
def set_registry(registry: Registry | str | os.PathLike | None) -> Registry | None:
    """Serve dispatch from `registry` (a Registry, a path, or None for $CUDAL2_REGISTRY / shipped);
    drops every cached plan and kernel so the next call chooses again."""
    clear_cache()
    _REG.clear()
    _REG.append(registry if isinstance(registry, Registry) else _load(registry))
    return _REG[0]


def _load(path) -> Registry | None:
    try:
        reg = Registry.load(path)
    except RegistryError as e:
        _warn_once(f"cudal2: {e}; dispatch falls back to torch.matmul")
        return None
    if not reg.shipped and not (reg.root / "index.json").exists():
        _warn_once(f"cudal2: registry {reg.root} has no index.json yet; every call uses torch.matmul")
    return reg


def get_registry() -> Registry | None:
    if not _REG:
        _REG.append(_load(None))
    return _REG[0]


def clear_cache() -> None:
    """Forget plans, kernels and one-time warnings (after changing the registry, or in tests)."""
    _PLANS.clear()
    _KERNELS.clear()
    _WARNED.clear()


def plan_info(a: torch.Tensor, b: torch.Tensor, layout: str = "nn", strict: bool = False) -> str:
    """What the cached plan for these operands does ("kernel <entry>" / "torch: reason")."""
    p = _PLANS.get((a.shape, b.shape, a.dtype, b.dtype, a.device, b.device, layout, strict))
    return getattr(p, "info", "no plan yet")


# ---- the hot path ------------------------------------------------------------------------------
def matmul(a: torch.Tensor, b: torch.Tensor, *, layout: str = "nn", out: torch.Tensor | None = None,
           strict: bool = False) -> torch.Tensor:
    """C = A @ B (layout "nn": b is [K, N]) or A @ B^T (layout "nt": b is [N, K], the nn.Linear
    weight). a is [..., K]; leading dimensions are flattened into M. fp16 CUDA tensors run the
    registry's kernel for this problem; anything else is computed by torch.matmul (see module doc).
    strict=True raises instead of falling back where the input is not one cudal2 tunes (not CUDA,
    not float16) or a registry entry is refused; "cuBLAS won" / "no entry" still use torch.matmul,
    since that is the tuned answer. Gradients flow through every plan: when a or b requires grad
    the call goes through the op `cudal2::hgemm`, whose backward runs its two GEMMs through cudal2."""
    if _is_compiling():
        r = torch.ops.cudal2.hgemm(a, b, layout)
        if out is None:
            return r
        if out.shape != r.shape or out.dtype != r.dtype:
            raise ValueError(f"out has shape {tuple(out.shape)} {out.dtype}; the result is {tuple(r.shape)} {r.dtype}")
        return out.copy_(r)
    try:
        plan = _PLANS[(a.shape, b.shape, a.dtype, b.dtype, a.device, b.device, layout, strict)]
    except KeyError:
        plan = _make_plan(a, b, layout, strict)
    except AttributeError:
        raise TypeError(f"cudal2.matmul takes tensors, got {type(a).__name__} and {type(b).__name__}") from None
    # Autograd must record the call: the op carries the backward. requires_grad first, since
    # inference tensors rarely need it and two attribute reads cost less than the grad-mode query.
    if (a.requires_grad or b.requires_grad) and _grad_enabled():
        if out is not None:
            raise RuntimeError("cudal2.matmul(out=...) does not support automatic differentiation, but a or b "
                               "requires grad (as torch.matmul); drop out= or run under torch.no_grad()")
        return torch.ops.cudal2.hgemm(a, b, layout)
    if out is None:     # the common call: the plan's own no-out path, one Python frame fewer
        return plan.new(a, b)
    return plan(a, b, out)


def _make_plan(a, b, layout, strict):
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"cudal2.matmul takes tensors, got {type(a).__name__} and {type(b).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if b.ndim != 2:
        raise ValueError(f"b must be 2-D ([K, N] for nn, [N, K] for nt), got shape {tuple(b.shape)}")
    if a.ndim < 2:
        raise ValueError(f"a must be [..., M, K] (at least 2-D), got shape {tuple(a.shape)}")
    K = a.shape[-1]
    Kb, N = (b.shape[0], b.shape[1]) if layout == "nn" else (b.shape[1], b.shape[0])
    if K != Kb:
        want = "[K, N]" if layout == "nn" else "[N, K]"
        raise ValueError(f"inner dimensions differ: a {tuple(a.shape)} has K={K} but b {tuple(b.shape)} "
                         f"(layout {layout}, b is {want}) has K={Kb}")
    if a.dtype != b.dtype:
        raise ValueError(f"a is {a.dtype} but b is {b.dtype}; cudal2.matmul needs one dtype")
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} but b is on {b.device}")
    lead = tuple(a.shape[:-1])
    M = math.prod(lead)
    shape = torch.Size((*lead, N))
    key = (a.shape, b.shape, a.dtype, b.dtype, a.device, b.device, layout, strict)
    reason = None
    if a.device.type != "cuda":
        reason = f"{a.device.type} tensors: cudal2 kernels run on CUDA GPUs; using torch.matmul"
    elif a.dtype != _F16:
        reason = f"dtype {a.dtype}: cudal2 tunes float16 only; using torch.matmul"
    if reason:
        if strict:
            raise ValueError(f"cudal2.matmul(strict=True): {reason}")
        _warn_once(f"cudal2.matmul: {reason}")
        plan = TorchPlan(layout, shape, a.dtype, a.device, f"torch: {reason}")
    elif min(M, N, K) == 0:
        plan = TorchPlan(layout, shape, a.dtype, a.device, "torch: zero-size problem")
    else:
        problem = Problem(M, N, K, layout)
        from .device import current
        idx = a.device.index if a.device.index is not None else torch.cuda.current_device()
        kern, info = _choose(problem, current(idx), idx, strict)
        plan = (kernel_plan(kern, M, N, K, shape, a.device, info) if kern is not None
                else TorchPlan(layout, shape, _F16, a.device, info))
    _PLANS[key] = plan
    return plan


def _choose(problem: Problem, dev, idx: int, strict: bool):
    """(kernel, info) of the first registry candidate that loads on `dev` (a DeviceInfo), or
    (None, why torch)."""
    reg = get_registry()
    if reg is None:
        return None, "torch: registry unreadable"
    why = reg.refused(problem, dev.key)
    if why:     # a corrupt or hand-edited entry for this very problem: cuBLAS, not a neighbour's kernel
        msg = f"cudal2 registry {reg.root}: entry {dev.key}/{problem} was refused at load ({why}); using torch.matmul"
        if strict:
            raise RegistryError(msg)
        _warn_once(msg)
        return None, f"torch: entry refused at load ({why})"
    refused = None
    for e in reg.serving(problem, dev.key, dev):
        if e.backend == "cublas":
            return _cublas_choice(reg, e, problem, idx)
        k = _kernel(reg, e, dev, idx)
        if isinstance(k, str):
            msg = f"cudal2 registry {reg.root}: refusing entry {e.key}: {k}; falling back"
            if strict:
                raise RegistryError(msg)
            _warn_once(msg)
            refused = refused or f"torch: entry {e.key} refused ({k})"
            continue
        if k.supports(problem):
            how = "exact" if e.problem == problem.text else f"in its measured scope {_scope_text(e)}"
            return k, f"kernel {e.key} ({how}, {e.backend}: {e.spec})"
    return None, refused or (f"torch: no registry entry for {problem} on {dev.key}, "
                             "nor a kernel measured to win over a range holding it")


def _scope_text(e) -> str:
    s = e.scope or {}
    return " ".join(f"{ax} {s[ax][0]}..{s[ax][1]}" for ax in ("M", "N", "K") if s.get(ax))


def _cublas_choice(reg: Registry, e, problem: Problem, idx: int):
    """cuBLAS won `e`: the cuBLAS call its timings chose that runs here (cudal2.lt_dispatch). Only
    the problem's own entry gets here (a cublas entry has no scope); the guard stays for callers
    that hand in another problem's entry: its algorithm was chosen for another size."""
    if e.problem != problem.text:
        return None, f"torch: cublas won {e.problem}"
    from . import lt_dispatch
    target, words, why = lt_dispatch.choose(e, lt_dispatch.lt_version())
    if target == "torch":
        return None, f"torch: cublas won {e.problem}, {why}"
    ck = (str(reg.root), e.key, target, idx)
    if ck not in _KERNELS:
        try:
            _KERNELS[ck] = _on_device(idx, lt_dispatch.LtKernel, problem, words)
        except Exception as err:   # the tuned answer is still cuBLAS: torch.matmul serves it
            _KERNELS[ck] = (str(err).splitlines() or [type(err).__name__])[0]
    k = _KERNELS[ck]
    if isinstance(k, str):
        _warn_once(f"cudal2: {target} for {e.key} failed to set up ({k}); using torch.matmul")
        return None, f"torch: cublas won {e.problem}, {target} failed ({k})"
    return k, f"{target}: cublas won {e.key}, {why}"


def _on_device(idx: int, build, *args):
    """build(*args) with device idx current: a CUDA-backend kernel loads its module (and cuBLASLt
    its handle) into the current device's context, so build on the tensors' device, not whichever
    is current. NOTE: untested on >1 GPU."""
    if torch.cuda.device_count() > 1:
        with torch.cuda.device(idx):
            return build(*args)
    return build(*args)


def _kernel(reg: Registry, e, dev, idx):
    """Build the entry's kernel (cached); a str is the reason it was refused."""
    ck = (str(reg.root), e.key, e.sha256, idx)
    if ck not in _KERNELS:
        from .backends import build_kernel
        try:
            reg.read_source(e)      # the stored file must still hash to the index's sha256
            # Build from the spec, and fail closed unless that renders exactly the stored source.
            spec = check_render(e)
            _KERNELS[ck] = _on_device(idx, build_kernel, spec, e.prob, dev)
        except Exception as err:   # any failure refuses the entry; dispatch stays correct
            _KERNELS[ck] = (str(err).splitlines() or [type(err).__name__])[0]
    return _KERNELS[ck]


# ---- the torch op ------------------------------------------------------------------------------
@torch.library.custom_op("cudal2::hgemm", mutates_args=())
def hgemm(a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """C = A @ B ("nn") or A @ B^T ("nt") through the registry (see cudal2.matmul)."""
    r = matmul(a, b, layout=layout)
    # A custom op may not return a view of an input; torch.matmul never does, but be certain.
    return r.clone() if r._base is a or r._base is b else r


@hgemm.register_fake
def _hgemm_fake(a, b, layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    K, (Kb, N) = a.shape[-1], (b.shape if layout == "nn" else (b.shape[1], b.shape[0]))
    torch._check(K == Kb, lambda: f"inner dimensions differ: a {tuple(a.shape)}, b {tuple(b.shape)}, layout {layout}")
    return a.new_empty((*a.shape[:-1], N))


def _setup(ctx, inputs, output):
    a, b, layout = inputs
    ctx.layout = layout
    ctx.save_for_backward(a, b)


def _backward(ctx, g):
    """The two GEMMs of the backward, each through the op (so cudal2 serves it where the registry
    has it, torch.matmul elsewhere; under torch.compile it stays one traced node). The operand
    that must be transposed (A^T, g^T) is a view: torch plans take it as is, kernel plans copy it
    dense first (the kernels read row-major A)."""
    a, b = ctx.saved_tensors
    g2 = g.reshape(-1, g.shape[-1])
    da = db = None
    if ctx.needs_input_grad[0]:
        # nn, C = A B:   dA = g B^T, the nt problem (M, K, N) with b [K, N] as its [N', K'] operand.
        # nt, C = A B^T: dA = g B,   the nn problem (M, K, N).
        da = _hgemm(g2, b, "nt" if ctx.layout == "nn" else "nn").reshape(a.shape)
    if ctx.needs_input_grad[1]:
        a2 = a.reshape(-1, a.shape[-1])
        # nn: dB = A^T g [K, N], the nn problem (K, N, M); nt: dB = g^T A [N, K], the nn problem (N, K, M).
        db = _hgemm(a2.t(), g2, "nn") if ctx.layout == "nn" else _hgemm(g2.t(), a2, "nn")
    return da, db, None


_hgemm = torch.ops.cudal2.hgemm


torch.library.register_autograd("cudal2::hgemm", _backward, setup_context=_setup)
