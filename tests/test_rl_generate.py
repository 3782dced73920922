"""`cudal2 generate` end to end on a CPU (--replay), kill -9 and --resume, and the GPU run (marked)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cudal2.backends import get_backend
from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.testing.stub_clocks import synthetic_measurements
from cudal2.spec import KernelSpec
from cudal2.store import Store

SHAPES = [Problem(64, 128, 512), Problem(2048, 2048, 1024), Problem(256, 64, 256), Problem(1024, 4096, 512)]
CLI = [sys.executable, "-c", "from cudal2.cli import main; main()"]


@pytest.fixture(scope="module")
def replay_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("gen") / "table.db"
    with Store(path) as st:
        st.add(synthetic_measurements(SHAPES, DeviceInfo.target("sm_90a"), n_specs=80, seed=1),
               run_id=st.new_run({"stub": True}))
    return path


def _gen(*args, timeout=120):
    """A subprocess: the kill test and the GPU test need a real process of their own."""
    return subprocess.run(CLI + ["generate", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def _invoke(*args):
    """In-process (typer's runner): the same command without paying the interpreter start again."""
    from typer.testing import CliRunner

    from cudal2.cli import app
    r = CliRunner().invoke(app, ["generate", *map(str, args)])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    r.returncode = r.exit_code
    return r


def test_generate_replay_writes_registry(replay_store, tmp_path):
    shapes = ",".join(p.shape for p in SHAPES[:2])
    r = _invoke("--replay", replay_store, "--shapes", shapes, "--budget", 8, "--group", 4,
             "--store", tmp_path / "run.db", "--registry", tmp_path / "reg", "--seed", 3)
    assert r.returncode == 0, r.stderr
    index = json.loads((tmp_path / "reg" / "index.json").read_text())
    entries = index["devices"]["sm90a"]["entries"]
    with Store(tmp_path / "run.db") as st, Store(replay_store) as src:
        for p in SHAPES[:2]:
            ms = st.measurements(problem=p.text)
            assert len({m.spec for m in ms}) == 8            # the budget: 8 distinct specs per shape
            best = min((m for m in ms if m.status == "ok"), key=lambda m: m.time_us)
            e = entries[p.text]
            # The registry holds the run's best, with the times the replayed measurement carries.
            assert e["spec"] == best.spec or e["times"].get("best_kernel_spec") == best.spec
            assert e["best_cublas_us"] == pytest.approx(best.best_cublas_us)
            assert best.spec in src.measured_specs(p, "sm90a")   # never a spec the table lacks
            if e["backend"] != "cublas":
                # The filed source is exactly what the winner's backend renders for its spec, so
                # dispatch's render check (cudal2.ops) accepts it; no GPU is needed to render.
                spec = KernelSpec.parse(e["spec"])
                want = get_backend(spec.backend).render(spec, p)
                assert (tmp_path / "reg" / e["source"]).read_text() == want
    assert "speedup" in r.stdout and SHAPES[0].text in r.stdout
    # The totals count what was replayed into the run's store, not every spec the policy asked for.
    with Store(tmp_path / "run.db") as st:
        n = len(st.measurements())
    assert f"2 shapes, {n} evaluations replayed from the store" in r.stdout


def test_generate_errors_are_one_line(tmp_path, replay_store):
    r = _invoke("--shapes", "64x64x64", "--store", tmp_path / "s.db")       # no GPU here, no --replay
    assert r.returncode != 0 and r.stderr.strip().startswith("error: no CUDA GPU")
    assert len(r.stderr.strip().splitlines()) == 1
    r = _invoke("--replay", replay_store, "--shapes", "64xx64", "--store", tmp_path / "s.db")
    assert r.returncode == 2 and "is not of the form MxNxK" in r.stderr
    r = _invoke("--replay", replay_store, "--shapes", "64x64x64", "--backend", "metal", "--store", tmp_path / "s.db")
    assert r.returncode == 2 and "--backend" in r.stderr


def test_generate_cuda_only(replay_store, tmp_path):
    r = _invoke("--replay", replay_store, "--shapes", SHAPES[2].shape, "--backend", "cuda", "--budget", 6,
             "--group", 3, "--store", tmp_path / "run.db", "--registry", tmp_path / "reg")
    assert r.returncode == 0, r.stderr
    with Store(tmp_path / "run.db") as st:
        ms = st.measurements()
    assert ms and all(m.spec.startswith("backend=cuda") for m in ms)


@pytest.mark.skipif(not hasattr(os, "kill"), reason="needs POSIX signals")
def test_kill9_then_resume_loses_nothing(replay_store, tmp_path):
    run_db = tmp_path / "run.db"
    shapes = ",".join(p.shape for p in SHAPES)
    args = ["--replay", replay_store, "--shapes", shapes, "--budget", 24, "--group", 4,
            "--store", run_db, "--registry", tmp_path / "reg"]
    proc = subprocess.Popen(CLI + ["generate", *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    before = set()
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if run_db.exists():
            with Store(run_db) as st:
                trained = bool(st.checkpoints())
            if trained:           # the seeds and a policy group stored, more to come
                break
    assert proc.poll() is None, "the run finished before it could be killed; give it more work"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store(run_db) as st:
        before = {m.key() + (m.time_us,) for m in st.measurements()}
        assert st.checkpoints(), "no policy checkpoint was recorded before the kill"
    assert before
    r = _gen(*args, "--resume", timeout=180)
    assert r.returncode == 0, r.stderr
    assert "restored policy checkpoint" in r.stderr
    with Store(run_db) as st:
        after = st.measurements()
    assert before <= {m.key() + (m.time_us,) for m in after}        # nothing stored was lost
    # Nothing measured twice under one profile (the screen and the full re-check are two profiles).
    keys = [m.key() + (m.meta["profile"]["name"],) for m in after]
    assert len(keys) == len(set(keys))
    assert len(after) > len(before)                                # the resumed run went on
    with Store(run_db) as st:
        assert set(st.shapes()) == {p.text for p in SHAPES}        # every shape finished
    for p in SHAPES:
        # Within budget; replay may end a shape early (a table of 80 specs has few distinct neighbours).
        screened = [m for m in after if m.problem == p.text and m.meta["profile"]["name"] == "screen"]
        assert 0 < len(screened) <= 24


@pytest.mark.gpu
def test_generate_gpu_both_backends_passes_checker(tmp_path):
    from cudal2.backends import build_kernel
    from cudal2.check import check_kernel
    from cudal2.device import current
    from cudal2.registry import Registry
    from cudal2.baselines import unbuildable
    shapes = [Problem(256, 256, 256), Problem(512, 1024, 256)]
    # Without nvmath-python generate refuses the default bar (issue 21); name torch alone then.
    named = ["--baselines", "torch"] if unbuildable(["cublaslt-heuristic"]) else []
    r = _gen("--backend", "both", "--shapes", ",".join(p.shape for p in shapes), "--budget", 4, "--group", 4,
             "--store", tmp_path / "run.db", "--registry", tmp_path / "reg", *named, timeout=540)
    assert r.returncode == 0, r.stderr
    dev = current()
    reg = Registry.load(tmp_path / "reg")
    for p in shapes:
        e = reg.lookup(p, dev.key)
        assert e is not None, f"no registry entry for {p}"
        spec = KernelSpec.parse(e.spec or e.times["best_kernel_spec"])
        kernel = build_kernel(spec, p, dev)
        report = check_kernel(kernel, p, "cuda")
        assert report.passed, report.to_dict()
