"""The stream family (decode / skinny, kernels_cuda/stream.cu) on the CPU: NVRTC compiles it for
sm_90a at M = 1, 7, 16, 64 in both layouts with no spills, its SASS uses tensor cores and no local
memory, the one validity rule refuses what it cannot serve naming the field, and a numpy emulation
of the kernel's index math (tests/stream_emulate.py) computes exact products, split-K included.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from cudal2.backends import cuda as cuda_mod
from cudal2.backends.cuda_stream import ENTRY_A, ENTRY_B, plan
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, SpecError, default_spec, is_valid, stream_smem, validate
from cudal2.spec_mask import valid_values

HERE = Path(__file__).resolve().parent

# M = 1, 7, 16, 64 (decode tokens) against Llama-3-8B-like projections, and the skinny-N mirror.
PROBLEMS = [(1, 4096, 4096), (7, 14336, 4096), (16, 4096, 14336), (64, 1024, 4096), (4096, 7, 4096)]
SPECS = [
    None,                                                   # the family default for the problem
    "bm=64 bn=16 warps=8 stages=2 split_k=4",
    "bm=16 bn=16 warps=4 stages=4 split_k=1",
    "bm=128 bn=16 warps=8 stages=2 split_k=2",
    "bm=32 bn=64 warps=8 stages=2 split_k=2",
    "bm=64 bn=32 warps=4 stages=2 split_k=8",
    "bm=32 bn=16 warps=8 stages=3 split_k=3",               # split_k off the powers of two
    "bm=64 bn=16 warps=4 stages=2 split_k=6",
]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    return cuda_mod.CudaBackend(cache_dir=tmp_path_factory.mktemp("cubin"))


def _spec(text: str | None, p: Problem, dev) -> KernelSpec:
    if text is None:
        return default_spec("stream", p, dev)
    return validate(KernelSpec.parse("backend=cuda family=stream " + text), p, dev)



@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", PROBLEMS, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("text", SPECS, ids=lambda t: "default" if t is None else t.replace(" ", ","))
def test_compiles_without_spills(backend, hopper, shape, layout, text):
    p = Problem(*shape, layout)
    spec = _spec(text, p, hopper)
    m = backend.compile(spec, p, hopper).meta
    assert m["arch"] == "sm_90a" and set(m["kernels"]) == {ENTRY_B, ENTRY_A}
    for name, r in m["kernels"].items():
        assert 0 < r["registers"] <= 255, (name, r)
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0, (name, m["log"])
    assert m["smem_dynamic"] == stream_smem(spec.to_dict(), layout)
    assert m["smem_dynamic"] + m["kernels"][ENTRY_B]["smem_static"] <= hopper.smem_per_block


@pytest.mark.parametrize("layout,want", [("nt", ("LDGSTS.E.BYPASS.128", "LDS.128")),
                                         ("nn", ("LDGSTS.E.BYPASS.128", "LDSM.16.MT88"))])
def test_sass_tensor_cores_no_local_memory(backend, hopper, sass, layout, want):
    p = Problem(7, 4096, 4096, layout)
    sass = sass(backend.compile(_spec(SPECS[1], p, hopper), p, hopper).binary)
    funcs = sass.split("Function : ")[1:]
    assert {f.split()[0] for f in funcs} == {ENTRY_A, ENTRY_B}
    for f in funcs:
        assert "HMMA.16816.F32" in f
        for op in ("LDL", "STL"):
            assert f" {op}" not in f and f"\t{op}" not in f, f"SASS uses local memory ({op})"
    body_b = next(f for f in funcs if f.startswith(ENTRY_B))
    for w in want:                    # B large: the per-thread cp.async ring (nt), or per-warp + ldmatrix.trans (nn)
        assert w in body_b, w
    assert "ATOMG" in body_b or "RED" in body_b or "ATOM" in body_b      # the split-K tile counter


@pytest.mark.parametrize("text,problem,field", [
    ("bm=64 bn=16 warps=8 stages=2", Problem(4096, 4096, 4096), "family"),          # not skinny
    ("bm=64 bn=16 warps=8 stages=2", Problem(1, 4096, 4100), "family"),             # K % 8
    ("bm=64 bn=16 warps=8 stages=2", Problem(1, 4100, 4096, "nn"), "family"),       # nn B rows: N % 8
    ("bm=256 bn=16 warps=8 stages=2", Problem(1, 4096, 4096), "bm"),
    ("bm=64 bn=128 warps=8 stages=2", Problem(1, 4096, 4096), "bn"),
    ("bm=64 bn=16 bk=64 warps=8 stages=2", Problem(1, 4096, 4096), "bk"),
    ("bm=64 bn=16 warps=12 stages=2", Problem(1, 4096, 4096), "warps"),
    ("bm=64 bn=16 warps=8 stages=12", Problem(1, 4096, 4096), "stages"),
    ("bm=128 bn=64 warps=4 stages=2", Problem(64, 4096, 4096), "bn"),               # accumulators
    ("bm=128 bn=16 warps=8 stages=8", Problem(1, 4096, 4096, "nn"), "stages"),      # nn ring smem
    ("bm=64 bn=16 warps=8 stages=2 split_k=16", Problem(1, 4096, 256), "split_k"),  # 8 chunks of 32
    ("bm=64 bn=16 warps=8 stages=2 group_m=8", Problem(1, 4096, 4096), "group_m"),
    ("bm=64 bn=16 warps=8 stages=2 cluster=2", Problem(1, 4096, 4096), "cluster"),
])
def test_invalid_specs_name_the_field(backend, hopper, monkeypatch, text, problem, field):
    monkeypatch.setattr(cuda_mod, "_nvrtc_compile", lambda *a, **k: pytest.fail("NVRTC reached"))
    with pytest.raises(SpecError) as e:
        backend.compile(KernelSpec.parse("backend=cuda family=stream " + text), problem, hopper)
    assert e.value.field == field, str(e.value)


def test_policy_mask_offers_stream_only_on_skinny_and_small(hopper):
    prefix = {"backend": "cuda"}
    assert "stream" in valid_values(prefix, "family", Problem(1, 4096, 4096, "nt"), hopper)
    assert "stream" in valid_values(prefix, "family", Problem(16384, 64, 4096, "nn"), hopper)
    assert "stream" not in valid_values(prefix, "family", Problem(128, 4096, 4096, "nt"), hopper)   # 4.3 GFLOP
    # the small class (< 1 GFLOP, any min(M, N)) since 2026-12-07; 1000 x 500 x 1000 is just 1 GFLOP
    assert "stream" in valid_values(prefix, "family", Problem(256, 256, 512, "nt"), hopper)
    assert "stream" in valid_values(prefix, "family", Problem(999, 500, 1000, "nn"), hopper)
    assert "stream" not in valid_values(prefix, "family", Problem(1000, 500, 1000, "nn"), hopper)


def test_defaults_and_fixed_list(hopper):
    from rl.search import FixedListPolicy
    for shape in ((1, 4096, 4096), (3, 14336, 4096), (64, 64, 64), (16384, 64, 4096), (33, 1000, 1000)):
        for layout in ("nn", "nt"):
            p = Problem(*shape, layout)
            assert is_valid(default_spec("stream", p, hopper), p, hopper)
            fams = {s.family for s in FixedListPolicy.candidates(p, hopper, ("cuda",))}
            assert "stream" in fams
    assert "stream" not in {s.family for s in FixedListPolicy.candidates(Problem(1024, 1024, 1024), hopper)}
    assert "stream" in {s.family for s in FixedListPolicy.candidates(Problem(512, 512, 512), hopper)}   # 0.27 GFLOP


def test_plan_picks_the_large_operand():
    spec = KernelSpec.parse("backend=cuda family=stream bm=64 bn=16 warps=8 stages=2 split_k=4")
    assert plan(spec, 7, 4096, 4096) == (ENTRY_B, (64, 1, 4))
    assert plan(spec, 4096, 33, 4096) == (ENTRY_A, (64, 3, 4))
    assert plan(spec, 64, 64, 64) == (ENTRY_B, (1, 4, 4))
    assert plan(spec, 300, 200, 64) == (ENTRY_A, (5, 13, 4))          # small class: tokens past 64


def _emulator():
    s = importlib.util.spec_from_file_location("stream_emulate", HERE / "stream_emulate.py")
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case", [
    (3, 40, 200, "nt", 16, 16, 2, 2, 1), (3, 40, 200, "nn", 32, 16, 2, 2, 2), (5, 72, 136, "nn", 16, 16, 2, 3, 1),
    (40, 3, 200, "nt", 16, 16, 2, 2, 2), (40, 5, 104, "nn", 32, 16, 2, 2, 1), (17, 17, 64, "nn", 16, 16, 2, 2, 1),
    (9, 136, 96, "nn", 64, 16, 2, 2, 3), (2, 160, 64, "nn", 128, 16, 2, 2, 1), (20, 33, 72, "nt", 16, 32, 2, 2, 1),
    (1, 24, 8, "nt", 16, 16, 2, 2, 1),
    # small-class shapes with min(M, N) > 64 (2026-12-07): several token tiles, ragged on both axes
    (72, 100, 64, "nt", 16, 32, 2, 2, 1), (100, 72, 48, "nn", 16, 64, 2, 2, 2), (70, 136, 40, "nn", 32, 32, 2, 2, 1),
], ids=str)
def test_emulated_index_math_is_exact(case):
    M, N, K, layout, bm, bn, warps, stages, split = case
    rng = np.random.default_rng(M * 31 + N + K)
    a = rng.integers(-3, 4, (M, K)).astype(float)
    b = rng.integers(-3, 4, (K, N) if layout == "nn" else (N, K)).astype(float)
    ref = a @ (b if layout == "nn" else b.T)
    c = _emulator().run(a, b, layout, bm, bn, warps, stages, split)
    assert np.array_equal(c, ref)


class _FakeKernel:
    """What StreamLauncher reads off a CudaKernel, with a recording `_launch` (no GPU)."""

    def __init__(self, text: str, layout: str):
        self.spec = KernelSpec.parse("backend=cuda family=stream " + text)
        self.layout, self.device_index, self.launches = layout, 0, []

    def _launch(self, name, grid, block, smem, stream, args):
        import ctypes
        vals = [ctypes.cast(args[i], ctypes.POINTER(ctypes.c_uint64)).contents.value for i in range(5)]
        ints = [ctypes.cast(args[i], ctypes.POINTER(ctypes.c_int)).contents.value for i in range(5, 8)]
        self.launches.append((name, grid, block, smem, stream, vals, ints))


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_launcher_packs_entry_grid_and_arguments(layout):
    from cudal2.backends.cuda_stream import StreamLauncher
    k = _FakeKernel("bm=32 bn=32 warps=4 stages=4 split_k=1", layout)
    s = StreamLauncher(k)
    s.run(7, 4096, 1024, 0x1000, 0x2000, 0x3002, 5)
    s.run(4096, 3, 1024, 0x1000, 0x2000, 0x3000, 5)
    smem = stream_smem(k.spec.to_dict(), layout)
    assert k.launches == [
        (ENTRY_B, (128, 1, 1), 128, smem, 5, [0x1000, 0x2000, 0x3002, 0, 0], [7, 4096, 1024]),
        (ENTRY_A, (128, 1, 1), 128, smem, 5, [0x1000, 0x2000, 0x3000, 0, 0], [4096, 3, 1024]),
    ]
    with pytest.raises(ValueError, match="16-byte aligned"):
        s.run(7, 4096, 1024, 0x1008, 0x2000, 0x3000, 5)
