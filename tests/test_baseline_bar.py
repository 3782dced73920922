"""Issue 21 item 5: the bar (best-cublas) cannot drop silently. `generate` and `compare` refuse, in
one line with a non-zero exit and before any GPU work, when a baseline that forms best-cublas cannot
be built, unless the user names the baselines; the store and registry entries record which ones."""
import functools
import json

import pytest
import torch
from typer.testing import CliRunner

from cudal2 import baselines
from cudal2.cli import app
from cudal2.device import DeviceInfo
from cudal2.evaluate import Evaluator, EvaluatorError
from cudal2.problems import Problem
from cudal2.registry import Registry
from cudal2.spec import KernelSpec
from cudal2.store import Store
from cudal2.testing.fake_evaluator import FakeEvaluator
from cudal2.testing.standin import HashClock, clock_compile, standin

HOPPER = DeviceInfo.target("sm_90a")
P = Problem(512, 512, 512)
NO_NVMATH = "unavailable: nvmath-python not installed"


@pytest.fixture
def no_nvmath(monkeypatch):
    """nvmath-python absent (as on this CPU machine; planted, so the test also holds where it is)."""
    def missing():
        raise baselines.BaselineUnavailable(NO_NVMATH)
    monkeypatch.setattr(baselines, "nvmath_libs", missing)
    monkeypatch.setattr("cudal2.device.gpu_available", lambda: True)


def _invoke(*args):
    r = CliRunner().invoke(app, [*map(str, args)])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r


def _error_lines(output):
    return [ln for ln in output.splitlines() if ln.strip()]


def test_unbuildable_and_the_refusal(no_nvmath):
    assert baselines.unbuildable(("torch",)) == {}
    missing = baselines.unbuildable(baselines.NAMES)
    assert list(missing) == list(baselines.NAMES[1:]) and set(missing.values()) == {NO_NVMATH}
    msg = baselines.refusal(missing)
    assert "\n" not in msg and "nvmath-python not installed" in msg and "--baselines torch" in msg


def test_generate_refuses_before_any_gpu_work(no_nvmath, monkeypatch, tmp_path):
    def no_worker(self):
        raise AssertionError("the GPU worker must not start")
    monkeypatch.setattr(Evaluator, "_start", no_worker)
    r = _invoke("generate", "--shapes", P.shape, "--budget", 2, "--seed-list", "fixed:2", "--workers", 1,
                "--store", tmp_path / "s.db", "--registry", tmp_path / "reg")
    assert r.exit_code == 2
    lines = _error_lines(r.output)
    assert len(lines) == 1, r.output
    assert lines[0].startswith("error: best-cublas cannot be formed: cublas-nn, cublas-tn, cublaslt-heuristic, "
                               "cublaslt-autotune cannot be built (nvmath-python not installed)")
    assert "--baselines torch" in lines[0]
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "reg").exists()


def test_generate_with_named_baselines_runs_and_records_them(no_nvmath, monkeypatch, tmp_path):
    made = []

    def make(cluster=None, **kw):
        assert kw["baselines"] == ("torch",) and kw["strict_baselines"] is False
        made.append(FakeEvaluator(HashClock(), HOPPER, early_stop=None, baselines=kw["baselines"]))
        return made[-1]
    monkeypatch.setattr("cudal2.evaluate.make_evaluator", make)
    db, reg = tmp_path / "s.db", tmp_path / "reg"
    r = _invoke("generate", "--shapes", P.shape, "--budget", 4, "--seed-list", "fixed:4", "--recheck", 1,
                "--baselines", "torch", "--store", db, "--registry", reg)
    assert r.exit_code == 0, r.output
    with Store(db) as st:
        (run,) = st.runs()
    config = run["config"] if isinstance(run["config"], dict) else json.loads(run["config"])
    assert config["baselines"] == ["torch"] and config["baselines_named"] is True
    (entry,) = Registry.load(reg).all()
    assert entry.baselines == ["torch"] and set(entry.baselines_us) == {"torch"}


def test_generate_rejects_an_unknown_baseline(tmp_path):
    r = _invoke("generate", "--shapes", P.shape, "--baselines", "torch,cublas-xx", "--store", tmp_path / "s.db")
    assert r.exit_code == 2 and "'cublas-xx' is not a baseline" in r.output


def test_compare_refuses_before_any_gpu_work(no_nvmath, monkeypatch):
    monkeypatch.setattr("cudal2.cli.compare.run", lambda *a, **k: pytest.fail("compare must not time anything"))
    r = _invoke("compare", "--shapes", "256x256x256")
    assert r.exit_code == 2
    lines = _error_lines(r.output)
    assert len(lines) == 1 and lines[0].startswith("error: best-cublas cannot be formed: cublas-nn")
    assert "--baselines torch" in lines[0]


def test_compare_measure_shape_strict_refuses_a_dropped_baseline():
    from cudal2 import timing
    from cudal2.cli.compare_measure import Config, measure_shape
    peak = timing.Peak(device="cpu", flops=1e12, bw=1e11, launch_us=1.0)
    cfg = Config(min_calls=2, min_ms=0.0)
    with pytest.raises(baselines.BaselineUnavailable, match="baseline cublas-tn could not be built"):
        measure_shape(Problem(64, 48, 32, "nt"), ("torch", "cublas-nn", "cublas-tn"), cfg, ("offline",), peak,
                      device="cpu", strict=True)


class LtFails(HashClock):
    left_out = {"cublaslt-heuristic": "unavailable: cuBLASLt heuristic returned no algorithm",
                "cublas-tn": "unavailable: cublas-tn takes B column-major ([N,K] row-major); an nn B would "
                             "need a transposed copy"}


@pytest.mark.parametrize("strict", [False, True])
def test_evaluator_strict_baselines_refuse_a_cublaslt_failure(strict):
    clock = LtFails()
    ok = KernelSpec(bm=64, bn=64, bk=32, warps=4, stages=2).text
    with Evaluator(worker_target=standin, worker_config={"clock": clock}, workers=0, timeout_s=5.0,
                   compile_fn=functools.partial(clock_compile, clock=clock), strict_baselines=strict) as ev:
        assert ev.unbuildable_baselines() == {}       # a stand-in worker times its own baselines
        if strict:
            with pytest.raises(EvaluatorError, match="baseline cublaslt-heuristic could not be built"):
                ev.evaluate(P, [ok])
        else:
            (m,) = ev.evaluate(P, [ok])
            assert m.status in ("ok", "slow") and "cublaslt-heuristic" in ev.baselines_left_out[P.text]


class TnOnly(HashClock):
    left_out = {"cublas-tn": LtFails.left_out["cublas-tn"]}


def test_a_layout_exclusion_does_not_trip_strict_baselines():
    clock = TnOnly()
    ok = KernelSpec(bm=64, bn=64, bk=32, warps=4, stages=2).text
    with Evaluator(worker_target=standin, worker_config={"clock": clock}, workers=0, timeout_s=5.0,
                   compile_fn=functools.partial(clock_compile, clock=clock), strict_baselines=True) as ev:
        (m,) = ev.evaluate(P, [ok])
    assert m.status == "ok"
