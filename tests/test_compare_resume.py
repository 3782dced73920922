"""`cudal2 compare --resume` on the CPU: what it keeps from an earlier compare JSON, the rows' order
and the file rewritten as rows come in (cli/compare_resume.py); the rules of what is stale are
tests/test_stale_rows.py's."""
import subprocess
import sys

import pytest

from cudal2.cli import compare_resume as cr
from cudal2.cli.compare_measure import Config, summaries
from cudal2.problems import Problem
from cudal2.report import MODES, read_json, write_json

NAMES = ("torch",)
P = [Problem(64 * (i + 1), 64, 128, "nt") for i in range(4)]


def _row(p: Problem, t: float) -> dict:
    r = {"shape": p.shape, "M": p.M, "N": p.N, "K": p.K, "layout": p.layout, "gflop": p.flops / 1e9,
         "status_torch": "ok", "ts": 100.0}
    for mode, key in (("offline", "median_us"), ("server", "mean_us")):
        r[f"{mode}_torch_{key}"] = t
        r[f"{mode}_best_cublas"], r[f"{mode}_best_cublas_us"] = "torch", t
        r[f"{mode}_torch_vs_best"] = 1.0
    return r


def _config(cfg: Config) -> dict:
    from dataclasses import asdict
    return {**asdict(cfg), "modes": list(MODES), "baselines": list(NAMES), "kernel_source": "none"}


def test_resume_state_keeps_the_asked_rows_and_refuses_other_settings(tmp_path):
    cfg = Config(min_ms=20.0)
    path = tmp_path / "c.json"
    # no file yet: a new compare of every shape
    assert cr.resume_state(str(path), P, cfg, MODES, NAMES, "none", None, None, None) == ([], P, [])
    rows = [_row(P[0], 5.0), _row(P[2], 7.0)]
    write_json(path, rows, {"config": _config(cfg), "runs": [{"shapes": 2, "ts": "2026-12-05T07:00:00Z"}]},
               summaries(rows, MODES, NAMES))
    kept, todo, runs = cr.resume_state(str(path), P, cfg, MODES, NAMES, "none", None, None, None)
    assert [r["shape"] for r in kept] == [P[0].shape, P[2].shape]
    assert todo == [P[1], P[3]] and runs == [{"shapes": 2, "ts": "2026-12-05T07:00:00Z"}]
    with pytest.raises(ValueError, match="min_ms=20.0 and this run asks 100.0"):
        cr.resume_state(str(path), P, Config(min_ms=100.0), MODES, NAMES, "none", None, None, None)
    with pytest.raises(ValueError, match="kernel_source='none' and this run asks 'registry'"):
        cr.resume_state(str(path), P, cfg, MODES, NAMES, "registry", None, None, None)
    # a gzipped compare (how they are committed) resumes the same
    import gzip
    gz = tmp_path / "c.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    kept_gz, todo_gz, _ = cr.resume_state(str(gz), P, cfg, MODES, NAMES, "none", None, None, None)
    assert kept_gz == kept and todo_gz == todo


def test_row_sink_orders_rows_and_saves_as_they_come(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    sink = cr.RowSink(P, [_row(P[2], 7.0)], [{"shapes": 1, "ts": "2026-12-05T07:00:00Z"}], str(path),
                      MODES, NAMES, summaries)
    sink.run_meta.update({"config": {"min_ms": 20.0}, "peak": {}, "versions": {}})
    monkeypatch.setattr(cr, "SAVE_EVERY_S", 0.0)      # save at every row
    sink.add(_row(P[3], 9.0))
    sink.add(_row(P[0], 5.0))
    assert [r["shape"] for r in sink.rows()] == [P[0].shape, P[2].shape, P[3].shape]
    doc = read_json(path)                              # what a crash now would leave
    assert [r["shape"] for r in doc["rows"]] == [P[0].shape, P[2].shape, P[3].shape]
    assert doc["runs"][0]["shapes"] == 1 and doc["runs"][1]["shapes"] == 2 and doc["runs"][1]["kept"] == 1
    assert doc["summary"]["offline"]["torch vs best-cublas"]["all"]["n"] == 3
    # without a JSON path nothing is written
    quiet = cr.RowSink(P, [], [], None, MODES, NAMES, summaries)
    quiet.add(_row(P[1], 6.0))
    assert len(quiet.rows()) == 1


def test_resume_needs_json():
    res = subprocess.run([sys.executable, "-m", "cudal2.cli", "compare", "--shapes", "64x64x64", "--resume"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "--resume goes on from a compare's --json file" in res.stderr
    assert "Traceback" not in res.stderr
