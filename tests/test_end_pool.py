"""cudal2.evaluate.procs.end_pool: a pool with a compile still running ends at once and leaves no
thread for the interpreter to wait on at exit (the CI of stop 59 hung there after its tests passed)."""
import multiprocessing as mp
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest

from cudal2.evaluate.procs import end_pool


def managers() -> list[threading.Thread]:
    """ProcessPoolExecutor's manager threads alive in this process (the ones exit joins)."""
    return [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread" and t.is_alive()]


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_a_running_task_is_killed_and_nothing_is_left_to_join(method):
    before = set(managers())
    pool = ProcessPoolExecutor(2, mp_context=mp.get_context(method))
    running = pool.submit(time.sleep, 60)          # stands in for a compile that never returns
    queued = [pool.submit(time.sleep, 60) for _ in range(4)]
    while not running.running():                   # the task is in a worker, not just queued
        time.sleep(0.01)
    procs = list(pool._processes.values())
    t0 = time.monotonic()
    end_pool(pool)
    assert time.monotonic() - t0 < 15.0            # 60 s if it had waited for the task
    assert not any(p.is_alive() for p in procs)
    assert set(managers()) <= before
    with pytest.raises(BrokenProcessPool):         # the killed task says so; it does not hang
        running.result(timeout=5)
    assert all(f.done() for f in queued)           # cancelled, or failed with the pool


def test_an_idle_or_finished_pool_ends_cleanly():
    before = set(managers())
    pool = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))
    assert pool.submit(abs, -3).result(timeout=60) == 3
    end_pool(pool)
    end_pool(ProcessPoolExecutor(1))               # never started: no processes, no thread
    assert set(managers()) <= before
