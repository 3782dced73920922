"""GPU: gradients through registry kernel plans, both layouts, eager and torch.compile(fullgraph=True).

The registry holds a tiled Triton kernel for the forward GEMM and for both backward GEMMs (dA, dB;
their problems are in ops._backward), so all three run generated kernels. Tolerance: each gradient
is one fp16 GEMM with fp32 accumulation and an fp16 output, like the forward, so PROTOCOL's
normwise relative error 5e-3 against the checker's fp32 reference applies to it (fp16 output
rounding alone is ~2e-4); torch's fp16 gradients obey the same bound, so the two differ by at most
2 x 5e-3 (triangle inequality), which the test also asserts.
"""
import pytest
import torch

import cudal2
from cudal2 import ops
from cudal2.backends import get_backend
from cudal2.check import rel_error
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry
from cudal2.spec import default_spec

pytestmark = pytest.mark.gpu
REL = 5e-3
M, N, K = 256, 384, 512


def gemms(layout):
    """The forward, dA and dB problems of C = A op(B) with A [M, K]."""
    if layout == "nn":
        return [Problem(M, N, K, "nn"), Problem(M, K, N, "nt"), Problem(K, N, M, "nn")]
    return [Problem(M, N, K, "nt"), Problem(M, K, N, "nn"), Problem(N, K, M, "nn")]


@pytest.fixture
def registry(tmp_path, gpu_device):
    reg = Registry.load(tmp_path, create=True)
    for lay in ("nn", "nt"):
        for p in gemms(lay):
            if reg.lookup(p, gpu_device.key) is None:
                spec = default_spec("tiled", p, gpu_device)
                reg.add(Entry(problem=p.text, device=gpu_device.key, backend="triton", spec=spec.text),
                        get_backend("triton").render(spec, p))
    ops.set_registry(tmp_path)
    yield reg
    ops.set_registry(None)


def operands(layout, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16, generator=g).requires_grad_()
    shape = (K, N) if layout == "nn" else (N, K)
    b = torch.randn(*shape, device="cuda", dtype=torch.float16, generator=g).requires_grad_()
    gc = torch.randn(M, N, device="cuda", dtype=torch.float16, generator=g)
    return a, b, gc


def reference_grads(a, b, gc, layout):
    """fp32 gradients (TF32 off) of the same inputs."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a32, b32 = a.detach().float().requires_grad_(), b.detach().float().requires_grad_()
        c = a32 @ (b32 if layout == "nn" else b32.t())
        return torch.autograd.grad(c, (a32, b32), gc.float())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def torch_grads(a, b, gc, layout):
    a2, b2 = a.detach().requires_grad_(), b.detach().requires_grad_()
    return torch.autograd.grad(a2 @ (b2 if layout == "nn" else b2.t()), (a2, b2), gc)


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("compiled", [False, True])
def test_grads_through_kernel_plans(registry, layout, compiled):
    a, b, gc = operands(layout, seed=1 + compiled)
    f = lambda x, y: cudal2.matmul(x, y, layout=layout)        # noqa: E731
    if compiled:
        f = torch.compile(f, fullgraph=True)
    c = f(a, b)
    assert c.grad_fn is not None
    da, db = torch.autograd.grad(c, (a, b), gc)
    ra, rb = reference_grads(a, b, gc, layout)
    ta, tb = torch_grads(a, b, gc, layout)
    assert rel_error(da, ra) <= REL and rel_error(db, rb) <= REL
    assert rel_error(da, ta.float()) <= 2 * REL and rel_error(db, tb.float()) <= 2 * REL
    # Every GEMM of the step was served by a registry kernel, not torch.
    fwd, pa, pb = gemms(layout)
    g2 = torch.empty(M, N, device="cuda", dtype=torch.float16)
    keys = {"fwd": (a, b, layout),
            "da": (g2, b, "nt" if layout == "nn" else "nn"),
            "db": ((a.t(), g2, "nn") if layout == "nn" else (g2.t(), a, "nn"))}
    for name, (x, y, lay) in keys.items():
        info = ops.plan_info(x, y, lay)
        assert info.startswith("kernel ") and "(exact, triton" in info, (name, info)


def test_patched_linear_trains(registry, gpu_device):
    """A patched fp16 nn.Linear learns: its weight gradient matches torch's and a step moves it."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(K, N, bias=True, device="cuda", dtype=torch.float16)
    ref = torch.nn.Linear(K, N, bias=True, device="cuda", dtype=torch.float16)
    ref.load_state_dict(lin.state_dict())
    assert cudal2.patch_linear(lin) == 1
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    lin(x).float().square().mean().backward()
    ref(x).float().square().mean().backward()
    assert rel_error(lin.weight.grad, ref.weight.grad.float()) <= 2 * REL
    assert rel_error(lin.bias.grad, ref.bias.grad.float()) <= 2 * REL
    assert ops.plan_info(x, lin.weight, "nt").startswith("kernel ")
