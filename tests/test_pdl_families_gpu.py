"""PDL in the mma and stream families (kernels_cuda/pdl.cuh, 1 by default since 2026-12-06) and the
Triton tiled family (kernels_triton/tiled.py, loaded with pdl=True, its default since run 131) on a GPU: the
PDL build says so (the module symbol; the Triton kernel's `pdl`), passes the full checker in both
layouts, and still sees every write of the kernels before it in the stream (torch's, its own, and
inside a CUDA graph), the split-K reduction launch included; Triton's direct launch (a size's calls
after its first) too.

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


TRITON = ["family=tiled bm=64 bn=64 bk=32 warps=4 stages=3 group_m=8",
          "family=tiled bm=32 bn=64 bk=64 warps=4 stages=2 split_k=3"]


def _triton(dev, text: str, p: Problem):
    from cudal2.backends import triton as tb
    spec = validate(KernelSpec.parse(f"backend=triton {text}"), p, dev)
    k = tb.load(tb.compile(spec, p, dev), pdl=True)      # asked for (on by default since run 131 where supported)
    assert k.pdl
    return k


@pytest.mark.parametrize("text", TRITON)
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_pdl_triton_checker(gpu_device, layout, text):
    for M, N, K in [(16, 512, 512), (33, 384, 1000), (1, 1000, 3000)]:
        p = Problem(M, N, K, layout)
        report = check_kernel(_triton(gpu_device, text, p), p, "cuda")
        assert report.passed, "\n".join(r.line() for r in report.results)


@pytest.mark.parametrize("text", TRITON)
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_pdl_triton_sees_the_writes_before_it(gpu_device, layout, text):
    k = _triton(gpu_device, text, Problem(64, 512, 512, layout))
    check_dependencies(k, 64, 512, layout)
    assert k.direct_status(64, 512, 512) == "direct"     # the chain's later calls went direct
