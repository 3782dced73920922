"""Both backends through the one PROTOCOL checker on a GPU: every family, both layouts, edge shapes
(1, 17, 100, 1000, 3000 on each axis), split-K and clusters; plus the CUDA driver-error path.

Run on an H200:  python3 -m pytest -q -m gpu tests/test_backends_gpu.py   (-k cuda / -k triton)
"""
from __future__ import annotations

import dataclasses

import pytest

from cudal2.check import check_kernel
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, default_spec, validate

pytestmark = pytest.mark.gpu

BASE = Problem(512, 512, 512)

# (backend, family, spec text or None for the family default at BASE). The checker's edges check
# runs each kernel on every off-grid shape it claims to support (kernel.supports).
CASES = [
    ("cuda", "mma", None),
    ("cuda", "mma", "bm=64 bn=64 bk=32 warps=4 stages=4 split_k=4"),
    ("cuda", "mma", "bm=16 bn=32 bk=16 warps=2 stages=2 group_m=1"),
    ("cuda", "wgmma", None),
    ("cuda", "wgmma", "bm=64 bn=64 warps=8 stages=6"),
    ("cuda", "wgmma", "bm=256 bn=128 warps=12 stages=3 group_m=16"),
    ("cuda", "wgmma", "bm=128 bn=128 warps=12 stages=5 cluster=2"),
    # issue 19: ping-pong, BN not a power of two, deep rings, one-launch split-K (with a cluster
    # and with ping-pong: a tile's K slices land on either warpgroup).
    ("cuda", "wgmma", "bm=128 bn=128 warps=12 stages=4 warp_spec=2"),
    ("cuda", "wgmma", "bm=128 bn=192 warps=12 stages=4"),
    ("cuda", "wgmma", "bm=64 bn=64 warps=8 stages=12 split_k=4"),
    ("cuda", "wgmma", "bm=128 bn=128 warps=12 stages=5 split_k=2 cluster=2"),
    ("cuda", "wgmma", "bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=2"),
    # cluster=2 sharing A (bm > bn: the pair along N; a partner past N's edge stores nothing).
    ("cuda", "wgmma", "bm=256 bn=128 warps=12 stages=3 cluster=2"),
    ("cuda", "wgmma", "bm=128 bn=64 warps=12 stages=8 warp_spec=2 split_k=2 cluster=2"),
    # subtile=2: the epilogue in two column blocks through half the staging (N's edge per block).
    ("cuda", "wgmma", "bm=256 bn=128 warps=12 stages=4 subtile=2"),
    ("cuda", "wgmma", "bm=128 bn=128 warps=12 stages=6 warp_spec=2 subtile=2 cluster=2"),
    # issue 20: the lite schedule (no producer warpgroup, one unit per CTA), ring shallower than K
    # (slots refilled), two warpgroups, split-K.
    ("cuda", "wgmma", "bm=64 bn=64 warps=4 stages=3 warp_spec=0"),
    ("cuda", "wgmma", "bm=128 bn=64 warps=4 stages=8 warp_spec=0"),
    ("cuda", "wgmma", "bm=128 bn=128 warps=8 stages=2 warp_spec=0"),
    ("cuda", "wgmma", "bm=64 bn=128 warps=4 stages=4 warp_spec=0 split_k=4"),
    ("cuda", "wgmma", "bm=128 bn=128 warps=8 stages=3 warp_spec=0 split_k=2"),
    ("cuda", "wgmma", "bm=64 bn=64 warps=4 stages=2 warp_spec=0 split_k=8"),
    # split_k off the powers of two (clusters of 3 / 6; mma's and Triton's workspaces of 3 slices).
    ("cuda", "wgmma", "bm=64 bn=64 warps=8 stages=12 split_k=3"),
    ("cuda", "wgmma", "bm=64 bn=64 warps=4 stages=2 warp_spec=0 split_k=6"),
    ("cuda", "mma", "bm=64 bn=64 bk=32 warps=4 stages=4 split_k=3"),
    # tile columns grouped along N (group_m < 0): the edge shapes leave partial column groups
    # (3000 / 128 = 23.4 tile columns in groups of 4 or 8), each schedule, a cluster, mma.
    ("cuda", "wgmma", "bm=128 bn=128 warps=12 stages=5 group_m=-4"),
    ("cuda", "wgmma", "bm=128 bn=64 warps=12 stages=8 warp_spec=2 split_k=2 cluster=2 group_m=-8"),
    ("cuda", "wgmma", "bm=64 bn=64 warps=4 stages=3 warp_spec=0 group_m=-1"),
    ("cuda", "mma", "bm=64 bn=64 bk=32 warps=4 stages=4 group_m=-4"),
    ("triton", "tiled", None),
    ("triton", "tiled", "bm=64 bn=64 bk=32 warps=4 stages=3 split_k=2"),
    ("triton", "tiled", "bm=64 bn=64 bk=32 warps=4 stages=3 split_k=3"),
    ("triton", "persistent", None),
]


