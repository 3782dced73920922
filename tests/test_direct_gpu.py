"""GPU: the direct launch paths (issue 6) give exactly what the JIT / per-call paths give, and a
warmed-up direct call can be captured in a CUDA graph.

Exact equality (torch.equal), not a tolerance: the direct path launches the very compiled kernel the
JIT picked (Triton) or packs the same arguments (CUDA), so every bit must agree.

Run on an H200:  python3 -m pytest -q -m gpu tests/test_direct_gpu.py
"""
from __future__ import annotations

import pytest
import torch

import cudal2
from cudal2 import ops, plans
from cudal2.backends import get_backend
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry
from cudal2.spec import KernelSpec, SpecError, default_spec, is_valid, validate

pytestmark = pytest.mark.gpu

TRITON = [
    ("tiled", None),
    ("tiled", "bm=64 bn=64 bk=32 warps=4 stages=3 split_k=2"),
    ("persistent", None),
]
CUDA = [
    ("mma", None),
    ("mma", "bm=64 bn=64 bk=32 warps=4 stages=4 split_k=4"),
    ("wgmma", None),
]
SHAPES = [(1, 4096, 4096), (100, 264, 200), (128, 4096, 4096)]


def _kernel(backend, family, text, p, dev):
    try:
        spec = (default_spec(family, p, dev) if text is None else
                KernelSpec.parse(f"backend={backend} family={family} {text}"))
    except SpecError as e:
        pytest.skip(str(e))
    if not is_valid(spec, p, dev):
        pytest.skip(f"{spec.text} is not valid for {p}")
    be = get_backend(backend)
    return be.load(be.compile(validate(spec, p, dev), p, dev))


