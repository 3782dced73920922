"""The PROTOCOL clock's other form: GPU time per call from CUDA-graph replays ("keep host launch gaps
out: queue a sleep kernel ... or time CUDA-graph replays").

Each candidate's calls are captured once into a graph of `calls` back-to-back launches (as many as
make a replay ~`replay_us` of GPU time, from a short probe); the graphs are replayed interleaved,
A B A B, behind a queued sleep, with an event pair around each replay; a sample is the replay's GPU
time / calls, and a candidate's figure the median over `replays` samples.

Why a second clock (2026-12-06, H100, bench/pdl_probe.py): the offline loop records an event after
every call, and on a ~5 µs kernel that event costs ~2 µs of GPU time (64x128x8192 nt: 7.58 µs a
call with an event after each, 5.45 with none between 400 calls). Inside a replay no event sits
between calls, as in a program that launches its kernels back to back; a kernel launched with
programmatic dependent launch keeps that edge in the graph, where an event between calls takes it
away. Both clocks are GPU time; report which one a figure used.

Callables must launch on torch's current stream, which must not be the legacy default stream (it
cannot be captured): run under `torch.cuda.stream(s)` and prepare cuBLAS baselines under it too
(their handle keeps the stream of the latest prepare). The clock and the capture are injectable so
the loop runs on a CPU with stubs.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

from .stats import Stats
from .timing import Clock, Fn, default_clock, probe_calls, warm_up

Capture = Callable[[Fn, int], Callable[[], None]]    # (fn, calls) -> replay()


def torch_capture(fn: Fn, calls: int) -> Callable[[], None]:
    """`calls` launches of fn captured into one CUDA graph on torch's current stream; its replay."""
    import torch
    s = torch.cuda.current_stream()
    if s == torch.cuda.default_stream():
        raise ValueError("graph capture needs a side stream: run under torch.cuda.stream(s) "
                         "(and prepare cuBLAS baselines under it too)")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for _ in range(calls):
            fn()
    return g.replay


def graph(fns: Mapping[str, Fn], *, replays: int = 30, replay_us: float = 300.0, max_calls: int = 512,
          warmup: int = 3, clock: Clock | None = None, capture: Capture | None = None,
          report: dict | None = None) -> dict[str, Stats]:
    """Per-call GPU time from interleaved graph replays (module docstring). `report` gets each
    candidate's calls per graph."""
    if not fns:
        return {}
    if replays < 1 or replay_us <= 0 or max_calls < 1:
        raise ValueError("replays and max_calls must be >= 1 and replay_us > 0")
    clock = clock or default_clock()
    capture = capture or torch_capture
    names = warm_up(fns, warmup, clock)
    est, _ = probe_calls(fns, clock)
    calls = {n: max(1, min(max_calls, math.ceil(replay_us / max(est[n], 0.5)))) for n in names}
    replay = {n: capture(fns[n], calls[n]) for n in names}
    for n in names:                 # the first replay uploads the graph: keep it out of the samples
        replay[n]()
    clock.sync()
    # A replay costs the host ~10-20 µs to launch and the GPU >= replay_us (unless max_calls caps
    # it), so after this lead the GPU stays behind the host.
    clock.sleep_us(1000.0 + 50.0 * len(names))
    marks = []
    for _ in range(replays):
        for n in names:
            a = clock.mark()
            replay[n]()
            marks.append((n, a, clock.mark()))
    clock.sync()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for n, a, b in marks:
        samples[n].append(clock.elapsed_us(a, b) / calls[n])
    if report is not None:
        report["calls_per_graph"] = dict(calls)
    return {n: Stats.from_samples(v) for n, v in samples.items()}
