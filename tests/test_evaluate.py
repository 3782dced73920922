"""The evaluator's fault handling, with real worker processes and planted faults (no GPU needed).

The CPU stand-in worker (cudal2.testing.standin.ClockHandler) gets its times from a deterministic
stub clock, and its planted faults are real: "crash" ends the worker process the way an illegal address ends a CUDA
process, "hang" blocks it until the evaluator's timeout kills it. So each test below runs the same
restart / attribution code a GPU run does.
"""
import functools
import os

import pytest

from cudal2.backends.base import Artifact, CompileError
from cudal2.device import DeviceInfo
from cudal2.evaluate import (DEFAULT_BASELINES, Evaluator, EvaluatorError, KernelCrash, Measurement, WrongResult,
                             make_evaluator)
from cudal2.testing.fake_evaluator import FakeEvaluator
from cudal2.testing.standin import HashClock, clock_compile, standin
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, SpecError, default_spec, validate

HOPPER = DeviceInfo.target("sm_90a")
P = Problem(512, 512, 512)


def spec(**kw) -> str:
    return KernelSpec(**{"bm": 64, "bn": 64, "bk": 32, "warps": 4, "stages": 2, **kw}).text


OK1, OK2, OK3 = spec(), spec(bn=128), spec(bm=128, warps=8)
CRASH, HANG, BADC, WRONG, SLOW = spec(group_m=1), spec(group_m=4), spec(stages=3), spec(split_k=2), spec(stages=4)
INVALID = "backend=cuda family=tiled"       # tiled is a Triton family
UNPARSEABLE = "bm=100"                       # not one of the choices
FAULTS = {CRASH: "crash", HANG: "hang", BADC: "compile", WRONG: "wrong", SLOW: "slow"}


def standin_evaluator(clock, **kw) -> Evaluator:
    kw.setdefault("workers", 2)
    kw.setdefault("timeout_s", 2.0)
    kw.setdefault("compile_fn", functools.partial(clock_compile, clock=clock))
    return Evaluator(worker_target=standin, worker_config={"clock": clock}, **kw)


def expected_reason(text: str) -> str:
    try:
        validate(KernelSpec.parse(text), P, HOPPER)
    except SpecError as e:
        return str(e)
    raise AssertionError(f"{text} is valid")


def test_planted_faults_each_recorded_and_the_run_goes_on():
    clock = HashClock(faults=FAULTS)
    batch = [OK1, CRASH, OK2, HANG, BADC, WRONG, INVALID, UNPARSEABLE, OK3, OK1, SLOW]
    with standin_evaluator(clock) as ev:
        ms = ev.evaluate(P, batch)
        st = {}
        for m in ms:
            st.setdefault(m.spec, m)     # the first of the two OK1s
        assert len(ms) == len(batch)
        assert [m.status for m in ms] == ["ok", "crash", "ok", "timeout", "compile_error", "wrong", "invalid",
                                          "invalid", "ok", "ok", "slow"]
        # ok: the stand-in's time is the clock's, untouched; beside the clock's baselines.
        for s in (OK1, OK2, OK3):
            assert st[s].time_us == clock(KernelSpec.parse(s), P)
            assert st[s].baselines_us == {"torch": clock.baselines(P)["torch"],
                                          "cublas-nn": clock.baselines(P)["cublas-nn"]}
            assert st[s].best_cublas_us == clock.baselines(P)["cublas-nn"]
            assert st[s].check["passed"] and st[s].reason == ""
        assert "exit code 134" in st[CRASH].reason and "during the check" in st[CRASH].reason
        assert "no answer within 2 s" in st[HANG].reason
        assert st[BADC].reason == "planted compile error" and "does not compile" in st[BADC].meta["compile_log"]
        assert st[WRONG].reason == "random: planted wrong result" and not st[WRONG].check["passed"]
        assert ms[6].reason == expected_reason(INVALID)
        assert ms[7].reason.startswith("bm: 100 is not one of")
        # The second OK1 is the same binary: one run, its result copied and marked.
        assert ms[9].reason.startswith("duplicate binary of") and ms[9].time_us == ms[0].time_us
        # slow: 10x its hashed time, stopped against the best time of the early pass.
        best = min([st[s].time_us for s in (OK1, OK2, OK3)] + list(clock.baselines(P).values()))
        assert st[SLOW].ratio == pytest.approx(clock(KernelSpec.parse(SLOW), P) / best)
        assert st[SLOW].ratio > 3.0 and st[SLOW].time_us is None
        assert ev.restarts == 2            # one for the crash, one for the hang
        assert all(m.device == "sm90a" for m in ms)
        assert all(m.versions.get("stand_in") == "ClockHandler" for m in ms)
        # The worker that replaced the dead ones keeps serving the next batch.
        again = ev.evaluate(P, [OK2, spec(bn=32)])
        assert [m.status for m in again] == ["ok", "ok"]
        assert again[0].reason.startswith("duplicate binary of")   # measured in the last batch


