"""persistent: a Hopper HGEMM with one program per SM looping over output tiles, fed by TMA.

C[M,N] = A[M,K] @ B in fp16 with fp32 accumulation. The grid is min(SMs, tiles); each program walks
the tiles tile_id = pid, pid + grid, ... in GROUP_M-swizzled order, so the programs resident at one
moment share A rows and B columns in L2. The loop stride is `tl.num_programs(0)`, not a constexpr
SM count, so the kernel compiles on a CPU worker that has no card to count.

TMA tensor descriptors are built on the device (`tl.make_tensor_descriptor`), not on the host
(`triton.tools.tensor_descriptor.TensorDescriptor`). Both exist in triton 3.6 and 3.9; the host
one encodes three descriptors (a driver call each) on every launch because the pointers change
from call to call, while the device one costs each persistent program a few instructions once and
the host passes plain pointers. Device-side descriptors need a global scratch buffer per program,
which Triton obtains through `triton.set_allocator`; `scratch_allocator` hands out one cached
buffer per (device, stream), so a launch allocates nothing after the first.

TMA needs 16-byte aligned base pointers and row strides: spec.py rejects N % 8 or K % 8 != 0 for
this family, and `launch` raises ValueError for a misaligned base pointer (a carved view, say)
rather than let TMA fault or read garbage. Out-of-range rows, columns and the K tail are handled
by TMA itself (loads pad with zeros, stores clip), so any M >= 1 works without masks or copies.

Layouts: nn builds the B descriptor over [K, N] with [BK, BN] blocks; nt builds it over [N, K]
(the nn.Linear weight as it lies) with [BN, BK] blocks and takes `.T` of the loaded tile; the
compiler hands wgmma the shared-memory tile with a transposed layout, so nothing is copied.

Warp specialisation (WARP_SPECIALIZE): `tl.range(..., warp_specialize=True)` on the tile loop asks
the compiler to split loads and MMAs into producer / consumer partitions. Measured on the TTGIR
(sm_90 target, triton 3.6 and 3.9): the hint is accepted but this loop is not partitioned (no
`ttg.warp_specialize` op; the compiled code is the same TMA + wgmma software pipeline), so
warp_spec=1 is correct but no different in kind from warp_spec=0 on Hopper today; Artifact.meta["warp_specialized"] records per
compile whether partitioning happened, so a Triton that does it on Hopper shows up in the data.
The tile loop is flattened (`flatten=True`: the K loop merged into one pipelined loop) only without
warp specialisation, the pairing Triton's persistent-matmul tutorial uses.

Epilogue subtiling (EPILOGUE_SUBTILE = 1|2) stores the tile in BN / EPILOGUE_SUBTILE wide pieces, halving the shared-memory staging buffer of
the TMA store so more of shared memory goes to pipeline stages.
"""
from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl

KNOBS = {"bm": "BM", "bn": "BN", "bk": "BK", "group_m": "GROUP_M", "subtile": "EPILOGUE_SUBTILE",
         "warp_spec": "WARP_SPECIALIZE"}
LAUNCH_OPTIONS = {"warps": "num_warps", "stages": "num_stages"}
# tl.range grew `warp_specialize` in triton 3.4; older versions reject the keyword at compile time.
HAS_WARP_SPECIALIZE = "warp_specialize" in inspect.signature(tl.range.__init__).parameters


@triton.jit
def _tile_coords(tile_id, width, num_pid_m, GROUP_M: tl.constexpr):
    group_id = tile_id // width
    first_m = group_id * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % group_size)
    pid_n = (tile_id % width) // group_size
    return pid_m, pid_n


