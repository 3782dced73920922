"""CUDA backend on the CPU: NVRTC compiles every family for sm_90a, resources, cache, errors, SASS.

No GPU needed: NVRTC produces the cubin and ptxas's -v log on any machine. Each compile takes about
a second; a session-wide cache directory makes repeated specs free.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cudal2.backends import CompileError
from cudal2.backends import cuda as cuda_mod
from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, SpecError, default_spec, mma_warp_layout

BIG = Problem(4096, 4096, 4096)

# A spread over the knobs: tiles, warps, stages, split-K, cluster 2, both layouts.
SPECS = [
    ("family=mma bm=128 bn=128 bk=32 warps=8 stages=4 group_m=8", "nn"),
    ("family=mma bm=64 bn=128 bk=64 warps=4 stages=3 group_m=4", "nt"),
    ("family=mma bm=16 bn=32 bk=16 warps=2 stages=2 group_m=1", "nn"),
    ("family=mma bm=64 bn=64 bk=32 warps=4 stages=4 split_k=4", "nt"),
    ("family=mma bm=32 bn=256 bk=32 warps=8 stages=3 split_k=2", "nn"),
    ("family=wgmma bm=64 bn=64 warps=8 stages=6", "nt"),
    ("family=wgmma bm=256 bn=128 warps=12 stages=3 group_m=16", "nn"),
    ("family=wgmma bm=128 bn=128 warps=12 stages=5 cluster=2", "nn"),
    ("family=wgmma bm=128 bn=256 warps=12 stages=3 cluster=2", "nt"),
    # issue 19's knobs: ping-pong, odd BN (TMA-store boxes of 16 columns), deep rings, one-launch
    # split-K, clusters with odd BN.
    ("family=wgmma bm=128 bn=128 warps=12 stages=4 warp_spec=2", "nn"),
    ("family=wgmma bm=64 bn=208 warps=12 stages=5 warp_spec=2", "nt"),
    ("family=wgmma bm=128 bn=112 warps=12 stages=6", "nt"),
    ("family=wgmma bm=64 bn=64 warps=8 stages=13", "nn"),
    ("family=wgmma bm=64 bn=96 warps=8 stages=10 split_k=8", "nt"),
    ("family=wgmma bm=128 bn=128 warps=12 stages=5 split_k=4", "nn"),
    ("family=wgmma bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=2", "nt"),
    ("family=wgmma bm=128 bn=208 warps=12 stages=3 cluster=2", "nt"),
    # cluster=2 sharing A (bm > bn: the pair along N), both layouts, ping-pong with split-K.
    ("family=wgmma bm=256 bn=128 warps=12 stages=3 cluster=2", "nn"),
    ("family=wgmma bm=256 bn=112 warps=12 stages=3 cluster=2", "nt"),
    ("family=wgmma bm=128 bn=64 warps=12 stages=8 warp_spec=2 split_k=2 cluster=2", "nt"),
    # subtile=2: the epilogue stages half the columns at a time, so a 4th stage fits at 256x128
    # (odd halves: 224 -> 112, TMA boxes of 16 columns), with a cluster, ping-pong, split-K.
    ("family=wgmma bm=256 bn=128 warps=12 stages=4 subtile=2", "nn"),
    ("family=wgmma bm=256 bn=128 warps=12 stages=4 subtile=2 cluster=2", "nt"),
    ("family=wgmma bm=128 bn=224 warps=12 stages=4 subtile=2", "nt"),
    ("family=wgmma bm=128 bn=96 warps=12 stages=6 warp_spec=2 subtile=2 split_k=2", "nt"),
    # issue 20's lite schedule (warp_spec 0: no producer warpgroup, one unit per CTA): one and two
    # warpgroups, a 128-row tile on one warpgroup, split-K, odd BN.
    ("family=wgmma bm=64 bn=64 warps=4 stages=8 warp_spec=0", "nn"),
    ("family=wgmma bm=128 bn=48 warps=4 stages=6 warp_spec=0 split_k=2", "nt"),
    ("family=wgmma bm=128 bn=128 warps=8 stages=4 warp_spec=0", "nt"),
    ("family=wgmma bm=64 bn=128 warps=4 stages=6 warp_spec=0 split_k=8", "nn"),
    ("family=wgmma bm=128 bn=128 warps=8 stages=4 warp_spec=0 split_k=2", "nn"),
    ("family=wgmma bm=64 bn=16 warps=4 stages=16 warp_spec=0 split_k=2", "nt"),
    ("family=wgmma bm=64 bn=64 warps=4 stages=8 warp_spec=0 split_k=16", "nn"),    # 16 slices, 8 groups
    ("family=wgmma bm=64 bn=48 warps=4 stages=8 warp_spec=0 split_k=4", "nt"),     # 6 groups over 4
    # nn with BN off the multiples of 64: B's TMA boxes of 32 (64-byte swizzle) or 16 columns
    # (32-byte), with a B-sharing cluster, ping-pong, the cluster split-K and the lite schedule.
    ("family=wgmma bm=128 bn=96 warps=12 stages=6", "nn"),
    ("family=wgmma bm=128 bn=112 warps=12 stages=5 cluster=2", "nn"),
    ("family=wgmma bm=64 bn=208 warps=12 stages=5 warp_spec=2", "nn"),
    ("family=wgmma bm=64 bn=48 warps=8 stages=15 split_k=8", "nn"),
    ("family=wgmma bm=64 bn=16 warps=4 stages=8 warp_spec=0 split_k=4", "nn"),
    # split_k off the powers of two: clusters of 3, 6 and 12 K slices (12 past the portable 8),
    # slices sharing the reduction unevenly (VPS = ceil(NV / SPLIT_K)), cooperative and lite; the
    # workspace path (ping-pong) and mma's blockIdx.z split with 3 and 6.
    ("family=wgmma bm=64 bn=64 warps=8 stages=13 split_k=3", "nt"),
    ("family=wgmma bm=64 bn=96 warps=8 stages=10 split_k=6", "nn"),
    ("family=wgmma bm=64 bn=48 warps=4 stages=8 warp_spec=0 split_k=12", "nt"),
    ("family=wgmma bm=128 bn=64 warps=8 stages=6 warp_spec=0 split_k=3", "nn"),
    ("family=wgmma bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=3", "nt"),
    # tile columns grouped along N (group_m < 0; -1: column-major) in each schedule, with a cluster
    # sharing A, and in mma.
    ("family=wgmma bm=128 bn=256 warps=12 stages=3 group_m=-8", "nt"),
    ("family=wgmma bm=64 bn=128 warps=12 stages=6 warp_spec=2 group_m=-1", "nn"),
    ("family=wgmma bm=256 bn=128 warps=12 stages=3 cluster=2 group_m=-4", "nt"),
    ("family=wgmma bm=64 bn=64 warps=4 stages=8 warp_spec=0 split_k=2 group_m=-16", "nn"),
    ("family=mma bm=64 bn=64 bk=32 warps=4 stages=4 group_m=-4", "nn"),
    # bk 32 (one 64-byte swizzle atom per k-tile: a deeper ring in the same smem) and bk 128 (two
    # 128-byte atoms: half the barrier round trips per k) over each schedule and load path: TMA
    # multicast of A and of B, nn's B boxes bk rows tall, the cluster split-K through a bk-32 ring.
    ("family=wgmma bm=128 bn=128 bk=32 warps=12 stages=10", "nt"),
    ("family=wgmma bm=128 bn=256 bk=128 warps=12 stages=2 subtile=2", "nn"),
    ("family=wgmma bm=64 bn=96 bk=32 warps=8 stages=16 split_k=4", "nn"),
    ("family=wgmma bm=128 bn=128 bk=128 warps=12 stages=2 warp_spec=2", "nt"),
    ("family=wgmma bm=64 bn=64 bk=128 warps=4 stages=4 warp_spec=0 split_k=2", "nt"),
    ("family=wgmma bm=64 bn=48 bk=32 warps=4 stages=8 warp_spec=0", "nn"),
    ("family=wgmma bm=256 bn=128 bk=32 warps=12 stages=6 cluster=2", "nt"),
    ("family=wgmma bm=128 bn=112 bk=128 warps=12 stages=3 cluster=2", "nn"),
    ("family=wgmma bm=128 bn=128 bk=32 warps=12 stages=8 cluster=2", "nn"),
    ("family=mma bm=64 bn=64 bk=32 warps=4 stages=4 split_k=6", "nn"),
    ("family=mma bm=32 bn=64 bk=32 warps=4 stages=3 split_k=3", "nt"),
    # the cluster split-K at 128 accumulators a thread (loads in flight capped at 64 registers):
    # 128x256 / 256x128 cooperative and lite, 2 to 16 slices, both layouts, no spill.
    ("family=wgmma bm=128 bn=256 warps=12 stages=3 split_k=2", "nt"),
    ("family=wgmma bm=256 bn=128 warps=12 stages=3 split_k=4", "nn"),
    ("family=wgmma bm=128 bn=256 warps=12 stages=3 split_k=3", "nn"),
    ("family=wgmma bm=128 bn=240 warps=12 stages=3 split_k=16", "nt"),
    ("family=wgmma bm=128 bn=256 warps=8 stages=3 warp_spec=0 split_k=2", "nt"),
    # subtile 2 with the cluster split-K: the partial in the ring + half a staging, a deeper ring
    ("family=wgmma bm=128 bn=256 warps=12 stages=4 subtile=2 split_k=2", "nn"),
    ("family=wgmma bm=256 bn=128 warps=12 stages=4 subtile=2 split_k=4", "nt"),
    ("family=wgmma bm=64 bn=128 warps=8 stages=9 subtile=2 split_k=4", "nn"),
]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    return cuda_mod.CudaBackend(cache_dir=tmp_path_factory.mktemp("cubin"))


def _spec(text: str) -> KernelSpec:
    return KernelSpec.parse("backend=cuda " + text)



@pytest.mark.parametrize("text,layout", SPECS)
def test_compiles_for_sm90a(backend, hopper, text, layout):
    spec = _spec(text)
    art = backend.compile(spec, Problem(4096, 4096, 4096, layout), hopper)
    m = art.meta
    assert art.binary[:4] == b"\x7fELF"                       # a cubin, not PTX
    assert m["arch"] == "sm_90a" and m["layout"] == layout
    assert set(m["kernels"]) == set(cuda_mod.KERNELS[spec.family])
    assert 0 < m["registers"] <= 255
    # The smem the kernel is launched with must be the figure `validate` compared with the device
    # limit (spec.smem_bytes, exact for CUDA), else validation would pass specs that fail to load.
    assert m["smem_dynamic"] == spec.smem_bytes()
    assert m["smem_dynamic"] + m["smem_static"] <= hopper.smem_per_block
    assert m["spills_bytes"] == 0, m["log"]
    # The knobs reached the source as the macros the template reads.
    src = art.source
    for k, v in (("BM", spec.bm), ("BN", spec.bn), ("BK", spec.bk), ("STAGES", spec.stages), ("SPLIT_K", spec.split_k),
                 ("CLUSTER", spec.cluster), ("LAYOUT_NT", int(layout == "nt"))):
        assert f"#define {k} {v}\n" in src
    if spec.family == "mma":
        wm, wn = mma_warp_layout(spec.bm, spec.bn, spec.warps)
        assert f"#define WM {wm}\n#define WN {wn}\n" in src
    if spec.family == "wgmma":
        assert f"#define PINGPONG {int(spec.warp_spec == 2)}\n" in src
        assert f"#define LITE {int(spec.warp_spec == 0)}\n" in src
        # cluster=2 shares the larger operand tile: A (pair along N) only when bm > bn.
        assert f"#define MC_A {int(spec.cluster == 2 and spec.bm > spec.bn)}\n" in src
        assert f"#define SUBTILE {spec.subtile}\n" in src and (spec.bn // spec.subtile) % spec.epi_cols == 0
        # The TMA-store box is the widest of 64/32/16 columns that tiles BN (112 -> 16, 96 -> 32).
        assert f"#define EPI_COLS {spec.epi_cols}\n" in src and spec.bn % spec.epi_cols == 0
        # nn: so is each TMA box of the N-major B tile (its swizzle spans the box's row).
        from cudal2.kernels_cuda import defines
        assert defines(spec, layout).get("NN_COLS") == (spec.nn_b_cols if layout == "nn" else None)
        assert layout == "nt" or f"#define NN_COLS {spec.nn_b_cols}\n" in src and spec.bn % spec.nn_b_cols == 0
        # 3 warpgroups of 128 threads under __launch_bounds__(384, 1): ptxas may use 65536/384 = 168.
        assert m["registers"] <= 65536 // spec.warps // 32 // 8 * 8 and m["stack_bytes"] == 0, m["log"]


@pytest.mark.parametrize("family", ["mma", "wgmma"])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_defaults_do_not_spill(backend, hopper, family, layout):
    p = BIG.with_layout(layout)
    spec = default_spec(family, p, hopper)
    m = backend.compile(spec, p, hopper).meta
    assert m["spills_bytes"] == 0 and m["stack_bytes"] == 0, m["log"]
    if family == "wgmma":
        # 3 warpgroups of 128 threads under __launch_bounds__(384, 1): ptxas may use 65536/384 = 168.
        assert m["registers"] <= 65536 // spec.warps // 32 // 8 * 8


def test_second_compile_hits_cache(backend, hopper, monkeypatch):
    spec = _spec(SPECS[0][0])
    first = backend.compile(spec, BIG, hopper)

    def boom(*a, **k):
        raise AssertionError("NVRTC was called on a cached kernel")
    monkeypatch.setattr(cuda_mod, "_nvrtc_compile", boom)
    again = backend.compile(spec, BIG, hopper)
    assert again.meta["cached"] is True
    assert again.binary == first.binary
    assert again.meta["registers"] == first.meta["registers"]
    # A fresh backend object on the same directory reads the same disk cache.
    other = cuda_mod.CudaBackend(cache_dir=backend.cache_dir).compile(spec, BIG, hopper)
    assert other.meta["cached"] is True and other.binary == first.binary


def test_cache_key_covers_source_and_arch(backend):
    assert backend.cache_key("a", "sm_90a") != backend.cache_key("b", "sm_90a")
    assert backend.cache_key("a", "sm_90a") != backend.cache_key("a", "sm_80")


@pytest.mark.parametrize("text,problem,field", [
    ("family=wgmma bm=128 bn=128 warps=12 stages=4", Problem(4096, 100, 4096), "family"),   # TMA: N % 8
    ("family=wgmma bm=128 bn=256 warps=12 stages=4", BIG, "stages"),        # ring + staging > 227 KB
    ("family=wgmma bm=128 bn=128 warps=8 stages=4 warp_spec=2", BIG, "warp_spec"),   # ping-pong: 2 consumers
    # split-K through the workspace (ping-pong) at 128 accumulators: its reduction would spill
    ("family=wgmma bm=128 bn=128 warps=12 stages=5 warp_spec=2 split_k=2", BIG, "split_k"),
    ("family=wgmma bm=64 bn=64 warps=8 stages=4 split_k=16", Problem(4096, 4096, 512), "split_k"),
    ("family=wgmma bm=64 bn=64 warps=4 stages=4 warp_spec=1", BIG, "warps"),          # no consumer left
    ("family=wgmma bm=64 bn=64 warps=12 stages=4 warp_spec=0", BIG, "warps"),         # lite: 1-2 warpgroups
    ("family=wgmma bm=128 bn=128 warps=8 stages=4 warp_spec=0 cluster=2", BIG, "cluster"),
    ("family=wgmma bm=64 bn=64 bk=16 warps=8 stages=4", BIG, "bk"),            # no 32-byte K atom
    # the cluster split-K's fp32 partial does not fit a 2-stage bk-32 ring beside the staging
    ("family=wgmma bm=128 bn=192 bk=32 warps=12 stages=2 split_k=2", BIG, "split_k"),
    # ... nor a 3-stage ring beside half a staging (subtile 2 needs the ring to hold 3/4 of it)
    ("family=wgmma bm=128 bn=256 bk=32 warps=12 stages=3 subtile=2 split_k=2", BIG, "split_k"),
    ("family=mma bm=64 bn=96 bk=32 warps=4 stages=3", BIG, "bn"),            # mma: powers of two
    ("family=mma bm=128 bn=128 bk=32 warps=12 stages=4", BIG, "warps"),
    ("family=mma bm=64 bn=64 bk=64 warps=4 stages=2 split_k=16", Problem(512, 512, 256), "split_k"),
    ("family=mma bm=128 bn=128 bk=32 warps=8 stages=2 cluster=2", BIG, "cluster"),
])
def test_invalid_spec_never_reaches_nvrtc(backend, hopper, monkeypatch, text, problem, field):
    monkeypatch.setattr(cuda_mod, "_nvrtc_compile", lambda *a, **k: pytest.fail("NVRTC reached"))
    with pytest.raises(SpecError) as e:
        backend.compile(_spec(text), problem, hopper)
    assert e.value.field == field


def test_wgmma_rejected_below_hopper(backend, monkeypatch):
    monkeypatch.setattr(cuda_mod, "_nvrtc_compile", lambda *a, **k: pytest.fail("NVRTC reached"))
    with pytest.raises(SpecError, match="sm_90a"):
        backend.compile(_spec("family=wgmma bm=128 bn=128 warps=12 stages=4"), BIG, DeviceInfo.target("sm_80"))


def test_mma_compiles_for_sm80(backend):
    a100 = DeviceInfo.target("sm_80")
    spec = default_spec("mma", BIG, a100)
    m = backend.compile(spec, BIG, a100).meta
    assert m["arch"] == "sm_80" and m["spills_bytes"] == 0


def test_compile_error_carries_nvrtc_log(backend):
    spec = _spec(SPECS[0][0])
    src = backend.render(spec, BIG) + "\n__device__ int broken() { return undeclared_thing_42; }\n"
    with pytest.raises(CompileError) as e:
        backend.compile_source(spec, src, "sm_90a", "nn")
    assert "undeclared_thing_42" in e.value.log
    assert "undeclared_thing_42" in str(e.value)


def test_ptxas_log_parser():
    log = ("ptxas info    : Compiling entry function 'k1' for 'sm_90a'\n"
           "ptxas info    : Function properties for k1\n"
           "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 96 registers, used 1 barriers, 2048 bytes smem\n"
           "ptxas info    : Compiling entry function 'k2' for 'sm_90a'\n"
           "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 12 registers, used 0 barriers\n")
    r = cuda_mod.parse_ptxas_log(log)
    assert r["k1"] == {"registers": 96, "stack_bytes": 8, "spill_stores": 4, "spill_loads": 4, "smem_static": 2048}
    assert r["k2"]["registers"] == 12 and r["k2"]["smem_static"] == 0


@pytest.mark.parametrize("family,want", [("wgmma", "HGMMA"), ("mma", "HMMA.16816.F32")])
def test_sass_uses_tensor_cores_and_no_local_memory(backend, hopper, sass, family, want):
    spec = default_spec(family, BIG, hopper)
    sass = sass(backend.compile(spec, BIG, hopper).binary)
    assert want in sass
    for op in ("LDL", "STL"):
        assert f" {op}" not in sass and f"\t{op}" not in sass, f"{family} SASS uses local memory ({op})"
    if family == "wgmma":
        assert "UTMALDG" in sass and "SYNCS" in sass       # TMA loads completing on mbarriers
    else:
        assert "LDGSTS" in sass and "LDSM" in sass          # cp.async and ldmatrix


@pytest.mark.parametrize("bk", [32, 64, 128])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_bk_sets_mmas_and_loads_per_k_tile(backend, hopper, sass, bk, layout):
    """A k-tile of bk columns: bk / 16 HGMMAs per m64 row block (the loop over k16 is unrolled), and
    one TMA box per swizzle atom of each K-major operand (two at bk 128), one per 64-column block of
    nn's B whatever bk (its boxes are bk rows tall). 128x128 on two consumer warpgroups: one m64
    block each."""
    spec = _spec(f"family=wgmma bm=128 bn=128 bk={bk} warps=12 stages={ {32: 8, 64: 4, 128: 2}[bk]}")
    code = sass(backend.compile(spec, BIG.with_layout(layout), hopper).binary)
    assert code.count("HGMMA.64x128x16.F32") == bk // 16
    atoms = 2 if bk == 128 else 1
    assert code.count("UTMALDG.2D") == atoms + (atoms if layout == "nt" else 128 // 64)
    assert " LDL" not in code and " STL" not in code


@pytest.mark.parametrize("bk", [32, 64, 128])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_bk_tma_boxes_are_the_kernels_atoms(monkeypatch, bk, layout):
    """The launcher's tensor maps match what wgmma.cu loads per k-tile: K-major boxes one swizzle
    atom wide (64 columns = 128-byte rows at bk 64 / 128, 32 columns = 64-byte rows at bk 32, which
    _encode swizzles by the row's bytes), by the tile's rows (halved for the operand a 2-CTA cluster
    shares); nn's B boxes nn_b_cols wide by bk k-rows."""
    from cudal2.backends import cuda_launch
    boxes = []
    monkeypatch.setattr(cuda_launch, "_encode", lambda ptr, inner, outer, bi, bo: boxes.append((inner, outer, bi, bo)) or b"")
    for text in (f"bm=128 bn=96 bk={bk} warps=12 stages=2", f"bm=256 bn=128 bk={bk} warps=12 stages=2 cluster=2",
                 f"bm=128 bn=128 bk={bk} warps=12 stages=2 cluster=2"):
        spec = _spec("family=wgmma " + text)
        launcher = object.__new__(cuda_launch.CudaKernel)
        launcher.spec, launcher.layout, launcher.a_trim, launcher._tmaps = spec, layout, False, {}
        boxes.clear()
        launcher._tensor_maps(1000, 2048, 3000, (0,), 0, 0)
        ca, cb = (2, 1) if spec.cluster_shares_a else (1, spec.cluster)
        assert boxes[0] == (3000, 1000, min(bk, 64), spec.bm // ca)
        if layout == "nt":
            assert boxes[1] == (3000, 2048, min(bk, 64), spec.bn // cb)
        else:
            assert boxes[1] == (2048, 3000, spec.nn_b_cols, bk // cb)


@pytest.mark.parametrize("text,layout", [
    ("bm=64 bn=64 warps=8 stages=13 split_k=2", "nt"),          # cooperative, cluster split-K
    ("bm=64 bn=128 warps=4 stages=6 warp_spec=0", "nn"),        # lite
    ("bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=3", "nt"),   # ping-pong, workspace split-K
    ("bm=128 bn=64 warps=12 stages=6", "nt"),                   # two consumer warpgroups
])
def test_a_trim_compiles_without_spills_and_says_so(backend, text, layout):
    """A_TRIM (wgmma.cu: A's box M rows tall when M < BM; the default where CLUSTER == 1 since
    2026-12-05) compiles for sm_90a without spills and carries the symbol the launcher looks for;
    A_TRIM=0 (the old code) does not; a 2-CTA cluster (A loaded in halves) is refused A_TRIM=1 and
    gets no trim by default."""
    spec = _spec("family=wgmma " + text)
    art = backend.compile(spec, Problem(7, 4096, 4096, layout), DeviceInfo.target("sm_90a"))
    assert art.meta["spills_bytes"] == 0 and art.meta["stack_bytes"] == 0, art.meta["log"]
    assert b"cudal2_a_trim" in art.binary
    plain = backend.compile_source(spec, "#define A_TRIM 0\n" + backend.render(spec, Problem(7, 4096, 4096, layout)),
                                   "sm_90a", layout)
    assert b"cudal2_a_trim" not in plain.binary
    pair = _spec("family=wgmma bm=128 bn=128 warps=12 stages=5 cluster=2")
    with pytest.raises(CompileError, match="A_TRIM"):
        backend.compile_source(pair, "#define A_TRIM 1\n" + backend.render(pair, BIG), "sm_90a", "nn")
    assert b"cudal2_a_trim" not in backend.compile(pair, BIG, DeviceInfo.target("sm_90a")).binary


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("M", [1, 7, 16, 64])
@pytest.mark.parametrize("text", ["bm=64 bn=64 warps=4 stages=8 warp_spec=0",                # lite
                                  "bm=64 bn=128 warps=4 stages=6 warp_spec=0 split_k=4",     # lite, 4 K slices
                                  "bm=64 bn=32 warps=8 stages=16 split_k=6"])                # the filed decode spec
def test_decode_specs_compile_at_decode_m(backend, hopper, text, M, layout):
    """Issue 20's compile-only check: the lite schedule and the registries' decode split-K spec are
    valid at M = 1, 7, 16, 64 (N 4096, K 14336) and compile for sm_90a without spills, with A's box
    trimmed to M rows where M < BM (the module's cudal2_a_trim). tests/test_stream_compile.py does
    the same for the stream family."""
    from cudal2.spec import validate
    p = Problem(M, 4096, 14336, layout)
    spec = validate(_spec("family=wgmma " + text), p, hopper)
    art = backend.compile(spec, p, hopper)
    assert art.meta["spills_bytes"] == 0 and art.meta["stack_bytes"] == 0, art.meta["log"]
    assert b"cudal2_a_trim" in art.binary


@pytest.mark.parametrize("text", ["bm=64 bn=64 warps=4 stages=4 warp_spec=0",        # lite
                                  "bm=128 bn=256 warps=12 stages=4 subtile=2",         # cooperative, halves
                                  "bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=2",   # ping-pong, workspace
                                  "bm=128 bn=128 warps=12 stages=5 cluster=2"])        # a 2-CTA cluster
def test_epi_direct_stores_from_registers_without_spills(backend, sass, text):
    """EPI_DIRECT=1 (wgmma.cu, off in every filed kernel): the epilogue's TMA store (UTMASTG) is gone
    from the SASS, global stores (STG) carry C instead, no spills."""
    spec = _spec("family=wgmma " + text)
    src = backend.render(spec, BIG)
    filed = sass(backend.compile_source(spec, src, "sm_90a", "nn").binary)
    art = backend.compile_source(spec, "#define EPI_DIRECT 1\n" + src, "sm_90a", "nn")
    assert art.meta["spills_bytes"] == 0 and art.meta["stack_bytes"] == 0, art.meta["log"]
    direct = sass(art.binary)
    assert "UTMASTG" in filed and "UTMASTG" not in direct and "STG" in direct


@pytest.mark.parametrize("text", ["bm=64 bn=16 warps=4 stages=2 warp_spec=0",         # lite
                                  "bm=64 bn=16 warps=8 stages=16"])                    # persistent
def test_tmap_prefetch_off_drops_only_the_prefetch(backend, sass, text):
    """TMAP_PREFETCH=0 (wgmma.cu, a timeline experiment; 1 in every filed kernel): the tensor-map
    prefetches at entry (UTMACCTL.PF in the SASS) are gone and nothing else changes but their slots:
    the TMA loads and stores stay, no spills."""
    spec = _spec("family=wgmma " + text)
    src = backend.render(spec, BIG)
    filed = sass(backend.compile_source(spec, src, "sm_90a", "nt").binary)
    art = backend.compile_source(spec, "#define TMAP_PREFETCH 0\n" + src, "sm_90a", "nt")
    assert art.meta["spills_bytes"] == 0 and art.meta["stack_bytes"] == 0, art.meta["log"]
    off = sass(art.binary)
    assert filed.count("UTMACCTL.PF") == 3 and "UTMACCTL" not in off
    assert "UTMALDG" in off and "UTMASTG" in off


@pytest.mark.parametrize("text", ["bm=64 bn=16 warps=4 stages=2 warp_spec=0",                   # one warpgroup
                                  "bm=128 bn=64 warps=8 stages=3 warp_spec=0",                   # two
                                  "bm=64 bn=96 warps=4 stages=8 warp_spec=0 split_k=4"])         # cluster split-K
def test_lite_cp_compiles_both_load_paths_without_spills(backend, sass, text):
    """LITE_CP=1 (wgmma.cu, an experiment; 0 in every filed kernel): the lite nt kernel carries both
    the cp.async path (LDGSTS, then the generic -> async proxy fence) for K that fits the ring and the
    TMA ring (UTMALDG) for longer K, no spills; nn and the persistent schedules are refused."""
    spec = _spec("family=wgmma " + text)
    src = backend.render(spec, Problem(100, 1000, 120, "nt"))
    art = backend.compile_source(spec, "#define LITE_CP 1\n" + src, "sm_90a", "nt")
    assert art.meta["spills_bytes"] == 0 and art.meta["stack_bytes"] == 0, art.meta["log"]
    code = sass(art.binary)
    assert "LDGSTS.E.BYPASS.128" in code and "UTMALDG" in code and "FENCE.VIEW.ASYNC.S" in code
    assert "LDGSTS" not in sass(backend.compile_source(spec, src, "sm_90a", "nt").binary)
    for other, layout in ((text.replace("warp_spec=0", "warp_spec=1").replace("warps=4", "warps=8"), "nt"),
                          (text, "nn")):
        sp = _spec("family=wgmma " + other)
        with pytest.raises(CompileError, match="LITE_CP"):
            backend.compile_source(sp, "#define LITE_CP 1\n" + backend.render(sp, Problem(100, 1000, 120, layout)),
                                   "sm_90a", layout)


def test_cli_compile_only(tmp_path):
    env = {**os.environ, "CUDAL2_CACHE_DIR": str(tmp_path)}
    for extra in ([], ["--family", "wgmma", "--layout", "nt"]):
        r = subprocess.run([sys.executable, "-m", "cudal2.cli", "check", "--backend", "cuda", "--compile-only",
                            "--shape", "4096x4096x4096", *extra], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        out = dict(line.split(None, 1) for line in r.stdout.splitlines() if line.strip())
        assert out["spills_bytes"] == "0" and int(out["registers"]) > 0
        assert out["kernel"] == ("cudal2_wgmma" if extra else "cudal2_mma_vec")


class _StandInDriver:
    """The few cuda.bindings.driver names CudaKernel._launch touches; returns `err` from every launch."""

    class CUresult:
        CUDA_SUCCESS = 0

    def __init__(self, err: int):
        self.err, self.launches = err, []

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, args, extra):
        self.launches.append((f, (gx, gy, gz), (bx, by, bz), smem, stream, args))
        return (self.err,)

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_INVALID_VALUE")


def test_launch_passes_its_arguments_and_names_a_failure(monkeypatch):
    # No GPU: a stand-in driver. The launch must hand the driver the kernel's own function, the
    # grid, a 1-D block, the smem and the stream as given, and the address of the argument array;
    # a failed launch must raise LaunchError naming the kernel, its grid and the CUDA error.
    import ctypes

    from cudal2.backends import LaunchError, cuda_launch
    k = object.__new__(cuda_launch.CudaKernel)
    k.funcs = {"cudal2_mma_vec": "F"}
    args = (ctypes.c_void_p * 2)()
    ok = _StandInDriver(0)
    monkeypatch.setattr(cuda_launch, "_drv", lambda: ok)
    k._launch("cudal2_mma_vec", (7, 1, 2), 256, 49152, 11, args)
    assert ok.launches == [("F", (7, 1, 2), (256, 1, 1), 49152, 11, ctypes.addressof(args))]
    bad = _StandInDriver(1)
    monkeypatch.setattr(cuda_launch, "_drv", lambda: bad)
    with pytest.raises(LaunchError, match=r"cuLaunchKernel\(cudal2_mma_vec, grid=\(7, 1, 2\), block=256\) "
                                          r"failed: CUDA_ERROR_INVALID_VALUE"):
        k._launch("cudal2_mma_vec", (7, 1, 2), 256, 0, 0, args)


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_unchecked_launch_derives_the_problem_like_the_checked_one(layout, monkeypatch):
    # The dispatch plans call `unchecked`: it must hand _run the same M, N, K the checked path
    # derives from the same tensors (no GPU: _run and the stream are stand-ins).
    import torch

    from cudal2.backends import cuda_launch
    k = object.__new__(cuda_launch.CudaKernel)
    k.layout = layout
    seen = []
    monkeypatch.setattr(k, "_run", lambda *a: seen.append(a[:3] + a[-1:]), raising=False)
    monkeypatch.setattr(k, "_stream", lambda s: 99, raising=False)
    M, N, K = 3, 5, 7
    a = torch.empty(M, K, dtype=torch.float16)
    b = torch.empty((K, N) if layout == "nn" else (N, K), dtype=torch.float16)
    c = torch.empty(M, N, dtype=torch.float16)
    k.unchecked(a, b, c)
    assert seen == [(M, N, K, 99)]
    with pytest.raises(ValueError, match="on the GPU"):     # the checked path refuses CPU tensors
        k(a, b, c)


@pytest.mark.parametrize("text", ["bm=128 bn=112 warps=12 stages=5 warp_spec=2",
                                  "bm=128 bn=208 warps=12 stages=4",
                                  "bm=256 bn=96 warps=12 stages=3 subtile=2",
                                  "bm=64 bn=48 warps=4 stages=4 warp_spec=0"])
def test_epi_wide_stores_one_box_a_subtile_without_spills(backend, sass, text):
    """EPI_WIDE forced on: one TMA store a subtile where the boxed kernel (forced off) issues
    BN / SUBTILE / EPI_COLS (7 at BN 112, 13 at 208, 3 at 96 / 2), no spills, and the symbol the
    launcher reads to encode C's box."""
    spec = _spec(f"family=wgmma {text}")
    p = Problem(1000, 1000, 4096, "nt")
    src = backend.render(spec, p)
    wide = backend.compile_source(spec, "#define EPI_WIDE 1\n" + src, "sm_90a", "nt")
    boxed = backend.compile_source(spec, "#define EPI_WIDE 0\n" + src, "sm_90a", "nt")
    assert wide.meta["spills_bytes"] == 0 and "__device__ int cudal2_epi_wide;" in wide.source
    w, bx = sass(wide.binary), sass(boxed.binary)
    assert "UTMASTG" in w and "HGMMA" in w
    assert sass_count(w, "UTMASTG") == spec.subtile and sass_count(bx, "UTMASTG") == spec.bn // spec.epi_cols
    assert w != bx


# The default (wgmma.cu): wide where the swizzled boxes would be 16 columns, 7 or more of them a
# subtile (H100 run 114: 0.83-0.88x the time there; 48 / 80 / 96 / 128 / 256 lost or tied wide).
@pytest.mark.parametrize("text, wide", [("bm=128 bn=112 warps=12 stages=5 warp_spec=2", True),
                                        ("bm=64 bn=144 warps=8 stages=7", True),
                                        ("bm=128 bn=240 warps=12 stages=3", True),
                                        ("bm=128 bn=224 warps=12 stages=3 subtile=2", True),   # 112 a subtile
                                        ("bm=64 bn=80 warps=8 stages=8", False),
                                        ("bm=128 bn=96 warps=12 stages=6", False),
                                        ("bm=128 bn=224 warps=12 stages=3", False),            # 32-column boxes
                                        ("bm=128 bn=256 warps=12 stages=3", False)])
def test_epi_wide_default_follows_the_box_rule(backend, hopper, sass, text, wide):
    spec = _spec(f"family=wgmma {text}")
    art = backend.compile(spec, Problem(1000, 1000, 4096, "nt"), hopper)
    sub = spec.bn // spec.subtile
    assert (b"cudal2_epi_wide" in art.binary) == wide         # the symbol the launcher reads
    stores = sass_count(sass(art.binary), "UTMASTG")
    assert stores == (spec.subtile if wide else spec.bn // spec.epi_cols)
    assert wide == (spec.epi_cols == 16 and sub >= 112) and art.meta["spills_bytes"] == 0
    # the default is exactly the forced build, machine code and all (an EPI_WIDE defined as an
    # expression of EPI_COLS once compiled a wide box with the 32-byte swizzle: same store count,
    # wrong C; the GPU checker caught it, this catches it on CPU)
    from cudal2.backends.sass import same_machine_code
    src = backend.render(spec, Problem(1000, 1000, 4096, "nt"))
    assert same_machine_code(f"#define EPI_WIDE {int(wide)}\n" + src, src, "sm_90a")


def sass_count(text: str, op: str) -> int:
    return sum(1 for line in text.splitlines() if op in line)


# PDL (wgmma.cu; 3 by default since 2026-12-06): the dependency wait (SASS ACQBULK) once, ahead of the
# first TMA load; the trigger (PREEXIT) right after it (PDL=1), later (PDL=2: after the producer's
# loads, or the lite schedule's last mainloop), or not at all (PDL=3); no spills; the symbol the
# launcher reads; PDL=0 has neither; the default is PDL=3's machine code; EARLY_LOAD (loads before the
# wait) is refused with PDL and turns the default off.
@pytest.mark.parametrize("text", ["bm=64 bn=64 warps=4 stages=3 warp_spec=0",
                                  "bm=128 bn=128 warps=12 stages=4",
                                  "bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=2",
                                  "bm=64 bn=64 warps=4 stages=4 warp_spec=0 split_k=4",
                                  "bm=128 bn=128 warps=12 stages=5 cluster=2"])
@pytest.mark.parametrize("pdl", [1, 2, 3])
def test_pdl_waits_before_the_first_load(backend, sass, text, pdl):
    spec = _spec(f"family=wgmma {text}")
    src = backend.render(spec, Problem(1000, 1000, 4096, "nt"))
    art = backend.compile_source(spec, f"#define PDL {pdl}\n" + src, "sm_90a", "nt")
    plain = backend.compile_source(spec, "#define PDL 0\n" + src, "sm_90a", "nt")
    assert art.meta["spills_bytes"] == 0 and b"cudal2_pdl" in art.binary and b"cudal2_pdl" not in plain.binary
    text_sass = sass(art.binary)
    lines = text_sass.splitlines()
    first = lambda op: next(i for i, line in enumerate(lines) if op in line)   # noqa: E731
    assert sass_count(text_sass, "ACQBULK") == 1 and first("ACQBULK") < first("UTMALDG")
    if pdl == 1:
        assert sass_count(text_sass, "PREEXIT") == 1 and first("ACQBULK") < first("PREEXIT") < first("UTMALDG")
    elif pdl == 2:
        assert sass_count(text_sass, "PREEXIT") >= 1 and first("PREEXIT") > first("UTMALDG")
    else:
        assert "PREEXIT" not in text_sass
    p = sass(plain.binary)
    assert "ACQBULK" not in p and "PREEXIT" not in p
    if pdl == 3:
        from cudal2.backends.sass import same_machine_code
        assert same_machine_code("#define PDL 3\n" + src, src, "sm_90a")


def test_pdl_refuses_early_loads(backend):
    spec = _spec("family=wgmma bm=64 bn=64 warps=4 stages=3 warp_spec=0")
    src = backend.render(spec, Problem(512, 512, 512, "nt"))
    with pytest.raises(Exception, match="PDL: EARLY_LOAD"):
        backend.compile_source(spec, "#define PDL 1\n#define EARLY_LOAD 1\n" + src, "sm_90a", "nt")
    early = backend.compile_source(spec, "#define EARLY_LOAD 1\n" + src, "sm_90a", "nt")   # default off
    assert b"cudal2_pdl" not in early.binary


# PDL in the mma and stream families (1 by default since 2026-12-06): every entry point waits once
# (ACQBULK) before anything else it does, the module carries the symbol the launcher reads, no
# spills, no trigger; on sm_80 (no griddepcontrol) PDL=1 builds the plain kernel; PDL=0 has neither
# the wait nor the symbol; the default is PDL=1's machine code.
@pytest.mark.parametrize("text, shape, entries", [
    ("family=mma bm=64 bn=64 bk=32 warps=4 stages=3 split_k=2", "100x64x96:nt", 3),
    ("family=mma bm=64 bn=64 bk=32 warps=4 stages=3", "100x64x96:nn", 3),    # the reduce is built too
    ("family=stream bm=64 bn=16 bk=32 warps=4 stages=4 group_m=1 split_k=2", "16x4096x4096:nt", 2)])
def test_pdl_in_mma_and_stream(backend, sass, text, shape, entries):
    from cudal2.backends.sass import same_machine_code
    spec, p = _spec(text), Problem.parse(shape)
    src = backend.render(spec, p)
    art = backend.compile_source(spec, "#define PDL 1\n" + src, "sm_90a", p.layout)
    code = sass(art.binary)
    assert sass_count(code, "ACQBULK") == entries and "PREEXIT" not in code
    assert b"cudal2_pdl" in art.binary and art.meta["spills_bytes"] == 0
    for fn in code.split("Function : ")[1:]:            # the wait comes before any load or store
        lines = fn.splitlines()
        first = lambda ops: next((i for i, line in enumerate(lines) if any(o in line for o in ops)), len(lines))  # noqa: E731
        assert first(["ACQBULK"]) < first(["LDG", "LDGSTS", "STG", "ATOM", "RED"])
    old = backend.compile_source(spec, "#define PDL 1\n" + src, "sm_80", p.layout)
    assert b"cudal2_pdl" not in old.binary and "ACQBULK" not in sass(old.binary)
    plain = backend.compile_source(spec, "#define PDL 0\n" + src, "sm_90a", p.layout)
    assert b"cudal2_pdl" not in plain.binary and "ACQBULK" not in sass(plain.binary)
    assert same_machine_code("#define PDL 1\n" + src, src, "sm_90a")
