"""The search-efficiency study's machinery (bench/efficiency.py) on the stub clock (CPU): budgets,
baselines, bookkeeping."""
import sys
from pathlib import Path

import pytest

from cudal2.problems import Problem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))   # the study's modules live in bench/
from efficiency import geomean, markdown, split, study                    # noqa: E402
from cudal2.rl.policy import UniformPolicy                                  # noqa: E402
from cudal2.rl.replay import ReplayEvaluator                                # noqa: E402
from cudal2.rl.reward import speedup                                        # noqa: E402
from cudal2.rl.search import FixedListPolicy, Search                        # noqa: E402
from cudal2.spec import validate                                            # noqa: E402
from cudal2.testing.stub_clocks import synthetic_measurements              # noqa: E402

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


# ---- sharing, re-check, deadline, the whole study as the device runs it (stub clock) ------------------
from cudal2.testing.fake_evaluator import FakeEvaluator                             # noqa: E402
from efficiency import recheck                                              # noqa: E402
from cudal2.rl.shared_eval import StudyDeadline, shared_evaluator          # noqa: E402
from cudal2.testing.stub_clocks import StubClock, StudyStubClock          # noqa: E402
from cudal2.store import Store                                               # noqa: E402


class CountingClock(StudyStubClock):
    def __init__(self):
        self.asked = []

    def __call__(self, spec, p):
        self.asked.append(spec.text)
        return super().__call__(spec, p)


def _specs(p, hopper, n, seed=0):
    from efficiency import random_list
    return random_list(p, hopper, n, seed)


def test_a_spec_measured_once_is_reused_and_still_counts_as_a_proposal(tmp_path, hopper):
    p = SHAPES[1]
    s = _specs(p, hopper, 6)
    clock = CountingClock()
    with Store(tmp_path / "s.db") as st:
        ev = shared_evaluator(FakeEvaluator(clock, hopper, early_stop=None), store=st, run_id=st.new_run({}))
        a = ev.view("random", "screen").evaluate(p, s[:4])
        b = ev.view("policy", "screen").evaluate(p, s[2:6])
        assert clock.asked == [x.text for x in s]                      # s[2], s[3] evaluated once
        assert [m.time_us for m in a[2:]] == [m.time_us for m in b[:2]]
        assert ev.acct[("random", p.text)]["unique"] == 4 and ev.totals("random")["proposals"] == 4
        pol = ev.acct[("policy", p.text)]
        assert (pol["proposals"], pol["unique"], pol["reused"], pol["resumed"]) == (4, 2, 2, 0)
        # Another profile is another measurement: nothing is shared across profiles.
        ev.view("recheck", "full").evaluate(p, s[:1])
        assert clock.asked[-1] == s[0].text and len(clock.asked) == 7
        # The store keeps them with their profile: a second evaluator on it (a resumed run) reuses them all.
        assert {m.meta["profile"]["name"] for m in st.measurements(problem=p.text)} == {"screen", "full"}
        again = shared_evaluator(FakeEvaluator(clock, hopper, early_stop=None), store=st)
        ms = again.view("fixed", "screen").evaluate(p, s)
        assert len(clock.asked) == 7 and [m.spec for m in ms] == [x.text for x in s]
        assert again.acct[("fixed", p.text)]["resumed"] == 6
        # ...unless a knob of the profile differs (another signature).
        other = shared_evaluator(FakeEvaluator(clock, hopper, early_stop=None), store=st,
                                 screen={"checks": ("random",), "min_ms": 5.0, "early_stop": None})
        other.view("fixed", "screen").evaluate(p, s[:1])
        assert len(clock.asked) == 8


def test_budgets_count_proposals_not_new_evaluations(hopper):
    p = SHAPES[0]
    clock = CountingClock()
    ev = shared_evaluator(FakeEvaluator(clock, hopper, early_stop=None))
    first = Search(UniformPolicy(), ev.view("random", "screen"), hopper, group=4, seed=3).run_problem(p, 12)
    n = len(clock.asked)
    again = Search(UniformPolicy(), ev.view("policy", "screen"), hopper, group=4, seed=3).run_problem(p, 12)
    assert len(again.evaluated) == 12 and len(clock.asked) == n      # same draws: all reused, budget spent
    assert [m.spec for m in again.evaluated] == [m.spec for m in first.evaluated]
    a = ev.acct[("policy", p.text)]
    assert a["proposals"] == 12 and a["unique"] == 0 and a["reused"] == 12


class FailsTheFastest(StudyStubClock):
    """The fastest screened spec of a problem fails the full check (edges) and only it."""
    def __init__(self, bad):
        self.bad = bad

    def fails(self, spec, p, checks):
        return "edges: planted" if spec.text == self.bad and "edges" in checks else None


def test_winner_recheck_replaces_a_winner_that_fails_the_full_check(hopper):
    p = SHAPES[1]
    s = _specs(p, hopper, 16, seed=5)
    base = FakeEvaluator(StubClock(), hopper, early_stop=None)
    times = {m.spec: m.speedup for m in base.evaluate(p, s)}
    ranked = sorted((x for x in times if times[x]), key=lambda x: -times[x])
    ev = shared_evaluator(FakeEvaluator(FailsTheFastest(ranked[0]), hopper, early_stop=None))
    screened = ev.view("random", "screen").evaluate(p, s)
    rc = recheck(ev.view("recheck", "full"), p, {"random": screened}, (4, 16), rounds=3)
    by = rc["by"][("random", 16)]
    assert by["screen_spec"] == ranked[0] and by["screen_winner_failed"]
    assert rc["failed"] == [ranked[0]] and rc["rounds"] == 2
    assert by["spec"] == ranked[1] and by["speedup"] == pytest.approx(times[ranked[1]])
    full = ev.cache[("full", p.text, ranked[1])]
    assert full.meta["profile"]["name"] == "full" and [r["name"] for r in full.check["results"]][-1] == "edges"
    assert rc["by"][("random", 4)]["speedup"] <= by["speedup"]
    # One round only: the failed winner leaves nothing verified for that (method, budget).
    ev2 = shared_evaluator(FakeEvaluator(FailsTheFastest(ranked[0]), hopper, early_stop=None))
    rc1 = recheck(ev2.view("recheck", "full"), p, {"random": ev2.view("random", "screen").evaluate(p, s)}, (16,),
                  rounds=1)
    assert rc1["by"][("random", 16)]["speedup"] == 0.0 and rc1["by"][("random", 16)]["spec"] is None


