"""The clock's loops and the statistics, on a CPU: a simulated stream stands in for CUDA events.

FakeClock models what matters about a real stream: the host enqueues work at a cost per call, the
GPU runs it in order as soon as both the previous work is done and the host has issued it, and an
event records when the GPU reaches it. So a loop that lets the GPU wait for the host shows host time
in its figures, exactly as on a card.
"""
import math
import random

import numpy as np
import pytest

from cudal2 import timing
from cudal2.problems import Problem
from cudal2.stats import CLASSES, Stats, flop_class, floor_us, geomean, summarize, summarize_by_class


class FakeClock:
    def __init__(self, host_per_call=10.0, wipe_us=30.0):
        self.host = 0.0          # host clock, µs
        self.gpu = 0.0           # when the GPU finishes what is queued
        self.h = host_per_call
        self.wipe_us = wipe_us
        self.sleeps, self.wipes, self.calls = [], 0, []

    def _enqueue(self, dur):
        self.host += self.h
        self.gpu = max(self.gpu, self.host) + dur

    def kernel(self, name, dur, jitter=0.0, seed=0):
        rng = random.Random(seed)

        def fn():
            self.calls.append(name)
            self._enqueue(dur * (1 + jitter * (2 * rng.random() - 1)))
        return fn

    def mark(self):
        self.host += 1.0
        self.gpu = max(self.gpu, self.host)
        return self.gpu

    def elapsed_us(self, a, b):
        return b - a

    def sleep_us(self, us):
        self.sleeps.append(us)
        self._enqueue(us)

    def wipe_l2(self):
        self.wipes += 1
        self._enqueue(self.wipe_us)

    def sync(self):
        self.host = max(self.host, self.gpu)

    def host_us(self):
        return self.host

    def done(self, mark):
        return mark <= self.host        # the GPU reached the mark by the host's present time


# ---- Stats and aggregation -------------------------------------------------------------------------
def test_stats_match_numpy():
    xs = [random.Random(1).lognormvariate(2, 0.3) for _ in range(101)]
    s = Stats.from_samples(xs)
    q1, q3 = np.percentile(xs, [25, 75])
    assert s.median_us == pytest.approx(np.median(xs), rel=1e-12)
    assert s.mean_us == pytest.approx(np.mean(xs), rel=1e-12)
    assert s.p99_us == pytest.approx(np.percentile(xs, 99), rel=1e-12)
    assert s.spread == pytest.approx((q3 - q1) / np.median(xs), rel=1e-12)
    assert (s.min_us, s.n) == (min(xs), 101)
    assert Stats.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError):
        Stats.from_samples([])


def test_geomean_worst_share_and_classes():
    sp = {"a": 2.0, "b": 0.5, "c": 1.0, "d": 4.0}
    s = summarize(sp)
    assert s.geomean == pytest.approx(math.sqrt(2.0))      # (2 * 0.5 * 1 * 4) ** (1/4)
    assert s.mean == pytest.approx(7.5 / 4)
    assert (s.worst, s.worst_shape, s.best_shape) == (0.5, "b", "d")
    assert s.share_faster == pytest.approx(0.5)             # 2 and 4; 1.0 is not faster
    assert s.share_not_slower == pytest.approx(0.75)        # ... but it is not slower
    assert summarize({"x": float("nan")}) is None
    flops = {"a": 5e8, "b": 5e10, "c": 2e11, "d": 1e9}
    by = summarize_by_class(sp, flops)
    assert by[CLASSES[0]].n == 1 and by[CLASSES[0]].geomean == pytest.approx(2.0)
    assert by[CLASSES[1]].n == 2 and by[CLASSES[1]].geomean == pytest.approx(math.sqrt(0.5 * 4.0))
    assert by[CLASSES[2]].worst_shape == "c"
    assert flop_class(1e9) == "1-100GF" and flop_class(1e11) == "1-100GF" and flop_class(1.01e11) == ">100GF"
    assert geomean([3.0]) == pytest.approx(3.0)


