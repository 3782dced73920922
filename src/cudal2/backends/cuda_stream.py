"""Launching the CUDA `stream` family (kernels_cuda/stream.cu): decode / skinny GEMMs, min(M, N) <= 64,
and any shape under 1 GFLOP (more tokens take more CTAs along grid.y).

CudaKernel hands a stream-family kernel to `StreamLauncher`; per call it only picks the entry point
(`cudal2_stream_b` when M <= N: B is the large operand; `cudal2_stream_a` otherwise), writes the
pointers into a pre-built argument buffer and launches on the caller's stream.

Split-K is reduced inside the kernel: each CTA writes an fp32 partial to a workspace and the last
CTA of an output tile (per-tile u32 counter) sums the partials in split order and resets its
counter. The workspace and counters are allocated once per (device, stream) -- the counters zeroed
once, at allocation -- and grown only when a larger problem needs more; so two streams never share
counters, and a call allocates nothing once its size has been seen on that stream.
"""
from __future__ import annotations

import ctypes

from ..spec import stream_smem
from .base import stream_getter
from .driver import check, drv, fixed_launch
from .workspace import StreamWorkspace

ENTRY_B, ENTRY_A = "cudal2_stream_b", "cudal2_stream_a"


def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def plan(spec, M: int, N: int, K: int) -> tuple[str, tuple[int, int, int]]:
    """(entry point, grid) for a problem: grid = (tiles of the large dim, tiles of the tokens, split_k)."""
    big_b = M <= N
    R, T = (N, M) if big_b else (M, N)
    return (ENTRY_B if big_b else ENTRY_A), (_cdiv(R, spec.bm), _cdiv(T, spec.bn), spec.split_k)


class StreamLauncher:
    def __init__(self, kernel):
        self.k = kernel
        self.spec, self.layout = kernel.spec, kernel.layout
        smem = stream_smem(self.spec.to_dict(), self.layout)      # both entries use the same
        self.smem = {ENTRY_B: smem, ENTRY_A: smem}
        self.threads = self.spec.warps * 32
        # Workspace and counters per stream (backends/workspace.py: grown by doubling, old pairs kept).
        self.ws = StreamWorkspace(f"cuda:{kernel.device_index}")
        # The unbound path's argument slots (A, B, C, workspace, counters, M, N, K), built once.
        self._u64 = [ctypes.c_uint64() for _ in range(5)]
        self._i32 = [ctypes.c_int() for _ in range(3)]
        slots = self._u64 + self._i32
        self._args = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(x) for x in slots])

    def buffers(self, stream: int, grid: tuple[int, int, int]) -> tuple[int, int]:
        """(workspace pointer, counters pointer) for this stream, large enough for `grid`."""
        if self.spec.split_k == 1:
            return 0, 0
        tiles = grid[0] * grid[1]
        return self.ws.pointers(stream, grid[2] * tiles * self.spec.bm * self.spec.bn, tiles)

    # ---- per call ---------------------------------------------------------------------------------
    def run(self, M: int, N: int, K: int, pa: int, pb: int, pc: int, stream: int) -> None:
        if (pa | pb) % 16:
            raise ValueError("family=stream loads A and B 16 bytes at a time: both must be 16-byte aligned")
        name, grid = plan(self.spec, M, N, K)
        pw, pn = self.buffers(stream, grid)
        u, i = self._u64, self._i32
        u[0].value, u[1].value, u[2].value, u[3].value, u[4].value = pa, pb, pc, pw, pn
        i[0].value, i[1].value, i[2].value = M, N, K
        self.k._launch(name, grid, self.threads, self.smem[name], stream, self._args)

    def bind(self, M: int, N: int, K: int):
        """f(a, b, c) for one size: entry, grid and argument buffer fixed once; per call three
        pointers and (split-K) a dict lookup of this stream's workspace."""
        d = drv()
        u64 = [ctypes.c_uint64() for _ in range(5)]
        slots = u64 + [ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K)]
        args = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(x) for x in slots])
        a_args = ctypes.addressof(args)
        name, (gx, gy, gz) = plan(self.spec, M, N, K)
        f, threads, smem = self.k.funcs[name], self.threads, self.smem[name]
        go = fixed_launch(d, f, (gx, gy, gz), (threads, 1, 1), smem, self.k.pdl)
        ok, idx = d.CUresult.CUDA_SUCCESS, self.k.device_index
        stream = stream_getter()
        split = self.spec.split_k > 1
        bufs = self.buffers

        def run(a, b, c) -> None:
            pa, pb = a.data_ptr(), b.data_ptr()
            if (pa | pb) & 15:         # a misaligned cp.async would be a sticky CUDA error: refuse
                raise ValueError("family=stream loads A and B 16 bytes at a time: both must be 16-byte aligned")
            u64[0].value, u64[1].value, u64[2].value = pa, pb, c.data_ptr()
            s = stream(idx)
            if split:
                u64[3].value, u64[4].value = bufs(s, (gx, gy, gz))
            res = go(s, a_args, 0)
            if res[0] != ok:
                check(res, f"cuLaunchKernel({name} {M}x{N}x{K}, grid=({gx}, {gy}, {gz}), block={threads})")
        run.keep = (args, slots)        # bare addresses in args: keep every slot object alive
        return run


def bytes_moved(M: int, N: int, K: int) -> int:
    """PROTOCOL's bytes of a GEMM: 2(MK + KN + MN)."""
    return 2 * (M * K + K * N + M * N)


__all__ = ["StreamLauncher", "plan", "bytes_moved", "ENTRY_A", "ENTRY_B"]