@triton.jit
def persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                      EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                      B_NT: tl.constexpr, FLATTEN: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    if B_NT:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                       block_shape=[BM, BN // EPILOGUE_SUBTILE])

    start = tl.program_id(0)
    nprog = tl.num_programs(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BK)
    width = GROUP_M * num_pid_n
    # The epilogue recomputes its tile from a second counter one step behind, so the loads of the
    # next tile do not depend on values the epilogue of this one still holds (lets the pipeliner
    # overlap them).
    tile_c = start - nprog
    for tile_id in tl.range(start, num_tiles, nprog, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _tile_coords(tile_id, width, num_pid_m, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in range(k_tiles):
            off_k = kt * BK
            a = a_desc.load([off_m, off_k])
            if B_NT:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc)

        tile_c += nprog
        pid_m, pid_n = _tile_coords(tile_c, width, num_pid_m, GROUP_M)
        off_cm = pid_m * BM
        off_cn = pid_n * BN
        if EPILOGUE_SUBTILE == 2:
            halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
            acc0, acc1 = tl.split(halves)
            c_desc.store([off_cm, off_cn], acc0.to(tl.float16))
            c_desc.store([off_cm, off_cn + BN // 2], acc1.to(tl.float16))
        else:
            c_desc.store([off_cm, off_cn], acc.to(tl.float16))


# ---- scratch for device-side descriptors ------------------------------------------------------------
_SCRATCH: dict[tuple, torch.Tensor] = {}


def scratch_allocator(size: int, alignment: int, stream):
    """triton.set_allocator hook: one cached int8 buffer per (device, stream), grown on demand.

    Triton asks on every launch of a kernel that makes descriptors (size = programs x 128 B per
    descriptor); answering from the cache keeps the launch free of allocations. torch's allocator
    returns 512-byte aligned blocks, which covers the 128 B TMA descriptors need.
    """
    dev = torch.cuda.current_device()
    key = (dev, stream)
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < size:
        buf = torch.empty(max(size, 1), dtype=torch.int8, device=f"cuda:{dev}")
        _SCRATCH[key] = buf
    return buf


def install_allocator() -> None:
    # The allocator lives in a ContextVar, i.e. per thread: the Kernel installs it where it launches.
    triton.set_allocator(scratch_allocator)


# ---- launcher ----------------------------------------------------------------------------------------
def constexprs_for(knobs: dict, layout: str) -> dict:
    """The full constexpr dict for one spec and layout (the derived B_NT and FLATTEN included)."""
    ws = bool(knobs["WARP_SPECIALIZE"])
    if ws and not HAS_WARP_SPECIALIZE:
        raise ValueError(f"warp_spec=1 needs tl.range(warp_specialize=...), which triton "
                         f"{triton.__version__} lacks")
    return {**knobs, "WARP_SPECIALIZE": ws, "B_NT": layout == "nt", "FLATTEN": not ws}


def check_alignment(a, b, c) -> None:
    K, N = a.shape[1], c.shape[1]
    if K % 8 or N % 8:
        raise ValueError(f"persistent (TMA) needs 16-byte row strides: K % 8 == 0 and N % 8 == 0, "
                         f"got K={K} N={N}: use family=tiled")
    for name, t in (("a", a), ("b", b), ("c", c)):
        if t.data_ptr() % 16:
            raise ValueError(f"persistent (TMA) needs 16-byte aligned base pointers; {name} is at "
                             f"{t.data_ptr():#x} (offset {t.data_ptr() % 16} B): pass an aligned tensor "
                             "or use family=tiled")


def grid(M: int, N: int, BM: int, BN: int, sm_count: int) -> tuple[int]:
    return (max(1, min(sm_count, triton.cdiv(M, BM) * triton.cdiv(N, BN))),)


def launch(a, b, c, layout: str, constexprs: dict, options: dict, sm_count: int) -> None:
    """C = A @ B for `layout` with `constexprs` from constexprs_for(); inputs checked by the caller
    (shapes, dtype, contiguity), alignment checked here because only this family needs it."""
    check_alignment(a, b, c)
    M, K = a.shape
    N = c.shape[1]
    g = grid(M, N, constexprs["BM"], constexprs["BN"], sm_count)
    persistent_kernel[g](a, b, c, M, N, K, **constexprs, **options)


def reference(a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """fp32 reference of what this family computes (before the fp16 rounding of the output)."""
    bb = b.float() if layout == "nn" else b.float().t()
    return a.float() @ bb

# ---- cudal2: the spec this text was rendered for ----
SPEC = 'backend=triton family=persistent bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8 split_k=1 subtile=2 warp_spec=0 cluster=1'
LAYOUT = 'nn'
CONSTEXPRS = {'BM': 128, 'BN': 256, 'BK': 64, 'GROUP_M': 8, 'EPILOGUE_SUBTILE': 2, 'WARP_SPECIALIZE': False, 'B_NT': False, 'FLATTEN': True}
OPTIONS = {'num_warps': 8, 'num_stages': 3, 'enable_fp_fusion': True}
