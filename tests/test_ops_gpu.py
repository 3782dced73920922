"""GPU: dispatch from a registry holding a real Triton (tiled) and a real CUDA (mma) kernel, under
eager, torch.compile(fullgraph=True) and CUDA-graph capture; a patched tiny HF model.

Error bound: PROTOCOL.md's normwise relative error 5e-3 against an fp32 reference (fp16 output
rounding alone is ~2e-4, so a correct kernel sits well inside it)."""
import pytest
import torch

import cudal2
from cudal2 import ops, plans
from cudal2.backends import get_backend
from cudal2.check import reference, rel_error
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry
from cudal2.spec import default_spec

pytestmark = pytest.mark.gpu
REL = 5e-3
TRITON_P = Problem(256, 512, 384, "nn")
CUDA_P = Problem(192, 256, 320, "nt")


def rel_err(c, a, b, layout):
    return rel_error(c, reference(a, b, layout))      # the checker's fp32 reference, TF32 off


def operands(p, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(p.M, p.K, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(*p.b_shape(), device="cuda", dtype=torch.float16, generator=g)
    return a, b


def add_entry(reg, family, p, dev):
    spec = default_spec(family, p, dev)
    src = get_backend(spec.backend).render(spec, p)
    # No times: this registry exists to exercise dispatch, and no number here was measured.
    return reg.add(Entry(problem=p.text, device=dev.key, backend=spec.backend, spec=spec.text), src)


@pytest.fixture
def registry(tmp_path, gpu_device):
    reg = Registry.load(tmp_path)
    add_entry(reg, "tiled", TRITON_P, gpu_device)
    add_entry(reg, "mma", CUDA_P, gpu_device)
    ops.set_registry(tmp_path)
    yield reg
    ops.set_registry(None)


@pytest.mark.parametrize("p,backend", [(TRITON_P, "triton"), (CUDA_P, "cuda")])
def test_exact_hit_runs_the_registry_kernel(registry, p, backend):
    a, b = operands(p)
    c = cudal2.matmul(a, b, layout=p.layout)
    info = ops.plan_info(a, b, p.layout)
    assert info.startswith(f"kernel {registry.all()[0].device}/{p.text} (exact, {backend}"), info
    assert c.shape == (p.M, p.N) and c.dtype == torch.float16
    assert rel_err(c, a, b, p.layout) <= REL


OFF_GRID = [(Problem(200, 500, 384, "nn"), TRITON_P, {"M": [200, 256], "N": [500, 512]}),
            (Problem(7, 100, 320, "nt"), CUDA_P, {"M": [1, 192], "N": [100, 256]}),
            (Problem(1, 256, 320, "nt"), CUDA_P, {"M": [1, 192], "N": [100, 256]})]


@pytest.mark.parametrize("p, home, box", OFF_GRID)
def test_off_grid_is_cublas_unless_a_scope_holds_it(registry, gpu_device, p, home, box):
    """No entry and no scope: torch.matmul (cuBLAS). With a scope over the box the home entry's
    kernel serves the odd shape (its masked edges are what this checks). The scope's points are
    stand-ins (1.0 us each side: this registry exercises dispatch; no number here was measured)."""
    a, b = operands(p, seed=1)
    c = cudal2.matmul(a, b, layout=p.layout)
    assert ops.plan_info(a, b, p.layout).startswith(f"torch: no registry entry for {p.text}")
    e = registry.lookup(home, gpu_device.key)
    corners = [f"{m}x{n}x{home.K}:{home.layout}" for m in box["M"] for n in box["N"]]
    e.scope = {**box, "margin": 1.0, "points": [{"problem": q, "time_us": 1.0, "best_cublas_us": 1.0} for q in corners]}
    registry.add(e, registry.read_source(e))
    ops.set_registry(registry.root)
    c = cudal2.matmul(a, b, layout=p.layout)
    assert "(in its measured scope M" in ops.plan_info(a, b, p.layout)
    assert rel_err(c, a, b, p.layout) <= REL


def test_strided_misaligned_and_out(registry):
    p = TRITON_P
    a, b = operands(p, seed=2)
    buf = torch.empty(p.M * p.K + 1, device="cuda", dtype=torch.float16)
    a_mis = buf[1:].view(p.M, p.K)
    a_mis.copy_(a)
    bt = b.t().contiguous().t()                       # same values, non-contiguous
    out = torch.empty(p.M, p.N, device="cuda", dtype=torch.float16)
    r = cudal2.matmul(a_mis, bt, out=out)
    assert r is out and rel_err(out, a, b, "nn") <= REL
    with pytest.raises(ValueError, match="out is"):
        cudal2.matmul(a, b, out=torch.empty(p.M, p.N + 1, device="cuda", dtype=torch.float16))
    c3 = cudal2.matmul(a.view(2, p.M // 2, p.K), b)   # leading dims flatten into M
    assert c3.shape == (2, p.M // 2, p.N) and rel_err(c3.reshape(p.M, p.N), a, b, "nn") <= REL


def test_other_dtypes_fall_back(registry):
    a, b = (t.float() for t in operands(TRITON_P))
    with pytest.warns(RuntimeWarning, match="float16 only"):
        c = cudal2.matmul(a, b)
    assert c.dtype == torch.float32 and rel_err(c, a, b, "nn") <= REL
    with pytest.raises(ValueError, match="strict"):
        cudal2.matmul(a, b, strict=True)


def test_tampered_entry_falls_back_on_gpu(tmp_path, gpu_device):
    reg = Registry.load(tmp_path)
    e = add_entry(reg, "tiled", TRITON_P, gpu_device)
    (tmp_path / e.source).write_text((tmp_path / e.source).read_text() + "\n# edited\n")
    ops.set_registry(tmp_path)
    try:
        a, b = operands(TRITON_P)
        with pytest.warns(RuntimeWarning, match=f"refusing entry {e.key}"):
            c = cudal2.matmul(a, b)
        assert ops.plan_info(a, b).startswith("torch:") and rel_err(c, a, b, "nn") <= REL
    finally:
        ops.set_registry(None)


@pytest.mark.parametrize("p", [TRITON_P, CUDA_P])
def test_torch_compile_fullgraph(registry, p):
    a, b = operands(p, seed=3)
    f = torch.compile(lambda x, y: cudal2.matmul(x, y, layout=p.layout), fullgraph=True)
    g = torch.compile(lambda x, y: torch.ops.cudal2.hgemm(x, y, p.layout) + 0, fullgraph=True)
    assert rel_err(f(a, b), a, b, p.layout) <= REL
    assert rel_err(g(a, b), a, b, p.layout) <= REL
    assert "kernel" in ops.plan_info(a, b, p.layout)     # the compiled op dispatched to the kernel


@pytest.mark.parametrize("p", [TRITON_P, CUDA_P])
@pytest.mark.parametrize("via", ["matmul", "op"])
def test_cuda_graph_capture(registry, p, via):
    a, b = operands(p, seed=4)
    call = (lambda: cudal2.matmul(a, b, layout=p.layout)) if via == "matmul" else \
        (lambda: torch.ops.cudal2.hgemm(a, b, p.layout))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):                  # first use builds the plan and compiles, outside capture
            call()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = call()
    a2, b2 = operands(p, seed=5)
    a.copy_(a2)
    b.copy_(b2)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(c, a2, b2, p.layout) <= REL      # the replay computed the new inputs


def test_patched_hf_model_matches(tmp_path, gpu_device):
    transformers = pytest.importorskip("transformers")
    from cudal2.problems import problems_from_hf_config
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=512)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to("cuda", torch.float16).eval()
    ids = torch.randint(0, 512, (2, 24), device="cuda")
    reg = Registry.load(tmp_path)
    # Real kernels for the model's own problems: Triton for the square ones, CUDA mma otherwise.
    for p in problems_from_hf_config(cfg.to_dict(), [48]):
        add_entry(reg, "tiled" if p.N == p.K else "mma", p, gpu_device)
    ops.set_registry(tmp_path)
    try:
        with torch.no_grad():
            want = model(ids).logits.float()
            cudal2.patch_linear(model)
            got = model(ids).logits.float()
            cudal2.unpatch_linear(model)
        kernels = [pl for pl in ops._PLANS.values() if isinstance(pl, plans.KernelPlan)]
        assert len(kernels) >= 4, [pl.info for pl in ops._PLANS.values()]
        # Two fp16 layers of different summation order: each GEMM differs by ~1e-3 relative (fp16
        # output rounding), compounded through 2 blocks and the head; 1e-2 normwise leaves 3x room.
        err = (torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)).item()
        assert err <= 1e-2, err
    finally:
        ops.set_registry(None)


def test_patched_mlp_compile_and_graph(tmp_path, gpu_device):
    """A patched fp16 MLP with bias: eager, torch.compile(fullgraph=True) and a captured CUDA
    graph all match the unpatched module (fp16 rounding of one extra bias add: 5e-3 normwise)."""
    torch.manual_seed(3)
    mlp = nn_mlp().to("cuda", torch.float16)
    x = torch.randn(4, 32, 256, device="cuda", dtype=torch.float16)
    reg = Registry.load(tmp_path)
    add_entry(reg, "tiled", Problem(128, 512, 256, "nt"), gpu_device)
    add_entry(reg, "mma", Problem(128, 256, 512, "nt"), gpu_device)
    ops.set_registry(tmp_path)
    try:
        with torch.no_grad():
            want = mlp(x).float()
            cudal2.patch_linear(mlp)
            eager = mlp(x).float()
            assert sum(isinstance(pl, plans.KernelPlan) for pl in ops._PLANS.values()) == 2
            comp = torch.compile(mlp, fullgraph=True)(x).float()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = mlp(x)
            x.copy_(torch.randn_like(x))
            graph.replay()
            cudal2.unpatch_linear(mlp)
            want2 = mlp(x).float()
        for got, ref in ((eager, want), (comp, want), (y.float(), want2)):
            assert (torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref)).item() <= REL
    finally:
        ops.set_registry(None)


def nn_mlp():
    from torch import nn
    return nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))


