"""The Triton backend's load: TritonKernel, one spec and layout launched for every problem it
supports (backends/triton.py has render and compile; this module is its third step, split out for
length). Every constexpr dict and launch option is fixed in __init__; a call checks its inputs
cheaply (`unchecked` skips that, `bind(M, N, K)` also fixes the size, for cudal2.plans). The first
launch of a size goes through the family's `launch` and the JIT; later ones call the compiled
kernel's launcher directly (backends/triton_direct.py)."""
from __future__ import annotations

import torch
import triton

from ..device import DeviceInfo
from ..problems import Problem
from ..spec import is_valid
from . import triton_direct as _direct
from .base import Artifact
from .triton_direct import INTERPRET
from .triton_families import constexprs, family_module, module_for, pdl_default, pdl_supported

# A size's launches after its first go direct: backends/triton_direct.py ("the direct launch").
_MAX_BINDS = 256           # problem sizes bound per kernel before the table is reset


class TritonKernel:
    """Kernel(a, b, c, stream=None) for one spec and layout; serves every problem it supports.
    `pdl` None: programmatic dependent launch where `pdl_default` says; True / False: on (where
    `pdl_supported`, else ValueError) / off (the A/B of bench/graph_clock.py)."""

    def __init__(self, artifact: Artifact, pdl: bool | None = None):
        self.spec = artifact.spec
        self.layout = artifact.meta.get("layout", "nn")
        self.device = DeviceInfo.from_dict(artifact.meta["device"])
        self.artifact = artifact
        self._mod = module_for(artifact.source, self.spec.family)
        self._persistent = self.spec.family == "persistent"
        if pdl and not pdl_supported(self.spec, self.device, self._mod):
            raise ValueError(f"PDL needs the tiled family compiled for sm_90+ from a text with the PDL "
                             f"constexpr ({self.spec.text}, cc {self.device.cc}, interpreter {INTERPRET})")
        self.pdl = (pdl_default(self.spec, self.device, self._mod, artifact.source) if pdl is None
                    else bool(pdl))
        self._cex, self._opts = constexprs(self.spec, self.layout, self.pdl, self._mod)
        self._sm_count: int | None = None
        self._nt = self.layout == "nt"
        self._binds: dict = {}          # (M, N, K) -> bound launch
        self._no_direct: dict = {}      # (M, N, K) -> why that size always uses the JIT
        why = _direct.direct_unsupported()
        if why is None and self._mod is not family_module(self.spec.family):
            # The direct path mirrors the installed family's `launch`; a stored text that differs
            # from it (an older rendering) keeps its own launch through the JIT.
            why = "the kernel source is not the installed family module's"
        self.direct_why = why           # None: launches after a size's first go direct

    def supports(self, problem: Problem) -> bool:
        return problem.layout == self.layout and is_valid(self.spec, problem, self.device)

    def _check(self, a, b, c) -> None:
        for name, t in (("a", a), ("b", b), ("c", c)):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.float16 or t.dim() != 2:
                got = f"{t.dtype} {t.dim()}-d" if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must be a 2-d float16 tensor, got {got}")
            if not t.is_contiguous():
                raise ValueError(f"{name} must be contiguous (stride {tuple(t.stride())})")
        M, K = a.shape
        N = c.shape[1]
        want_b = (N, K) if self._nt else (K, N)
        if c.shape[0] != M or tuple(b.shape) != want_b:
            raise ValueError(f"shapes do not fit layout {self.layout}: a {tuple(a.shape)}, b {tuple(b.shape)} "
                             f"(want {want_b}), c {tuple(c.shape)}")
        if not (a.device == b.device == c.device):
            raise ValueError(f"a, b, c on different devices: {a.device}, {b.device}, {c.device}")
        if not INTERPRET and not c.is_cuda:
            raise ValueError("tensors must be on the GPU (CPU tensors run only under TRITON_INTERPRET=1)")

    def __call__(self, a, b, c, stream=None) -> None:
        self._check(a, b, c)
        if stream is not None:
            with torch.cuda.stream(stream):
                self.unchecked(a, b, c)
        else:
            self.unchecked(a, b, c)

    def unchecked(self, a, b, c) -> None:
        """The launch without the per-call argument checks, for callers that have already made the
        arguments 2-d fp16, dense and of this layout (on the current stream)."""
        M, K = a.shape
        self.bind(M, c.shape[1], K)(a, b, c)

    def bind(self, M: int, N: int, K: int):
        """f(a, b, c): the launch for problem size (M, N, K) (contract: backends/base.py). The first
        call (per device) goes through the JIT; later ones with 16-byte aligned pointers launch the
        compiled kernel directly (backends/triton_direct.py)."""
        key = (M, N, K)
        f = self._binds.get(key)
        if f is None:
            if len(self._binds) >= _MAX_BINDS:
                self._binds.clear()
            f = self._binds[key] = self._make_bound(M, N, K)
        return f

    def direct_status(self, M: int, N: int, K: int) -> str:
        """'direct' once size (M, N, K) launches directly on some device, else why not (yet)."""
        if self.direct_why is not None:
            return f"jit: {self.direct_why}"
        if (M, N, K) in self._no_direct:
            return f"jit: {self._no_direct[(M, N, K)]}"
        f = self._binds.get((M, N, K))
        recs = getattr(f, "records", None)
        return "direct" if recs else "jit: no aligned launch of this size yet"

    # ---- the JIT launch (first call of a size, and every call the direct path cannot take) ----------
    def _jit_launch(self, a, b, c) -> None:
        if self._persistent:
            if INTERPRET:
                sm = 4      # the interpreter has no SMs; a few programs still exercise the tile loop
            else:
                sm = self._sms()
                self._mod.install_allocator()
            self._mod.launch(a, b, c, self.layout, self._cex, self._opts, sm)
        else:
            skey = torch.cuda.current_stream(c.device).cuda_stream if (c.is_cuda and self._cex["SPLIT_K"] > 1) else None
            self._mod.launch(a, b, c, self.layout, self._cex, self._opts, skey)

    def _sms(self) -> int:
        if self._sm_count is None:
            from ..device import current
            self._sm_count = current().sm_count
        return self._sm_count

    # ---- what the direct path passes: mirrors tiled.launch / persistent.launch ------------------------
    def _calls(self, M: int, N: int, K: int, a, b, c, ws) -> list[tuple]:
        """[(jit function, pointer tensors, int arguments, constexprs, options, grid)] of one launch,
        in launch order, with contiguous strides (what the direct path passes every call)."""
        mod, cex, opts = self._mod, self._cex, self._opts
        if self._persistent:
            return [(mod.persistent_kernel, [a, b, c], {"M": M, "N": N, "K": K}, cex, opts,
                     mod.grid(M, N, cex["BM"], cex["BN"], self._sms()))]
        sbk, sbn = (1, K) if self._nt else (N, 1)
        split = cex["SPLIT_K"]
        ints = {"M": M, "N": N, "K": K, "stride_am": K, "stride_ak": 1, "stride_bk": sbk, "stride_bn": sbn,
                "stride_cm": N, "stride_cn": 1}
        out = [(mod.tiled_kernel, [a, b, c, ws if split > 1 else c], ints, cex, opts,
                mod.grid(M, N, cex["BM"], cex["BN"], split))]
        if split > 1:
            red = mod.reduce_args(cex, opts)
            rcex = {k: red.pop(k) for k in ("SPLIT_K", "BLOCK", "PDL") if k in red}
            out.append((mod.splitk_reduce_kernel, [ws, c], {"M": M, "N": N, "stride_cm": N, "stride_cn": 1},
                        rcex, red, (triton.cdiv(M * N, mod.REDUCE_BLOCK),)))
        return out

    def _make_bound(self, M: int, N: int, K: int):
        jit = self._jit_launch

        def first(a, b, c, dev=0):
            """The JIT launch; then, if it can, record the size for the direct path."""
            a2 = a if a.dim() == 2 else a.view(M, K)
            c2 = c if c.dim() == 2 else c.view(M, N)
            jit(a2, b, c2)
            if records is None or dev in records or (M, N, K) in self._no_direct:
                return
            if (a.data_ptr() | b.data_ptr() | c.data_ptr()) & 15 or not _direct.hooks_idle():
                return
            ws = None
            if not self._persistent and self._cex["SPLIT_K"] > 1:
                ws = self._mod.workspace(self._cex["SPLIT_K"] * M * N, c.device, _direct.raw_stream(dev))
            recs = []
            try:
                for fn, ptrs, ints, cex, opts, grid in self._calls(M, N, K, a2, b, c2, ws):
                    r = _direct.record(fn, ptrs, ints, cex, opts, grid)
                    if isinstance(r, str):
                        self._no_direct[(M, N, K)] = r
                        return
                    recs.append(r)
            except Exception as e:  # noqa: BLE001 - the launch is done; this size keeps the JIT
                self._no_direct[(M, N, K)] = f"recording failed: {type(e).__name__}: {e}"
                return
            records[dev] = recs[0] if len(recs) == 1 else tuple(recs)

        if self.direct_why is not None:
            records = None
            first.records = None
            return first
        records: dict = {}      # device index -> record(s)
        if self._persistent:
            launch = _direct.bound(first, records, install=self._mod.install_allocator)
        elif self._cex["SPLIT_K"] > 1:
            launch = _direct.bound(first, records, workspace=self._mod.workspace,
                                   ws_numel=M * N * self._cex["SPLIT_K"])
        else:
            launch = _direct.bound(first, records)
        launch.records = records
        return launch


def load(artifact: Artifact, pdl: bool | None = None) -> TritonKernel:
    if artifact.backend != "triton":
        raise ValueError(f"artifact is for backend {artifact.backend!r}, not triton")
    return TritonKernel(artifact, pdl)
