"""Issue 21 item 6: a candidate that fails to compile reports one line (the error's first line and
where the full log is), never the compiler's multi-page dump; the full log goes to the store."""
import functools

from cudal2.backends.base import CompileError
from cudal2.device import DeviceInfo
from cudal2.evaluate import Evaluator
from cudal2.evaluate.procs import compile_failure, first_line
from cudal2.problems import Problem
from cudal2.spec import KernelSpec
from cudal2.store import Store
from cudal2.testing.fake_evaluator import FakeEvaluator
from cudal2.testing.standin import HashClock, clock_compile, standin

HOPPER = DeviceInfo.target("sm_90a")
P = Problem(512, 512, 512)
OK = KernelSpec(bm=64, bn=64, bk=32, warps=4, stages=2).text
NOISY = KernelSpec(bm=64, bn=64, bk=32, warps=4, stages=3).text


def test_first_line_and_compile_failure():
    assert first_line("\n\n  error: boom  \nmore\nmore") == "error: boom"
    assert len(first_line("x" * 5000)) == 300
    kind, line, log = compile_failure("ptxas failed\n--- compiler log ---\nline 2", "IR dump\n")
    assert (kind, line) == ("error", "ptxas failed")
    assert "line 2" in log and "IR dump" in log


def test_a_noisy_compile_in_a_pool_prints_nothing_and_keeps_the_log(capfd):
    clock = HashClock(faults={NOISY: "compile_noisy"})
    with Evaluator(worker_target=standin, worker_config={"clock": clock}, workers=1, timeout_s=5.0,
                   compile_fn=functools.partial(clock_compile, clock=clock)) as ev:
        ok, bad = ev.evaluate(P, [OK, NOISY])
    assert ok.status == "ok"
    assert bad.status == "compile_error"
    assert bad.reason == "PassManager::run failed: out of shared memory"
    log = bad.meta["compile_log"]
    assert "MLIR_LOG line 199" in log and "MLIR_DUMP" in log and log.count("tt.load") == 400
    out, err = capfd.readouterr()
    assert "MLIR_DUMP" not in out + err and "MLIR_LOG" not in out + err


class FailingClock(HashClock):
    """Every spec with stages=3 fails to compile with a long log (as ptxas or an MLIR pass would)."""

    def __call__(self, spec, problem):
        if spec.stages == 3:
            raise CompileError("ptxas failed: too many resources requested",
                               log="\n".join(f"MLIR_LOG line {i}" for i in range(300)))
        return super().__call__(spec, problem)


def test_generate_prints_one_line_per_compile_failure(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from cudal2.cli import app
    made = []

    def make(cluster=None, **kw):
        made.append(FakeEvaluator(FailingClock(), HOPPER, early_stop=None))
        return made[-1]
    monkeypatch.setattr("cudal2.evaluate.make_evaluator", make)
    monkeypatch.setattr("cudal2.device.gpu_available", lambda: True)
    db = tmp_path / "s.db"
    r = CliRunner().invoke(app, ["generate", "--shapes", P.shape, "--budget", "8", "--seed-list", "fixed:8",
                                 "--recheck", "1", "--baselines", "torch", "--store", str(db),
                                 "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 0, r.output
    with Store(db) as st:
        failed = [m for m in st.measurements(problem=P.text) if m.status == "compile_error"]
    assert failed, "the stand-in fails every stages=3 spec; the search proposes some"
    assert all("MLIR_LOG line 299" in m.meta["compile_log"] for m in failed)
    assert "MLIR_LOG" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("compile error ")]
    assert len(lines) == len(failed)
    for ln in lines:
        assert "ptxas failed: too many resources requested" in ln
        assert f"full log: store {db}, meta.compile_log" in ln
