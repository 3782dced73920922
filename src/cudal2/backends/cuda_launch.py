"""Loading and launching CUDA-backend cubins through the driver API (cuda.bindings.driver).

Every driver call's status is checked; a failure raises LaunchError with the CUDA error name.
Per call the kernel does only: cheap input checks, writing the argument values into ctypes slots
whose pointer array is built once, (wgmma) a dict lookup of cached tensor maps, and cuLaunchKernel
on torch's current stream.

`bind(M, N, K)` (what cudal2.ops' plans call) goes further: each bound size has its own argument
buffer with M, N, K, the grid, block, shared memory and function handles filled in once, so a call
writes three pointers (and the split-K workspace pointer) into it and launches (backends/cuda_bind.py;
the stream family's in cuda_stream.py). The stream comes from torch._C._cuda_getCurrentRawStream
where torch has it (backends.base.stream_getter). Split-K scratch is per stream (backends/workspace.py).
"""
from __future__ import annotations

import ctypes

from ..kernels_cuda import KERNELS
from ..problems import Problem
from ..spec import cluster_split, is_valid
from .base import Artifact, stream_getter
from .cuda_bind import bind_mma, bind_wgmma
from .cuda_stream import StreamLauncher
from .driver import check as check_with, drv, pdl_launch
from .workspace import StreamWorkspace

# Tensor maps kept encoded per kernel, each operand's on its own (A, B and C pointer and shape): a
# 32-layer model's weights of one shape (one B map each) beside the caching allocator's few
# activation and output blocks fit; past it the cache starts again.
_TMAP_CACHE_MAX = 256
_MAX_BINDS = 256              # problem sizes bound per kernel before the table is reset


def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _drv():
    """The driver module (backends/driver.py); a module-level name so tests can stand it in."""
    return drv()


def check(result, what: str):
    """backends/driver.check against this module's driver (a test's stand-in included)."""
    return check_with(result, what, _drv())


