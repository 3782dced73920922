"""The search-efficiency study's machinery (bench/efficiency.py) on the stub clock (CPU): budgets,
baselines, bookkeeping; then the whole study as the device runs it (bench/search_efficiency.py: all
four methods, the outputs, resume) and its committed held-out set."""
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
        assert row["reference"] == max(row[m]["8"] for m in ("policy", "random", "fixed"))
        assert row["shape_cost"]["unique"] <= row["shape_cost"]["proposals"]
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


# ---- bench/search_efficiency.py: the issue 21 study, on the stub clock (a tiny configuration) --------
import csv                                                                   # noqa: E402
import json                                                                  # noqa: E402

BENCH = Path(__file__).resolve().parents[1] / "bench"
TINY = ["--synthetic", "--held-out", "256x64x512:nn,64x16384x4096:nt", "--train", "1", "--budgets", "8,16"]
METHODS5 = ("policy", "random", "fixed", "cost", "critic")


class StandInRanker:
    """The cost and critic methods' model, standing in for a CostModel (same `rank`): orders a pool by
    a hash of the spec text, and records each pool it ranked."""

    def __init__(self):
        self.pools = {}        # the first pool ranked per shape: the cost method's (its list is made first)
        self.calls = []        # every (shape, pool) ranked, the critic's too

    def key(self, s):
        import hashlib
        return hashlib.sha256(s.text.encode()).hexdigest()

    def rank(self, problem, specs):
        self.pools.setdefault(problem.text, list(specs))
        self.calls.append((problem.text, list(specs)))
        return sorted(specs, key=self.key)


class CountingStudyClock(StudyStubClock):
    asked: list = []

    def __call__(self, spec, p):
        CountingStudyClock.asked.append((p.text, spec.text))
        return super().__call__(spec, p)


@pytest.fixture
def se(monkeypatch):
    """bench/search_efficiency.py with the stand-in ranker, a counting stub clock and its modules."""
    import importlib
    import cudal2.testing.stub_clocks as sc
    sys.path.insert(0, str(BENCH))
    mod = importlib.import_module("search_efficiency")
    ranker = StandInRanker()
    monkeypatch.setattr(mod, "load_cost_model", lambda path: ranker)
    monkeypatch.setattr(sc, "StudyStubClock", CountingStudyClock)
    CountingStudyClock.asked = []
    lists = []
    import efficiency
    real = efficiency.run_list

    def recording(view, problem, specs, chunk):      # each list method's proposals, in order
        lists.append((view.tag, problem.text, [s.text for s in specs]))
        return real(view, problem, specs, chunk)
    monkeypatch.setattr(efficiency, "run_list", recording)
    mod.ranker, mod.lists = ranker, lists
    return mod


def _results(res):
    """What a row reports, less what it cost (which differs between a run and its resumed parts)."""
    keep = ("8", "16", "screen", "winner", "ratio", "proposals", "curve", "evals")
    return [{k: (r[k] if k not in METHODS5 else {x: r[k][x] for x in keep}) for k in r
             if k not in ("shape_cost", "recheck")} for r in res["rows"]]


