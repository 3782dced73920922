"""wgmma.cu's PDL (programmatic dependent launch; 3, no trigger, by default since 2026-12-06; 1 and 2
trigger the next launch early) on a GPU: each build says so by its module symbol (the launcher then
launches it with programmatic stream serialization), passes the full checker in both layouts, and
still sees every write of the kernels before it in the stream, whether those are torch's or its own
early-triggering launches, also inside a CUDA graph (tests/pdl_chain.py).

Run on a Hopper card:  python3 -m pytest -q -m gpu tests/test_wgmma_pdl_gpu.py
"""
from __future__ import annotations

import pytest

from cudal2.check import check_kernel
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, validate
from pdl_chain import check_dependencies

pytestmark = pytest.mark.gpu

# Every schedule and reduction path: lite, cooperative persistent, ping-pong with the workspace
# split-K (counters reset by the kernel: a dependent launch must not see them mid-reset), the
# cluster split-K, and a 2-CTA multicast cluster.
SPECS = ["bm=64 bn=64 warps=4 stages=3 warp_spec=0",
         "bm=128 bn=128 warps=12 stages=4",
         "bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=2",
         "bm=64 bn=64 warps=4 stages=4 warp_spec=0 split_k=4",
         "bm=128 bn=128 warps=12 stages=5 cluster=2"]


def _pdl_kernel(dev, text: str, p: Problem, pdl: int):
    from cudal2.backends import get_backend
    be = get_backend("cuda")
    spec = validate(KernelSpec.parse(f"backend=cuda family=wgmma {text}"), p, dev)
    k = be.load(be.compile_source(spec, f"#define PDL {pdl}\n" + be.render(spec, p), dev.arch, p.layout))
    assert k.pdl, "the PDL build's module has no cudal2_pdl symbol: the launcher would not use PDL"
    return k


@pytest.mark.parametrize("text", SPECS)
@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("pdl", [1, 2, 3])      # the trigger: at the start, late, at exit
def test_wgmma_pdl_checker(gpu_device, layout, text, pdl):
    for p in (Problem(512, 512, 512, layout), Problem(33, 384, 1000, layout), Problem(1, 1000, 3000, layout)):
        report = check_kernel(_pdl_kernel(gpu_device, text, p, pdl), p, "cuda")
        assert report.passed, "\n".join(r.line() for r in report.results)


@pytest.mark.parametrize("text", SPECS)
@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("pdl", [1, 2, 3])
def test_wgmma_pdl_sees_the_writes_before_it(gpu_device, layout, text, pdl):
    n = 512
    check_dependencies(_pdl_kernel(gpu_device, text, Problem(n, n, n, layout), pdl), n, n, layout, steps=6)
