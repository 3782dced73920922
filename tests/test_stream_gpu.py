"""The stream family (decode / skinny) through the PROTOCOL checker on a GPU: M in {1, 2, 3, 7, 16,
33, 64} against every N, K in {64, 1000, 4096, 14336}, both layouts, the skinny-N mirror (A large),
small-class shapes with more than 64 tokens,
split-K bit-identical across runs and across two streams, the bound launch equal to the checked one.

Run on an H200:  python3 -m pytest -q -m gpu tests/test_stream_gpu.py     (a few minutes)
"""
from __future__ import annotations

import pytest
import split_k_runs

from cudal2.check import CHECKS, check_kernel, make_inputs, reference, rel_error
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, validate

pytestmark = pytest.mark.gpu

# Specs: a split-K default-like one, one without split-K, a wide-token one, a large-tile one, a split of 3.
SPECS = {
    "s4": "bm=64 bn=16 warps=8 stages=3 split_k=4",
    "s1": "bm=32 bn=32 warps=4 stages=4 split_k=1",
    "t64": "bm=32 bn=64 warps=8 stages=2 split_k=2",
    "b128": "bm=128 bn=16 warps=4 stages=2 split_k=8",
    "s3": "bm=32 bn=16 warps=8 stages=3 split_k=3",          # split_k off the powers of two (2026-12-05)
}
MS = (1, 2, 3, 7, 16, 33, 64)
NK_SIZES = (64, 1000, 4096, 14336)

# Issue 20's grid: every M against every (N, K) of NK_SIZES, both layouts (224 full checks of the
# random / exact / poison / guard / fresh kind, a spec of SPECS each); edges once per spec and layout.
CASES = [(m, n, k) for m in MS for n in NK_SIZES for k in NK_SIZES]
MIRROR = [(4096, 7, 4096), (1000, 33, 1000), (14336, 1, 4096), (4096, 64, 14336), (17, 3, 64), (3000, 16, 1000)]
# The small class past 64 tokens (< 1 GFLOP, served since 2026-12-07): several token tiles, ragged
# against every tile (N % 8 == 0 where M <= N: nn streams B by 16-byte rows there).
SMALL = [(100, 136, 72), (257, 304, 520), (1000, 200, 1000), (72, 4096, 1000), (4000, 100, 64), (129, 136, 4096)]
_KERNELS: dict = {}


def _kernel(key: str, p: Problem, device):
    from cudal2.backends import get_backend
    spec = validate(KernelSpec.parse("backend=cuda family=stream " + SPECS[key]), p, device)
    k = _KERNELS.get((spec.text, p.layout))
    if k is None:
        be = get_backend("cuda")
        k = _KERNELS[(spec.text, p.layout)] = be.load(be.compile(spec, p, device))
    return k


def _report(report, what):
    return f"{what}:\n" + "\n".join(r.line() for r in report.results)


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", CASES + MIRROR, ids=lambda s: "x".join(map(str, s)))
def test_checker(gpu_device, shape, layout):
    from cudal2.spec import is_valid
    p = Problem(*shape, layout)
    keys = list(SPECS)[sum(shape) % len(SPECS):] + list(SPECS)     # a spread, skipping invalid splits
    key = next(k for k in keys if is_valid(KernelSpec.parse("backend=cuda family=stream " + SPECS[k]), p, gpu_device))
    k = _kernel(key, p, gpu_device)
    rep = check_kernel(k, p, "cuda", checks=[c for c in CHECKS if c != "edges"])
    assert rep.passed, _report(rep, f"{p} {SPECS[key]}")


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", SMALL, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("key", ["s1", "t64"])
def test_checker_small(gpu_device, shape, layout, key):
    """More tokens than one CTA's tile (min(M, N) > 64, the small class): every token tile of a
    ragged grid written once; a split-K spec and one without, two token widths (16 / 64 wide
    tiles are the other keys' and the rule's)."""
    p = Problem(*shape, layout)
    k = _kernel(key, p, gpu_device)
    rep = check_kernel(k, p, "cuda", checks=[c for c in CHECKS if c != "edges"])
    assert rep.passed, _report(rep, f"{p} {SPECS[key]}")


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("spec", ["bm=32 bn=16 warps=4 stages=4 split_k=2", "bm=16 bn=16 warps=8 stages=3 split_k=4"])
def test_exactly_48k_dynamic_smem(gpu_device, spec, layout):
    """Rings of exactly 48 KB with split-K (its static flag on top): the launcher must raise the
    dynamic smem cap; before, these failed to launch (H200 decode sweep, 2026-12-04)."""
    from cudal2.backends import get_backend
    from cudal2.spec import stream_smem
    p = Problem(4, 1024, 4096, layout)
    s = validate(KernelSpec.parse("backend=cuda family=stream " + spec), p, gpu_device)
    assert stream_smem(s.to_dict(), layout) == 48 * 1024
    be = get_backend("cuda")
    rep = check_kernel(be.load(be.compile(s, p, gpu_device)), p, "cuda", checks=[c for c in CHECKS if c != "edges"])
    assert rep.passed, _report(rep, f"{p} {spec}")


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("key", list(SPECS))
def test_edges(gpu_device, key, layout):
    """The full checker with its edge shapes (1, 17, 100, 1000, 3000 on each axis) where supported."""
    p = Problem(16, 1000, 1000, layout)
    k = _kernel(key, p, gpu_device)
    rep = check_kernel(k, p, "cuda")
    assert rep.passed, _report(rep, f"{p} {SPECS[key]}")
    assert rep.results[-1].name == "edges"


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", [(7, 4096, 14336), (64, 1000, 4096), (4096, 33, 4096), (1, 14336, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_split_k_bit_identical(gpu_device, shape, layout):
    """The last CTA of a tile sums the split partials in a fixed order: two runs, the bound launch
    and a launch on a second stream (its own workspace and counters) give the same bits."""
    import torch
    p = Problem(*shape, layout)
    for key in ("s4", "b128"):
        k = _kernel(key, p, gpu_device)
        a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(3))
        outs = split_k_runs.outputs(k, p, a, b)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            c2 = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
            k(a, b, c2)
        torch.cuda.current_stream().wait_stream(side)
        outs.append(c2)
        torch.cuda.synchronize()
        assert rel_error(outs[0], reference(a, b, layout)) <= 5e-3
        for o in outs[1:]:
            assert split_k_runs.same_bits(o, outs[0]), f"{p} {SPECS[key]}: not bit-identical"


def test_many_sizes_share_the_counters(gpu_device):
    """Sizes of different tile counts in a row on one stream: every counter is back at zero after
    each launch (a stale one would make a later tile's reduction fire early: wrong results)."""
    import torch
    for layout in ("nt", "nn"):
        for shape in ((1, 14336, 4096), (33, 1000, 1000), (7, 64, 4096), (1, 14336, 4096), (2, 4096, 14336)):
            p = Problem(*shape, layout)
            k = _kernel("s4", p, gpu_device)
            a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(5))
            c = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
            k.bind(p.M, p.N, p.K)(a, b, c)
            torch.cuda.synchronize()
            assert rel_error(c, reference(a, b, layout)) <= 5e-3, str(p)


def test_unaligned_operand_is_refused(gpu_device):
    import torch
    p = Problem(3, 64, 64, "nt")
    k = _kernel("s1", p, gpu_device)
    a = torch.randn(3 * 64 + 1, dtype=torch.float16, device="cuda")[1:].view(3, 64)
    b = torch.randn(64, 64, dtype=torch.float16, device="cuda")
    c = torch.empty(3, 64, dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="16-byte aligned"):
        k(a, b, c)
