"""The Ray evaluator on a local Ray with two fake GPUs and the CPU stand-in worker in each actor.

Ray schedules `num_gpus=1` actors on declared GPU resources without any GPU, and gives each its own
CUDA_VISIBLE_DEVICES; the stand-in worker (a real process per actor, crash isolation included) takes
its times from a deterministic clock, so the Ray run can be compared row for row with a local one.
One Ray instance serves the module: starting it takes ~15 s on two cores.
"""
import dataclasses
import functools

import pytest

ray = pytest.importorskip("ray")

from cudal2.device import DeviceInfo  # noqa: E402
from cudal2.evaluate import Evaluator, EvaluatorError, make_evaluator  # noqa: E402
from cudal2.testing.fake_evaluator import FakeEvaluator  # noqa: E402
from cudal2.testing.standin import HashClock, clock_compile, standin  # noqa: E402
from cudal2.problems import Problem  # noqa: E402
from cudal2.spec import KernelSpec  # noqa: E402
from cudal2.store import Store  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def spec(**kw) -> str:
    return KernelSpec(**{"bm": 64, "bn": 64, "bk": 32, "warps": 4, "stages": 2, **kw}).text


SPECS = [spec(), spec(bn=128), spec(group_m=1), spec(stages=3), spec(split_k=2), spec(stages=4)]
FAULTS = {SPECS[2]: "crash", SPECS[3]: "compile", SPECS[4]: "wrong", SPECS[5]: "slow"}
KEYS = ("spec", "problem", "device", "status", "time_us", "ratio", "baselines_us", "best_cublas_us",
        "binary_hash", "reason")


def batches(n: int, specs=SPECS):
    # One problem per batch: the early-stop bar then depends on the batch alone, not on which
    # batches an actor happened to see before, so the Ray and local runs are comparable.
    return [(Problem(64 * (k + 1), 256, 128), list(specs)) for k in range(n)]


def standin_kw(clock, **kw):
    return {"worker_target": standin, "worker_config": {"clock": clock, **kw},
            "compile_fn": functools.partial(clock_compile, clock=clock), "timeout_s": 5.0}


def rows(store: Store) -> list[tuple]:
    return sorted(tuple(str(getattr(m, k)) for k in KEYS) for m in store.measurements())


def test_spread_over_all_actors_and_same_store_as_a_local_run(local_ray, tmp_path):
    clock = HashClock(faults=FAULTS, delay_s=0.01)
    work = batches(6)
    with Store(tmp_path / "ray.sqlite") as st, make_evaluator("ray", inflight=2, **standin_kw(clock)) as ev:
        run = st.new_run({"cluster": "ray"}, ev.device.key)
        out = ev.evaluate_many(work, store=st, run_id=run)
        assert sorted(ev.batches_per_actor) == [0, 1] and sum(ev.batches_per_actor.values()) == 6
        assert ev.restarts() == 6             # each batch's crash restarted its actor's worker
        ray_rows = rows(st)
    assert [[m.problem for m in ms] for ms in out] == [[p.text] * len(SPECS) for p, _ in work]
    with Store(tmp_path / "local.sqlite") as st, Evaluator(workers=0, **standin_kw(clock)) as ev:
        ev.evaluate_many(work, store=st, run_id=st.new_run({}, "sm90a"))
        local_rows = rows(st)
    assert ray_rows == local_rows
    statuses = sorted({r[3] for r in ray_rows})
    assert statuses == ["compile_error", "crash", "ok", "slow", "wrong"]


def test_killing_an_actor_mid_run_loses_nothing(local_ray, tmp_path):
    clock = HashClock(faults={SPECS[4]: "wrong"}, delay_s=0.05)
    work = batches(10, SPECS[:5])
    killed = []
    with Store(tmp_path / "ray.sqlite") as st, make_evaluator("ray", inflight=2, **standin_kw(clock)) as ev:
        run = st.new_run({}, ev.device.key)
        stored_at_kill = []

        def on_result(k, ms):
            if not killed:   # both actors still hold queued batches at the first result
                stored_at_kill.extend(rows(st))
                ray.kill(ev.actors[0])
                killed.append(k)

        out = ev.evaluate_many(work, store=st, run_id=run, on_result=on_result)
        assert ev.actor_deaths == 1 and ev.alive == {1} and ev.retried >= 1
        # Every batch is stored exactly once (the killed actor's batches ran again elsewhere) and
        # what was committed before the kill is unchanged.
        assert len(out) == 10 and st.count() == 10 * 5
        assert {m.problem for m in st.measurements()} == {p.text for p, _ in work}
        final = rows(st)
        assert set(stored_at_kill) <= set(final) and len(stored_at_kill) == 5
    reference = FakeEvaluator(clock)
    want = sorted(tuple(str(getattr(m, k)) for k in KEYS) for p, s in work for m in reference.evaluate(p, s))
    assert final == want


def test_gpu_models_are_never_mixed(local_ray):
    base = DeviceInfo.target("sm_90a")
    h100 = dataclasses.replace(base, name="NVIDIA H100 stand-in", sm_count=1, l2_bytes=2**20).to_dict()
    h200 = dataclasses.replace(base, name="NVIDIA H200 stand-in", sm_count=1, l2_bytes=2**20).to_dict()
    clock = HashClock()
    kw = standin_kw(clock, devices=[h100, h200])
    with pytest.raises(EvaluatorError, match=r"several models \(h100-sm90 x1, h200-sm90 x1\)"):
        make_evaluator("ray", **kw)
    with make_evaluator("ray", device_key="h200-sm90", **kw) as ev:
        assert len(ev.actors) == 1 and ev.device.key == "h200-sm90"
        ms = ev.evaluate(Problem(64, 64, 64), SPECS[:2])
    assert {m.device for m in ms} == {"h200-sm90"} and [m.status for m in ms] == ["ok", "ok"]


def test_a_compile_task_that_kills_its_process_is_a_compile_error(local_ray):
    clock = HashClock(faults={SPECS[1]: "compile_crash"})
    with make_evaluator("ray", gpus=1, **standin_kw(clock)) as ev:
        ms = ev.evaluate(Problem(64, 64, 64), SPECS[:3])
    assert [m.status for m in ms] == ["ok", "compile_error", "ok"]
    assert "compile task's process died" in ms[1].reason
