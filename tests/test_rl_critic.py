"""The policy with a critic (rl/search.Search(critic=...)): each group is the cost model's best of
critic_pool x group of the policy's samples; GRPO trains on that group. Stub clock, CPU."""
import hashlib

import pytest

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.rl.costrank import pick
from cudal2.rl.policy import SpecPolicy
from cudal2.rl.search import Search
from cudal2.testing.fake_evaluator import FakeEvaluator


class HashRanker:
    """Stands in for a CostModel: orders by a hash of the spec text; records what it ranked."""

    def __init__(self):
        self.calls = []

    def rank(self, problem, specs):
        self.calls.append(list(specs))
        return sorted(specs, key=lambda s: hashlib.sha256(s.text.encode()).hexdigest())


class Clock:
    """A planted preference (smaller tiles faster) so GRPO's rewards differ within a group."""

    def __call__(self, spec, p):
        return 10.0 + spec.bm / 16 + spec.bn / 32

    def baselines(self, p):
        return {"torch": 20.0, "cublas-nn": 19.0}


clock = Clock()


@pytest.fixture
def hopper():
    import dataclasses
    return dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)


def test_each_group_is_the_critics_best_of_the_policys_pool(hopper):
    p = Problem(1000, 768, 1000, "nt")      # off the tile grid
    ranker, pol = HashRanker(), SpecPolicy(seed=0)
    drawn = []
    real = pol.sample

    def recording(*a, **kw):
        out = real(*a, **kw)
        drawn.append(out)
        return out
    pol.sample = recording
    trained = []
    s = Search(pol, FakeEvaluator(clock, hopper), hopper, group=4, seed=0, critic=ranker, critic_pool=8,
               checkpoint_dir=None)
    real_step = s.trainer.step
    s.trainer.step = lambda problem, dev, samples, rewards: (trained.append([x.spec.text for x in samples]),
                                                              real_step(problem, dev, samples, rewards))[1]
    res = s.run_problem(p, 12)
    assert len(res.evaluated) == 12 and len(trained) == 3
    known: set = set()
    for pool, ranked_in, group in zip(drawn, ranker.calls, trained):
        assert len(pool) == 32                                   # critic_pool x group, one draw
        # The critic saw the pool's distinct specs not measured before, and the group is its pick.
        fresh = list(dict.fromkeys(x.spec.text for x in pool if x.spec.text not in known))
        assert [x.text for x in ranked_in] == fresh
        assert group == [x.text for x in pick(ranker.rank(p, ranked_in), 4)]
        ranker.calls.pop()                                       # the re-rank above is the test's own
        known |= set(group)
    assert [m.spec for m in res.evaluated] == [t for g in trained for t in g]


def test_a_pool_of_known_specs_is_filled_by_hot_draws(hopper):
    """A converged policy proposes what was measured: the group is filled from hotter draws (not
    trained on), so the budget still buys new specs."""
    p = Problem(512, 512, 512)

    class Stuck(SpecPolicy):
        def sample(self, problem, device, n, *, generator=None, backends=None, temperature=1.0):
            out = super().sample(problem, device, n, generator=generator, backends=backends, temperature=temperature)
            if temperature == 1.0:       # at T = 1 it only ever proposes its first answer
                out = [out[0]] * n
            return out
    s = Search(Stuck(seed=0), FakeEvaluator(clock, hopper), hopper, group=4, seed=0, critic=HashRanker(),
               checkpoint_dir=None)
    res = s.run_problem(p, 9)
    assert len({m.spec for m in res.evaluated}) == 9


def test_bad_critic_pool_is_refused(hopper):
    with pytest.raises(ValueError, match="critic_pool"):
        Search(SpecPolicy(seed=0), FakeEvaluator(clock, hopper), hopper, critic=HashRanker(), critic_pool=0)
