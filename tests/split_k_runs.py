"""What the split-K determinism tests of the decode families share (GPU only): a kernel's output for
one problem's inputs from repeated checked-path calls and its bound launch, each written over a NaN
poisoned C, so the tests compare their bits."""
from __future__ import annotations


def outputs(kernel, p, a, b, runs: int = 2) -> list:
    """C from `runs` calls of kernel(a, b, c), then one of its bound launch (kernel.bind)."""
    import torch

    def poisoned():
        return torch.full((p.M, p.N), float("nan"), dtype=torch.float16, device="cuda")
    outs = []
    for _ in range(runs):
        c = poisoned()
        kernel(a, b, c)
        outs.append(c)
    c = poisoned()
    kernel.bind(p.M, p.N, p.K)(a, b, c)
    outs.append(c)
    return outs


def same_bits(x, y) -> bool:
    """fp16 tensors equal bit for bit (NaN payloads included, which torch.equal would not call equal)."""
    import torch
    return torch.equal(x.view(torch.int16), y.view(torch.int16))
