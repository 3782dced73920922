"""The store: round trip, WAL, the best view, all-or-nothing batches, survival of kill -9."""
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from cudal2.measurement import Measurement
from cudal2.spec import KernelSpec
from cudal2.store import Store, StoreError

P = "512x512x512:nn"
DEV = "h200-sm90"
S1 = KernelSpec().text
S2 = KernelSpec(bm=64, bn=64, warps=4).text
S3 = KernelSpec(bm=64, bn=128, warps=4).text


def full(spec=S1, status="ok", time_us=10.0, problem=P, device=DEV) -> Measurement:
    """A measurement with every field set to something non-default."""
    return Measurement(
        spec=spec, problem=problem, device=device, status=status,
        reason="" if status == "ok" else "random: relative error 0.3 (limit 0.005)",
        time_us=time_us if status == "ok" else None,
        times={"offline": {"median_us": time_us, "p99_us": 1.5 * time_us, "n": 30}},
        baselines_us={"torch": 12.5, "cublas-nn": 11.0}, best_cublas_us=11.0,
        check={"problem": problem, "passed": status == "ok", "reason": "", "results": []},
        binary_hash="ab" * 32, versions={"torch": "2.11.0", "triton": "3.6.0"}, ts=1234.5, ratio=None,
        meta={"registers": 168, "spills_bytes": 0})


