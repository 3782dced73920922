"""splitk_serial: split-K in one launch; the last program of each output tile reduces it.

Why: on the grid's starved shapes (output tiles cannot fill the SMs, K >= 2048) the search's best
kernel stayed at 0.77x of best-cublas with the tiled family's split-K (2026-12-03, H200, 135
shapes), which is two launches: the split programs write fp32 partials, then a reduce kernel adds
them. On 9-20 us kernels the second launch and the pass between them are a large share of the time.
Here each program writes its fp32 partial to its slice of the workspace [SPLIT_K, M, N] and counts
itself in a per-tile int32 counter; the program that counts last adds the SPLIT_K slices and
stores C. One launch, no extra pass over C.

Deterministic: the last program adds the slices in the fixed order 0..SPLIT_K-1 whichever program
arrives last, so the same inputs give bit-identical C (the checker's fresh-input check and the
store's duplicate detection rely on that; tiled.py's docstring says why not atomics on C).

Memory ordering: every thread's partial must be in memory before the count, and the counting
program must see the other programs' partials. A CTA barrier (`tl.debug_barrier`) orders the
threads' stores before the one-thread acq_rel atomic at GPU scope (the release covers what the
barrier made it observe); the partials are read with `.cg` (L2, never a stale L1 line).

Counters reset themselves: the last program writes its tile's counter back to 0, so a buffer
zeroed once at allocation serves every later launch on that (device, stream) with no memset.

Status: measured, and not a family. On the H200 (2026-12-03, `bench/splitk_serial.py`, 12 starved
shapes, 6 tiles x splits 2-16, both ways with the same knobs, interleaved with the four nn
baselines; bench/results/h200-sm90/splitk_serial_eae8105.*) one launch is *slower* than two: 0.939x
geomean at the same knobs (0.907-0.997x), best per shape 0.780x of best-cublas against 0.816x for
two launches. The second launch costs little when it is queued behind the first on the stream
(64x64x16384: 12.0 vs 12.4 us), while here the reduction runs in the last-arriving program of each
tile only (as many CTAs as tiles, each reading SPLIT_K slices), where the reduce kernel spreads it
over the whole card. Kept as the measured alternative (the benchmark reproduces the finding); a
family would add a `family` value, which `SpecPolicy.load` and a resumed search absorb (rl/vocab.py),
and it must stay its own module: a registry entry's hash covers its family module's whole source.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from cudal2.kernels_triton import tiled   # absolute: a rendered copy of this file is imported standalone

KNOBS = {"bm": "BM", "bn": "BN", "bk": "BK", "group_m": "GROUP_M", "split_k": "SPLIT_K"}
LAUNCH_OPTIONS = {"warps": "num_warps", "stages": "num_stages"}


@triton.jit
def splitk_serial_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K,
                         stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                         GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr):
    pid = tl.program_id(0)          # the output tile (its counter's index)
    pid_k = tl.program_id(1)        # the K slice
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    # GROUP_M swizzle, as in tiled.py: row-tiles of a group share B tiles in L2.
    width = GROUP_M * num_pid_n
    group_id = pid // width
    first_m = group_id * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size)
    pid_n = (pid % width) // group_size

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_am = tl.max_contiguous(tl.multiple_of(offs_m % M, BM), BM)
    offs_bn = tl.max_contiguous(tl.multiple_of(offs_n % N, BN), BN)
    offs_k = tl.arange(0, BK)

    k_tiles = tl.cdiv(K, BK)
    per_split = tl.cdiv(k_tiles, SPLIT_K)
    k_first = pid_k * per_split
    k_last = min(k_first + per_split, k_tiles)    # the last split may hold fewer (or no) tiles
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + (k_first * BK + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_first * BK + offs_k)[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kt in range(k_first, k_last):
        k_left = K - kt * BK
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk

    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    slice_elems = tl.cast(M, tl.int64) * N        # int64: SPLIT_K * M * N passes 2**31 at large shapes
    tile_offs = offs_m[:, None] * N + offs_n[None, :]
    tl.store(ws_ptr + pid_k * slice_elems + tile_offs, acc, mask=mask)
    tl.debug_barrier()                             # all threads' partials stored before the count
    arrived = tl.atomic_add(cnt_ptr + pid, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        total = tl.zeros((BM, BN), dtype=tl.float32)
        for s in tl.static_range(SPLIT_K):        # fixed order: deterministic
            total += tl.load(ws_ptr + s * slice_elems + tile_offs, mask=mask, other=0.0, cache_modifier=".cg")
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, total.to(tl.float16), mask=mask)
        tl.atomic_xchg(cnt_ptr + pid, 0)           # ready for the next launch


# ---- counters ----------------------------------------------------------------------------------------
_COUNTERS: dict[tuple, torch.Tensor] = {}


def counters(tiles: int, device: torch.device, stream_key=None) -> torch.Tensor:
    """Zeroed int32 per-tile counters, one buffer per (device, stream), grown on demand. Every launch
    leaves them at zero, so they are zeroed once, here, and never again."""
    key = (device, stream_key)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < tiles:
        buf = torch.zeros(max(tiles, 1), dtype=torch.int32, device=device)
        _COUNTERS[key] = buf
    return buf


# ---- launcher ----------------------------------------------------------------------------------------
def launch(a, b, c, layout: str, constexprs: dict, options: dict, stream_key=None) -> None:
    """C = A @ B for `layout`; `constexprs` holds BM, BN, BK, GROUP_M, SPLIT_K (>= 2); `options` the
    launch options (num_warps, num_stages). Operand checks are the caller's, as for tiled.launch."""
    M, K = a.shape
    N = c.shape[1]
    split = constexprs["SPLIT_K"]
    if split < 2:
        raise ValueError("splitk_serial needs SPLIT_K >= 2 (SPLIT_K = 1 is the tiled family)")
    sbk, sbn = (b.stride(0), b.stride(1)) if layout == "nn" else (b.stride(1), b.stride(0))
    g = tiled.grid(M, N, constexprs["BM"], constexprs["BN"], split)
    ws = tiled.workspace(split * M * N, c.device, stream_key)
    cnt = counters(g[0], c.device, stream_key)
    splitk_serial_kernel[g](a, b, c, ws, cnt, M, N, K, a.stride(0), a.stride(1), sbk, sbn,
                            c.stride(0), c.stride(1), **constexprs, **options)


def reference(a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """fp32 reference of what this kernel computes (before the fp16 rounding of the output)."""
    return tiled.reference(a, b, layout)
