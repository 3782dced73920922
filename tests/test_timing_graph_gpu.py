"""The graph-replay clock on a GPU: a sleep of known length times as that length, a short kernel
times no slower than on the offline loop (no event between calls), and capture refuses the legacy
default stream with a message that says what to do.

Run on a card:  python3 -m pytest -q -m gpu tests/test_timing_graph_gpu.py
"""
import pytest

pytestmark = pytest.mark.gpu


def test_graph_clock_on_the_card():
    import torch

    from cudal2 import timing, timing_graph
    clock = timing.default_clock()
    cycles = int(20.0 * clock.cycles_per_us())             # a 20 µs busy wait
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.zeros(1024, device="cuda")
        fns = {"sleep": lambda: torch.cuda._sleep(cycles), "add": lambda: x.add_(1.0)}
        st = timing_graph.graph(fns, replays=20)
        off = timing.offline(fns, min_ms=5)
    # _sleep spins on the SM clock, calibrated against events: within 5% (clock boost drift).
    assert st["sleep"].median_us == pytest.approx(20.0, rel=0.05)
    # A ~2 µs elementwise kernel: the offline loop's per-call event only adds to it.
    assert st["add"].median_us <= off["add"].median_us * 1.02
    with pytest.raises(ValueError, match="side stream"):
        timing_graph.torch_capture(lambda: x.add_(1.0), 2)
