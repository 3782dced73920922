"""wgmma.cu's PDL experiment (programmatic dependent launch) on a GPU: the kernel built with PDL=1
says so by its module symbol (the launcher then launches it with programmatic stream serialization),
passes the full checker in both layouts, and still sees every write of the kernels before it in the
stream, whether those are torch's or its own early-triggering launches.

Run on a Hopper card:  python3 -m pytest -q -m gpu tests/test_wgmma_pdl_gpu.py
"""
from __future__ import annotations

import pytest

from cudal2.check import check_kernel
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, validate

pytestmark = pytest.mark.gpu

# Every schedule and reduction path: lite, cooperative persistent, ping-pong with the workspace
# split-K (counters reset by the kernel: a dependent launch must not see them mid-reset), the
# cluster split-K, and a 2-CTA multicast cluster.
SPECS = ["bm=64 bn=64 warps=4 stages=3 warp_spec=0",
         "bm=128 bn=128 warps=12 stages=4",
         "bm=64 bn=128 warps=12 stages=6 warp_spec=2 split_k=2",
         "bm=64 bn=64 warps=4 stages=4 warp_spec=0 split_k=4",
         "bm=128 bn=128 warps=12 stages=5 cluster=2"]

# The PROTOCOL checker's bound on the normwise relative error: fp16 output rounds at ~2e-4, an
# fp32-accumulated product of K <= 512 terms stays far below 5e-3; a launch that read a stale or
# half-written operand is off by O(1) (or NaN: the outputs start as NaN).
RTOL = 5e-3


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


def _rel_err(c, ref) -> float:
    import torch
    return float(torch.linalg.norm(c.float() - ref) / torch.linalg.norm(ref))


@pytest.mark.parametrize("text", SPECS)
@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("pdl", [1, 2, 3])
def test_wgmma_pdl_sees_the_writes_before_it(gpu_device, layout, text, pdl):
    import torch
    n, steps = 512, 6
    p = Problem(n, n, n, layout)
    k = _pdl_kernel(gpu_device, text, p, pdl)
    g = torch.Generator(device="cuda").manual_seed(11)
    # B scaled by 1/sqrt(K) so a chain of products keeps its magnitude (no fp16 overflow).
    w = (torch.randn(n, n, generator=g, device="cuda") / n ** 0.5).half()
    b = w if layout == "nn" else w.t().contiguous()          # b @ layout == w as a [K, N] matrix
    # (1) Our own launches back to back, each reading the output of the one before (which
    # triggered its dependents at its start), queued without a sync; outputs start as NaN.
    xs = [torch.randn(n, n, generator=g, device="cuda").half()]
    xs += [torch.full((n, n), float("nan"), dtype=torch.float16, device="cuda") for _ in range(steps)]
    for i in range(steps):
        k(xs[i], b, xs[i + 1])
    # (2) Each launch right after a torch kernel rewrote its A.
    srcs = [torch.randn(n, n, generator=g, device="cuda").half() for _ in range(steps)]
    a = torch.empty(n, n, dtype=torch.float16, device="cuda")
    cs = [torch.full((n, n), float("nan"), dtype=torch.float16, device="cuda") for _ in range(steps)]
    for i in range(steps):
        a.copy_(srcs[i])
        k(a, b, cs[i])
    torch.cuda.synchronize()
    wf = w.float()
    for i in range(steps):
        assert _rel_err(xs[i + 1], xs[i].float() @ wf) <= RTOL, f"chain step {i + 1} read a stale operand"
        assert _rel_err(cs[i], srcs[i].float() @ wf) <= RTOL, f"launch {i} after a torch write read a stale A"
    # (3) The chain captured into a CUDA graph (programmatic edges between its kernel nodes: how
    # bench/graph_clock.py times it), replayed after its outputs were poisoned again.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        k(xs[0], b, xs[1])                  # this stream's split-K workspace exists before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            for i in range(steps):
                k(xs[i], b, xs[i + 1])
        for x in xs[1:]:
            x.fill_(float("nan"))
        graph.replay()
    torch.cuda.synchronize()
    for i in range(steps):
        assert _rel_err(xs[i + 1], xs[i].float() @ wf) <= RTOL, f"graph step {i + 1} read a stale operand"
