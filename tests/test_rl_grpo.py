"""GRPO on a toy reward raises the probability of the rewarded spec; the reward table is ARCHITECTURE's."""
import math

import pytest
import torch

from cudal2.problems import Problem
from cudal2.rl.grpo import GRPO, GRPOConfig, advantages
from cudal2.rl.policy import SpecPolicy
from cudal2.rl.reward import reward
from cudal2.spec import FIELDS, KernelSpec


def test_reward_table():
    ok = {"status": "ok", "time_us": 8.0, "best_cublas_us": 10.0}
    assert reward(ok) == pytest.approx(math.log(10 / 8))
    assert reward({"status": "compile_error"}) == -1.0 and reward({"status": "invalid"}) == -1.0
    for s in ("wrong", "crash", "timeout"):
        assert reward({"status": s}) == -3.0
    # slow: the ratio when stopped, capped at -1.1 (it may be only 2x slower when stopped) and floored at -3
    assert reward({"status": "slow", "time_us": 20.0, "best_cublas_us": 10.0}) == -1.1
    assert reward({"status": "slow", "time_us": 100.0, "best_cublas_us": 10.0}) == pytest.approx(math.log(0.1))
    assert reward({"status": "slow", "time_us": 1e6, "best_cublas_us": 10.0}) == -3.0
    assert reward({"status": "slow", "ratio": 5.0}) == pytest.approx(-math.log(5.0))
    with pytest.raises(ValueError, match="unknown measurement status"):
        reward({"status": "bogus"})


def test_advantages_are_standardised():
    a = advantages([1.0, 2.0, 3.0, 6.0])
    assert float(a.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(a.std(unbiased=False)) == pytest.approx(1.0, abs=1e-4)
    assert torch.all(advantages([2.0, 2.0, 2.0]) == 0)


def test_grpo_raises_logprob_of_rewarded_spec(hopper):
    problem = Problem(1024, 1024, 1024, "nn")
    target = KernelSpec.parse("backend=triton family=tiled bm=128 bn=128 bk=64 warps=8 stages=4 group_m=8")
    policy = SpecPolicy(seed=0)
    before = policy.spec_logprob(problem, hopper, target)
    trainer = GRPO(policy, GRPOConfig(lr=3e-3, kl_coef=0.01))
    g = torch.Generator().manual_seed(0)

    def toy(spec):    # fields that agree with the target: a dense signal that peaks at the target
        return float(sum(getattr(spec, f) == getattr(target, f) for f in FIELDS))

    for _ in range(25):
        samples = policy.sample(problem, hopper, 16, generator=g)
        trainer.step(problem, hopper, samples, [toy(s.spec) for s in samples])
    after = policy.spec_logprob(problem, hopper, target)
    # The start puts ~e^-11 on any one spec; seeded, 25 updates reach ~e^-0.04. A margin of 5 nats
    # (x150) leaves room for BLAS-order noise across torch versions without passing a no-op update.
    assert after > before + 5.0, (before, after)
