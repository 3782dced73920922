"""Test set-up: GPU tests are marked `gpu` and skipped where no CUDA GPU is visible."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_GPU = _has_gpu()


class HostClock:
    """A cudal2.timing Clock for CPU tensors: every call is synchronous there, so host wall time
    is the compute time (tests time real CPU work through timing.offline with it)."""

    def mark(self):
        import time
        return time.perf_counter()

    def elapsed_us(self, a, b):
        return (b - a) * 1e6

    def sleep_us(self, us):
        import time
        time.sleep(us / 1e6)

    def wipe_l2(self):
        pass

    def sync(self):
        pass

    def host_us(self):
        import time
        return time.perf_counter() * 1e6

    def done(self, mark):
        return False        # no queue: each call ran when the host made it, nothing waited


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def hopper():
    """The sm_90a compile target (limits of the architecture, no card)."""
    from cudal2.device import DeviceInfo
    return DeviceInfo.target("sm_90a")


@pytest.fixture
def gpu_device():
    from cudal2.device import current
    return current()


@pytest.fixture
def sass(tmp_path):
    """f(cubin bytes) -> its SASS text, by the cuobjdump the triton wheel ships
    (triton/backends/nvidia/bin); the test is skipped where there is none."""
    import subprocess
    from pathlib import Path
    try:
        import triton
    except ImportError:
        pytest.skip("no triton: its wheel carries the cuobjdump these SASS checks use")
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.is_file():
        pytest.skip("no cuobjdump (ships with the triton wheel at triton/backends/nvidia/bin)")

    def dump(binary: bytes) -> str:
        cubin = tmp_path / "k.cubin"
        cubin.write_bytes(binary)
        return subprocess.run([str(tool), "--dump-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    return dump


def pytest_sessionfinish(session, exitstatus):
    """A thread left running by a test keeps the interpreter from exiting after the tests passed
    (stop 59's CI hung so, on a process pool's manager thread, until its 90 minutes ran out). Such
    threads fail the run here, by name; a pool's processes are killed so that its thread, and the
    exit, end."""
    import multiprocessing
    import threading
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not left:
        return
    if any(type(t).__name__ == "_ExecutorManagerThread" for t in left):
        for p in multiprocessing.active_children():
            p.kill()
    for t in left:
        t.join(10.0)
    names = ", ".join(f"{t.name} ({type(t).__name__})" for t in left)
    sys.stderr.write(f"\nerror: threads still running when the tests ended: {names} (a process pool "
                     "is ended with cudal2.evaluate.procs.end_pool)\n")
    session.exitstatus = 1
