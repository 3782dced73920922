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

from .problems import LAYOUTS, Problem
from .registry import Registry, RegistryError, check_render

_PLANS: dict = {}
_KERNELS: dict = {}      # (entry key, sha256, device index) -> Kernel, or the refusal message
_WARNED: set = set()
_REG: list = []          # [Registry | None] once loaded
_F16 = torch.float16
_Tensor = torch.Tensor
_CONTIGUOUS = torch.contiguous_format
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_linear = torch.nn.functional.linear
_ALIGN = 16              # bytes: the vector loads / cp.async / TMA of every backend need 16-byte bases
_MASK = _ALIGN - 1


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


def _check_out(out, shape, dtype, dev):
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a tensor, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype or out.device != dev:
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype} on {out.device}; "
                         f"the result is {tuple(shape)} {dtype} on {dev}")


class _TorchPlan:
    """cuBLAS (or the CPU) through torch.matmul: nothing tuned beats it, or the input is not ours."""
    __slots__ = ("nt", "shape", "dtype", "dev", "info", "new")

    def __init__(self, layout, shape, dtype, dev, info):
        self.nt, self.shape, self.dtype, self.dev, self.info = layout == "nt", shape, dtype, dev, info
        # matmul calls this directly when out is None: torch's own function, no plan frame between.
        # F.linear(a, b) is at::matmul(a, b.t()) without building the transposed view in Python;
        # a 2-D nn product is at::matmul's mm, called without matmul's dimension dispatch.
        self.new = _linear if self.nt else torch.mm if len(shape) == 2 else torch.matmul

    def __call__(self, a, b, out):
        if out is None:
            # F.linear(a, b) is at::matmul(a, b.t()) without building the transposed view in Python.
            return _linear(a, b) if self.nt else torch.matmul(a, b)
        _check_out(out, self.shape, self.dtype, self.dev)
        return torch.matmul(a, b.t() if self.nt else b, out=out)


class _KernelPlan:
    """A registry kernel behind the generic Kernel contract: a, b, c made 2-d, dense and aligned."""
    __slots__ = ("kernel", "kern", "mk", "mn", "shape", "flat", "dev", "guard", "info", "new")

    def __init__(self, kern, M, N, K, shape, dev, info):
        self.kernel = kern
        # The plan's key fixes shapes, dtypes and device, and __call__ makes a, b, c dense and
        # aligned, so a backend's per-call argument checks are redundant here: if the Kernel offers
        # `unchecked` (the same launch without them), the hot path uses it.
        self.kern = getattr(kern, "unchecked", None) or kern
        self.mk, self.mn, self.shape, self.dev, self.info = (M, K), (M, N), shape, dev, info
        self.flat = len(shape) != 2
        # With several GPUs the launch must happen on the tensors' device, not the current one.
        self.guard = torch.cuda.device_count() > 1
        self.new = self._new()

    def _new(self):
        """f(a, b): the call without out= (what matmul calls then)."""
        call = self.__call__
        return lambda a, b: call(a, b, None)

    def __call__(self, a, b, out):
        if self.flat:
            a = a.reshape(self.mk)
        # Kernels read dense rows from 16-byte aligned bases; anything else is copied, never misread.
        if not a.is_contiguous() or a.data_ptr() % _ALIGN:
            a = a.clone(memory_format=torch.contiguous_format)
        if not b.is_contiguous() or b.data_ptr() % _ALIGN:
            b = b.clone(memory_format=torch.contiguous_format)
        direct = out is not None and self._direct(out, a, b)
        c = out.view(self.mn) if direct else torch.empty(*self.mn, dtype=_F16, device=self.dev)
        if self.guard:
            with torch.cuda.device(self.dev):
                self.kern(a, b, c)
        else:
            self.kern(a, b, c)
        if out is None:
            return c.view(self.shape) if self.flat else c
        if not direct:
            out.copy_(c.view(self.shape))
        return out

    def _direct(self, out, a, b) -> bool:
        """Write straight into `out` if it is dense, aligned and shares no memory with a or b."""
        _check_out(out, self.shape, _F16, self.dev)
        if not out.is_contiguous() or out.data_ptr() % _ALIGN:
            return False
        s = out.untyped_storage().data_ptr()
        return s != a.untyped_storage().data_ptr() and s != b.untyped_storage().data_ptr()


