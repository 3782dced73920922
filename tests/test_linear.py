"""patch_linear / unpatch_linear on a tiny Llama built from a config (no download), on the CPU."""
import warnings

import pytest
import torch
from torch import nn

import cudal2
from cudal2 import linear, ops

transformers = pytest.importorskip("transformers")


def tiny_llama(dtype):
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(dtype).eval()


N_LINEAR = 2 * 7 + 1      # q k v o gate up down per layer, plus lm_head


@pytest.fixture(autouse=True)
def fresh():
    ops.clear_cache()
    yield
    ops.clear_cache()


def test_fp32_identical_and_unpatch_restores():
    model = tiny_llama(torch.float32)
    ids = torch.randint(0, 96, (2, 11))
    with torch.no_grad():
        want = model(ids).logits
        assert cudal2.patch_linear(model) == N_LINEAR
        assert cudal2.patch_linear(model) == 0                     # idempotent
        got = model(ids).logits
        # fp32 is not tuned: a patched layer runs the original forward, bit for bit.
        assert torch.equal(got, want)
        assert cudal2.unpatch_linear(model) == N_LINEAR
        assert torch.equal(model(ids).logits, want)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            assert "forward" not in m.__dict__ and m.forward.__func__ is nn.Linear.forward
            assert not linear.is_patched(m)


def test_fp16_routes_through_dispatch(monkeypatch):
    model = tiny_llama(torch.float16)
    ref = tiny_llama(torch.float32)
    ids = torch.randint(0, 96, (2, 11))
    calls = []
    real = linear.matmul

    def spy(x, w, **kw):
        calls.append((tuple(x.shape), tuple(w.shape), kw["layout"]))
        return real(x, w, **kw)

    monkeypatch.setattr(linear, "matmul", spy)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)       # CPU fallback notice
        want16 = model(ids).logits.float()
        want32 = ref(ids).logits
        cudal2.patch_linear(model)
        got = model(ids).logits.float()
    # Every linear call went to cudal2.matmul with the weight as the nt operand, leading dims intact.
    assert len(calls) == N_LINEAR and all(c[2] == "nt" and c[0][:2] == (2, 11) for c in calls)
    assert calls[-1][1] == (96, 64)
    # Patched and unpatched differ only by fp16 rounding of mm+bias vs addmm, and the network has
    # no bias here, so they agree to fp16 noise; both stay close to the fp32 model (rounding of
    # fp16 weights and activations through 2 layers: well under 1% of the logit scale).
    scale = want32.abs().max().item()
    assert (got - want16).abs().max().item() <= 2e-3 * scale
    assert (got - want32).abs().max().item() <= 2e-2 * scale


def test_bias_grad_and_instance_forward():
    torch.manual_seed(1)
    lin = nn.Linear(12, 5).half()
    x = torch.randn(3, 4, 12).half()
    own = lambda t: nn.Linear.forward(lin, t) * 1   # an instance-level forward set by someone else
    lin.forward = own
    cudal2.patch_linear(lin)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with torch.no_grad():
            y = lin(x)
        xr = x.clone().requires_grad_()
        lin(xr).float().sum().backward()          # requires grad: through the op's backward
    ref = x.double() @ lin.weight.double().t() + lin.bias.double()
    # fp16 output of a 12-term dot product plus bias: relative rounding 2^-11 per step.
    assert (y.double() - ref).abs().max().item() <= 14 * 2**-11 * ref.abs().max().item()
    gw = torch.ones(3, 4, 5).double().reshape(-1, 5).t() @ x.double().reshape(-1, 12)
    assert (lin.weight.grad.double() - gw).abs().max().item() <= 16 * 2**-11 * gw.abs().max().item()
    gx = torch.ones(3, 4, 5).double() @ lin.weight.double()
    assert (xr.grad.double() - gx).abs().max().item() <= 8 * 2**-11 * gx.abs().max().item()
    cudal2.unpatch_linear(lin)
    assert lin.forward is own


def test_one_vector_input_runs_the_original_forward():
    # nn.Linear takes a 1-D x; cudal2.matmul needs [..., M, K]. The patched layer must not raise
    # there but run the original forward: the same fp16 operations, so the result is bit-identical.
    torch.manual_seed(4)
    lin = nn.Linear(12, 5).half()
    x = torch.randn(12).half()
    with torch.no_grad():
        want = lin(x)
        cudal2.patch_linear(lin)
        got = lin(x)
    assert got.shape == (5,) and torch.equal(got, want)


def test_rejects_non_module():
    with pytest.raises(TypeError, match="nn.Module"):
        cudal2.patch_linear("model")


def test_patched_module_compiles_fullgraph():
    """The patched forward (dtype test, matmul -> cudal2::hgemm, bias add) traces as one graph."""
    torch.manual_seed(2)
    mlp = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 8, bias=False)).half()
    x = torch.randn(2, 5, 16).half()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = mlp(x)
        cudal2.patch_linear(mlp)
        got = torch.compile(mlp, fullgraph=True, backend="aot_eager")(x)
    # Same fp16 operations in the same order (mm then bias add) vs addmm: fp16 rounding apart.
    assert (got.float() - want.float()).abs().max().item() <= 4 * 2**-11 * want.float().abs().max().item()