def _id(case):
    be, fam, text = case
    return f"{be}-{fam}-" + ("default" if text is None else text.replace(" ", ",").replace("=", ""))


def _build(backend: str, family: str, text: str | None, problem: Problem, device):
    from cudal2.backends import get_backend
    if text is None:
        spec = default_spec(family, problem, device)
    else:
        spec = validate(KernelSpec.parse(f"backend={backend} family={family} {text}"), problem, device)
    be = get_backend(backend)
    return be.load(be.compile(spec, problem, device))


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_checker_passes(gpu_device, case, layout):
    p = BASE.with_layout(layout)
    kernel = _build(*case, p, gpu_device)
    report = check_kernel(kernel, p, "cuda")
    lines = "\n".join(r.line() for r in report.results)
    assert report.passed, f"{case} {layout}:\n{lines}"
    edges = report.results[-1]
    assert edges.name == "edges" and "edge shapes" in edges.detail


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("family", ["mma", "wgmma"])
def test_cuda_large_square(gpu_device, family, layout):
    """The default spec at 4096^3: full tiles, long K loop (many ring wraps), many persistent tiles."""
    import torch
    from cudal2.check import make_inputs, reference, rel_error
    p = Problem(4096, 4096, 4096, layout)
    kernel = _build("cuda", family, None, p, gpu_device)
    a, b = make_inputs(p, "cuda", torch.Generator().manual_seed(1))
    c = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    kernel(a, b, c)
    torch.cuda.synchronize()
    # fp16 output rounding (~2e-4 relative) dominates; 5e-3 is the PROTOCOL bound.
    assert rel_error(c, reference(a, b, layout)) <= 5e-3


def test_cuda_rejects_bad_inputs(gpu_device):
    import torch
    kernel = _build("cuda", "mma", None, BASE, gpu_device)
    a = torch.zeros(64, 32, dtype=torch.float16, device="cuda")
    b = torch.zeros(32, 16, dtype=torch.float16, device="cuda")
    c = torch.zeros(64, 16, dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="float16"):
        kernel(a.float(), b, c)
    with pytest.raises(ValueError, match="contiguous"):
        kernel(a, b.t(), c)
    with pytest.raises(ValueError, match="shapes do not agree"):
        kernel(a, b, c[:, :8].contiguous()[:32])


def test_cuda_driver_errors_are_launch_errors(gpu_device):
    from cudal2.backends import LaunchError, get_backend
    be = get_backend("cuda")
    spec = default_spec("mma", BASE, gpu_device)
    art = be.compile(spec, BASE, gpu_device)
    kernel = be.load(art)
    # A block of 4096 threads is past every GPU's limit: the driver refuses the launch.
    with pytest.raises(LaunchError, match=r"cuLaunchKernel.*CUDA_ERROR_[A-Z_]+"):
        kernel._launch("cudal2_mma_vec", (1, 1, 1), 4096, kernel.smem, 0, kernel._args)
    # Asking for more dynamic shared memory than the device has is refused when loading.
    too_big = dataclasses.replace(art, meta={**art.meta, "smem_dynamic": gpu_device.smem_per_block + 4096})
    with pytest.raises(LaunchError, match=r"cuFuncSetAttribute.*CUDA_ERROR_[A-Z_]+"):
        be.load(too_big)


