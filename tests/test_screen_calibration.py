"""bench/screen_calibration.py: the agreement figures exactly, and a run over a stub-clock search's store."""
import json

import pytest

from cudal2.problems import Problem
from bench_import import load_bench


def _module():
    return load_bench("screen_calibration")


def test_agreement_figures():
    sc = _module()
    ref = {"a": 10.0, "b": 12.0, "c": 20.0}
    # Same ranking, speedups off by 0% / 10% / 0% against ref's (best-cublas 8 here, 8 in ref).
    a = sc.agreement({"a": 10.0, "b": 12.0 / 1.1, "c": 20.0}, ref, 8.0, 8.0)
    assert a["top1"] and a["median_dev"] == pytest.approx(0.0) and a["worst_dev"] == pytest.approx(0.1)
    # A different winner.
    assert not sc.agreement({"a": 10.0, "b": 9.0, "c": 20.0}, ref, 8.0, 8.0)["top1"]


def test_calibration_over_a_stub_search(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cudal2.cli import app
    from cudal2.device import DeviceInfo
    from cudal2.testing.fake_evaluator import FakeEvaluator
    from cudal2.testing.standin import HashClock
    hopper = DeviceInfo.target("sm_90a")
    monkeypatch.setattr("cudal2.evaluate.make_evaluator",
                        lambda cluster=None, **kw: FakeEvaluator(HashClock(), hopper, early_stop=None))
    monkeypatch.setattr("cudal2.device.gpu_available", lambda: True)
    shapes = [Problem(64, 64, 64), Problem(1024, 1024, 2048), Problem(4096, 4096, 4096)]   # one per class
    db = tmp_path / "run.db"
    r = CliRunner().invoke(app, ["generate", "--shapes", ",".join(p.shape for p in shapes), "--budget", "5",
                                 "--seed-list", "fixed:5", "--store", str(db), "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 0, r.output
    sc = _module()
    ev = FakeEvaluator(HashClock(), hopper, early_stop=None)
    assert sc.main(["--store", str(db), "--device", hopper.key, "--shapes", "3", "--out", str(tmp_path / "o")],
                   evaluator=ev) == 0
    res = json.loads((tmp_path / "o" / "screen_calibration.json").read_text())
    assert res["complete"] and [r["shape"] for r in res["rows"]] == [p.shape for p in shapes]   # GFLOP order
    for row in res["rows"]:
        assert row["specs"] == 5
        for name in ("screen", "capped"):                # a stub clock: every setting agrees exactly
            assert row[name]["top1"] and row[name]["worst_dev"] == pytest.approx(0.0)
    assert set(res["summary"]) == {"all", "<1GF", "1-100GF", ">100GF"}
    assert res["profiles"]["capped"]["max_calls"] == 300 and "max_calls" not in res["profiles"]["screen"]
    assert ev.profiles["ref"][1]["min_ms"] == 100.0 and ev.profiles["ref"][0]["checks"] == ("random",)
