"""A policy saved before the grammar grew (a choice added to cudal2.spec.CHOICES, e.g. a new family)
loads with its token rows moved to the new ids: it scores every old choice exactly as before, the
new token starts from fresh weights, and a resumed search moves the GRPO reference and Adam's
moments the same way. A grammar that lost a choice is refused.

The "old" checkpoints are made from today's policy by deleting one token ("family=wgmma") from the
vocabulary and its rows from every [vocab, d_model] tensor: what a checkpoint saved before that
choice existed looks like.
"""
import pytest
import torch

from cudal2.problems import Problem
from cudal2.rl.features import N_FEATURES
from cudal2.rl.grpo import GRPO, GRPOConfig
from cudal2.rl.policy import SpecPolicy
from cudal2.rl.search import Search
from cudal2.rl.vocab import VOCAB, rows_from
from cudal2.spec import KernelSpec

DROPPED = "family=wgmma"
WTE = "lm.transformer.wte.weight"


def _drop(state, idx: int, n: int):
    """`state` as saved under a vocabulary without token `idx` (every [n, d] tensor loses that row)."""
    if isinstance(state, dict):
        return {k: _drop(v, idx, n) for k, v in state.items()}
    if isinstance(state, torch.Tensor) and state.ndim == 2 and state.shape[0] == n:
        return torch.cat([state[:idx], state[idx + 1:]]).clone()
    return state


def _trained_like(seed: int) -> SpecPolicy:
    p = SpecPolicy(seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():      # weights away from the initial ones, as after training
        for prm in p.parameters():
            prm.add_(0.1 * torch.randn(prm.shape, generator=g))
    return p


def _save_old(p: SpecPolicy, path) -> list[str]:
    idx = VOCAB.index[DROPPED]
    old = [t for i, t in enumerate(VOCAB.tokens) if i != idx]
    torch.save({"kind": "default", "hparams": p.hparams, "vocab": old,
                "state": _drop({k: v.detach().clone() for k, v in p.state_dict().items()}, idx, len(VOCAB))}, path)
    return old


def test_old_checkpoint_scores_old_choices_as_before(tmp_path):
    p = _trained_like(3)
    old = _save_old(p, tmp_path / "policy.pt")
    q = SpecPolicy.load(tmp_path / "policy.pt")
    assert q.remapped_from == old
    idx = VOCAB.index[DROPPED]
    fresh = SpecPolicy(**p.hparams).state_dict()
    for key in (WTE, "lm.lm_head.weight"):
        keep = [i for i in range(len(VOCAB)) if i != idx]
        assert torch.equal(q.state_dict()[key][keep], p.state_dict()[key][keep])
        assert torch.equal(q.state_dict()[key][idx], fresh[key][idx])       # the new token: initial weights
    # Behaviour: on specs of the old grammar the logits of every old token are the old model's.
    specs = [KernelSpec.parse("backend=triton family=tiled bm=64 bn=128 bk=32 warps=4 stages=3"),
             KernelSpec.parse("backend=triton family=persistent bm=128 bn=256 bk=64 warps=8 stages=3 subtile=2")]
    toks = torch.tensor([VOCAB.encode(s) for s in specs])[:, :-1]
    ctx = torch.randn(2, N_FEATURES, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        lq, lp = q.logits(ctx, toks), p.logits(ctx, toks)
    keep = [i for i in range(len(VOCAB)) if i != idx]
    assert torch.allclose(lq[..., keep], lp[..., keep], rtol=0, atol=1e-6)


def test_same_grammar_loads_unchanged_and_lost_choice_is_refused(tmp_path):
    p = _trained_like(4)
    p.save(tmp_path / "same.pt")
    q = SpecPolicy.load(tmp_path / "same.pt")
    assert q.remapped_from is None
    assert all(torch.equal(q.state_dict()[k], v) for k, v in p.state_dict().items())
    ck = torch.load(tmp_path / "same.pt", weights_only=False)
    ck["vocab"] = ck["vocab"] + ["family=gone"]
    torch.save(ck, tmp_path / "lost.pt")
    with pytest.raises(ValueError, match="no longer has .*family=gone"):
        SpecPolicy.load(tmp_path / "lost.pt")
    with pytest.raises(ValueError, match="no longer has"):
        rows_from(["<pad>", "bm=999"])


def test_resumed_search_moves_reference_and_adam_moments(tmp_path, hopper):
    problem = Problem(1024, 1024, 1024, "nn")
    p = _trained_like(5)
    tr = GRPO(p, GRPOConfig(lr=1e-3, cpu=True))
    samples = p.sample(problem, hopper, 4, generator=torch.Generator().manual_seed(0))
    tr.step(problem, hopper, samples, [0.0, 1.0, 2.0, 3.0])       # Adam has moments now
    ckdir = tmp_path / "ck"
    ckdir.mkdir()
    _save_old(tr.module, ckdir / "policy.pt")
    idx = VOCAB.index[DROPPED]
    saved = tr.state_dict()
    torch.save(_drop(saved, idx, len(VOCAB)), ckdir / "trainer.pt")

    s = Search(SpecPolicy(seed=0), None, hopper, checkpoint_dir=ckdir, resume=True, grpo=GRPOConfig(cpu=True))
    keep = [i for i in range(len(VOCAB)) if i != idx]
    wte_moments = [st for st in s.trainer.opt.state_dict()["state"].values()
                   if st["exp_avg"].shape == (len(VOCAB), p.hparams["d_model"])]
    old_moments = [st for st in saved["opt"]["state"].values()
                   if st["exp_avg"].shape == (len(VOCAB), p.hparams["d_model"])]
    assert wte_moments and len(wte_moments) == len(old_moments)
    for new, old in zip(wte_moments, old_moments):
        for m in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(new[m][keep], old[m][keep])
            assert torch.all(new[m][idx] == 0)                        # a new token has no history
    ref = s.trainer.ref.state_dict()[WTE]
    assert torch.equal(ref[keep], saved["ref"][WTE][keep])
    assert torch.equal(ref[idx], s.trainer.module.state_dict()[WTE][idx])   # the reference starts at the policy
    assert torch.equal(s.trainer.module.state_dict()[WTE][keep], tr.module.state_dict()[WTE][keep])