def test_roofline_formula_each_regime():
    P, BW, L = 800e12, 4.3e12, 2.0
    big = Problem(4096, 4096, 4096)                     # compute bound: 2*4096^3 / P
    assert floor_us(big.flops, big.min_bytes, P, BW, L) == pytest.approx(2 * 4096 ** 3 / P * 1e6)
    skinny = Problem(16384, 64, 16384)                  # memory bound: A alone is 512 MiB
    assert floor_us(skinny.flops, skinny.min_bytes, P, BW, L) == pytest.approx(skinny.min_bytes / BW * 1e6)
    tiny = Problem(64, 64, 64)                          # launch bound
    assert floor_us(tiny.flops, tiny.min_bytes, P, BW, L) == L
    peak = timing.Peak(device="x", flops=P, bw=BW, launch_us=L)
    assert timing.roofline_us(big, peak) == pytest.approx(2 * 4096 ** 3 / P * 1e6)


# ---- the loops, on the simulated stream -------------------------------------------------------------
def test_offline_keeps_host_time_out_and_interleaves():
    clk = FakeClock(host_per_call=10.0)
    fns = {"A": clk.kernel("A", 2.0, jitter=0.1, seed=1), "B": clk.kernel("B", 3.0, jitter=0.1, seed=2)}
    st = timing.offline(fns, min_calls=30, min_ms=1.0, warmup=3, clock=clk)
    # Kernels 2 and 3 µs against 11 µs of host per call: any host wait would show as ~11 µs.
    assert st["A"].median_us == pytest.approx(2.0, rel=0.1)
    assert st["B"].median_us == pytest.approx(3.0, rel=0.1)
    assert st["A"].p99_us < 2.3 and st["B"].p99_us < 3.4          # not one sample waited for the host
    # At least ~min_ms of GPU time per candidate (the count comes from a 3-call probe, +10%).
    for s in st.values():
        assert s.n * s.mean_us >= 1000.0 and s.n >= 30
    # After 3 warm-up and 3 probe rounds the timed calls alternate A B A B while both still need
    # calls (B reaches its count first, then A runs alone).
    timed = clk.calls[12:12 + 2 * st["B"].n]
    assert all(x != y for x, y in zip(timed, timed[1:])) and timed.count("B") == st["B"].n


def test_offline_without_the_sleep_would_show_host_time():
    # The simulated stream is not lenient: the same calls without the queued sleep time the host.
    clk = FakeClock(host_per_call=10.0)
    fn = clk.kernel("A", 2.0)
    marks = [clk.mark()]
    for _ in range(20):
        fn()
        marks.append(clk.mark())
    assert np.median(np.diff(marks)) > 10.0


class SlowingClock(FakeClock):
    """A host that enqueues at `host_per_call` during warm-up and the probe and `slow` µs a call
    after `after` calls: the probe's estimate then sizes the sleeps too short."""

    def __init__(self, host_per_call, slow, after):
        super().__init__(host_per_call)
        self.slow, self.after, self.n = slow, after, 0

    def _enqueue(self, dur):
        self.n += 1
        if self.n > self.after:
            self.h = self.slow
        super()._enqueue(dur)


def test_offline_drops_a_batch_the_gpu_waited_in():
    """2026-12-05 (runs 91-92, H200): empty kernels timed 8-12 µs offline where an earlier run had
    3.5. Whatever the cause there, a host slower than its probe drains the queue and puts host time
    in the samples; the loop sees that the sleep was over before the batch was in, drops the batch
    and enqueues it again behind a sleep sized by the batch's own host rate."""
    clk = SlowingClock(host_per_call=5.0, slow=20.0, after=20)
    fns = {"A": clk.kernel("A", 3.0), "B": clk.kernel("B", 4.0)}
    rep = {}
    st = timing.offline(fns, min_calls=30, min_ms=1.0, warmup=3, clock=clk, report=rep)
    assert st["A"].median_us == pytest.approx(3.0, rel=0.05) and st["A"].p99_us < 3.3
    # the report says so: the probe saw ~6 µs a call (5 + the mark), the batch ~21, one batch redone
    assert rep["probe_host_us"] == pytest.approx(6.0) and rep["host_us"] == pytest.approx(21.0, rel=0.05)
    assert rep["redone"] >= 1 and rep["batches"] >= 1
    assert st["B"].median_us == pytest.approx(4.0, rel=0.05) and st["B"].p99_us < 4.4
    # the same host without the check: the first batch's samples hold host time (~21 µs)
    monkey = SlowingClock(host_per_call=5.0, slow=20.0, after=20)
    monkey.done = lambda mark: False
    fns = {"A": monkey.kernel("A", 3.0), "B": monkey.kernel("B", 4.0)}
    bad = timing.offline(fns, min_calls=30, min_ms=1.0, warmup=3, clock=monkey)
    assert bad["A"].p99_us > 15.0