def test_phase_seconds_say_where_the_time_went():
    # The stand-in's clock sleeps 0.2 s per kernel run, which happens in the check; timing reads
    # the table. So the check phase holds >= 3 x 0.2 s, split per candidate, and timing far less.
    clock = HashClock(delay_s=0.2)
    with standin_evaluator(clock) as ev:
        ms = ev.evaluate(P, [OK1, OK2, OK3])
        assert [m.status for m in ms] == ["ok"] * 3
        assert all(0.2 <= m.meta["check_s"] < 2.0 for m in ms)
        assert ev.phase_s["check"] >= 0.6
        assert ev.phase_s["time"] < ev.phase_s["check"]
        assert ev.phase_s["prepare"] > 0 and ev.phase_s["compile"] > 0


def test_a_crash_while_timing_a_group_is_charged_to_its_member():
    clock = HashClock(faults={CRASH: "crash_timing"})
    with standin_evaluator(clock, workers=0) as ev:
        ms = ev.evaluate(P, [OK1, CRASH, OK2])
        assert ev.restarts == 2   # the group run, then the culprit alone
    assert [m.status for m in ms] == ["ok", "crash", "ok"]
    assert ms[1].check["passed"] and "while timing" in ms[1].reason and "exit code 134" in ms[1].reason
    assert [m.time_us for m in (ms[0], ms[2])] == [clock(KernelSpec.parse(s), P) for s in (OK1, OK2)]


def test_the_fake_evaluator_agrees_with_the_real_one_on_the_stand_in():
    clock = HashClock(faults={WRONG: "wrong", BADC: "compile", SLOW: "slow"})
    batch = [OK1, OK2, WRONG, BADC, INVALID, OK3, OK2, SLOW]
    fake = FakeEvaluator(clock).evaluate(P, batch)
    with standin_evaluator(clock, workers=0) as ev:
        real = ev.evaluate(P, batch)
    keys = ("spec", "status", "time_us", "baselines_us", "best_cublas_us", "ratio", "binary_hash", "reason")
    assert [[getattr(m, k) for k in keys] for m in fake] == [[getattr(m, k) for k in keys] for m in real]


def test_fake_evaluator_with_a_plain_function_clock():
    times = {OK1: 50.0, OK2: 20.0, OK3: 55.0}   # all within 3x of the best

    def clock(s, problem):
        t = s.text
        if t == CRASH:
            raise KernelCrash("illegal address")
        if t == WRONG:
            raise WrongResult("exact: 3 entries differ")
        if t == BADC:
            raise CompileError("ptxas failed", log="ptxas error: too many resources")
        return times.get(t, 1000.0)

    ev = FakeEvaluator(clock, early_stop=3.0)
    ms = ev.evaluate("512x512x512", [OK1, OK2, OK3, CRASH, WRONG, BADC, SLOW, INVALID])
    assert [m.status for m in ms] == ["ok", "ok", "ok", "crash", "wrong", "compile_error", "slow", "invalid"]
    assert [m.time_us for m in ms[:3]] == [50.0, 20.0, 55.0]
    assert ms[6].ratio == pytest.approx(1000.0 / 20.0)       # no baselines: the best candidate is the bar
    assert ms[0].best_cublas_us is None and ms[0].speedup is None
    assert ms[5].reason == "ptxas failed" and "too many resources" in ms[5].meta["compile_log"]
    assert ev.evaluate(P, [OK3])[0].reason.startswith("duplicate binary")
    # The best so far carries over to later batches: alone, 1000 us is measured against the 20 us known.
    late = ev.evaluate(P, [spec(bm=32)])[0]
    assert late.status == "slow" and late.ratio == pytest.approx(50.0)
    assert Measurement.from_dict(ms[1].to_dict()) == ms[1]


def test_a_compile_worker_that_dies_is_charged_to_its_spec_only():
    clock = HashClock()
    with standin_evaluator(clock, compile_fn=_die_on_stages_3) as ev:
        ms = ev.evaluate(P, [OK1, BADC, OK2])
    assert [m.status for m in ms] == ["ok", "compile_error", "ok"]
    assert "compile worker process died" in ms[1].reason


def _die_on_stages_3(s, problem, device):
    if s.stages == 3:
        os._exit(11)     # as a segfaulting compiler would
    return clock_compile(s, problem, device)


def _dies_at_start(conn, cfg):
    os._exit(3)


def test_a_worker_that_cannot_start_is_an_evaluator_error():
    ev = Evaluator(worker_target=_dies_at_start, workers=0, timeout_s=2.0)
    with pytest.raises(EvaluatorError, match="did not start: worker died \\(exit code 3\\)"):
        ev.evaluate(P, [OK1])
    ev.close()