def test_the_study_on_the_stub_clock_all_methods_outputs_and_resume(se, tmp_path):
    from cudal2.device import DeviceInfo
    from cudal2.problems import Problem
    from cudal2.rl.costrank import pick
    import dataclasses
    import efficiency
    out, store = tmp_path / "a", tmp_path / "live-a" / "study.db"
    assert se.main(TINY + ["--time-limit", "0", "--out", str(out), "--store", str(store)]) == 0
    assert sorted(x.name for x in out.iterdir()) == ["best_so_far.png", "study.csv", "study.db.gz", "study.json",
                                                      "study.log", "study.md"]
    r = json.loads((out / "study.json").read_text())
    assert r["complete"] and r["methods"] == list(METHODS5) and len(r["rows"]) == 2
    assert r["results_are"] == "model" and r["plan"]["calls"] == 1 and r["modeled_device_s"] > 0
    for row in r["rows"]:
        # The reference is the best any method found at any budget; best-so-far never falls.
        assert row["reference"] == max(row[m][b] for m in METHODS5 for b in ("8", "16")) > 0
        assert max(row[m]["ratio"]["16"] for m in METHODS5) == 1.0
        for m in METHODS5:
            assert row[m]["8"] <= row[m]["16"] and row[m]["ratio"]["8"] <= row[m]["ratio"]["16"] <= 1.0
            assert row[m]["curve"] == sorted(row[m]["curve"]) and row[m]["proposals"] == {"8": 8, "16": 16}
            assert 0 < row[m]["modeled_s"]["8"] <= row[m]["modeled_s"]["16"] <= row["shape_cost"]["shape_modeled_s"]
    # The cost method proposes the ranker's best of its pool first (rl/costrank.pick: distinct tiles first).
    dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)
    for p in ("256x64x512:nn", "64x16384x4096:nt"):
        proposed = [specs for tag, prob, specs in se.lists if tag == "cost" and prob == p][0]
        ranked = se.ranker.rank(Problem.parse(p), se.ranker.pools[p])
        assert proposed[0] == ranked[0].text and proposed == [s.text for s in pick(ranked, 16)]
        assert proposed == [s.text for s in efficiency.cost_list(Problem.parse(p), dev, 16, se.ranker)]
        row = next(x for x in r["rows"] if x["problem"] == p)
        assert row["cost"]["winner"]["8"] in proposed[:8]
    # Every (shape, spec, profile) measured once, whichever methods proposed it: one clock call per
    # stored measurement (less the invalid specs and duplicate binaries, which never reach the clock).
    from cudal2.cli.stores import sqlite_copy
    path, tmp = sqlite_copy(out / "study.db.gz", always=True)
    with Store(path) as st:
        ms = [m for m in st.measurements() if m.status != "invalid" and not m.reason.startswith("duplicate binary")]
    tmp.cleanup()
    assert len(CountingStudyClock.asked) == len(ms) > 0
    # The CSV: one row per shape x method x budget, as the JSON says.
    rows = list(csv.DictReader(open(out / "study.csv")))
    assert len(rows) == 2 * 5 * 2 and {(x["problem"], x["method"], x["budget"]) for x in rows} == {
        (p, m, b) for p in ("256x64x512:nn", "64x16384x4096:nt") for m in METHODS5 for b in ("8", "16")}
    for x in rows:
        row = next(y for y in r["rows"] if y["problem"] == x["problem"])
        assert float(x["best_vs_reference"]) == pytest.approx(row[x["method"]]["ratio"][x["budget"]], abs=1e-5)
        assert float(x["reference_speedup"]) == pytest.approx(row["reference"], abs=1e-5)
        assert x["class"] in ("small", "skinny") and x["seconds_are"] == "model" and float(x["gpu_s"]) > 0
    md = (out / "study.md").read_text()
    assert "### nn (1 shapes" in md and "### nt (1 shapes" in md and "| cost |" in md
    # Resume: a call stopped by the (modelled) time limit, then the rest on a fresh machine from the
    # returned study.db.gz: the same results, nothing measured twice; a third call measures nothing.
    n_full = len(CountingStudyClock.asked)
    CountingStudyClock.asked = []
    store1, store2 = tmp_path / "live-b1" / "study.db", tmp_path / "live-b2" / "study.db"
    assert se.main(TINY + ["--time-limit", "90", "--out", str(tmp_path / "b1"), "--store", str(store1)]) == 4
    b1 = json.loads((tmp_path / "b1" / "study.json").read_text())
    assert not b1["complete"] and len(b1["rows"]) == 1 and "64x16384x4096:nt" in b1["stopped"]
    assert b1["cost_total"]["unique"] > r["rows"][0]["shape_cost"]["unique"] + r["train_cost"]["unique"]  # mid-shape
    assert se.main(TINY + ["--time-limit", "0", "--out", str(tmp_path / "b2"), "--store", str(store2),
                           "--resume-from", str(tmp_path / "b1" / "study.db.gz")]) == 0
    b2 = json.loads((tmp_path / "b2" / "study.json").read_text())
    assert b2["complete"] and b2["resumed_rows"] == len(b1["rows"]) and _results(b2) == _results(r)
    assert len(CountingStudyClock.asked) == n_full
    tc = ("proposals", "unique", "modeled_s")
    assert [b2["train_cost"][k] for k in tc] == [r["train_cost"][k] for k in tc]
    # (a shape split between two calls pays a second problem switch and call overheads: a few s)
    assert b2["plan"]["train_s"] == r["plan"]["train_s"] and abs(b2["plan"]["device_s"] - r["plan"]["device_s"]) < 6
    assert se.main(TINY + ["--time-limit", "0", "--out", str(tmp_path / "b3"), "--store", str(store2)]) == 0
    b3 = json.loads((tmp_path / "b3" / "study.json").read_text())
    assert len(CountingStudyClock.asked) == n_full and b3["cost_total"]["unique"] == 0 and b3["resumed_rows"] == 2


