"""`cudal2 generate`'s staged search (rl/staged.py) on a stub clock: seeds first, the full re-check
of the fastest screened candidates, what gets filed, the time limit and --resume.

The GPU evaluator is replaced by FakeEvaluator over cudal2.testing.standin.HashClock (µs from a hash of spec and
shape, a 1x-4x spread between specs; baselines at 1.8x / 1.9x the spread's floor), so the order of
candidates, the winner and its margin over best-cublas are known exactly."""
import dataclasses
import math

import pytest

from cudal2.device import DeviceInfo
from cudal2.testing.fake_evaluator import FakeEvaluator
from cudal2.testing.standin import HashClock
from cudal2.problems import Problem
from cudal2.registry import Registry
from cudal2.rl.search import FixedListPolicy
from cudal2.rl.staged import SeedListError, decode_lead, model_seeds, parse_seed_list, seed_specs, starved
from cudal2.spec import is_valid
from cudal2.store import Store

HOPPER = DeviceInfo.target("sm_90a")
# Off the tile grid on purpose (300, 200, 1000, 72 are multiples of no tile).
SHAPES = [Problem(300, 200, 1000), Problem(64, 128, 512), Problem(72, 1000, 256), Problem(512, 256, 128)]


@pytest.fixture
def fake_gpu(monkeypatch):
    """Install a FakeEvaluator over `clock` as generate's evaluator; returns the evaluators made."""
    made = []

    def install(clock, device=HOPPER):
        def make(cluster=None, **kw):
            made.append(FakeEvaluator(clock, device, early_stop=None))
            return made[-1]
        monkeypatch.setattr("cudal2.evaluate.make_evaluator", make)
        monkeypatch.setattr("cudal2.device.gpu_available", lambda: True)
        return made
    return install


def _invoke(*args):
    from typer.testing import CliRunner

    from cudal2.cli import app
    r = CliRunner().invoke(app, ["generate", *map(str, args)])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r


def _checks(m):
    return [x["name"] for x in m.check["results"]]


def _rows(db, problem, profile):
    with Store(db) as st:
        return [m for m in st.measurements(problem=problem.text) if m.meta["profile"]["name"] == profile]


def test_seeds_first_then_policy_then_full_recheck_of_the_fastest(fake_gpu, tmp_path):
    clock = HashClock()
    fake_gpu(clock)
    p = SHAPES[0]
    db, reg = tmp_path / "run.db", tmp_path / "reg"
    r = _invoke("--shapes", p.shape, "--budget", 12, "--group", 4, "--seed-list", "fixed:8", "--recheck", 2,
                "--store", db, "--registry", reg)
    assert r.exit_code == 0, r.output
    screen = _rows(db, p, "screen")
    fixed = [s.text for s in FixedListPolicy.candidates(p, HOPPER)[:8]]
    # The fixed list comes first, in its order, then the policy's proposals fill the budget.
    assert [m.spec for m in screen[:8]] == fixed
    assert len(screen) == 12 and len({m.spec for m in screen}) == 12
    assert all("edges" not in _checks(m) for m in screen if m.check)
    # The full pass re-checks exactly the two fastest screened candidates, with all six checks.
    ok = sorted((m for m in screen if m.status == "ok"), key=lambda m: m.time_us)
    full = _rows(db, p, "full")
    assert sorted(m.spec for m in full) == sorted(m.spec for m in ok[:2])
    assert all(_checks(m) == ["random", "exact", "poison", "guard", "fresh", "edges"] for m in full)
    # Filed: the fastest of the full pass, as a kernel exactly when it beat best-cublas there.
    win = min(full, key=lambda m: m.time_us)
    e = Registry.load(reg).lookup(p, HOPPER.key)
    assert e.spec == win.spec and e.best_cublas_us == pytest.approx(win.best_cublas_us)
    assert (e.backend != "cublas") == (win.time_us * 1.01 < win.best_cublas_us)     # --file-margin 1.01
    assert e.time_us == pytest.approx(win.time_us if e.backend != "cublas" else win.best_cublas_us)
    # The search log: one row for the shape, its counts matching the store.
    with Store(db) as st:
        log = st.shapes(HOPPER.key)[p.text]
    assert log["evaluations"] == 12 and log["seeded"] == 8 and log["full_evaluations"] == 2
    assert log["winner_spec"] == win.spec and log["filed"].startswith("filed")


