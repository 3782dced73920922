"""The PROTOCOL.md clock, once for every callable: offline, server and eager timing, and the roofline.

Candidates are zero-argument callables bound to prepared tensors. Every GPU figure comes from CUDA
events recorded on torch's current stream; the loops record events for all calls and synchronize
once at the end, so the host never stalls the queue between calls.

  offline  calls back to back, interleaved A B A B, behind a queued `torch.cuda._sleep` long enough
           that the host finishes enqueueing before the GPU catches up (the GPU never waits for
           Python; a batch whose sleep was over before it was enqueued, with the host slower than
           its GPU work, is dropped and enqueued again behind a longer sleep); median of
           >= min_calls calls and >= min_ms of GPU time per candidate.
  server   each call after an idle gap drawn from an exponential (mean gap_ms), spent on the GPU as
           a sleep kernel (a host sleep would let the queue drain and time the host instead), then
           L2 wiped by writing a buffer of 2x the device's L2; interleaved like offline.
  eager    host wall time from Python: N calls then one synchronize, divided by N.

The clock itself is an object (`CudaClock`) so the loops can be driven by a stub on a CPU.
"""
from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping, Protocol

from .stats import Stats, floor_us

Fn = Callable[[], None]

# Host enqueue time per batch that one queued sleep covers. Longer batches mean fewer sleeps but a
# longer wait before the first timed call; 20 ms keeps both small.
_BATCH_HOST_US = 20_000.0
# Safety factor on the sleep: host enqueue time jitters (GC, page faults) by tens of percent.
_SLEEP_MARGIN = 1.5
# Offline batches enqueued again, at most, after the GPU finished a batch's sleep before the host
# finished enqueueing it (it may then have waited for the host: those samples are dropped).
_MAX_REDO = 4


class Clock(Protocol):
    def mark(self): ...                                  # record an event on the stream, return it
    def elapsed_us(self, a, b) -> float: ...             # GPU time between two marks
    def sleep_us(self, us: float) -> None: ...           # queue a device-side busy wait
    def wipe_l2(self) -> None: ...                       # queue a write of >= 2x L2 bytes
    def sync(self) -> None: ...
    def host_us(self) -> float: ...                      # host wall clock
    def done(self, mark) -> bool: ...                    # the GPU has passed this mark already


