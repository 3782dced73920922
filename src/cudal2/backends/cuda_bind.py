"""Bound launches of the mma and wgmma families: `CudaKernel.bind(M, N, K)` (what cudal2.ops' plans call).

Each bound size gets its own argument buffer with M, N, K, the grid, block, shared memory and the
function handles filled in once, so a call writes the pointers that moved (three operands, the
split-K workspace where another size or stream replaced it) and launches: the same kernels, grids
and arguments as CudaKernel's per-call path (`_run`), which tests/test_direct_launch.py compares
launch by launch on a stand-in driver. The stream family binds in backends/cuda_stream.py.

`d` is the driver module and `stream` the current-stream getter, both passed in by
backends/cuda_launch.py so a test's stand-ins reach these launches too. Each launch is a
`driver.fixed_launch` (function, grid, block and shared memory fixed at bind; PDL or not by the
module), so a call does no lookup to launch.
"""
from __future__ import annotations

import ctypes

from .driver import check, fixed_launch


_UNSEEN = object()      # no workspace pair read yet (a stream's pair may be None: not made yet)


def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def bind_mma(k, M: int, N: int, K: int, d, stream):
    """f(a, b, c) for the mma family at one size: the vector or scalar entry per call (alignment),
    then (split-K) the reduce launch."""
    sp = k.spec
    u64 = [ctypes.c_uint64() for _ in range(4)]
    i32 = [ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K)]
    slots = u64 + i32
    args = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(x) for x in slots])
    red = (ctypes.c_void_p * 4)(*[ctypes.addressof(x) for x in (u64[3], u64[2], i32[0], i32[1])])
    a_args, a_red = ctypes.addressof(args), ctypes.addressof(red)
    f_vec, f_scalar = k.funcs["cudal2_mma_vec"], k.funcs["cudal2_mma_scalar"]
    shape_vec = K % 8 == 0 and N % 8 == 0
    split = sp.split_k
    g0 = _cdiv(M, sp.bm) * _cdiv(N, sp.bn)
    threads, smem, need = k.threads, k.smem, split * M * N
    ok, idx = d.CUresult.CUDA_SUCCESS, k.device_index
    go_vec, go_scalar = (fixed_launch(d, f, (g0, 1, split), (threads, 1, 1), smem, k.pdl) for f in (f_vec, f_scalar))
    ws, last = k._ws, [_UNSEEN]
    if split > 1:
        r0 = min(_cdiv(M * N, 256), k.sm_count * 16)
        go_red = fixed_launch(d, k.funcs["cudal2_splitk_reduce"], (r0, 1, 1), (256, 1, 1), 0, k.pdl)

    def run(a, b, c) -> None:
        pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
        u64[0].value, u64[1].value, u64[2].value = pa, pb, pc
        s = stream(idx)
        # This stream's partials; re-read when the stream changed or another size grew them.
        if split > 1 and ws.pairs.get(s) is not last[0]:
            u64[3].value = ws.pointers(s, need)[0]
            last[0] = ws.pairs[s]
        res = (go_vec if shape_vec and not (pa | pb | pc) % 16 else go_scalar)(s, a_args, 0)
        if res[0] != ok:
            check(res, f"cuLaunchKernel(mma {M}x{N}x{K}, grid=({g0}, 1, {split}), block={threads})", d)
        if split > 1:
            res = go_red(s, a_red, 0)
            if res[0] != ok:
                check(res, f"cuLaunchKernel(cudal2_splitk_reduce, grid=({r0}, 1, 1), block=256)", d)
    run.keep = (args, red, slots)   # bare addresses in the argument arrays: keep every slot alive
    return run


def bind_wgmma(k, M: int, N: int, K: int, d, stream):
    """f(a, b, c) for the wgmma family at one size: each operand's tensor map rewritten only when its
    pointer moved (a fresh activation or output each call must not re-copy the others')."""
    maps = [(ctypes.c_ubyte * 128)() for _ in range(3)]
    c_slot, ws_slot, cnt_slot = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
    i32 = [ctypes.c_int(M), ctypes.c_int(N), ctypes.c_int(K)]
    ab = [ctypes.c_uint64(), ctypes.c_uint64()] if k.lite_cp else []
    slots = maps + [c_slot, ws_slot, cnt_slot] + i32 + ab
    args = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(x) for x in slots])
    a_args = ctypes.addressof(args)
    g0 = k._grid_wgmma(M, N)
    threads, smem = k.threads, k.smem
    go = fixed_launch(d, k.funcs["cudal2_wgmma"], (g0, 1, 1), (threads, 1, 1), smem, k.pdl)
    ok, idx = d.CUresult.CUDA_SUCCESS, k.device_index
    bshape = (K, N) if k.layout == "nn" else (N, K)
    split, ws = k._global_split(), k._ws
    last = [None, None, None, _UNSEEN]      # A's, B's and C's pointers (as maps), the workspace pair

    def run(a, b, c) -> None:
        pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
        # Maps encode the operand pointers: rewrite the one that moved (at decode A moves every
        # step and B, the weight, stays).
        if last[0] != pa:
            ctypes.memmove(maps[0], k._a_map(M, K, pa), 128)
            if ab:
                ab[0].value = pa
            last[0] = pa
        if last[1] != pb:
            ctypes.memmove(maps[1], k._b_map(N, K, bshape, pb), 128)
            if ab:
                ab[1].value = pb
            last[1] = pb
        if last[2] != pc:
            ctypes.memmove(maps[2], k._c_map(M, N, pc), 128)
            c_slot.value = pc
            last[2] = pc
        s = stream(idx)
        # This stream's workspace; re-read when the stream changed or another size grew it (a pair
        # only grows, so the same one still fits).
        if split and ws.pairs.get(s) is not last[3]:
            ws_slot.value, cnt_slot.value = k._splitk_workspace(M, N, s)
            last[3] = ws.pairs[s]
        res = go(s, a_args, 0)
        if res[0] != ok:
            check(res, f"cuLaunchKernel(cudal2_wgmma {M}x{N}x{K}, grid=({g0}, 1, 1), block={threads})", d)
    run.keep = (args, slots)        # bare addresses in args: keep every slot object alive
    return run


__all__ = ["bind_mma", "bind_wgmma"]