# Issue 20's families served by cudal2.matmul: the stream family at a decode shape and the wgmma
# lite schedule at a tiny one (specs the registries file; no times: dispatch only).
DECODE = [(Problem(7, 4096, 4096, "nt"), "backend=cuda family=stream bm=32 bn=16 bk=32 warps=8 stages=8 split_k=1"),
          (Problem(16, 1024, 4096, "nt"), "backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=8 stages=13 split_k=6"),
          (Problem(128, 128, 512, "nn"), "backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=4 stages=8 warp_spec=0")]


@pytest.mark.parametrize("p,text", DECODE, ids=[p.text for p, _ in DECODE])
def test_decode_families_serve_a_decode_loop(tmp_path, gpu_device, p, text):
    """Steps of a decode loop (a fresh activation each step, the same weight; a second weight of the
    same shape between them, as a model's layers are): every call dispatches the filed kernel and
    matches the fp32 reference, and a step's output is not the previous step's."""
    from cudal2.spec import KernelSpec, validate
    spec = validate(KernelSpec.parse(text), p, gpu_device)
    reg = Registry.load(tmp_path)
    reg.add(Entry(problem=p.text, device=gpu_device.key, backend="cuda", spec=spec.text),
            get_backend("cuda").render(spec, p))
    ops.set_registry(tmp_path)
    try:
        _, w1 = operands(p, seed=10)
        _, w2 = operands(p, seed=11)
        prev = None
        for step in range(4):
            a, _ = operands(p, seed=20 + step)
            for w in (w1, w2):
                c = cudal2.matmul(a, w, layout=p.layout)
                assert rel_err(c, a, w, p.layout) <= REL, f"step {step}"
            assert ops.plan_info(a, w1, p.layout).startswith(f"kernel {gpu_device.key}/{p.text} (exact, cuda")
            if prev is not None:
                assert not torch.equal(c, prev)
            prev = c
    finally:
        ops.set_registry(None)