def test_device_key_mismatch_is_refused():
    ev = standin_evaluator(HashClock(), device_key="h200-sm90", workers=0)
    with pytest.raises(EvaluatorError, match="runs on sm90a, but device_key=h200-sm90"):
        ev.evaluate(P, [OK1])
    ev.close()


def test_dedup_by_binary_not_by_text():
    # Two different spec texts that compile to one binary run once.
    def same_binary(s, problem, device):
        return Artifact(backend=s.backend, spec=s, source="// one kernel for all group_m\n")

    with standin_evaluator(HashClock(), compile_fn=same_binary, workers=0) as ev:
        ms = ev.evaluate(P, [OK1, spec(group_m=1), spec(group_m=4)])
    assert [m.status for m in ms] == ["ok"] * 3
    assert {m.time_us for m in ms} == {ms[0].time_us}
    assert [m.reason.startswith("duplicate binary of " + OK1) for m in ms] == [False, True, True]


def test_defaults_are_the_baselines_and_checks_they_copy():
    # cudal2.evaluate repeats these names so the parent process need not import torch; keep them in step.
    from cudal2 import baselines, check
    from cudal2.evaluate import DEFAULT_CHECKS
    assert DEFAULT_BASELINES == baselines.NAMES and DEFAULT_CHECKS == check.CHECKS


def test_make_evaluator():
    ev = make_evaluator(None, workers=0)
    assert isinstance(ev, Evaluator)
    with pytest.raises(ValueError, match="use 'local', 'ray' or 'ray:ADDRESS'"):
        make_evaluator("slurm")
    with pytest.raises(ValueError, match="early_stop must be > 1"):
        Evaluator(early_stop=0.5)


@pytest.mark.gpu
def test_gpu_end_to_end_three_families(gpu_device):
    # One spec per family, from both backends, on the real worker: checked, timed beside cuBLAS.
    p = Problem(512, 512, 512)
    specs = [default_spec(f, p, gpu_device) for f in ("tiled", "mma", "wgmma")]
    with Evaluator(workers=3, timeout_s=300.0) as ev:
        ms = ev.evaluate(p, specs)
        assert ev.device.key == gpu_device.key
        left_out = ev.baselines_left_out[p.text]
    for m in ms:
        assert m.status == "ok", (m.spec, m.reason)
        assert m.check["passed"] and [r["name"] for r in m.check["results"]][-1] == "edges"
        assert m.time_us > 0 and m.times["offline"]["n"] >= 30
        # cublas-tn serves only nt; the cuBLASLt ones need nvmath-python (left out with a reason if absent).
        assert {"torch", "cublas-nn"} <= set(m.baselines_us) and "cublas-tn" not in m.baselines_us
        assert set(m.baselines_us) | set(left_out) == set(DEFAULT_BASELINES)
        assert m.best_cublas_us == min(m.baselines_us.values()) > 0
        assert m.device == gpu_device.key and "torch" in m.versions and "driver_cuda" in m.versions
    assert len({m.binary_hash for m in ms}) == 3


def test_real_backends_compile_in_the_spawn_pool():
    # The compile half of a GPU run, on the CPU: Triton AOT and NVRTC cubins made in 'spawn'
    # workers reach the (stand-in) GPU worker as picklable Artifacts.
    specs = [default_spec(f, P, HOPPER) for f in ("tiled", "mma", "wgmma")]
    with Evaluator(workers=2, timeout_s=30.0, worker_target=standin, worker_config={"clock": HashClock()}) as ev:
        ms = ev.evaluate(P, specs)
    assert [m.status for m in ms] == ["ok"] * 3, [m.reason for m in ms]
    assert len({m.binary_hash for m in ms}) == 3
    assert [m.meta["arch"] for m in ms] == ["sm_90a"] * 3
    assert all(m.meta["registers"] > 0 for m in ms)


class _IllegalAddressHandler:
    """The real GPU handler, except that one planted spec loads as a kernel writing far out of bounds."""

    def __new__(cls, cfg):
        from cudal2.evaluate.worker import GpuHandler

        class Handler(GpuHandler):
            def _load(self, art):
                if art.spec.text == CRASH:
                    return _oob_kernel
                return super()._load(art)
        return Handler(cfg)


def _oob_kernel(a, b, c):
    import triton
    import triton.language as tl

    @triton.jit
    def store_far(ptr):
        tl.store(ptr + (1 << 40), 1.0)   # ~2 TB past c: an illegal address, sticky for the context

    store_far[(1,)](c)


def _illegal_address_worker(conn, cfg):
    from cudal2.evaluate.worker import serve
    serve(conn, _IllegalAddressHandler, cfg)


