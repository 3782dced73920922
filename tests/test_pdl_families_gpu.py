"""PDL in the mma and stream families on a GPU (kernels_cuda/mma.cu, stream.cu; an experiment, 0 in
every filed kernel): the PDL=1 build says so by its module symbol, passes the full checker in both
layouts, and still sees every write of the kernels before it in the stream (torch's, its own, and
inside a CUDA graph), the split-K reduction launch included.

Run on a Hopper card:  python3 -m pytest -q -m gpu tests/test_pdl_families_gpu.py
"""
from __future__ import annotations

import pytest

from cudal2.check import check_kernel
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, validate
from pdl_chain import check_dependencies

pytestmark = pytest.mark.gpu

# (spec, the chain's size: square for mma, 16 tokens for the decode family)
CASES = [("family=mma bm=64 bn=64 bk=32 warps=4 stages=3", 512),
         ("family=mma bm=64 bn=64 bk=32 warps=4 stages=3 split_k=2", 512),        # + the reduce launch
         ("family=stream bm=64 bn=16 bk=32 warps=4 stages=4 group_m=1", 16),
         ("family=stream bm=64 bn=16 bk=32 warps=4 stages=4 group_m=1 split_k=2", 16)]


def _build(dev, text: str, p: Problem):
    from cudal2.backends import get_backend
    be = get_backend("cuda")
    spec = validate(KernelSpec.parse(f"backend=cuda {text}"), p, dev)
    k = be.load(be.compile_source(spec, "#define PDL 1\n" + be.render(spec, p), dev.arch, p.layout))
    assert k.pdl, "the PDL build's module has no cudal2_pdl symbol"
    return k


@pytest.mark.parametrize("text, m", CASES)
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_pdl_family_checker(gpu_device, layout, text, m):
    shapes = [(m, 512, 512), (min(m, 33), 384, 1000), (1, 1000, 3000)]
    for M, N, K in shapes:
        p = Problem(M, N, K, layout)
        report = check_kernel(_build(gpu_device, text, p), p, "cuda")
        assert report.passed, "\n".join(r.line() for r in report.results)


@pytest.mark.parametrize("text, m", CASES)
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_pdl_family_sees_the_writes_before_it(gpu_device, layout, text, m):
    check_dependencies(_build(gpu_device, text, Problem(m, 512, 512, layout)), m, 512, layout)