def test_the_time_limit_stops_before_an_evaluation_and_the_result_says_so(hopper):
    ev = shared_evaluator(FakeEvaluator(StubClock(), hopper, early_stop=None), deadline=0.0)
    with pytest.raises(StudyDeadline):
        ev.view("x", "screen").evaluate(SHAPES[0], _specs(SHAPES[0], hopper, 2))
    train, test = split(SHAPES, 2, 1, seed=0)
    r = study(train, test, ev, hopper, budgets=(4,), group=4, train_budget=4)
    assert r["complete"] is False and r["stopped"].startswith("during training") and r["rows"] == []


def test_dry_run_of_the_device_study_fits_and_resumes(tmp_path):
    """The device call's study exactly (defaults), on the stub clock: four files, the cost model's
    figure under the time limit, and a second run on the same store evaluates nothing new."""
    import importlib.util
    import json
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "search_efficiency", Path(__file__).resolve().parents[1] / "bench" / "search_efficiency.py")
    se = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(se)
    out, store = tmp_path / "eff", tmp_path / "live" / "study.db"
    assert se.main(["--synthetic", "--out", str(out), "--store", str(store)]) == 0
    assert sorted(x.name for x in out.iterdir()) == ["study.db", "study.json", "study.log", "study.md"]
    r = json.loads((out / "study.json").read_text())
    a = se.parse_args([])
    assert r["complete"] and r["results_are"] == "model" and r["modeled_device_s"] < a.time_limit
    assert len(r["rows"]) == a.test and len(r["train"]) == a.train
    for row in r["rows"]:
        for m in ("policy", "random", "fixed"):
            assert row[m]["cost"]["proposals"] == 64 >= row[m]["cost"]["unique"]
            assert [row[m][b] for b in ("8", "16", "32", "64")] == sorted(row[m][b] for b in ("8", "16", "32", "64"))
        assert row["recheck"]["rechecked"] >= 1 and row["cost"]["unique"] <= row["cost"]["proposals"]
    assert r["profiles"]["screen"]["config"]["checks"] == ["random", "exact", "poison", "guard", "fresh"]
    assert r["profiles"]["full"]["config"]["min_ms"] == 100.0 and r["args"]["screen_min_ms"] == a.screen_min_ms
    with Store(out / "study.db") as st:     # the snapshot holds every evaluation, with its profile
        assert st.count() == r["cost_total"]["unique"]
    assert se.main(["--synthetic", "--out", str(tmp_path / "eff2"), "--store", str(store)]) == 0
    r2 = json.loads((tmp_path / "eff2" / "study.json").read_text())
    assert r2["cost_total"]["unique"] == 0 and r2["cost_total"]["resumed"] > 0
    def results(res):
        return [[{k: v for k, v in row[m].items() if k not in ("cost", "eval_s")}
                 for m in ("policy", "random", "fixed")] for row in res["rows"]]
    assert results(r2) == results(r) and r2["geomean_best_speedup"] == r["geomean_best_speedup"]


def test_the_study_on_the_real_evaluator_with_its_stand_in_worker(tmp_path, hopper):
    """Processes as on the GPU machine (spawned GPU worker, compile pool, compile-ahead pool), the
    CPU stand-in's clock in place of the GPU: profiles, prefetch, the shared cache and the store."""
    import functools
    from cudal2.evaluate import Evaluator
    from cudal2.testing.standin import HashClock, clock_compile, standin
    clock = HashClock()
    ev = Evaluator(worker_target=standin, worker_config={"clock": clock}, workers=1, prefetch_workers=1,
                   compile_fn=functools.partial(clock_compile, clock=clock), timeout_s=10.0, early_stop=None)
    train, test = split(SHAPES[:4], 2, 1, seed=0)
    with Store(tmp_path / "s.db") as st:
        shared = shared_evaluator(ev, store=st, run_id=st.new_run({}))
        try:
            r = study(train, test, shared, hopper, budgets=(4, 8), group=4, train_budget=4)
        finally:
            shared.close()
        assert r["complete"] and r["prefetched"] == 16 and ev.compiled_ahead >= 8
        row = r["rows"][0]
        assert all(row[m]["cost"]["proposals"] == 8 for m in ("policy", "random", "fixed"))
        assert row["recheck"]["rechecked"] >= 1 and row["recheck"]["failed"] == []
        assert ev.phase_s["check"] > 0 and ev.restarts == 0
        full = [m for m in st.measurements() if m.meta["profile"]["name"] == "full"]
        assert len(full) == row["recheck"]["rechecked"]
        assert all([c["name"] for c in m.check["results"]][-1] == "edges" for m in full)
        screen = [m for m in st.measurements() if m.meta["profile"]["name"] == "screen"]
        assert all("edges" not in [c["name"] for c in m.check["results"]] for m in screen if m.check)
