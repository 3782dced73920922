"""The search-efficiency study's machinery on the stub clock (CPU): budgets, baselines, bookkeeping."""
import pytest

from cudal2.problems import Problem
from cudal2.rl.efficiency import geomean, markdown, split, study, synthetic_measurements
from cudal2.rl.policy import UniformPolicy
from cudal2.rl.replay import ReplayEvaluator
from cudal2.rl.reward import speedup
from cudal2.rl.search import FixedListPolicy, Search
from cudal2.spec import validate

SHAPES = [Problem(64, 256, 512), Problem(2048, 1024, 1024), Problem(128, 128, 4096), Problem(4096, 4096, 256),
          Problem(256, 64, 1024, "nt"), Problem(1024, 2048, 512, "nt")]


@pytest.fixture(scope="module")
def ev():
    from cudal2.device import DeviceInfo
    return ReplayEvaluator(synthetic_measurements(SHAPES, DeviceInfo.target("sm_90a"), n_specs=60, seed=2))


def test_fixed_list_is_valid_deterministic_and_distinct(hopper):
    p = Problem(100, 4096, 17, "nt")
    a, b = FixedListPolicy.candidates(p, hopper), FixedListPolicy.candidates(p, hopper)
    assert a == b and len(a) >= 64 and len({s.text for s in a}) == len(a)
    for s in a:
        validate(s, p, hopper)
    assert {s.family for s in a} == {"tiled", "mma"}          # TMA families masked for N*K unaligned
    assert {s.backend for s in FixedListPolicy.candidates(p, hopper, ("cuda",))} == {"cuda"}


def test_best_within_budget_counts_distinct_evaluations(ev, hopper):
    p = SHAPES[0]
    res = Search(UniformPolicy(), ev, hopper, ev.device_key, group=4, seed=0).run_problem(p, 12)
    assert len(res.evaluated) == 12 and len({m.spec for m in res.evaluated}) == 12
    curve = [res.best_within(k) for k in range(1, 13)]
    assert curve == sorted(curve)                              # the best so far never drops
    assert curve[-1] == pytest.approx(max(speedup(m) or 0.0 for m in res.evaluated))
    assert res.best.time_us == min(m.time_us for m in res.evaluated if m.status == "ok")


def test_study_reports_every_method_and_budget(ev, hopper):
    train, test = split(SHAPES, 4, 2, seed=0)
    assert not set(train) & set(test)
    r = study(train, test, ev, hopper, budgets=(4, 8), group=4, train_budget=8, seed=0)
    assert [row["problem"] for row in r["rows"]] == [p.text for p in test]
    for row in r["rows"]:
        for m in ("policy", "random", "fixed"):
            assert row[m]["4"] <= row[m]["8"] and row[m]["evals"] <= 8
        assert row["best_any_at_max"] == max(row[m]["8"] for m in ("policy", "random", "fixed"))
    for m in ("policy", "random", "fixed"):
        assert r["geomean_best_speedup"][m]["8"] == pytest.approx(geomean([row[m]["8"] for row in r["rows"]]))
    assert "| policy |" in markdown(r) and "| random |" in markdown(r)
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
