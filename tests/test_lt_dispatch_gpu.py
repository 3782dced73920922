"""GPU: cuBLASLt dispatch for cublas registry entries (cudal2.lt_dispatch) against the fp32
reference, with stored and heuristic algorithms, both layouts, off-tile shapes, views whose
pointers are not 256-byte aligned, and cudal2.matmul under CUDA-graph capture.

Error bound: PROTOCOL.md's normwise relative error 5e-3 (fp16 output rounding alone is ~2e-4)."""
import pytest
import torch

from cudal2 import lt_dispatch, ops
from cudal2.check import reference, rel_error
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry

pytestmark = pytest.mark.gpu
REL = 5e-3
SHAPES = [Problem(264, 200, 136, "nn"), Problem(264, 200, 136, "nt"), Problem(64, 4096, 1032, "nn")]


def need_lt():
    if lt_dispatch.lt_version() is None:
        pytest.skip("nvmath-python (cuBLASLt) not importable")


def operands(p, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(p.M, p.K, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(*p.b_shape(), device="cuda", dtype=torch.float16, generator=g)
    return a, b


def stored_words(p):
    """A real algorithm other than the heuristic's first, as the autotune cache stores it."""
    from cudal2.baselines import LtPlan
    algos = LtPlan(p).candidates(4)
    return [int(w) for w in algos[-1]["data_"][0]]


@pytest.mark.parametrize("p", SHAPES, ids=lambda p: p.text)
@pytest.mark.parametrize("stored", [False, True], ids=["heuristic", "stored"])
def test_lt_kernel_matches_reference(p, stored):
    need_lt()
    words = stored_words(p) if stored else None
    k = lt_dispatch.LtKernel(p, words)
    if stored:
        assert [int(w) for w in k.algo["data_"][0]] == words
    a, b = operands(p)
    c = torch.full((p.M, p.N), float("nan"), device="cuda", dtype=torch.float16)   # unwritten shows
    k(a, b, c)
    torch.cuda.synchronize()
    assert rel_error(c, reference(a, b, p.layout)) <= REL


def test_lt_kernel_misaligned_views_take_torch():
    need_lt()
    p = SHAPES[0]
    a, b = operands(p)
    # 16-byte aligned (what ops' plans guarantee) but not 256: the algorithm was chosen for 256.
    abuf = torch.empty(a.numel() + 8, device="cuda", dtype=torch.float16)
    cbuf = torch.full((p.M * p.N + 8,), float("nan"), device="cuda", dtype=torch.float16)
    a2, c2 = abuf[8:].view(p.M, p.K), cbuf[8:].view(p.M, p.N)
    a2.copy_(a)
    assert a2.data_ptr() % 256 and c2.data_ptr() % 256
    lt_dispatch.LtKernel(p, stored_words(p))(a2, b, c2)
    torch.cuda.synchronize()
    assert rel_error(c2, reference(a, b, p.layout)) <= REL
    assert torch.isnan(cbuf[:8]).all()                  # nothing written before the view


def test_matmul_dispatches_cublas_entry_to_cublaslt_and_captures(tmp_path, gpu_device):
    need_lt()
    p = Problem(264, 200, 136, "nt")
    reg = Registry.load(tmp_path)
    # Times are placeholders that make autotune the fastest: this test is about what runs.
    reg.add(Entry(problem=p.text, device=gpu_device.key, backend="cublas", time_us=1.0, best_cublas_us=1.0,
                  baselines_us={"torch": 2.0, "cublaslt-autotune": 1.0},
                  lt_algo={"data": stored_words(p), "cublasLt": lt_dispatch.lt_version()}), None)
    ops.set_registry(tmp_path)
    try:
        a, b = operands(p)
        c = ops.matmul(a, b, layout="nt")
        assert ops.plan_info(a, b, "nt").startswith("cublaslt-autotune: cublas won")
        assert rel_error(c, reference(a, b, "nt")) <= REL
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            ops.matmul(a, b, layout="nt")                   # warm on the capture stream
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = ops.matmul(a, b, layout="nt")
        a2, b2 = operands(p, seed=1)
        a.copy_(a2)
        b.copy_(b2)
        g.replay()
        torch.cuda.synchronize()
        assert rel_error(out, reference(a2, b2, "nt")) <= REL
    finally:
        ops.set_registry(None)
