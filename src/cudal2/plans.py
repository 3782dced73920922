"""The plans behind `cudal2.matmul` (cudal2/ops.py): what one cached (shapes, dtypes, devices, layout)
key runs on every call after its first.

- `TorchPlan`: torch.matmul (cuBLAS, or the CPU): nothing tuned beats it, or the input is not ours.
- `KernelPlan`: a registry kernel behind the generic Kernel contract (backends/base.py): a, b and c
  made 2-D, dense and 16-byte aligned (anything else is copied, never misread), out written directly
  where it is dense, aligned and overlaps neither input.
- `BoundPlan`: a kernel that offers `bind(M, N, K)`: the same checks with no reshape or view, its
  out=None path a closure over locals (the hot path: NOTES.md has the per-call host costs).

No host sync and no .item() anywhere, so a warmed-up call can be captured in a CUDA graph.
"""
from __future__ import annotations

import torch

_F16 = torch.float16
_Tensor = torch.Tensor
_CONTIGUOUS = torch.contiguous_format
_linear = torch.nn.functional.linear
ALIGN = 16               # bytes: the vector loads / cp.async / TMA of every backend need 16-byte bases
_MASK = ALIGN - 1


def check_out(out, shape, dtype, dev):
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a tensor, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype or out.device != dev:
        raise ValueError(f"out is {tuple(out.shape)} {out.dtype} on {out.device}; "
                         f"the result is {tuple(shape)} {dtype} on {dev}")


class TorchPlan:
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
        check_out(out, self.shape, self.dtype, self.dev)
        return torch.matmul(a, b.t() if self.nt else b, out=out)


class KernelPlan:
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
        if not a.is_contiguous() or a.data_ptr() % ALIGN:
            a = a.clone(memory_format=torch.contiguous_format)
        if not b.is_contiguous() or b.data_ptr() % ALIGN:
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
        check_out(out, self.shape, _F16, self.dev)
        if not out.is_contiguous() or out.data_ptr() % ALIGN:
            return False
        s = out.untyped_storage().data_ptr()
        return s != a.untyped_storage().data_ptr() and s != b.untyped_storage().data_ptr()


class BoundPlan(KernelPlan):
    """A kernel that offers `bind(M, N, K)` (backends/base.py): its launch for this size takes dense,
    aligned tensors of any shape and reads only their data pointers, so the plan passes a and out as
    they come (no reshape, no view) once its checks hold. The checks are the generic plan's, done
    with what they need and no more: contiguity and 16-byte alignment of a and b (else a dense
    copy), `out`'s shape / dtype / device (else the error check_out raises), and `out` written
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
            check_out(out, self.shape, _F16, self.dev)      # raises unless a subclass that fits
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


def kernel_plan(kern, M, N, K, shape, dev, info) -> KernelPlan:
    return (BoundPlan if callable(getattr(kern, "bind", None)) else KernelPlan)(kern, M, N, K, shape, dev, info)
