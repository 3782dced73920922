"""Issue 20's decode grid for the wgmma family's decode paths on a GPU: M in {1, 2, 3, 7, 16, 33, 64}
against every N, K in {64, 1000, 4096, 14336}, both layouts, through the PROTOCOL checker (random,
exact 0/1, poison, guard bands, fresh inputs; edges once per spec and layout), and split-K bit-identical
across runs at decode shapes. The specs are the ones the registries file for the decode set (A's box M
rows tall where M < BM: A_TRIM, the default for one-CTA loads) and the lite schedule the search seeds
under 1 GFLOP. tests/test_stream_gpu.py runs the same grid through the stream family.

Run on an H200:  python3 -m pytest -q -m gpu tests/test_decode_grid_gpu.py     (a few minutes)
"""
from __future__ import annotations

import pytest
import split_k_runs

from cudal2.check import CHECKS, check_kernel, make_inputs, reference, rel_error
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, is_valid, validate

pytestmark = pytest.mark.gpu

MS = (1, 2, 3, 7, 16, 33, 64)
NK_SIZES = (64, 1000, 4096, 14336)
CASES = [(m, n, k) for m in MS for n in NK_SIZES for k in NK_SIZES]

# The registries' decode specs (h200-sm90 / h100-sm90, 2026-12-07: 1x512x3584 and 8x1024x4096 nt,
# 16x4096x4096 nt) and two lite ones (one warpgroup; the split one a cluster of 4 K slices).
SPECS = {
    "split6": "bm=64 bn=32 warps=8 stages=16 split_k=6",
    "split2": "bm=64 bn=64 warps=8 stages=13 split_k=2",
    "lite": "bm=64 bn=64 warps=4 stages=8 warp_spec=0",
    "lite4": "bm=64 bn=128 warps=4 stages=6 warp_spec=0 split_k=4",
}
_KERNELS: dict = {}


def _spec(key: str) -> KernelSpec:
    return KernelSpec.parse("backend=cuda family=wgmma " + SPECS[key])


def _kernel(key: str, p: Problem, device):
    from cudal2.backends import get_backend
    spec = validate(_spec(key), p, device)
    k = _KERNELS.get((spec.text, p.layout))
    if k is None:
        be = get_backend("cuda")
        k = _KERNELS[(spec.text, p.layout)] = be.load(be.compile(spec, p, device))
    return k


def _pick(p: Problem, device) -> str:
    """A spread over SPECS (by the shape), skipping the ones invalid at p (a split past K's k-tiles)."""
    keys = list(SPECS)[sum((p.M, p.N, p.K)) % len(SPECS):] + list(SPECS)
    return next(k for k in keys if is_valid(_spec(k), p, device))


def _report(report, what):
    return f"{what}:\n" + "\n".join(r.line() for r in report.results)


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", CASES, ids=lambda s: "x".join(map(str, s)))
def test_checker(gpu_device, shape, layout):
    p = Problem(*shape, layout)
    key = _pick(p, gpu_device)
    k = _kernel(key, p, gpu_device)
    assert k.a_trim                      # every spec here loads A one CTA at a time: trimmed boxes
    rep = check_kernel(k, p, "cuda", checks=[c for c in CHECKS if c != "edges"])
    assert rep.passed, _report(rep, f"{p} {SPECS[key]}")


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("key", list(SPECS))
def test_edges(gpu_device, key, layout):
    """The full checker with its edge shapes (1, 17, 100, 1000, 3000 on each axis) where supported."""
    p = Problem(16, 1000, 1000, layout)
    rep = check_kernel(_kernel(key, p, gpu_device), p, "cuda")
    assert rep.passed, _report(rep, f"{p} {SPECS[key]}")
    assert rep.results[-1].name == "edges"


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", [(1, 14336, 4096), (7, 4096, 14336), (64, 1000, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("key", ["split6", "split2", "lite4"])
def test_split_k_bit_identical(gpu_device, key, shape, layout):
    """A tile's K slices are summed in slice order: two runs and the bound launch give the same bits."""
    import torch
    p = Problem(*shape, layout)
    k = _kernel(key, p, gpu_device)
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(5))
    outs = split_k_runs.outputs(k, p, a, b)
    torch.cuda.synchronize()
    assert rel_error(outs[0], reference(a, b, layout)) <= 5e-3      # PROTOCOL's normwise bound
    for o in outs[1:]:
        assert split_k_runs.same_bits(o, outs[0]), f"{p} {SPECS[key]}: not bit-identical"