class CudaClock:
    """CUDA events on torch's current stream; `torch.cuda._sleep` calibrated against the events."""

    def __init__(self):
        import torch
        from .device import current
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU is visible: the clock needs one")
        self._torch = torch
        self._cycles_per_us: float | None = None
        self._wipe = None
        self._l2 = current().l2_bytes

    def mark(self):
        # NOTE: one new event per mark (every mark must live until the loop's final sync); creating
        # them is host work the queued sleep covers, so it does not reach the timings. A pool made
        # before each batch would cut host time per call; not done without a GPU to re-test on.
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def elapsed_us(self, a, b) -> float:
        return a.elapsed_time(b) * 1000.0

    def sync(self) -> None:
        self._torch.cuda.synchronize()

    def host_us(self) -> float:
        return time.perf_counter() * 1e6

    def done(self, mark) -> bool:
        return mark.query()

    def cycles_per_us(self) -> float:
        """SM clock cycles per µs as `_sleep` counts them, measured once (the clock boosts under load)."""
        if self._cycles_per_us is None:
            cycles = 2_000_000
            self._torch.cuda._sleep(cycles)          # wakes the clock up before measuring
            rates = []
            for _ in range(3):
                a = self.mark()
                self._torch.cuda._sleep(cycles)
                b = self.mark()
                self.sync()
                rates.append(cycles / self.elapsed_us(a, b))
            self._cycles_per_us = sorted(rates)[1]
        return self._cycles_per_us

    def sleep_us(self, us: float) -> None:
        if us > 0:
            self._torch.cuda._sleep(max(1, int(us * self.cycles_per_us())))

    def wipe_l2(self) -> None:
        if self._wipe is None:
            if not self._l2:
                raise RuntimeError("the device reports no L2 size; cannot size the L2 wipe")
            self._wipe = self._torch.empty(2 * self._l2 // 4, dtype=self._torch.int32, device="cuda")
        self._wipe.fill_(0x3C003C00)   # a write of every line: evicts A, B and C from L2


_DEFAULT: CudaClock | None = None


def default_clock() -> Clock:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = CudaClock()
    return _DEFAULT


# ---- offline ---------------------------------------------------------------------------------------
def probe_calls(fns: Mapping[str, Fn], clock: Clock, rounds: int = 3) -> tuple[dict[str, float], float]:
    """Per-candidate GPU µs per call and host µs to enqueue one call (incl. its event)."""
    names = list(fns)
    # Generous (50 µs of host per call is slower than any launch path here): the probe's GPU times
    # feed the batch sleeps, so they too must not contain host waits.
    clock.sleep_us(max(2000.0, 50.0 * rounds * len(names)))
    marks = [clock.mark()]
    t0 = clock.host_us()
    for _ in range(rounds):
        for n in names:
            fns[n]()
            marks.append(clock.mark())
    host = max(0.1, (clock.host_us() - t0) / (rounds * len(names)))
    clock.sync()
    per: dict[str, list[float]] = {n: [] for n in names}
    for i in range(rounds * len(names)):
        per[names[i % len(names)]].append(clock.elapsed_us(marks[i], marks[i + 1]))
    return {n: sorted(v)[len(v) // 2] for n, v in per.items()}, host


def warm_up(fns: Mapping[str, Fn], warmup: int, clock: Clock) -> list[str]:
    """Run every candidate `warmup` times (module load, autotune caches, clocks up), then sync."""
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n]()
    clock.sync()
    return names


def offline(fns: Mapping[str, Fn], *, min_calls: int = 30, min_ms: float = 100.0, warmup: int = 3,
            max_calls: int = 100_000, clock: Clock | None = None, report: dict | None = None) -> dict[str, Stats]:
    """Back-to-back GPU time per call, interleaved A B A B; see the module docstring. A `report`
    dict gets how the loop went: the probe's host µs a call, the last estimate, batches timed and
    batches dropped (the GPU may have waited for the host in them) and enqueued again."""
    if not fns:
        return {}
    if min_calls < 1 or min_ms < 0:
        raise ValueError("min_calls must be >= 1 and min_ms >= 0")
    clock = clock or default_clock()
    names = warm_up(fns, warmup, clock)
    est, host = probe_calls(fns, clock)
    probe_host = host
    # 10% over the probe's estimate: the probe is three calls, the floor on total time is "~min_ms".
    target = {n: min(max_calls, max(min_calls, math.ceil(1.1 * min_ms * 1000.0 / max(est[n], 1e-3))))
              for n in names}
    done = {n: 0 for n in names}
    batches = []   # (first mark, [(name, mark after the call)])
    redo = 0
    while any(done[n] < target[n] for n in names):
        active = [n for n in names if done[n] < target[n]]
        rounds = max(1, int(_BATCH_HOST_US / (host * len(active))))
        rounds = min(rounds, max(target[n] - done[n] for n in active))
        calls = [n for r in range(rounds) for n in active if done[n] + r < target[n]]
        gpu = sum(est[n] for n in calls)
        # The queue never drains if the sleep outlasts the host's lead: n*(host - gpu per call).
        clock.sleep_us(_SLEEP_MARGIN * max(0.0, len(calls) * host - gpu) + 20.0)
        first = clock.mark()
        t0 = clock.host_us()
        seq = []
        for n in calls:
            fns[n]()
            seq.append((n, clock.mark()))
        host_batch = clock.host_us() - t0
        if clock.done(first) and host_batch > gpu and redo < _MAX_REDO:
            # The sleep ended before the host had enqueued the batch, and enqueueing took longer
            # than the batch's GPU work: the GPU caught up and waited for Python, which puts host
            # time into these samples (the probe's three rounds under-estimated the host). Drop
            # them; size the next sleep by this batch's own host rate and enqueue it again. (While
            # the sleep still runs when the last call is in, no call can have waited; a batch of
            # GPU work longer than its enqueueing keeps the GPU behind the host after the sleep.)
            host = max(host, host_batch / len(calls))
            redo += 1
            continue
        for n in active:
            done[n] += min(rounds, target[n] - done[n])   # how many of `calls` are n's
        batches.append((first, seq))
    clock.sync()
    if report is not None:
        report.update(probe_host_us=round(probe_host, 3), host_us=round(host, 3), batches=len(batches), redone=redo)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for first, seq in batches:
        prev = first
        for n, ev in seq:
            samples[n].append(clock.elapsed_us(prev, ev))
            prev = ev
    return {n: Stats.from_samples(v) for n, v in samples.items()}


# ---- server ----------------------------------------------------------------------------------------
def server(fns: Mapping[str, Fn], *, calls: int = 50, gap_ms: float = 2.0, seed: int = 0,
           warmup: int = 3, clock: Clock | None = None) -> dict[str, Stats]:
    """Cold-L2 GPU time per call after a random idle gap (exponential, mean gap_ms), interleaved."""
    if not fns:
        return {}
    if calls < 1 or gap_ms < 0:
        raise ValueError("calls must be >= 1 and gap_ms >= 0")
    clock = clock or default_clock()
    rng = random.Random(seed)
    names = warm_up(fns, warmup, clock)
    marks = []
    # A lead for the first calls: later the gaps (2 ms mean) keep the GPU far behind the host, but a
    # short first gap would let the start event fire before the host has issued the call.
    clock.sleep_us(1000.0 + 100.0 * len(names))
    for _ in range(calls):
        for n in names:
            clock.sleep_us(rng.expovariate(1.0 / (gap_ms * 1000.0)) if gap_ms > 0 else 0.0)
            clock.wipe_l2()
            a = clock.mark()
            fns[n]()
            marks.append((n, a, clock.mark()))
    clock.sync()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for n, a, b in marks:
        samples[n].append(clock.elapsed_us(a, b))
    return {n: Stats.from_samples(v) for n, v in samples.items()}


# ---- eager -----------------------------------------------------------------------------------------
def eager(fn: Fn, *, calls: int = 200, repeats: int = 5, warmup: int = 3, clock: Clock | None = None) -> Stats:
    """Host wall µs per call as a PyTorch user sees it: `calls/repeats` calls then one sync, per repeat."""
    if calls < 1 or repeats < 1:
        raise ValueError("calls and repeats must be >= 1")
    clock = clock or default_clock()
    for _ in range(warmup):
        fn()
    clock.sync()
    per = max(1, calls // repeats)
    samples = []
    for _ in range(repeats):
        t0 = clock.host_us()
        for _ in range(per):
            fn()
        clock.sync()
        samples.append((clock.host_us() - t0) / per)
    return Stats.from_samples(samples)


# ---- roofline --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Peak:
    """What the card can do, measured on it: FLOP/s, bytes/s (read + write) and the empty-kernel µs."""
    device: str
    flops: float
    bw: float
    launch_us: float
    how: str = ""
    measured_at: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def default_cache_dir() -> Path:
    return Path(os.path.expanduser("~/.cache/cudal2"))


def measure_peak(clock: Clock | None = None) -> Peak:
    """P from cuBLAS (torch.matmul) on random fp16 4096^3 and 8192^3 (the faster counts: the floor
    must be a bound), BW from a 1 GiB device-to-device copy, t_launch from an empty kernel."""
    import torch
    from .device import current
    clock = clock or default_clock()
    rates = []
    for s in (4096, 8192):
        a = torch.randn(s, s, device="cuda", dtype=torch.float16)
        b = torch.randn(s, s, device="cuda", dtype=torch.float16)
        c = torch.empty(s, s, device="cuda", dtype=torch.float16)
        # Bound as default arguments, not closed over: the `del` below then frees the buffers
        # without leaving a closure whose names are gone.
        st = offline({"mm": lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)}, min_calls=30, min_ms=100.0,
                     clock=clock)["mm"]
        rates.append(2.0 * s ** 3 / (st.median_us * 1e-6))
        del a, b, c
    n = 1 << 29  # fp16 elements: 1 GiB, far beyond any L2
    src = torch.randn(n, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    st = offline({"copy": lambda dst=dst, src=src: dst.copy_(src)}, min_calls=30, min_ms=100.0, clock=clock)["copy"]
    bw = 2.0 * src.numel() * src.element_size() / (st.median_us * 1e-6)
    del src, dst
    # `_sleep(0)` is a kernel that returns at once: back to back, its event delta is the launch cost.
    lat = offline({"empty": lambda: torch.cuda._sleep(0)}, min_calls=200, min_ms=5.0, clock=clock)["empty"]
    return Peak(device=current().key, flops=max(rates), bw=bw, launch_us=lat.median_us,
                how="torch.matmul fp16 randn 4096^3/8192^3 (max); 1 GiB copy_ (read+write); _sleep(0)",
                measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def get_peak(force: bool = False, cache_dir: str | Path | None = None) -> Peak:
    """The card's Peak, measured once and cached as JSON keyed by device key; `force` re-measures."""
    from .device import current
    key = current().key
    path = Path(cache_dir or default_cache_dir()) / f"roofline-{key}.json"
    if not force and path.is_file():
        try:
            d = json.loads(path.read_text())
            if d.get("device") == key:
                return Peak(**d)
        except (ValueError, TypeError):
            pass  # a damaged cache is re-measured
    p = measure_peak()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(p.to_dict(), indent=2))
    tmp.replace(path)
    return p


def roofline_us(problem, peak: Peak | None = None) -> float:
    """t_floor = max(2MNK / P, bytes / BW, t_launch) for the problem on this card (µs)."""
    p = peak or get_peak()
    return floor_us(problem.flops, problem.min_bytes, p.flops, p.bw, p.launch_us)