def test_offline_min_calls_for_long_kernels():
    clk = FakeClock(host_per_call=10.0)
    rep = {}
    st = timing.offline({"big": clk.kernel("big", 5000.0)}, min_calls=30, min_ms=100.0, clock=clk, report=rep)
    assert st["big"].n == 30 and st["big"].median_us == pytest.approx(5000.0) and rep["redone"] == 0
    # GPU-bound: the short sleep is over at once, but the GPU stays behind the host: no batch is
    # dropped (3 warm-up + 3 probe + 30 timed calls, not more)
    assert len(clk.calls) == 36


def test_server_gaps_and_wipes():
    clk = FakeClock(host_per_call=10.0, wipe_us=30.0)
    fns = {"A": clk.kernel("A", 4.0), "B": clk.kernel("B", 6.0)}
    st = timing.server(fns, calls=100, gap_ms=2.0, seed=3, clock=clk)
    assert clk.wipes == 200                                 # one wipe before every timed call
    gaps = clk.sleeps[-200:]
    # Exponential, mean 2000 µs: over 200 draws the sample mean is within 3 sigma (2000/sqrt(200)*3).
    assert abs(np.mean(gaps) - 2000.0) < 3 * 2000.0 / math.sqrt(200)
    assert np.std(gaps) == pytest.approx(np.mean(gaps), rel=0.3)   # an exponential's sd equals its mean
    assert st["A"].mean_us == pytest.approx(4.0) and st["B"].p99_us == pytest.approx(6.0)
    assert st["A"].n == 100
    again = FakeClock(10.0, 30.0)
    timing.server({"A": again.kernel("A", 4.0), "B": again.kernel("B", 6.0)}, calls=100, seed=3, clock=again)
    assert again.sleeps[-200:] == gaps                      # the seed fixes the gaps


def test_eager_counts_host_or_gpu_whichever_is_slower():
    clk = FakeClock(host_per_call=10.0)
    host_bound = timing.eager(clk.kernel("A", 2.0), calls=200, clock=clk)
    assert host_bound.median_us == pytest.approx(10.0, rel=0.05)
    clk = FakeClock(host_per_call=10.0)
    gpu_bound = timing.eager(clk.kernel("A", 50.0), calls=200, clock=clk)
    assert gpu_bound.median_us == pytest.approx(50.0, rel=0.05)
    assert gpu_bound.n == 5


def test_bad_arguments():
    clk = FakeClock()
    with pytest.raises(ValueError):
        timing.offline({"A": clk.kernel("A", 1.0)}, min_calls=0, clock=clk)
    with pytest.raises(ValueError):
        timing.server({"A": clk.kernel("A", 1.0)}, calls=0, clock=clk)
    assert timing.offline({}, clock=clk) == {}


def test_spearman_ties_share_their_mean_rank():
    from cudal2.stats import spearman
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # x ties on its first two values: ranks 0.5, 0.5, 2, 3 whatever the order of the tied pair,
    # so swapping y's first two values (the tied pair's partners) cannot change rho
    a = spearman([5, 5, 7, 9], [1, 2, 3, 4])
    assert a == spearman([5, 5, 7, 9], [2, 1, 3, 4]) == pytest.approx(4.5 / (4.5 * 5.0) ** 0.5)
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0          # no spread