def test_seeds_computed_ahead_reach_their_own_shape(fake_gpu, tmp_path):
    """generate computes the next shapes' seeds on a thread while one shape is measured: each shape
    must still get its own list, first and in order. Each shape's lead spec (--lead-specs) is a
    different one, so a list handed to the wrong shape shows."""
    fake_gpu(HashClock())
    db, reg, leads = tmp_path / "run.db", tmp_path / "reg", tmp_path / "leads.txt"
    want = {}
    for p in SHAPES:
        fixed = [s.text for s in FixedListPolicy.candidates(p, HOPPER)]
        lead = next(t for t in fixed[1:] if t not in {w[0] for w in want.values()})
        want[p.text] = [lead, fixed[0]]           # the lead, then fixed:2's first (N counts the lead)
    leads.write_text("".join(f"{k}|{w[0]}\n" for k, w in want.items()))
    r = _invoke("--shapes", ",".join(p.shape for p in SHAPES), "--budget", 2, "--group", 4, "--seed-list", "fixed:2",
                "--lead-specs", leads, "--recheck", 1, "--store", db, "--registry", reg)
    assert r.exit_code == 0, r.output
    for p in SHAPES:
        assert [m.spec for m in _rows(db, p, "screen")] == want[p.text]


def test_seeds_that_fill_the_budget_leave_the_policy_unasked(fake_gpu, tmp_path, monkeypatch):
    """--budget 2 with two seeds (generate's cheap pass: a lead and a cost seed): a policy group
    would be cut off unevaluated, so none is sampled; with room left the policy fills it."""
    from cudal2.rl.policy import SpecPolicy
    calls = []
    real = SpecPolicy.sample
    monkeypatch.setattr(SpecPolicy, "sample", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    fake_gpu(HashClock())
    p = SHAPES[0]
    r = _invoke("--shapes", p.shape, "--budget", 2, "--group", 4, "--seed-list", "fixed:2", "--recheck", 1,
                "--store", tmp_path / "a.db", "--registry", tmp_path / "ra")
    assert r.exit_code == 0, r.output
    assert len(_rows(tmp_path / "a.db", p, "screen")) == 2 and not calls
    r = _invoke("--shapes", p.shape, "--budget", 4, "--group", 4, "--seed-list", "fixed:2", "--recheck", 1,
                "--store", tmp_path / "b.db", "--registry", tmp_path / "rb")
    assert r.exit_code == 0, r.output
    assert len(_rows(tmp_path / "b.db", p, "screen")) == 4 and calls


def test_a_winner_failing_the_full_check_gives_way_to_the_next(fake_gpu, tmp_path):
    p = SHAPES[1]
    fixed = FixedListPolicy.candidates(p, HOPPER)[:8]
    times = {s.text: HashClock()(s, p) for s in fixed}
    order = sorted(times, key=times.get)
    # The fastest passes the screen (no edges) but fails the full pass's edge shapes.
    fake_gpu(HashClock(faults={order[0]: "wrong_edges"}))
    db, reg = tmp_path / "run.db", tmp_path / "reg"
    r = _invoke("--shapes", p.shape, "--budget", 8, "--seed-list", "fixed:8", "--recheck", 1,
                "--store", db, "--registry", reg)
    assert r.exit_code == 0, r.output
    full = {m.spec: m for m in _rows(db, p, "full")}
    assert list(full) == order[:2]                      # the next fastest was re-checked in a second round
    assert full[order[0]].status == "wrong" and "edges" in full[order[0]].reason
    e = Registry.load(reg).lookup(p, HOPPER.key)
    assert e.spec == order[1]
    assert e.check["passed"] and "edges" in _checks(e)


def test_nothing_passing_the_full_check_files_cublas(fake_gpu, tmp_path):
    p = SHAPES[1]
    fixed = FixedListPolicy.candidates(p, HOPPER)[:8]
    fake_gpu(HashClock(faults={s.text: "wrong_edges" for s in fixed}))
    db, reg = tmp_path / "run.db", tmp_path / "reg"
    r = _invoke("--shapes", p.shape, "--budget", 8, "--seed-list", "fixed:8", "--recheck", 2,
                "--store", db, "--registry", reg)
    assert r.exit_code == 0, r.output
    assert len(_rows(db, p, "full")) == 6               # 2 per round, 3 rounds, all failed
    e = Registry.load(reg).lookup(p, HOPPER.key)
    base = HashClock().baselines(p)
    assert e.backend == "cublas" and e.best_cublas_us == pytest.approx(min(base.values()))
    with Store(db) as st:
        assert st.shapes()[p.text]["failures_full"] == {"wrong: edges": 6}


def test_a_cublas_entry_records_autotunes_algorithm_from_the_run(fake_gpu, tmp_path, monkeypatch):
    """The GPU worker's autotune cache (cudal2.baselines) holds the algorithm cuBLASLt chose for the
    shape; filing cuBLAS copies it into the entry (cudal2.lt_dispatch runs it). Shapes the cache
    does not hold file without one."""
    import json
    p, q = SHAPES[1], SHAPES[3]
    fixed = FixedListPolicy.candidates(p, HOPPER)[:8] + FixedListPolicy.candidates(q, HOPPER)[:8]
    fake_gpu(HashClock(faults={s.text: "wrong_edges" for s in fixed}))
    cache = tmp_path / "cache"
    cache.mkdir()
    words = list(range(10, 18))
    (cache / f"lt-autotune-{HOPPER.key}.json").write_text(json.dumps(
        {f"{p.text}|cublasLt130100": {"algo": words, "median_us": 1.0, "rank": 2, "candidates": 9, "calls": 5}}))
    monkeypatch.setattr("cudal2.timing.default_cache_dir", lambda: cache)
    db, reg = tmp_path / "run.db", tmp_path / "reg"
    r = _invoke("--shapes", f"{p.shape},{q.shape}", "--budget", 8, "--seed-list", "fixed:8", "--recheck", 1,
                "--store", db, "--registry", reg)
    assert r.exit_code == 0, r.output
    got = {e.problem: (e.backend, e.lt_algo) for e in Registry.load(reg).all(HOPPER.key)}
    assert got == {p.text: ("cublas", {"data": words, "cublasLt": 130100}), q.text: ("cublas", None)}


class SlowOn(HashClock):
    """HashClock whose evaluations of one shape take `delay` seconds each while `slow` is set."""

    def __init__(self, problem, delay):
        super().__init__()
        self.problem, self.delay, self.slow = problem.text, delay, True

    def __call__(self, spec, problem):
        import time
        if self.slow and str(problem) == self.problem:
            time.sleep(self.delay)
        return super().__call__(spec, problem)


def test_time_limit_stops_cleanly_and_resume_finishes_without_remeasuring(fake_gpu, tmp_path):
    # The first shape is quick; the second needs ~12 x 0.5 s, so a 4 s limit ends the run inside it.
    clock = SlowOn(SHAPES[1], 0.5)
    made = fake_gpu(clock)
    db, reg = tmp_path / "run.db", tmp_path / "reg"
    args = ["--shapes", ",".join(p.shape for p in SHAPES), "--budget", 10, "--group", 2,
            "--seed-list", "fixed:6", "--store", db, "--registry", reg]
    r = _invoke(*args, "--time-limit", 4)
    clock.slow = False
    assert r.exit_code == 0, r.output
    assert "stopped at the time limit" in r.output
    with Store(db) as st:
        first = set(st.shapes())
        before = {m.key() + (m.meta["profile"]["name"],) for m in st.measurements()}
    assert first == {SHAPES[0].text}
    calls_before = made[0].calls
    r = _invoke(*args, "--resume")
    assert r.exit_code == 0, r.output
    assert f"{len(first)} shapes already finished" in r.output
    with Store(db) as st:
        assert set(st.shapes()) == {p.text for p in SHAPES}
        rows = st.measurements()
        run2 = st.runs()[-1]["id"]
    keys = [m.key() + (m.meta["profile"]["name"],) for m in rows]
    assert len(keys) == len(set(keys))                  # nothing measured twice under one profile
    assert before <= set(keys)
    assert not [m for m in rows if m.run_id == run2 and m.problem in first]   # finished shapes untouched
    for p in SHAPES:
        screened = [m for m in rows if m.problem == p.text and m.meta["profile"]["name"] == "screen"]
        assert len(screened) == 10                      # the budget spans the interrupted and resumed runs
    assert calls_before > 0 and made[1].calls > 0


def test_file_margin_files_cublas_for_a_small_win(fake_gpu, tmp_path):
    """A kernel that beat best-cublas in the full pass, but by less than --file-margin, is filed as
    cuBLAS; with --file-margin 1.0 the same measurements file the kernel."""
    clock = HashClock()
    fake_gpu(clock)
    won = []
    for p in SHAPES:        # the shapes where this clock's fastest seed beats best-cublas
        best = min(clock(s, p) for s in FixedListPolicy.candidates(p, HOPPER)[:4])
        if best < min(clock.baselines(p).values()):
            won.append(p)
    assert won, "HashClock gives no winning shape here: the test needs one"
    p = won[0]
    fastest = min(clock(s, p) for s in FixedListPolicy.candidates(p, HOPPER)[:4])
    margin = 1.5 * min(clock.baselines(p).values()) / fastest     # more than the win: files cuBLAS
    for m, want in ((margin, "cublas"), (1.0, None)):
        db, reg = tmp_path / f"{m}.db", tmp_path / f"reg{m}"
        r = _invoke("--shapes", p.shape, "--budget", 4, "--seed-list", "fixed:4", "--recheck", 1,
                    "--store", db, "--registry", reg, "--file-margin", m)
        assert r.exit_code == 0, r.output
        e = Registry.load(reg).lookup(p, HOPPER.key)
        with Store(db) as st:
            log = st.shapes(HOPPER.key)[p.text]
        if want == "cublas":
            assert e.backend == "cublas" and "margin" in log["filed"]
        else:
            assert e.backend != "cublas" and log["filed"] == f"filed {e.backend}"


def test_bad_options_are_one_line_errors(fake_gpu, tmp_path):
    fake_gpu(HashClock())
    for opt, val, words in (("--seed-list", "best:4", "fixed:N"), ("--screen-ms", 0, "--screen-ms"),
                            ("--time-limit", -1, "--time-limit"), ("--recheck", 0, "--recheck"),
                            ("--file-margin", 0.5, "--file-margin")):
        r = _invoke("--shapes", "64x64x64", "--store", tmp_path / "s.db", opt, val)
        assert r.exit_code == 2 and words in r.output, (opt, r.output)
        assert len(r.output.strip().splitlines()) == 1


def test_parse_seed_list():
    assert parse_seed_list("none") == ("fixed", 0)
    assert parse_seed_list("fixed:12") == ("fixed", 12) and parse_seed_list("auto:4") == ("auto", 4)
    for bad in ("fixed:", "fixed:-1", "random:3", "auto"):
        with pytest.raises(SeedListError):
            parse_seed_list(bad)


H200 = dataclasses.replace(HOPPER, name="NVIDIA H200", sm_count=132)     # the SM count the rule reads


@pytest.mark.parametrize("shape", ["64x64x16384", "128x4096x16384", "4096x128x8192", "256x4096x4096"])
def test_auto_seeds_split_k_where_the_tiles_cannot_fill_the_sms(shape):
    p = Problem.parse(shape)
    assert starved(p, H200)
    seeds = seed_specs(4, p, H200, ("triton", "cuda"), "auto")
    assert len(seeds) == 4 == len({s.text for s in seeds})
    assert all(is_valid(s, p, H200) for s in seeds)
    assert [s.family for s in seeds].count("stream") == 0     # min(M, N) >= 64: the stream rule measured to lose
    split = [s for s in seeds if s.split_k > 1 and s.family != "stream"]
    # the fixed list's tiled / mma specs, and since 2026-12-06 its 128x256 wgmma (the cluster
    # split-K takes 128 accumulators a thread)
    assert len(split) == 2 and {s.family for s in split} <= {"tiled", "mma", "wgmma"}
    for s in split:
        ctas = math.ceil(p.M / s.bm) * math.ceil(p.N / s.bn) * s.split_k
        assert ctas <= H200.sm_count < 2 * ctas      # the largest split that still fits one wave
    assert any(s.split_k == 1 for s in seeds)         # and the ordinary seeds beside them


def test_auto_seeds_elsewhere_are_the_fixed_list_with_fitting_tiles_first():
    big = Problem(4096, 4096, 4096)
    assert not starved(big, H200)
    assert seed_specs(4, big, H200, kind="auto") == seed_specs(4, big, H200, kind="fixed")
    small = Problem(64, 64, 64)
    auto = seed_specs(4, small, H200, kind="auto")
    assert all(s.bm <= 64 and s.bn <= 64 for s in auto)
    assert not all(s.bm <= 64 for s in seed_specs(4, small, H200, kind="fixed"))
    # Without a measured SM count (an arch target) the starvation rule cannot be applied.
    assert not starved(Problem(64, 64, 16384), HOPPER)


def test_generate_uses_auto_seeds(fake_gpu, tmp_path):
    fake_gpu(HashClock(), device=H200)
    p = Problem(64, 64, 16384)
    r = _invoke("--shapes", p.shape, "--budget", 4, "--seed-list", "auto:4", "--store", tmp_path / "s.db",
                "--registry", tmp_path / "reg")
    assert r.exit_code == 0, r.output
    screen = [m.spec for m in _rows(tmp_path / "s.db", p, "screen")]
    assert screen == [s.text for s in seed_specs(4, p, H200, ("triton", "cuda"), "auto")]
    # Two split-K seeds of the tiled / mma families (the stream seed splits K its own way).
    assert sum(" split_k=16 " in t and "family=stream" not in t for t in screen) == 2


def test_screen_max_calls_reaches_the_timer_of_the_screen_only(fake_gpu, tmp_path):
    from cudal2.evaluate.worker import time_batch

    class Recording:
        def __init__(self):
            self.kw = []

        def offline(self, names, **kw):
            self.kw.append(kw)
            return {n: {"median_us": 1.0} for n in names}

    t = Recording()
    time_batch(t, ["k"], ["torch"], {"early_stop": None, "min_calls": 30, "min_ms": 10.0, "warmup": 3,
                                     "max_calls": 300}, None)
    assert t.kw == [{"min_calls": 30, "min_ms": 10.0, "warmup": 3, "max_calls": 300}]
    made = fake_gpu(HashClock())
    r = _invoke("--shapes", "64x64x64", "--budget", 2, "--seed-list", "fixed:2", "--screen-max-calls", 300,
                "--store", tmp_path / "s.db", "--registry", tmp_path / "reg")
    assert r.exit_code == 0, r.output
    assert made[0].profiles["screen"][1]["max_calls"] == 300
    assert "max_calls" not in made[0].profiles["full"][1]
    r = _invoke("--shapes", "64x64x64", "--screen-max-calls", 10, "--store", tmp_path / "s.db")
    assert r.exit_code == 2 and "--screen-max-calls" in r.output


def test_seeds_and_the_first_group_share_one_screen_call(monkeypatch, tmp_path):
    class Counting(FakeEvaluator):
        def evaluate(self, problem, specs, profile="default"):
            specs = list(specs)
            self.asks.append((profile, len(specs)))
            return super().evaluate(problem, specs, profile)

    ev = Counting(HashClock(), HOPPER, early_stop=None)
    ev.asks = []
    monkeypatch.setattr("cudal2.evaluate.make_evaluator", lambda cluster=None, **kw: ev)
    monkeypatch.setattr("cudal2.device.gpu_available", lambda: True)
    p = SHAPES[0]
    r = _invoke("--shapes", p.shape, "--budget", 8, "--group", 4, "--seed-list", "fixed:4", "--recheck", 1,
                "--store", tmp_path / "s.db", "--registry", tmp_path / "reg")
    assert r.exit_code == 0, r.output
    screen = [n for prof, n in ev.asks if prof == "screen"]
    # One call of 8: the 4 seeds and the policy's 4 (a proposal repeating a seed is replaced by a
    # hotter draw in the same call).
    assert screen[0] == 8 and sum(screen) == 8
    rows = _rows(tmp_path / "s.db", p, "screen")
    assert [m.spec for m in rows[:4]] == [s.text for s in FixedListPolicy.candidates(p, HOPPER)[:4]]


@pytest.mark.parametrize("shape", ["4096x4096x512", "256x512x8192", "64x8192x4096:nt"])
def test_model_seeds_lead_with_the_wgmma_cost_model(shape):
    from cudal2.tiles import candidates
    p = Problem.parse(shape)
    seeds = seed_specs(6, p, H200, ("triton", "cuda"), "model")
    assert len(seeds) == 6 == len({s.text for s in seeds}) and all(is_valid(s, p, H200) for s in seeds)
    # A decode shape leads with the stream rule's seeds; none of these has min(M, N) <= 32.
    lead = decode_lead(6, p, H200, ("triton", "cuda"))
    assert lead == [] and decode_lead(6, Problem(32, p.N, p.K, p.layout), H200, ("triton", "cuda"))
    rest = seeds[len(lead):]
    half = (6 - len(lead)) - (6 - len(lead)) // 2
    assert rest[:half] == model_seeds(half, p, H200, ("triton", "cuda"))      # about half from the model
    assert rest[:half - 1] == candidates(p, H200, half)[:half - 1]          # its cooperative list's best first
    auto = [s for s in seed_specs(6, p, H200, ("triton", "cuda"), "auto") if s not in seeds[:len(lead) + half]]
    assert rest[half:] == auto[:len(rest) - half]
    # No cuda backend, or no Hopper: the model has nothing to offer and model = auto.
    assert seed_specs(6, p, H200, ("triton",), "model") == seed_specs(6, p, H200, ("triton",), "auto")
    assert parse_seed_list("model:6") == ("model", 6)


@pytest.mark.parametrize("shape,has_half_wave", [("4096x4096x512", False), ("256x512x8192", True),
                                                  ("64x8192x4096:nt", False), ("512x512x16384:nt", True)])
def test_model_seeds_from_one_gflop_reach_the_ping_pong_and_half_wave_specs(shape, has_half_wave):
    """From 1 GFLOP a third of the model's seeds come from the groups after its cooperative list
    (half-wave first, then ping-pong, alternating): the first n of `candidates` never reached them,
    and on the H100 ping-pong 128x128 won most large shapes and the half-wave split the deep-K
    starved ones (runs 158, 163, 167)."""
    from cudal2.tiles import candidate_groups
    p = Problem.parse(shape)
    g = candidate_groups(p, H200, 8)
    seeds = model_seeds(8, p, H200, ("cuda",))
    assert len(seeds) == 8 == len(set(seeds)) and all(is_valid(s, p, H200) for s in seeds)
    assert seeds[:6] == g["cooperative"][:6]
    hw, pp = g["half_wave"], g["pingpong"]
    assert pp and all(s.warp_spec == 2 for s in pp) and bool(hw) == has_half_wave
    assert seeds[6:] == ([hw[0], pp[0]] if has_half_wave else pp[:2])
    if has_half_wave:       # the split that fills about half the SMs with units (tiles.half_wave_split)
        assert all(s.split_k > 1 and s.warp_spec == 1 for s in hw)
    # The best cooperative spec stays first however few seeds; from two, one of the extras.
    assert model_seeds(1, p, H200, ("cuda",)) == g["cooperative"][:1]
    assert model_seeds(2, p, H200, ("cuda",)) == [g["cooperative"][0], seeds[6]]
    # 16 seeds have room (5) for every extra: both half-wave tiles and the ping-pong pair.
    assert len(pp) == 2 and len(hw) == (2 if has_half_wave else 0)
    assert model_seeds(16, p, H200, ("cuda",))[-len(hw + pp):] == ([hw[0], pp[0], hw[1], pp[1]] if hw else pp)


def test_model_seeds_under_one_gflop_include_the_lite_schedule():
    """Under 1 GFLOP a quarter of the model's seeds (at least one) are lite specs (warp_spec 0), after
    the cooperative ones: lite was the best spec of ~30% of the small grid shapes on the H200 (runs
    36-37) and lost elsewhere, so above 1 GFLOP there are none."""
    from cudal2.tiles import candidates
    small, big = Problem.parse("256x512x2048"), Problem.parse("4096x4096x512")
    seeds = model_seeds(8, small, H200, ("cuda",))
    assert len(seeds) == 8 and all(is_valid(s, small, H200) for s in seeds)
    assert [s.warp_spec for s in seeds[-2:]] == [0, 0] and all(s.warp_spec != 0 for s in seeds[:-2])
    assert seeds[:6] == [s for s in candidates(small, H200, 8) if s.warp_spec != 0][:6]
    assert all(s.warp_spec != 0 for s in model_seeds(8, big, H200, ("cuda",)))