class _BoundPlan(_KernelPlan):
    """A kernel that offers `bind(M, N, K)` (backends/base.py): its launch for this size takes dense,
    aligned tensors of any shape and reads only their data pointers, so the plan passes a and out as
    they come (no reshape, no view) once its checks hold. The checks are the generic plan's, done
    with what they need and no more: contiguity and 16-byte alignment of a and b (else a dense
    copy), `out`'s shape / dtype / device (else the error _check_out raises), and `out` written
    directly only when dense, aligned and overlapping neither input's bytes (else a temporary that
    is copied into it)."""
    __slots__ = ("launch", "dims", "abytes", "bbytes", "cbytes", "didx")

    def __init__(self, kern, M, N, K, shape, dev, info):
        self.launch = kern.bind(M, N, K)
        # torch.empty(*ints) parses in about half the time of torch.empty(torch.Size) (~1 vs ~2 µs).
        self.dims = tuple(int(x) for x in shape)
        super().__init__(kern, M, N, K, shape, dev, info)
        self.abytes, self.bbytes, self.cbytes = 2 * M * K, 2 * N * K, 2 * M * N
        self.didx = dev.index if dev.type == "cuda" and dev.index is not None else -1

    def _new(self):
        """The out=None path as a closure: everything it reads is a local bound once here, not an
        attribute looked up per call (the same checks as __call__: dense, 16-byte aligned a and b,
        else a dense copy; a fresh output from the caching allocator)."""
        launch, dims, dev, guard = self.launch, self.dims, self.dev, self.guard
        empty, f16, contiguous, mask = torch.empty, _F16, _CONTIGUOUS, _MASK

        def new(a, b):
            if a.data_ptr() & mask or not a.is_contiguous():
                a = a.clone(memory_format=contiguous)
            if b.data_ptr() & mask or not b.is_contiguous():
                b = b.clone(memory_format=contiguous)
            c = empty(*dims, dtype=f16, device=dev)
            if guard:
                with torch.cuda.device(dev):
                    launch(a, b, c)
            else:
                launch(a, b, c)
            return c
        return new

    def __call__(self, a, b, out):
        if out is None:
            return self.new(a, b)
        pa = a.data_ptr()
        if pa & _MASK or not a.is_contiguous():
            a = a.clone(memory_format=_CONTIGUOUS)
            pa = a.data_ptr()
        pb = b.data_ptr()
        if pb & _MASK or not b.is_contiguous():
            b = b.clone(memory_format=_CONTIGUOUS)
            pb = b.data_ptr()
        if (out.__class__ is not _Tensor or out.dtype is not _F16 or out.shape != self.shape
                or out.get_device() != self.didx):
            _check_out(out, self.shape, _F16, self.dev)      # raises unless a subclass that fits
        po, n = out.data_ptr(), self.cbytes
        if (po & _MASK or not out.is_contiguous() or (po < pa + self.abytes and pa < po + n)
                or (po < pb + self.bbytes and pb < po + n)):
            c = torch.empty(*self.dims, dtype=_F16, device=self.dev)
        else:
            c = out
        if self.guard:
            with torch.cuda.device(self.dev):
                self.launch(a, b, c)
        else:
            self.launch(a, b, c)
        if c is not out:
            out.copy_(c)
        return out


def _kernel_plan(kern, M, N, K, shape, dev, info) -> _KernelPlan:
    return (_BoundPlan if callable(getattr(kern, "bind", None)) else _KernelPlan)(kern, M, N, K, shape, dev, info)


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
        plan = _TorchPlan(layout, shape, a.dtype, a.device, f"torch: {reason}")
    elif min(M, N, K) == 0:
        plan = _TorchPlan(layout, shape, a.dtype, a.device, "torch: zero-size problem")
    else:
        problem = Problem(M, N, K, layout)
        from .device import current
        idx = a.device.index if a.device.index is not None else torch.cuda.current_device()
        kern, info = _choose(problem, current(idx), idx, strict)
        plan = (_kernel_plan(kern, M, N, K, shape, a.device, info) if kern is not None
                else _TorchPlan(layout, shape, _F16, a.device, info))
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
