"""Gradients through cudal2.matmul on the CPU: the torch fallback plan, kernel plans (a stand-in
kernel that serves the forward and both backward GEMMs), double backward, torch.compile, and the
no-grad fast path left as it was.

Tolerance: each gradient is one GEMM, so it is held to the same elementwise Higham bound as the
forward (test_ops.close: |C - ref| <= (K + 2) u |A||B| in the output's precision, K the GEMM's own
reduction length). torch's own gradients obey the same bound, which is why this compares both
against a float64 reference instead of each other bit for bit (summation order may differ).
"""
import warnings

import pytest
import torch

import cudal2
from cudal2 import ops, plans

from test_ops import _BindStandIn, close


@pytest.fixture(autouse=True)
def fresh():
    ops.clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # the CPU fallback's one-time warning
        yield
    ops.clear_cache()


def _b(layout, K, N, dtype, **kw):
    return torch.randn((K, N) if layout == "nn" else (N, K), dtype=dtype, **kw)


def _torch_grads(a, b, layout, g):
    a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
    c = torch.matmul(a, b if layout == "nn" else b.t())
    return torch.autograd.grad(c, (a, b), g)


def _grads_close(da, db, a, b, g, layout):
    """dA and dB each within the Higham bound of its own GEMM against float64."""
    a2, g2 = a.detach().reshape(-1, a.shape[-1]), g.reshape(-1, g.shape[-1])
    bd = b.detach()
    ok_a = close(da.reshape(a2.shape), g2, bd, "nt" if layout == "nn" else "nn")
    ok_b = close(db, a2.t(), g2, "nn") if layout == "nn" else close(db, g2.t(), a2, "nn")
    return ok_a and ok_b


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("lead", [(9,), (2, 5)])
def test_fallback_plan_keeps_gradients(layout, lead):
    K, N = 12, 7
    a = torch.randn(*lead, K, requires_grad=True)
    b = _b(layout, K, N, torch.float32, requires_grad=True)
    c = cudal2.matmul(a, b, layout=layout)
    assert c.grad_fn is not None and "cudal2_hgemm" in type(c.grad_fn).__name__
    g = torch.randn_like(c)
    da, db = torch.autograd.grad(c, (a, b), g)
    assert da.shape == a.shape and db.shape == b.shape
    assert _grads_close(da, db, a, b, g, layout)
    ta, tb = _torch_grads(a, b, layout, g)
    assert _grads_close(ta, tb, a, b, g, layout)       # torch is held to the same bound


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_gradcheck_and_double_backward(layout):
    a = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    b = _b(layout, 5, 4, torch.float64, requires_grad=True)
    f = lambda x, y: cudal2.matmul(x, y, layout=layout)     # noqa: E731
    assert torch.autograd.gradcheck(f, (a, b))
    assert torch.autograd.gradgradcheck(f, (a, b))


def test_only_needed_gradients():
    a = torch.randn(6, 4, requires_grad=True)
    w = torch.randn(3, 4)                                   # a frozen weight
    c = cudal2.matmul(a, w, layout="nt")
    c.sum().backward()
    assert w.grad is None and torch.allclose(a.grad, torch.ones(6, 3) @ w)


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_kernel_plans_serve_forward_and_backward(layout):
    """The forward and both backward GEMMs go to the plans the registry would choose: here three
    stand-in kernel plans (fp16 on the CPU), each of which must be called once."""
    M, N, K = 6, 10, 12
    a = torch.randn(2, 3, K).half().requires_grad_()
    b = _b(layout, K, N, torch.float16, requires_grad=True)
    g = torch.randn(2, 3, N).half()
    # (a shape, b shape, layout) of the three GEMMs: forward, dA, dB (see ops._backward).
    if layout == "nn":
        gemms = {"fwd": ((2, 3, K), (K, N), "nn"), "da": ((M, N), (K, N), "nt"), "db": ((K, M), (M, N), "nn")}
    else:
        gemms = {"fwd": ((2, 3, K), (N, K), "nt"), "da": ((M, N), (N, K), "nn"), "db": ((N, M), (M, K), "nn")}
    stands, cpu = {}, torch.device("cpu")
    for name, (sa, sb, lay) in gemms.items():
        m, kk = (a.numel() // K if name == "fwd" else sa[0]), sa[-1]
        n = sb[1] if lay == "nn" else sb[0]
        stands[name] = _BindStandIn(lay)
        out_shape = torch.Size((*sa[:-1], n))
        ops._PLANS[(torch.Size(sa), torch.Size(sb), torch.float16, torch.float16, cpu, cpu, lay, False)] = \
            plans.kernel_plan(stands[name], m, n, kk, out_shape, cpu, f"stand-in {name}")
    c = cudal2.matmul(a, b, layout=layout)
    assert c.grad_fn is not None and stands["fwd"].calls == 1
    assert close(c.detach().reshape(M, N), a.detach().reshape(M, K), b.detach(), layout)
    da, db = torch.autograd.grad(c, (a, b), g)
    assert [stands[n].calls for n in ("fwd", "da", "db")] == [1, 1, 1]
    assert da.dtype == db.dtype == torch.float16
    assert _grads_close(da, db, a, b, g, layout)


def test_compile_fullgraph_backward():
    a = torch.randn(2, 9, 12, requires_grad=True)
    w = torch.randn(7, 12, requires_grad=True)
    f = torch.compile(lambda x, y: (cudal2.matmul(x, y, layout="nt") ** 2).sum(), fullgraph=True,
                      backend="aot_eager")
    f(a, w).backward()
    ga, gw = a.grad.clone(), w.grad.clone()
    a.grad = w.grad = None
    (cudal2.matmul(a, w, layout="nt") ** 2).sum().backward()          # eager, same op
    assert torch.allclose(ga, a.grad, rtol=1e-5, atol=1e-5) and torch.allclose(gw, w.grad, rtol=1e-5, atol=1e-5)


def test_out_with_grad_is_refused_and_no_grad_path_is_plain():
    a, b = torch.randn(4, 5, requires_grad=True), torch.randn(5, 3)
    with pytest.raises(RuntimeError, match=r"out=.*does not support automatic differentiation"):
        cudal2.matmul(a, b, out=torch.empty(4, 3))
    with torch.no_grad():
        c = cudal2.matmul(a, b)
        out = torch.empty(4, 3)
        assert cudal2.matmul(a, b, out=out) is out
    assert c.grad_fn is None and torch.equal(c, out)
    plain = cudal2.matmul(a.detach(), b)
    assert plain.grad_fn is None and not plain.requires_grad