# BN off the multiples of 64. The TMA-store box is 16 (BN 112, 208, 48, 80) or 32 (BN 96, 160, 224)
# columns wide there; in nn so is each TMA box of the N-major B tile, read through the 32- or 64-byte
# swizzle of the wgmma descriptor (hopper.cuh: desc_nmajor; in nn before 2026-12-04 BN was a
# multiple of 64, the 128-byte swizzle only).
ODD_BN = [
    "bm=128 bn=112 warps=12 stages=6",
    "bm=64 bn=208 warps=12 stages=5 warp_spec=2",
    "bm=128 bn=96 warps=12 stages=6 cluster=2",
    "bm=128 bn=224 warps=12 stages=4 subtile=2",
    "bm=64 bn=48 warps=8 stages=15 split_k=8",
    "bm=128 bn=160 warps=12 stages=4 split_k=2",
    "bm=64 bn=48 warps=4 stages=4 warp_spec=0 split_k=2",
    "bm=128 bn=80 warps=8 stages=6 warp_spec=0",
    "bm=64 bn=48 warps=4 stages=3 warp_spec=0 split_k=2",
    "bm=64 bn=48 warps=4 stages=3 warp_spec=0 split_k=4",
    "bm=64 bn=16 warps=8 stages=16 split_k=4",
    "bm=64 bn=32 warps=4 stages=4 warp_spec=0",
    "bm=128 bn=32 warps=12 stages=8 cluster=2",
]


@pytest.mark.parametrize("text", ODD_BN)
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_odd_bn(gpu_device, layout, text):
    _wgmma_passes(text, BASE.with_layout(layout), gpu_device)


def _wgmma_passes(text, p, device):
    """The wgmma spec `text` built for p passes the full checker (its edges run it off the grid)."""
    kernel = _build("cuda", "wgmma", text, p, device)
    report = check_kernel(kernel, p, "cuda")
    assert report.passed, f"{p}: " + "\n".join(r.line() for r in report.results)


# bk 32 (a 64-byte swizzle atom per k-tile, 64-byte-swizzle descriptors) and bk 128 (two 128-byte
# atoms, two TMA boxes per operand per stage; nn: B's boxes 128 k-rows tall) under the full checker
# (edges off the tile grid; K = 1000 leaves a partial last k-tile at either bk): each schedule,
# multicast of A and of B, both split-K reductions, A_TRIM at M = 1 and 33 (the checker's edges).
BK = [
    "bm=128 bn=128 bk=32 warps=12 stages=10",
    "bm=128 bn=256 bk=128 warps=12 stages=2 subtile=2",
    "bm=64 bn=96 bk=32 warps=8 stages=16 split_k=4",
    "bm=128 bn=128 bk=128 warps=12 stages=2 warp_spec=2",
    "bm=64 bn=64 bk=128 warps=4 stages=4 warp_spec=0 split_k=2",
    "bm=64 bn=48 bk=32 warps=4 stages=8 warp_spec=0",
    "bm=256 bn=128 bk=32 warps=12 stages=6 cluster=2",
    "bm=128 bn=112 bk=128 warps=12 stages=3 cluster=2",
    "bm=128 bn=128 bk=32 warps=12 stages=8 cluster=2",
    "bm=64 bn=128 bk=128 warps=12 stages=3 warp_spec=2 split_k=2",
]


@pytest.mark.parametrize("text", BK)
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_bk(gpu_device, layout, text):
    for p in (BASE.with_layout(layout), Problem(33, 384, 1000, layout)):
        _wgmma_passes(text, p, gpu_device)


@pytest.mark.parametrize("text", [t for t in BK if "split_k" in t])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_bk_split_k_is_deterministic(gpu_device, layout, text):
    _split_k_determinism(gpu_device, layout, text)


# A_TRIM=1 (wgmma.cu; the default where CLUSTER == 1 since 2026-12-05, run 62): A's TMA box M rows tall when M < BM,
# the ring's rows >= M left stale. The full checker (its edges run the same kernel at M 1, 17, 100 ...)
# at decode-like M, each schedule and split-K path.
@pytest.mark.parametrize("text", ["bm=64 bn=64 warps=8 stages=13 split_k=2",
                                  "bm=64 bn=128 warps=4 stages=6 warp_spec=0",
                                  "bm=128 bn=64 warps=12 stages=6",
                                  "bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=3"])