def _operands(p, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(p.M, p.K, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(*p.b_shape(), device="cuda", dtype=torch.float16, generator=g)
    return a, b


def _cases(pairs, backend):
    out = []
    for family, text in pairs:
        for M, N, K in SHAPES:
            for layout in ("nn", "nt"):
                out.append((backend, family, text, Problem(M, N, K, layout)))
    return out


def _id(case):
    be, fam, text, p = case
    return f"{fam}-{'default' if text is None else text.split()[-1]}-{p.text}"


@pytest.mark.parametrize("case", _cases(TRITON, "triton"), ids=_id)
def test_triton_direct_equals_jit(gpu_device, case):
    backend, family, text, p = case
    k = _kernel(backend, family, text, p, gpu_device)
    a, b = _operands(p, 0)
    c_jit, c_first, c_direct = (torch.full((p.M, p.N), float("nan"), device="cuda", dtype=torch.float16)
                                for _ in range(3))
    k._jit_launch(a, b, c_jit)                     # the family's launch through the JIT
    k.unchecked(a, b, c_first)                     # first call of the size: JIT, then recorded
    assert k.direct_why is None, k.direct_why
    assert k.direct_status(p.M, p.N, p.K) == "direct", k.direct_status(p.M, p.N, p.K)
    k.unchecked(a, b, c_direct)                    # the direct launch
    bound = torch.full_like(c_direct, float("nan"))
    k.bind(p.M, p.N, p.K)(a, b, bound)
    torch.cuda.synchronize()
    assert torch.equal(c_first, c_jit) and torch.equal(c_direct, c_jit) and torch.equal(bound, c_jit)
    # The result is right, not only repeatable (PROTOCOL bound).
    from cudal2.check import reference, rel_error
    assert rel_error(c_direct, reference(a, b, p.layout)) <= 5e-3
    # New tensors at new addresses: still direct, still the same bits as the JIT on them.
    a2, b2 = _operands(p, 1)
    c2, c2_jit = torch.empty_like(c_jit), torch.empty_like(c_jit)
    k.unchecked(a2, b2, c2)
    k._jit_launch(a2, b2, c2_jit)
    torch.cuda.synchronize()
    assert torch.equal(c2, c2_jit)


def test_triton_misaligned_goes_through_jit(gpu_device):
    p = Problem(64, 256, 256, "nn")
    k = _kernel("triton", "tiled", None, p, gpu_device)
    a, b = _operands(p, 2)
    c = torch.empty(p.M, p.N, device="cuda", dtype=torch.float16)
    k.unchecked(a, b, c)
    k.unchecked(a, b, c)
    buf = torch.empty(p.M * p.K + 1, device="cuda", dtype=torch.float16)
    am = buf[1:].view(p.M, p.K)
    am.copy_(a)
    cm = torch.empty_like(c)
    k.unchecked(am, b, cm)                          # a misaligned: the JIT's other specialisation
    torch.cuda.synchronize()
    assert torch.equal(cm, c)


@pytest.mark.parametrize("case", _cases(CUDA, "cuda"), ids=_id)
def test_cuda_bind_equals_run(gpu_device, case):
    backend, family, text, p = case
    k = _kernel(backend, family, text, p, gpu_device)
    a, b = _operands(p, 0)
    c_run, c_bind = (torch.full((p.M, p.N), float("nan"), device="cuda", dtype=torch.float16) for _ in range(2))
    k._run(p.M, p.N, p.K, a, b, c_run, k._stream(None))
    k.bind(p.M, p.N, p.K)(a, b, c_bind)
    torch.cuda.synchronize()
    assert torch.equal(c_bind, c_run)
    a2, b2 = _operands(p, 1)                        # new pointers (wgmma: new tensor maps)
    c_run2, c_bind2 = torch.empty_like(c_run), torch.empty_like(c_run)
    k._run(p.M, p.N, p.K, a2, b2, c_run2, k._stream(None))
    k.bind(p.M, p.N, p.K)(a2, b2, c_bind2)
    torch.cuda.synchronize()
    assert torch.equal(c_bind2, c_run2) and not torch.equal(c_bind2, c_bind)


@pytest.fixture
def registry(tmp_path, gpu_device):
    reg = Registry.load(tmp_path)
    for family, p in (("tiled", Problem(16, 4096, 4096, "nt")), ("persistent", Problem(256, 512, 384, "nn")),
                      ("mma", Problem(16, 1024, 512, "nt"))):
        spec = default_spec(family, p, gpu_device)
        reg.add(Entry(problem=p.text, device=gpu_device.key, backend=spec.backend, spec=spec.text),
                get_backend(spec.backend).render(spec, p))
    ops.set_registry(tmp_path)
    yield reg
    ops.set_registry(None)


@pytest.mark.parametrize("p", [Problem(16, 4096, 4096, "nt"), Problem(256, 512, 384, "nn"),
                               Problem(16, 1024, 512, "nt")], ids=lambda p: p.text)
def test_graph_capture_of_warm_direct_call(registry, p):
    a, b = _operands(p, 4)
    out = torch.empty(p.M, p.N, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):                          # plan, JIT launch + record, then direct
            cudal2.matmul(a, b, layout=p.layout)
            cudal2.matmul(a, b, layout=p.layout, out=out)
    torch.cuda.current_stream().wait_stream(s)
    plan = ops._PLANS[(a.shape, b.shape, a.dtype, b.dtype, a.device, b.device, p.layout, False)]
    assert isinstance(plan, plans.BoundPlan), plan.info
    for k in ops._KERNELS.values():                 # Triton kernels: the size goes direct now
        if hasattr(k, "direct_status") and k.supports(p):
            assert k.direct_status(p.M, p.N, p.K) == "direct"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = cudal2.matmul(a, b, layout=p.layout)
        cudal2.matmul(a, b, layout=p.layout, out=out)
    a2, b2 = _operands(p, 5)
    a.copy_(a2)
    b.copy_(b2)
    graph.replay()
    torch.cuda.synchronize()
    want = cudal2.matmul(a2, b2, layout=p.layout)     # eager, direct path, on the new inputs
    torch.cuda.synchronize()
    assert torch.equal(c, want) and torch.equal(out, want)