def _context(device_index: int) -> None:
    """Make torch's primary context current on this thread (the one torch's tensors live in)."""
    import torch
    torch.cuda.init()
    d = _drv()
    check(d.cuInit(0), "cuInit")
    dev = check(d.cuDeviceGet(device_index), "cuDeviceGet")
    ctx = check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class CudaKernel:
    """A loaded CUDA-backend kernel: `kernel(a, b, c, stream=None)` writes C = A @ B."""

    def __init__(self, artifact: Artifact):
        import torch
        from ..device import current
        self.artifact, self.spec = artifact, artifact.spec
        self.family, self.layout = self.spec.family, artifact.meta["layout"]
        self.device_index = torch.cuda.current_device()
        self.device_info = current(self.device_index)
        _context(self.device_index)
        d = _drv()
        self.module = check(d.cuModuleLoadData(artifact.binary), "cuModuleLoadData")
        self.funcs = {n: check(d.cuModuleGetFunction(self.module, n.encode()), f"cuModuleGetFunction({n})")
                      for n in KERNELS[self.family]}
        self.smem = int(artifact.meta["smem_dynamic"])
        attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        for n, f in self.funcs.items():
            # Raised whenever there is dynamic smem, not only past 48 KB: the default cap is 48 KB
            # minus the kernel's static smem, so a stream split-K spec with exactly 48 KB of ring
            # (+ its 4-byte static flag) failed to launch (H200, 2026-12-04, decode sweep: 15 specs).
            if n != "cudal2_splitk_reduce" and self.smem > 0:
                check(d.cuFuncSetAttribute(f, attr, self.smem), f"cuFuncSetAttribute({n}, {self.smem} B smem)")
        if self.family == "wgmma" and cluster_split(self.spec) and self.spec.split_k > 8:
            # the cluster split-K's cluster is split_k CTAs: past 8 (portable) the kernel must opt in.
            np_attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            check(d.cuFuncSetAttribute(self.funcs["cudal2_wgmma"], np_attr, 1),
                  f"cuFuncSetAttribute(cudal2_wgmma, non-portable cluster of {self.spec.split_k})")
        if self.family == "wgmma":
            # A kernel built with A_TRIM (wgmma.cu's default where CLUSTER == 1) expects A's box M
            # rows tall when M < BM: its module says so by a symbol, so the maps below always match
            # the transaction count.
            self.a_trim = d.cuModuleGetGlobal(self.module, b"cudal2_a_trim")[0] == d.CUresult.CUDA_SUCCESS
            # LITE_CP (wgmma.cu, an experiment): the kernel also takes A's and B's pointers.
            self.lite_cp = d.cuModuleGetGlobal(self.module, b"cudal2_lite_cp")[0] == d.CUresult.CUDA_SUCCESS
            # EPI_WIDE (wgmma.cu: on where the swizzled boxes would be 16 columns, 7 or more of them):
            # C's store box is a whole subtile wide, unswizzled.
            self.epi_wide = d.cuModuleGetGlobal(self.module, b"cudal2_epi_wide")[0] == d.CUresult.CUDA_SUCCESS
        # PDL (every CUDA family's default since 2026-12-06: wgmma.cu, pdl.cuh; the module says so):
        # launched with programmatic stream serialization, so its launch overlaps the previous
        # kernel's tail where no event sits between them (the kernel waits for it itself).
        self.pdl = d.cuModuleGetGlobal(self.module, b"cudal2_pdl")[0] == d.CUresult.CUDA_SUCCESS
        self.sm_count = self.device_info.sm_count     # read once by cudal2.device, not asked again
        self.threads = self.spec.warps * 32
        if self.family == "wgmma" and self.spec.cluster > 1:
            self.cluster_ctas = self._cluster_capacity()
        # Split-K scratch, one pair per stream (backends/workspace.py): mma's partials, wgmma's
        # partials and counters.
        self._ws = StreamWorkspace(torch.device("cuda", self.device_index))
        self._tmaps: dict[tuple, tuple[bytes, ...]] = {}
        # Argument slots and the void* array pointing at them, built once.
        self._u64 = [ctypes.c_uint64() for _ in range(4)]
        self._i32 = [ctypes.c_int() for _ in range(3)]
        if self.family == "wgmma":
            self._maps = [(ctypes.c_ubyte * 128)() for _ in range(3)]
            # (maps A, B, C; C's pointer (lite split-K stores directly); workspace; counters; M, N, K
            # [; A's and B's pointers: LITE_CP])
            self._ab = [ctypes.c_uint64(), ctypes.c_uint64()] if self.lite_cp else ()
            slots = self._maps + [self._u64[1], self._u64[2], self._u64[3]] + self._i32 + list(self._ab)
        else:
            slots = self._u64 + self._i32
        self._args = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(s) for s in slots])
        self._red_args = (ctypes.c_void_p * 4)(*[ctypes.addressof(s) for s in (self._u64[3], self._u64[2],
                                                                                 self._i32[0], self._i32[1])])
        self._binds: dict = {}
        if self.family == "stream":        # decode / skinny: its own launcher (backends/cuda_stream.py)
            self._streamer = StreamLauncher(self)

    def supports(self, problem: Problem) -> bool:
        return problem.layout == self.layout and is_valid(self.spec, problem, self.device_info)

    # ---- per call ---------------------------------------------------------------------------------
    def _shapes(self, a, b, c) -> tuple[int, int, int]:
        import torch
        for name, t in (("a", a), ("b", b), ("c", c)):
            if t.dtype != torch.float16:
                raise ValueError(f"{name} must be float16, got {t.dtype}")
            if t.dim() != 2 or not t.is_contiguous():
                raise ValueError(f"{name} must be a contiguous 2-D tensor, got shape {tuple(t.shape)}")
            if not t.is_cuda:
                raise ValueError(f"{name} must be on the GPU, got device {t.device}")
        M, K = a.shape
        N = b.shape[1] if self.layout == "nn" else b.shape[0]
        want_b = (K, N) if self.layout == "nn" else (N, K)
        if tuple(b.shape) != want_b or tuple(c.shape) != (M, N):
            raise ValueError(f"shapes do not agree for layout {self.layout}: a {tuple(a.shape)}, "
                             f"b {tuple(b.shape)} (want {want_b}), c {tuple(c.shape)} (want {(M, N)})")
        if M == 0 or N == 0 or K == 0:
            raise ValueError(f"empty problem {M}x{N}x{K}: every dimension must be >= 1")
        return M, N, K

    def _stream(self, stream) -> int:
        if stream is None:
            # The current stream of the kernel's own device: its module lives in that context.
            return stream_getter()(self.device_index)
        return stream.cuda_stream if hasattr(stream, "cuda_stream") else int(stream)

    def _launcher(self, d):
        """d.cuLaunchKernel, or (a module built with PDL) its drop-in with programmatic stream
        serialization, made once per kernel."""
        if not self.pdl:
            return d.cuLaunchKernel
        if self._pdl_fn is None:
            self._pdl_fn = pdl_launch(d)
        return self._pdl_fn

    def _launch(self, name: str, grid: tuple[int, int, int], block: int, smem: int, stream: int, args) -> None:
        d = _drv()
        res = self._launcher(d)(self.funcs[name], grid[0], grid[1], grid[2], block, 1, 1, smem, stream,
                                ctypes.addressof(args), 0)
        # Hot path: the error label (about 0.4 us to format) is built only when the launch failed.
        if (res[0] if isinstance(res, tuple) else res) != d.CUresult.CUDA_SUCCESS:
            check(res, f"cuLaunchKernel({name}, grid={grid}, block={block})")

    def __call__(self, a, b, c, stream=None) -> None:
        M, N, K = self._shapes(a, b, c)
        if stream is None:
            self.bind(M, N, K)(a, b, c)
        else:
            self._run(M, N, K, a, b, c, self._stream(stream))

    def unchecked(self, a, b, c) -> None:
        """The launch without argument checks, on the current stream, for callers that have
        already made a, b, c fp16, dense, aligned, non-empty and of this layout (cudal2.ops plans)."""
        M, K = a.shape
        self._run(M, c.shape[1], K, a, b, c, self._stream(None))

    def _run(self, M, N, K, a, b, c, s) -> None:
        self._i32[0].value, self._i32[1].value, self._i32[2].value = M, N, K
        pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
        if self.family == "stream":
            return self._streamer.run(M, N, K, pa, pb, pc, s)
        if self.family == "wgmma":
            self._call_wgmma(M, N, K, b, pa, pb, pc, s)
        else:
            self._call_mma(M, N, K, a, pa, pb, pc, s)

    def _call_mma(self, M, N, K, a, pa, pb, pc, s) -> None:
        sp = self.spec
        vec = K % 8 == 0 and N % 8 == 0 and (pa | pb | pc) % 16 == 0
        self._u64[0].value, self._u64[1].value, self._u64[2].value = pa, pb, pc
        split = sp.split_k
        if split > 1:
            self._u64[3].value = self._ws.pointers(s, split * M * N)[0]
        else:
            self._u64[3].value = 0
        tiles = _cdiv(M, sp.bm) * _cdiv(N, sp.bn)
        name = "cudal2_mma_vec" if vec else "cudal2_mma_scalar"
        self._launch(name, (tiles, 1, split), self.threads, self.smem, s, self._args)
        if split > 1:
            blocks = min(_cdiv(M * N, 256), self.sm_count * 16)
            self._launch("cudal2_splitk_reduce", (blocks, 1, 1), 256, 0, s, self._red_args)

    def _tensor_maps(self, M, N, K, bshape: tuple, pa, pb) -> tuple[bytes, bytes]:
        """A's and B's tensor maps (each encoded once per pointer and shape: `_a_map`, `_b_map`)."""
        return self._a_map(M, K, pa), self._b_map(N, K, bshape, pb)

    def _a_map(self, M, K, pa) -> bytes:
        """A's tensor map, cached on its own: at decode A is a fresh activation every step while B
        is the same weight, so a moved A must not re-encode B's map (one cuTensorMapEncodeTiled
        a call, not two), and a model's many weights of one shape share the few activation blocks
        the caching allocator hands out (a cache of (A, B) pairs held layers x blocks of them)."""
        key = ("a", pa, M, K)
        hit = self._tmaps.get(key)
        if hit is not None:
            return hit
        if pa % 16:
            raise ValueError("wgmma (TMA) needs a 16-byte aligned a")
        if K % 8:
            raise ValueError(f"wgmma (TMA) needs K % 8 == 0 (16-byte rows of a), got K={K}")
        sp = self.spec
        # A 2-CTA cluster loads the shared tile in halves, one per CTA (kernels_cuda/wgmma.cu).
        ca = sp.cluster if sp.cluster_shares_a else 1
        # K-major boxes are one swizzle atom wide (wgmma.cu's KA: 64 columns, 32 at bk 32); a bk 128
        # k-tile is two such boxes.
        return self._keep(key, _encode(pa, K, M, min(sp.bk, 64), a_box_rows(sp.bm // ca, M, self.a_trim)))

    def _b_map(self, N, K, bshape: tuple, pb) -> bytes:
        """B's tensor map, cached on its own (see `_a_map`); nn's B box is bk k-rows tall."""
        key = ("b", pb, bshape, N, K)
        hit = self._tmaps.get(key)
        if hit is not None:
            return hit
        if pb % 16:
            raise ValueError("wgmma (TMA) needs a 16-byte aligned b")
        if K % 8 or N % 8:
            raise ValueError(f"wgmma (TMA) needs N % 8 == 0 and K % 8 == 0, got N={N} K={K}")
        sp = self.spec
        cb = 1 if sp.cluster_shares_a else sp.cluster
        tb = (_encode(pb, K, N, min(sp.bk, 64), sp.bn // cb) if self.layout == "nt"
              else _encode(pb, N, K, sp.nn_b_cols, sp.bk // cb))
        return self._keep(key, tb)

    def _keep(self, key, tmap: bytes) -> bytes:
        if len(self._tmaps) >= _TMAP_CACHE_MAX:
            self._tmaps.clear()
        self._tmaps[key] = tmap
        return tmap

    def _c_map(self, M, N, pc) -> bytes:
        """C's tensor map: the epilogue's store box, one warpgroup's rows by epi_cols columns,
        swizzled as staged. Cached on its own: a fresh output each call (the caching allocator
        alternates blocks) must not re-copy A's and B's maps."""
        key = ("c", pc, M, N)
        hit = self._tmaps.get(key)
        if hit is not None:
            return hit
        if pc % 16:
            raise ValueError("wgmma (TMA) needs a 16-byte aligned c")
        sp = self.spec
        crows = sp.bm if sp.pingpong else sp.bm // sp.consumers
        return self._keep(key, _encode(pc, N, M, sp.bn // sp.subtile, crows, swizzled=False) if self.epi_wide
                          else _encode(pc, N, M, sp.epi_cols, crows))

    # CTAs a persistent cluster launch may have resident at once (None: one per SM).
    cluster_ctas: int | None = None
    # wgmma built with A_TRIM / LITE_CP / EPI_WIDE, any family with PDL (read off the module when loaded).
    a_trim: bool = False
    lite_cp: bool = False
    epi_wide: bool = False
    pdl: bool = False
    _pdl_fn = None                  # PDL: the cuLaunchKernel drop-in (driver.pdl_launch), made on first use
    _ab: tuple | list = ()          # LITE_CP: the slots of A's and B's pointers

    def _cluster_capacity(self) -> int:
        """CTAs in the clusters that fit on the device at once (cuOccupancyMaxActiveClusters): a
        persistent grid of more clusters than fit would run its last ones as a second wave. (On the
        H200 all 66 pairs fit; the cluster slowdown seen there was the slot release's semantics,
        kernels_cuda/wgmma.cu.) A failed query keeps one CTA per SM."""
        d, cl = _drv(), self.spec.cluster
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = cl * (self.sm_count // cl), 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.threads, 1, 1
        cfg.sharedMemBytes, cfg.numAttrs = self.smem, 0    # cluster size: compiled in
        try:
            n = int(check(d.cuOccupancyMaxActiveClusters(self.funcs["cudal2_wgmma"], cfg),
                          "cuOccupancyMaxActiveClusters"))
        except Exception:
            return self.sm_count // cl * cl
        return max(1, min(n, self.sm_count // cl)) * cl

    def _global_split(self) -> bool:
        """wgmma split-K through a global workspace (ping-pong, cluster=2); lite and cooperative
        reduce their K slices inside a cluster and need none."""
        return self.spec.split_k > 1 and not cluster_split(self.spec)

    def _cluster_tiles(self, M: int, N: int) -> tuple[int, int]:
        """The tile grid with a 2-CTA cluster's shared dimension halved (rounded up): the pairs."""
        sp, cl = self.spec, self.spec.cluster
        if sp.cluster_shares_a:
            return _cdiv(M, sp.bm), _cdiv(_cdiv(N, sp.bn), cl)
        return _cdiv(_cdiv(M, sp.bm), cl), _cdiv(N, sp.bn)

    def _grid_wgmma(self, M: int, N: int) -> int:
        sp, cl = self.spec, self.spec.cluster
        cm, cn = self._cluster_tiles(M, N)
        units = cm * cn * sp.split_k                                         # (cluster tile, K slice)
        if sp.warp_spec == 0 or cluster_split(sp):
            return units                  # lite, cluster split-K: one unit per CTA, no persistent loop
        ctas = self.cluster_ctas or self.sm_count                            # persistent: one CTA per SM
        return max(1, min(ctas // cl, units)) * cl

    def _splitk_workspace(self, M: int, N: int, stream: int) -> tuple[int, int]:
        """wgmma split-K through a global workspace: this stream's (partials pointer, counters
        pointer), one fp32 bm x bn partial per (tile, K slice) and one int32 counter per tile and
        consumer warpgroup (ping-pong: per tile, its slices may land on either warpgroup). The
        counters are zeroed when allocated and the kernel resets each one it uses, so every size
        finds them at 0 (backends/workspace.py has the rest of the rules)."""
        sp = self.spec
        cm, cn = self._cluster_tiles(M, N)
        tiles = cm * cn * sp.cluster         # every CTA's tile, partners past the edge included
        slots = tiles * (1 if sp.pingpong else sp.consumers)
        return self._ws.pointers(stream, tiles * sp.split_k * sp.bm * sp.bn, slots)

    def _call_wgmma(self, M, N, K, b, pa, pb, pc, s) -> None:
        ta, tb = self._tensor_maps(M, N, K, tuple(b.shape), pa, pb)
        for slot, m in zip(self._maps, (ta, tb, self._c_map(M, N, pc))):
            ctypes.memmove(slot, m, 128)
        self._u64[1].value = pc
        if self._ab:
            self._ab[0].value, self._ab[1].value = pa, pb
        if self._global_split():
            self._u64[2].value, self._u64[3].value = self._splitk_workspace(M, N, s)
        else:
            self._u64[2].value = self._u64[3].value = 0
        self._launch("cudal2_wgmma", (self._grid_wgmma(M, N), 1, 1), self.threads, self.smem, s, self._args)

    # ---- bound sizes (cudal2.ops plans) --------------------------------------------------------------
    def bind(self, M: int, N: int, K: int):
        """f(a, b, c): the launch for size (M, N, K) with a pre-packed argument buffer (contract:
        backends/base.py); the same kernels, grids and arguments as `_run` computes per call."""
        key = (M, N, K)
        f = self._binds.get(key)
        if f is None:
            if len(self._binds) >= _MAX_BINDS:
                self._binds.clear()
            if self.family == "stream":
                f = self._binds[key] = self._streamer.bind(M, N, K)
                return f
            make = bind_wgmma if self.family == "wgmma" else bind_mma     # backends/cuda_bind.py
            f = self._binds[key] = make(self, M, N, K, _drv(), stream_getter())
        return f


def a_box_rows(rows: int, M: int, trim: bool) -> int:
    """The height of A's TMA box: the tile's rows, or M where the kernel trims A (A_TRIM) and M is
    shorter; wgmma.cu's a_tx_bytes counts the same rows."""
    return M if trim and M < rows else rows


def _encode(ptr: int, inner: int, outer: int, box_inner: int, box_outer: int, swizzled: bool = True) -> bytes:
    """A 2-D fp16 tensor map (row-major [outer, inner]), zero fill out of bounds; the swizzle spans
    the box's row (128, 64 or 32 bytes), which is what the kernels' smem layouts assume; unswizzled
    (EPI_WIDE's C box: any multiple of 8 columns up to 256) where `swizzled` is False."""
    d = _drv()
    sw = d.CUtensorMapSwizzle
    swizzle = ({128: sw.CU_TENSOR_MAP_SWIZZLE_128B, 64: sw.CU_TENSOR_MAP_SWIZZLE_64B,
                32: sw.CU_TENSOR_MAP_SWIZZLE_32B}[box_inner * 2] if swizzled else sw.CU_TENSOR_MAP_SWIZZLE_NONE)
    tmap = check(d.cuTensorMapEncodeTiled(
        d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, ptr,
        [d.cuuint64_t(inner), d.cuuint64_t(outer)], [d.cuuint64_t(inner * 2)],
        [d.cuuint32_t(box_inner), d.cuuint32_t(box_outer)], [d.cuuint32_t(1), d.cuuint32_t(1)],
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle,
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), f"cuTensorMapEncodeTiled({outer}x{inner})")
    return ctypes.string_at(tmap.getPtr(), 128)