@pytest.mark.parametrize("M", [1, 33])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_a_trim(gpu_device, layout, M, text):
    from cudal2.backends import get_backend
    p = Problem(M, 384, 1000, layout)
    spec = validate(KernelSpec.parse(f"backend=cuda family=wgmma {text}"), p, gpu_device)
    be = get_backend("cuda")
    kernel = be.load(be.compile_source(spec, "#define A_TRIM 1\n" + be.render(spec, p), gpu_device.arch, layout))
    assert kernel.a_trim
    report = check_kernel(kernel, p, "cuda")
    assert report.passed, "\n".join(r.line() for r in report.results)


# EPI_DIRECT=1 (wgmma.cu, an experiment off in every filed kernel, 0.75x of them in run 62): the epilogue stores from registers,
# no TMA store; the full checker (edges off the tile grid: the guards replace TMA's clipping).
@pytest.mark.parametrize("text", ["bm=64 bn=64 warps=4 stages=4 warp_spec=0",
                                  "bm=128 bn=96 warps=12 stages=6",
                                  "bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=2",
                                  "bm=128 bn=112 warps=12 stages=5 cluster=2"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_epi_direct(gpu_device, layout, text):
    from cudal2.backends import get_backend
    p = BASE.with_layout(layout)
    spec = validate(KernelSpec.parse(f"backend=cuda family=wgmma {text}"), p, gpu_device)
    be = get_backend("cuda")
    kernel = be.load(be.compile_source(spec, "#define EPI_DIRECT 1\n" + be.render(spec, p), gpu_device.arch, layout))
    report = check_kernel(kernel, p, "cuda")
    assert report.passed, "\n".join(r.line() for r in report.results)


# EPI_WIDE=1 forced (wgmma.cu's default only where the swizzled boxes would be 16 columns, 7 or
# more of them): each subtile stored as one unswizzled TMA box BN / SUBTILE wide (the launcher reads
# the module's symbol and encodes C's map to match); the full checker (edges off the tile grid: TMA
# clips N's edge inside the wide box), odd BN in each schedule, subtile 2 (two boxes a tile), a 2-CTA
# cluster, the lite schedule.
@pytest.mark.parametrize("text", ["bm=128 bn=112 warps=12 stages=5 warp_spec=2",
                                  "bm=128 bn=208 warps=12 stages=4",
                                  "bm=256 bn=96 warps=12 stages=3 subtile=2",
                                  "bm=128 bn=96 warps=12 stages=6 cluster=2",
                                  "bm=64 bn=48 warps=4 stages=4 warp_spec=0"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_epi_wide(gpu_device, layout, text):
    _check_epi_wide(gpu_device, text, (BASE.with_layout(layout), Problem(33, 384, 1000, layout)), forced=True)


def _check_epi_wide(gpu_device, text: str, problems, forced: bool) -> None:
    """Each problem: the spec built with EPI_WIDE forced on (or as rendered), its module says it is
    wide (the launcher encodes C's box from that), and it passes the full checker."""
    from cudal2.backends import get_backend
    be = get_backend("cuda")
    for p in problems:
        spec = validate(KernelSpec.parse(f"backend=cuda family=wgmma {text}"), p, gpu_device)
        art = (be.compile_source(spec, "#define EPI_WIDE 1\n" + be.render(spec, p), gpu_device.arch, p.layout)
               if forced else be.compile(spec, p, gpu_device))
        kernel = be.load(art)
        assert kernel.epi_wide
        report = check_kernel(kernel, p, "cuda")
        assert report.passed, "\n".join(r.line() for r in report.results)


# The default render where the rule turns EPI_WIDE on (the filed BN 144 / 240 / 112 kernels since
# 2026-12-06), split-K through the workspace and a cluster split-K included: the kernel says so by its
# symbol and passes the full checker on and off the tile grid.
@pytest.mark.parametrize("text", ["bm=64 bn=144 warps=8 stages=7",
                                  "bm=64 bn=240 warps=8 stages=4 group_m=1",
                                  "bm=64 bn=112 warps=4 stages=2 warp_spec=0",
                                  "bm=64 bn=112 warps=12 stages=4 warp_spec=2 split_k=2",
                                  "bm=128 bn=144 warps=12 stages=4 split_k=2"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_epi_wide_by_default(gpu_device, layout, text):
    _check_epi_wide(gpu_device, text, (BASE.with_layout(layout), Problem(33, 384, 1000, layout),
                                       Problem(1, 1000, 3000, layout)), forced=False)


@pytest.mark.parametrize("text", ["bm=128 bn=128 warps=12 stages=5 split_k=16",
                                  "bm=128 bn=64 warps=12 stages=6 split_k=4 cluster=2",
                                  "bm=64 bn=128 warps=4 stages=8 warp_spec=0 split_k=8",
                                  "bm=64 bn=64 warps=4 stages=8 warp_spec=0 split_k=16"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_split_k_is_deterministic_and_stream_safe(gpu_device, layout, text):
    """Split-K in one launch: the last K slice of a tile sums all partials in slice order, so two
    runs are bit-identical; the counters reset themselves (a second launch needs no memset), and
    two streams running the same kernel at once each get their own workspace."""
    _split_k_determinism(gpu_device, layout, text)


# split_k off the powers of two (2026-12-05): clusters of 3, 6 and 12 K slices (12 past the portable
# 8), uneven K slices and reduction shares (VPS = ceil(NV / SPLIT_K)); the workspace path (ping-pong)
# with 3. A test of its own so the probe stage (bench/device_run.sh) can run just these.
@pytest.mark.parametrize("text", ["bm=64 bn=96 warps=8 stages=10 split_k=3",
                                  "bm=128 bn=64 warps=12 stages=6 split_k=6",
                                  "bm=64 bn=48 warps=4 stages=8 warp_spec=0 split_k=12",
                                  "bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=3"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_split_k_off_powers_of_two(gpu_device, layout, text):
    _split_k_determinism(gpu_device, layout, text)


# The cluster split-K at 128 accumulators a thread (2026-12-06: its loads in flight capped at 64
# registers, so 128x256 / 256x128 reduce without spilling): the full checker (edges off the tile
# grid, K = 1000's partial last k-tile) and two bit-identical runs, cooperative and lite.
ACC128_SPLIT = ["bm=128 bn=256 warps=12 stages=3 split_k=2",
                "bm=256 bn=128 warps=12 stages=3 split_k=4",
                "bm=128 bn=240 warps=12 stages=3 split_k=3",
                "bm=128 bn=256 warps=8 stages=3 warp_spec=0 split_k=2",
                "bm=128 bn=256 warps=12 stages=4 subtile=2 split_k=2",     # half the staging: a 4th stage
                "bm=64 bn=128 warps=8 stages=9 subtile=2 split_k=4"]


@pytest.mark.parametrize("text", ACC128_SPLIT)
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_wgmma_split_k_128_accumulators(gpu_device, layout, text):
    for p in (BASE.with_layout(layout), Problem(33, 384, 1000, layout)):
        _wgmma_passes(text, p, gpu_device)
    _split_k_determinism(gpu_device, layout, text)


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_mma_split_k_is_deterministic_and_stream_safe(gpu_device, layout):
    """The mma family's split-K (partials, then its reduce launch) on two streams at once: since
    2026-12-06 each stream has its own partials (backends/workspace.py); before, one buffer per
    kernel, which the two streams raced on."""
    _split_k_determinism(gpu_device, layout, "bm=64 bn=64 bk=32 warps=4 stages=4 split_k=4", family="mma")


def _split_k_determinism(gpu_device, layout, text, family="wgmma"):
    import torch
    from cudal2.check import make_inputs, reference, rel_error
    p = Problem(256, 384, 8192, layout)              # 6 tiles of 128x128: starved, deep K
    kernel = _build("cuda", family, text, p, gpu_device)
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(3))
    ref = reference(a, b, layout)
    outs = []
    for _ in range(3):
        c = torch.full((p.M, p.N), float("nan"), dtype=torch.float16, device="cuda")
        kernel(a, b, c)
        outs.append(c)
    torch.cuda.synchronize()
    assert rel_error(outs[0], ref) <= 5e-3
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    c1 = torch.empty_like(outs[0])
    c2 = torch.empty_like(outs[0])
    torch.cuda.synchronize()
    for _ in range(20):                               # many launches in flight on both streams
        with torch.cuda.stream(s1):
            kernel(a, b, c1)
        with torch.cuda.stream(s2):
            kernel(a, b, c2)
    torch.cuda.synchronize()
    assert torch.equal(c1, outs[0]) and torch.equal(c2, outs[0])
