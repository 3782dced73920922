"""The wgmma split-K workspace (backends/cuda_launch.py `_splitk_workspace` over backends/workspace.py), on the CPU.

The kernel resets every counter it uses, so a workspace is zeroed once, when allocated. On the H200
(2026-12-03) the first version kept the counters after the partials in one buffer, at an offset that
depended on the size: a smaller size reused the buffer and read partials as counters (the last K
slice was never recognised, C stayed unwritten). These tests pin the fix: counters live in their own
zeroed allocation, per stream, and only grow.
"""
from __future__ import annotations

import torch

from cudal2.backends import cuda_launch
from cudal2.backends.workspace import StreamWorkspace
from cudal2.spec import KernelSpec


def _kernel(text: str):
    k = object.__new__(cuda_launch.CudaKernel)
    k.spec = KernelSpec.parse("backend=cuda family=wgmma " + text)
    k._ws = StreamWorkspace("cpu")
    return k


def test_counters_are_zero_for_every_size_and_stream():
    k = _kernel("bm=128 bn=128 warps=12 stages=5 split_k=4")
    big = k._splitk_workspace(4096, 4096, 7)
    part, cnt = k._ws.pairs[7]
    # 32 x 32 tiles, two cooperative consumer warpgroups: one counter each; 4 slices of 128x128 fp32.
    assert cnt.dtype == torch.int32 and cnt.numel() == 32 * 32 * 2 and int(cnt.abs().sum()) == 0
    assert part.numel() == 32 * 32 * 4 * 128 * 128
    assert big == (part.data_ptr(), cnt.data_ptr())
    part.fill_(123.0)                       # partials left by an earlier launch
    small = k._splitk_workspace(1, 256, 7)
    assert small == big                     # a smaller size reuses both, counters still zero
    assert int(k._ws.pairs[7][1].abs().sum()) == 0
    other = k._splitk_workspace(1, 256, 8)   # another stream: its own pair
    assert other[0] != big[0] and other[1] != big[1]


def test_growth_replaces_the_pair_so_bound_launches_re_read():
    k = _kernel("bm=64 bn=64 warps=8 stages=12 split_k=8")
    k._splitk_workspace(64, 64, 0)
    first = k._ws.pairs[0]
    k._splitk_workspace(64, 64, 0)
    assert k._ws.pairs[0] is first         # same size: the same pair object (bind's identity check)
    k._splitk_workspace(1024, 1024, 0)
    grown = k._ws.pairs[0]
    assert grown is not first and grown[1].numel() == 16 * 16 and int(grown[1].abs().sum()) == 0


def test_pingpong_counts_one_counter_per_tile():
    k = _kernel("bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=2")
    k._splitk_workspace(1000, 1000, 0)
    assert k._ws.pairs[0][1].numel() == 16 * 8   # a tile's slices may land on either warpgroup
