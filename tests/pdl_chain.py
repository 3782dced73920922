"""The dependency check the PDL GPU tests share (tests/test_wgmma_pdl_gpu.py, test_pdl_families_gpu.py):
a kernel launched with programmatic stream serialization must still see every write before it."""
from __future__ import annotations

# PROTOCOL's normwise bound on the relative error: fp16 output rounds at ~2e-4; a launch that read a
# stale or half-written operand is off by O(1), or NaN (every output starts as NaN).
RTOL = 5e-3


def _rel_err(c, ref) -> float:
    import torch
    return float(torch.linalg.norm(c.float() - ref) / torch.linalg.norm(ref))


def check_dependencies(k, m: int, n: int, layout: str, steps: int = 5, seed: int = 11) -> None:
    """C = A @ W with W n x n (scaled by 1/sqrt(n): a chain keeps its magnitude), A m x n, through
    kernel k: (1) a chain of k's own launches, each reading the one before's output, queued without a
    sync; (2) each launch right after a torch kernel rewrote its A; (3) the chain captured into a CUDA
    graph (programmatic edges between its kernel nodes) and replayed after its outputs were poisoned."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = (torch.randn(n, n, generator=g, device="cuda") / n ** 0.5).half()
    b = w if layout == "nn" else w.t().contiguous()          # b in the layout: w as a [K, N] matrix
    wf = w.float()
    nan = float("nan")
    xs = [torch.randn(m, n, generator=g, device="cuda").half()]
    xs += [torch.full((m, n), nan, dtype=torch.float16, device="cuda") for _ in range(steps)]
    for i in range(steps):
        k(xs[i], b, xs[i + 1])
    srcs = [torch.randn(m, n, generator=g, device="cuda").half() for _ in range(steps)]
    a = torch.empty(m, n, dtype=torch.float16, device="cuda")
    cs = [torch.full((m, n), nan, dtype=torch.float16, device="cuda") for _ in range(steps)]
    for i in range(steps):
        a.copy_(srcs[i])
        k(a, b, cs[i])
    torch.cuda.synchronize()
    for i in range(steps):
        assert _rel_err(xs[i + 1], xs[i].float() @ wf) <= RTOL, f"chain step {i + 1} read a stale operand"
        assert _rel_err(cs[i], srcs[i].float() @ wf) <= RTOL, f"launch {i} after a torch write read a stale A"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        k(xs[0], b, xs[1])                  # this stream's split-K workspace exists before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            for i in range(steps):
                k(xs[i], b, xs[i + 1])
        for x in xs[1:]:
            x.fill_(nan)
        graph.replay()
    torch.cuda.synchronize()
    for i in range(steps):
        assert _rel_err(xs[i + 1], xs[i].float() @ wf) <= RTOL, f"graph step {i + 1} read a stale operand"