def test_round_trip_every_field(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        run = st.new_run({"budget": 16, "backend": "both"}, DEV, versions={"torch": "2.11.0"})
        m = full()
        assert st.add([m], run) == 1
        (back,) = st.measurements()
        assert back.to_dict() == {**m.to_dict(), "run_id": run}
        assert st.runs()[0]["config"] == {"budget": 16, "backend": "both"}
        assert st.runs()[0]["device"] == DEV


def test_spec_text_is_canonical_in_queries(tmp_path):
    # A spec given in another field order (or with defaults left out) is the same key.
    with Store(tmp_path / "s.sqlite") as st:
        st.add([full(spec="warps=8 backend=triton family=tiled")], st.new_run({}, DEV))
        assert st.measurements()[0].spec == S1
        assert st.has(KernelSpec(), P, DEV)
        assert st.has("family=tiled backend=triton", P, DEV)
        assert not st.has(S2, P, DEV)
        assert not st.has(S1, P, "h100-sm90")


def test_wal_mode_lets_the_writer_commit_under_an_open_reader(tmp_path):
    path = tmp_path / "s.sqlite"
    w = Store(path)
    assert w.journal_mode == "wal"
    run = w.new_run({}, DEV)
    w.add([full()], run)
    # A reader (compare, the registry) in the middle of a read transaction: with a rollback journal
    # its shared lock would make the writer's commit wait and fail; in WAL the commit goes through
    # and the reader keeps its snapshot until it ends its transaction.
    r = sqlite3.connect(str(path), isolation_level=None)
    r.execute("BEGIN")
    assert r.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 1
    w._db.execute("PRAGMA busy_timeout=500")
    w.add([full(S2)], run)
    assert r.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 1
    r.execute("COMMIT")
    assert r.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 2
    assert (tmp_path / "s.sqlite-wal").exists()
    r.close()
    w.close()


def test_best_view_is_fastest_ok_per_problem_and_device(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        run = st.new_run({}, DEV)
        st.add([full(S1, time_us=20.0), full(S2, time_us=9.0), full(S3, status="wrong"),
                full(S3, status="slow"), full(S1, time_us=5.0, device="h100-sm90"),
                full(S1, time_us=7.0, problem="64x64x64:nn")], run)
        st.add([full(S3, time_us=9.0)], run)   # ties with S2: the earlier row stays the best
        b = st.best(P, DEV)
        assert (b.spec, b.time_us) == (S2, 9.0)
        assert st.best(P, "h100-sm90").time_us == 5.0
        assert st.best("64x64x64:nn", DEV).time_us == 7.0
        assert st.best("64x64x64:nt", DEV) is None
        assert {(m.problem, m.device) for m in st.best_all()} == {(P, DEV), (P, "h100-sm90"), ("64x64x64:nn", DEV)}
        assert sorted(m.time_us for m in st.best_all(DEV)) == [7.0, 9.0]


def test_filters_problems_done_and_checkpoints(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        r1, r2 = st.new_run({"n": 1}, DEV), st.new_run({"n": 2}, DEV)
        st.add([full(S1), full(S2, status="wrong")], r1)
        st.add([full(S1, problem="64x64x64:nt")], r2)
        assert [m.spec for m in st.measurements(status="wrong")] == [S2]
        assert len(st.measurements(problem=P, device=DEV)) == 2
        assert len(st.measurements(run_id=r2)) == 1
        assert st.problems_done(r1) == {P}
        assert st.problems_done() == {P, "64x64x64:nt"}
        assert st.measured_specs(P, DEV) == {S1, S2}
        st.add_checkpoint("ckpt/step10.pt", 10, r1)
        st.add_checkpoint("ckpt/step20.pt", 20, r1)
        assert st.latest_checkpoint(r1)["path"] == "ckpt/step20.pt"
        assert st.latest_checkpoint(r2) is None
        assert st.count() == 3 and st.count(r1) == 2


def test_a_batch_that_fails_midway_leaves_nothing(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        run = st.new_run({}, DEV)
        st.add([full(S1), full(S2)], run)
        bad = full(S3)
        bad.time_us = [1.0]   # sqlite cannot bind a list: the INSERT of the 3rd row fails
        with pytest.raises(sqlite3.Error):
            st.add([full(S1, problem="64x64x64:nn"), full(S2, problem="64x64x64:nn"), bad], run)
        assert st.count() == 2
        assert st.problems_done() == {P}
        st.add([full(S3)], run)   # and the store is still usable
        assert st.count() == 3


def test_nan_is_stored_as_null_and_named(tmp_path, capsys):
    # A NaN upstream is a bug, but refusing the row killed whole device runs (2026-12-04): the row is
    # kept, the value becomes null (JSON has no NaN) and meta names where it was.
    with Store(tmp_path / "s.sqlite") as st:
        m = full()
        m.times = {"offline": {"median_us": float("nan"), "n": 30}}
        m.baselines_us = {"torch": float("inf"), "cublas-nn": 11.0}
        m.time_us = float("nan")
        assert st.add([m], st.new_run({}, DEV)) == 1
        (back,) = st.measurements()
        assert back.times == {"offline": {"median_us": None, "n": 30}}
        assert back.baselines_us == {"torch": None, "cublas-nn": 11.0} and back.time_us is None
        assert sorted(back.meta["nonfinite"]) == ["baselines_us.torch", "time_us", "times.offline.median_us"]
        assert back.meta["registers"] == 168
    assert "non-finite values stored as null" in capsys.readouterr().err


def test_not_a_store(tmp_path):
    p = tmp_path / "junk.sqlite"
    p.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not an SQLite store"):
        Store(p)


WRITER = textwrap.dedent("""
    import sys, time
    from cudal2.measurement import Measurement
    from cudal2.store import Store
    st = Store(sys.argv[1])
    run = st.new_run({"writer": True}, "h200-sm90")
    k = 0
    while True:
        batch = [Measurement(spec=f"backend=triton bm={[16, 32, 64, 128, 256][i]}", problem=f"{k + 1}x64x64:nn",
                             device="h200-sm90", status="ok", time_us=float(k * 5 + i + 1)) for i in range(5)]
        st.add(batch, run)
        k += 1
        print(k, flush=True)
""")


def test_kill_9_mid_run_loses_nothing_committed(tmp_path):
    path = tmp_path / "s.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    committed = 0
    deadline = time.monotonic() + 60
    while committed < 40 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed = int(line)
    os.kill(proc.pid, signal.SIGKILL)   # while it writes further batches
    proc.wait()
    assert committed >= 40, "the writer did not get going"
    with Store(path) as st:
        ms = st.measurements()
        # Every batch it reported is there, and no batch is there in part.
        assert len(ms) >= 5 * committed
        assert len(ms) % 5 == 0
        times = sorted(m.time_us for m in ms)
        assert times == [float(t) for t in range(1, len(ms) + 1)]
        assert len(st.problems_done()) == len(ms) // 5
