"""The HF-LM stand-in policy: a tiny random GPT-2 saved to tmp_path; its answers are parsed and
validated, never executed; invalid ones are corrected with a clear rejection reason."""
import pytest
import torch

from cudal2.problems import Problem
from cudal2.rl.hf_policy import HFPolicy, prompt
from cudal2.spec import default_spec, validate


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from cudal2.rl.hf_local import build_grammar_lm
    return build_grammar_lm(tmp_path_factory.mktemp("tiny_lm"), n_embd=32, n_layer=1, n_head=2, seed=0)


def test_random_lm_answers_are_parsed_or_corrected(tiny_lm, hopper):
    pol = HFPolicy.load(tiny_lm, seed=0)
    p = Problem(100, 4096, 17, "nt")       # off-grid, N*K unaligned for TMA: a strict mask
    samples = pol.sample(p, hopper, 4, generator=torch.Generator().manual_seed(0))
    assert len(samples) == 4
    for s in samples:
        validate(s.spec, p, hopper)                     # every sample is valid, corrected or not
        if s.reason:
            # A random model answers garbage: the reason quotes it, says why, and what was replaced.
            assert s.reason.startswith("answer ") and " rejected (" in s.reason
            assert "constrained decoding replaced" in s.reason
        assert s.tokens and pol.tok.decode(s.tokens) == s.spec.text
        assert s.old_logp.shape == (len(s.tokens),)


def test_correction_keeps_valid_fields_and_names_bad_ones(tiny_lm, hopper):
    pol = HFPolicy.load(tiny_lm, seed=0)
    p = Problem(256, 256, 256)
    # family=wgmma does not belong to triton; bm=48 is not a choice at all.
    spec, replaced = pol.correct("backend=triton family=wgmma bm=48 bn=64 warps=4", p, hopper, None, 1.0,
                                 torch.Generator().manual_seed(0), prompt(p, hopper))
    validate(spec, p, hopper)
    assert spec.backend == "triton" and spec.bn == 64 and spec.warps == 4      # kept: valid where they stand
    assert any(r.startswith("family=wgmma->") for r in replaced)
    assert any(r.startswith("bm=?->") for r in replaced)                     # 48 did not parse: chosen anew


def test_valid_answer_passes_through_and_trains(tiny_lm, hopper, monkeypatch):
    from cudal2.rl.grpo import GRPO, GRPOConfig
    pol = HFPolicy.load(tiny_lm, seed=0)
    p = Problem(512, 512, 512)
    good, other = default_spec("tiled", p, hopper), default_spec("mma", p, hopper)
    monkeypatch.setattr(pol, "_generate", lambda text, n, t, g: [good.text, other.text, "bm=999", good.text][:n])
    samples = pol.sample(p, hopper, 4)
    assert [s.spec for s in samples[:2]] == [good, other] and samples[0].reason == "" == samples[1].reason
    assert "bm: 999 is not one of" in samples[2].reason
    lp_before = float(pol.token_logprobs(p, hopper, samples[:1])[0].detach().sum())
    tr = GRPO(pol, GRPOConfig(lr=1e-2, kl_coef=0.0))
    # The passed-through answers only: the corrected one's tokens were sampled at random by the
    # constrained decoder, so how much they share with `good` (and drag it down with their -1)
    # moved with any edit of the prompt's grammar text (2026-12-05: -258.6 -> -266.5 with all four).
    valid = [samples[0], samples[1], samples[3]]
    for _ in range(3):
        tr.step(p, hopper, valid, [1.0 if s.spec == good else -1.0 for s in valid])
    lp_after = float(pol.token_logprobs(p, hopper, samples[:1])[0].detach().sum())
    # Three Adam steps at lr 1e-2 on a 32-wide model move the rewarded answer's log-prob by whole
    # nats (measured -258.6 -> -235.9, seeded, 2026-12-05); 1 nat separates a real step from float noise.
    assert lp_after > lp_before + 1.0, (lp_before, lp_after)


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="not a local model directory"):
        HFPolicy.load(tmp_path / "nope")
    with pytest.raises(ValueError, match="cannot load a causal LM"):
        HFPolicy.load(tmp_path)