def test_a_method_added_to_a_finished_study_measures_only_its_own_proposals(se, tmp_path):
    """The critic added to a study whose rows were finished without it: the shapes are re-run, the
    store answers every earlier measurement (the other methods' results come out the same), and the
    clock is asked only for specs the critic proposed that nobody had measured."""
    store = tmp_path / "live" / "study.db"
    four = ["--methods", "policy,random,fixed,cost"]
    assert se.main(TINY + four + ["--time-limit", "0", "--out", str(tmp_path / "a"), "--store", str(store)]) == 0
    a = json.loads((tmp_path / "a" / "study.json").read_text())
    CountingStudyClock.asked = []
    assert se.main(TINY + ["--time-limit", "0", "--out", str(tmp_path / "b"), "--store", str(store)]) == 0
    b = json.loads((tmp_path / "b" / "study.json").read_text())
    assert b["methods"] == list(METHODS5) and b["resumed_rows"] == 0 and b["complete"]
    keep = ("8", "16", "winner", "ratio", "curve")
    for ra, rb in zip(a["rows"], b["rows"]):
        for m in METHODS5[:4]:
            # ratios move only where the critic found a better reference
            assert {k: rb[m][k] for k in keep if k != "ratio"} == {k: ra[m][k] for k in keep if k != "ratio"}
    # New measurements (clock calls) only by the critic's screen and the re-check of its winners.
    cost = b["cost_by_method"]
    assert cost["critic"]["unique"] > 0 and all(cost[m]["unique"] == 0 for m in ("train", *METHODS5[:4]))
    assert len(CountingStudyClock.asked) == cost["critic"]["unique"] + cost["recheck"]["unique"]
    # A re-checked winner that fails the full check is replaced by the next screened one (efficiency.recheck's
    # rounds), so the re-check's new measurements are the critic's winners and the failed ones at most.
    assert cost["recheck"]["unique"] <= len({t for r in b["rows"] for t in r["critic"]["winner"].values()} |
                                            {t for r in b["rows"] for t in r["recheck"]["failed"]})


def test_the_committed_held_out_set():
    """bench/efficiency_heldout.txt: what bench/study_shapes.py writes; >= 4 per class in both layouts,
    >= 6 off-grid LLM shapes, every one held out by the committed cost model's hash split (so by a
    `cudal2 train --policy-out` policy with the same defaults too); its first 30 lines are the
    issue's minimum set; the training shapes are on the other side of the split."""
    sys.path.insert(0, str(BENCH))
    import study_shapes as ss
    from collections import Counter
    from cudal2.problems import read_shape_file
    from cudal2.rl.costmodel import CostModel
    from cudal2.rl.costtrain import _in_holdout
    from cudal2.stats import SHAPE_CLASSES
    ps = ss.read_heldout()
    assert [p.text for p in ps] == [p.text for p in ss.choose_heldout()]          # reproducible
    assert len({p.text for p in ps}) == len(ps) >= 30
    assert all(_in_holdout(p, 0.2, 0) for p in ps)
    trained = set(CostModel.load(BENCH / "results/h200-sm90/costmodel/cost_h200_9583f7e.pt").info["train_shapes"])
    assert not trained & {p.text for p in ps}
    grid_ps = [p for p in ps if not ss.offgrid(p)]
    c = Counter((ss.cls(p), p.layout) for p in grid_ps)
    assert all(c[(k, lay)] >= 4 for k in SHAPE_CLASSES for lay in ("nn", "nt"))
    llm = [p for p in ps if ss.offgrid(p)]
    model_set = {p.text for p in read_shape_file(str(BENCH / "model_set.txt"), "nt")}
    assert len(llm) >= 6 and {p.text for p in llm} <= model_set and len({ss.cls(p) for p in llm}) >= 5
    first = ps[:30]
    c30 = Counter(ss.cls(p) for p in first)
    assert all(c30[k] >= 4 for k in SHAPE_CLASSES) and {p.layout for p in first} == {"nn", "nt"}
    assert sum(map(ss.offgrid, first)) >= 6
    train = ss.train_split(12, ps)
    assert len(train) == 12 and not any(_in_holdout(p, 0.2, 0) for p in train)
    assert len({(ss.cls(p), p.layout) for p in train}) == 12
