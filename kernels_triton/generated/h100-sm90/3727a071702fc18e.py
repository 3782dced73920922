"""tiled: the classic one-tile-per-program Triton HGEMM, with an L2 swizzle and split-K.

C[M,N] = A[M,K] @ B in fp16 with fp32 accumulation. B is read through its strides, so one kernel
serves both layouts with no transpose copy: nn passes B [K,N] as (stride_bk, stride_bn) = (N, 1),
nt passes B [N,K] as (1, K). Triton specialises on strides equal to 1, so each layout still gets
its own machine code.

Masking: rows of A and columns of B beyond M / N are wrapped back into range with a modulo (they
load real memory, never past the buffer, and their products land only in masked-off outputs), the
K tail is masked to zero, and the store is masked on M and N. Any M, N, K >= 1 is therefore correct
without padding copies.

Split-K reduction: an fp32 workspace [SPLIT_K, M, N] plus a second reduce kernel, not atomics.
Reasons: (1) deterministic — the partial sums are added in a fixed order, so the same inputs give
bit-identical C on every run, which the checker's fresh-input check and the store's duplicate
detection rely on; (2) fp16 atomics would round every partial sum to fp16 (fp32 accumulation is the
contract), and fp32 atomics would need an fp32 copy of C, zeroed per call, plus a cast pass anyway —
the same two passes as the workspace with the nondeterminism added. The workspace is allocated once
per device and stream and grown on demand (see `workspace`), so a launch allocates nothing.

PDL (programmatic dependent launch; sm_90+, compiled; on where the rendered text's footer says so,
backends/triton_families.py's PDL_BY_DEFAULT and PDL_LINE, or as load's pdl asks; the backend sets
the PDL constexpr and Triton's `launch_pdl` option together): both kernels wait for the grids
before them in the stream (gdc_wait: complete, their writes visible) before any load or store, and
are launched with programmatic stream serialization, so a launch overlaps the previous kernel's
tail where no event sits between calls. No trigger: dependents launch as the grid exits, as in the
CUDA families (kernels_cuda/pdl.cuh). H100 2026-12-06 (run 131): 1.23x best-cublas on the graph
clock over the 13 filed tiled kernels where the build without ran 1.07x.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

try:        # triton >= 3.4 (the card's 3.6, CI's 3.9); without it the backend never sets PDL
    from triton.language.extra.cuda import gdc_wait
    HAS_GDC = True
except ImportError:  # pragma: no cover
    HAS_GDC = False

    @triton.jit
    def gdc_wait():
        pass

# The knobs this family reads from a KernelSpec (spec field -> constexpr); warps and stages are
# launch options (num_warps, num_stages), not kernel arguments.
KNOBS = {"bm": "BM", "bn": "BN", "bk": "BK", "group_m": "GROUP_M", "split_k": "SPLIT_K"}
LAUNCH_OPTIONS = {"warps": "num_warps", "stages": "num_stages"}
REDUCE_BLOCK = 1024     # elements per program of the split-K reduce; a plain streaming kernel


@triton.jit
def tiled_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, M, N, K,
                 stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, PDL: tl.constexpr = False):
    if PDL:         # before any global access (the header: PDL)
        gdc_wait()
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    # GROUP_M swizzle: GROUP_M row-tiles sweep the columns together, so the B tiles they share
    # stay in L2 while the group passes over them.
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
    if SPLIT_K == 1:
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(tl.float16), mask=mask)
    else:
        # Slice pid_k of the contiguous fp32 workspace; the reduce kernel adds the slices.
        # int64: SPLIT_K * M * N passes 2**31 at large shapes.
        w_ptrs = ws_ptr + pid_k * tl.cast(M, tl.int64) * N + offs_m[:, None] * N + offs_n[None, :]
        tl.store(w_ptrs, acc, mask=mask)


@triton.jit
def splitk_reduce_kernel(ws_ptr, c_ptr, M, N, stride_cm, stride_cn,
                         SPLIT_K: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    if PDL:         # the slices the launch before it wrote
        gdc_wait()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    slice_elems = tl.cast(M, tl.int64) * N      # int64: SPLIT_K * M * N passes 2**31 at large shapes
    for s in tl.static_range(SPLIT_K):          # fixed order: deterministic
        acc += tl.load(ws_ptr + s * slice_elems + offs, mask=mask, other=0.0)
    row = offs // N
    col = offs % N
    tl.store(c_ptr + row * stride_cm + col * stride_cn, acc.to(tl.float16), mask=mask)


# ---- workspace ---------------------------------------------------------------------------------------
_WORKSPACE: dict[tuple, torch.Tensor] = {}


def workspace(numel: int, device: torch.device, stream_key=None) -> torch.Tensor:
    """A cached fp32 buffer of at least `numel` elements, one per (device, stream), grown on demand.

    Keyed by stream too, so two streams never race on one buffer; growing frees the old buffer
    through torch's stream-ordered caching allocator, so an in-flight kernel keeps its memory.
    """
    key = (device, stream_key)
    buf = _WORKSPACE.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(max(numel, 1), dtype=torch.float32, device=device)
        _WORKSPACE[key] = buf
    return buf


# ---- launcher ----------------------------------------------------------------------------------------
def grid(M: int, N: int, BM: int, BN: int, SPLIT_K: int) -> tuple[int, int]:
    return (triton.cdiv(M, BM) * triton.cdiv(N, BN), SPLIT_K)


def launch(a, b, c, layout: str, constexprs: dict, options: dict, stream_key=None) -> None:
    """C = A @ B for `layout`; `constexprs` holds BM, BN, BK, GROUP_M, SPLIT_K (and PDL, with
    `launch_pdl` in `options`: the reduce launch follows); `options` the launch options (num_warps,
    num_stages). Inputs are assumed checked by the caller (the Kernel)."""
    M, K = a.shape
    N = c.shape[1]
    sbk, sbn = (b.stride(0), b.stride(1)) if layout == "nn" else (b.stride(1), b.stride(0))
    split = constexprs["SPLIT_K"]
    ws = workspace(split * M * N, c.device, stream_key) if split > 1 else c
    g = grid(M, N, constexprs["BM"], constexprs["BN"], split)
    tiled_kernel[g](a, b, c, ws, M, N, K, a.stride(0), a.stride(1), sbk, sbn, c.stride(0), c.stride(1),
                    **constexprs, **options)
    if split > 1:
        splitk_reduce_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](
            ws, c, M, N, c.stride(0), c.stride(1), **reduce_args(constexprs, options))


def reduce_args(constexprs: dict, options: dict) -> dict:
    """The split-K reduce launch's constexprs and options (PDL as the tiled launch's)."""
    pdl = {"PDL": constexprs["PDL"]} if "PDL" in constexprs else {}
    if constexprs.get("PDL"):
        pdl["launch_pdl"] = True
    return {"SPLIT_K": constexprs["SPLIT_K"], "BLOCK": REDUCE_BLOCK, "num_warps": 4,
            "enable_fp_fusion": True, **pdl}


def reference(a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """fp32 reference of what this family computes (before the fp16 rounding of the output)."""
    bb = b.float() if layout == "nn" else b.float().t()
    return a.float() @ bb

# ---- cudal2: the spec this text was rendered for ----
SPEC = 'backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=3 group_m=8 split_k=1 subtile=1 warp_spec=0 cluster=1'
LAYOUT = 'nn'
CONSTEXPRS = {'BM': 64, 'BN': 64, 'BK': 64, 'GROUP_M': 8, 'SPLIT_K': 1}
OPTIONS = {'num_warps': 4, 'num_stages': 3, 'enable_fp_fusion': True}
PDL = True