def _compile_or_plant(s, problem, device):
    from cudal2.evaluate.procs import backend_compile
    return clock_compile(s, problem, device) if s.text == CRASH else backend_compile(s, problem, device)


@pytest.mark.gpu
def test_gpu_illegal_address_kills_only_its_worker(gpu_device):
    p = Problem(512, 512, 512)
    good = [default_spec("tiled", p, gpu_device).text, default_spec("mma", p, gpu_device).text]
    with Evaluator(workers=2, timeout_s=300.0, worker_target=_illegal_address_worker,
                   compile_fn=_compile_or_plant, baselines=("torch",)) as ev:
        ms = ev.evaluate(p, [good[0], CRASH, good[1]])
        assert ev.restarts == 1
    assert [m.status for m in ms] == ["ok", "crash", "ok"], [m.reason for m in ms]
    assert "illegal" in ms[1].reason.lower()
    assert all(m.time_us > 0 for m in (ms[0], ms[2]))


def test_profiles_keep_their_own_checks_and_dedup_and_share_the_worker():
    # A kernel that is wrong only off the tile grid passes a screen without "edges" and fails the full
    # check; the screen's result is never copied into the full profile (dedup is per profile).
    EDGY = spec(bm=32)
    clock = HashClock(faults={EDGY: "wrong_edges"})
    with standin_evaluator(clock, workers=0) as ev:
        conf = ev.add_profile("screen", checks=("random", "poison"), min_ms=5.0, early_stop=None)
        assert conf["checks"] == ["random", "poison"] and conf["min_ms"] == 5.0 and conf["early_stop"] is None
        assert ev.profile_config()["checks"] == list(ev.check_cfg["checks"])       # the default is untouched
        screen = ev.evaluate(P, [OK1, EDGY], profile="screen")
        full = ev.evaluate(P, [OK1, EDGY])
        assert [m.status for m in screen] == ["ok", "ok"]
        assert [m.status for m in full] == ["ok", "wrong"] and full[1].reason.startswith("edges:")
        assert not full[0].reason.startswith("duplicate binary")                   # measured again, in full
        assert [r["name"] for r in screen[0].check["results"]] == ["random", "poison"]
        assert ev.restarts == 0
        with pytest.raises(ValueError, match="unknown evaluation profile"):
            ev.evaluate(P, [OK1], profile="nope")
        with pytest.raises(ValueError, match="unknown timing knob"):
            ev.add_profile("bad", min_seconds=1)
        with pytest.raises(ValueError, match="name one or more of"):
            ev.add_profile("bad", checks=("random", "vibes"))


def test_fake_evaluator_profiles_agree_with_the_real_one():
    EDGY = spec(bm=32)
    clock = HashClock(faults={EDGY: "wrong_edges", WRONG: "wrong"})
    fake = FakeEvaluator(clock, early_stop=None)
    fake.add_profile("screen", checks=("random",))
    with standin_evaluator(clock, workers=0, early_stop=None) as ev:
        ev.add_profile("screen", checks=("random",))
        for prof in ("screen", "default"):
            keys = ("spec", "status", "time_us", "best_cublas_us", "reason")
            a = [[getattr(m, k) for k in keys] for m in fake.evaluate(P, [OK1, EDGY, WRONG], profile=prof)]
            b = [[getattr(m, k) for k in keys] for m in ev.evaluate(P, [OK1, EDGY, WRONG], profile=prof)]
            assert a == b
    assert [x[1] for x in a] == ["ok", "wrong", "wrong"]


def test_prefetched_compiles_are_used_and_a_dying_ahead_pool_falls_back():
    BOOM = spec(bm=32, bn=32)
    clock = HashClock(faults={BOOM: "compile_crash", BADC: "compile"})
    with standin_evaluator(clock, workers=1, prefetch_workers=1) as ev:
        assert ev.prefetch(P, [OK1, OK2, BADC, INVALID, OK1]) == 3       # invalid and repeated ones skipped
        ms = ev.evaluate(P, [OK1, BADC, OK2])
        assert [m.status for m in ms] == ["ok", "compile_error", "ok"]
        assert ev.compiled_ahead == 3 and "does not compile" in ms[1].meta["compile_log"]
        # A compile that kills its (ahead) worker: evaluate compiles it again the ordinary way, which
        # charges the death to that spec alone; the others still come through.
        assert ev.prefetch(P, [BOOM, OK3]) == 2
        ms = ev.evaluate(P, [OK3, BOOM])
        assert [m.status for m in ms] == ["ok", "compile_error"]
        assert "compile worker process died" in ms[1].reason
        assert ev.prefetch(P, [spec(bn=32)]) == 1                          # a new ahead pool starts
        assert ev.evaluate(P, [spec(bn=32)])[0].status == "ok"
    assert Evaluator(workers=0).prefetch(P, [OK1]) == 0                   # no pool, no prefetch
