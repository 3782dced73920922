"""backends/workspace.py, the split-K scratch every CUDA family keeps per stream, on the CPU (its
allocations stand in on the CPU, the synchronise is recorded)."""
from __future__ import annotations

import pytest
import torch

from cudal2.backends.workspace import StreamWorkspace


def test_one_pair_per_stream_the_same_object_while_it_fits():
    ws = StreamWorkspace("cpu")
    p7 = ws.get(7, 1000, 10)
    assert p7[0].dtype == torch.float32 and p7[0].numel() == 1000
    assert p7[1].dtype == torch.int32 and p7[1].numel() == 10 and int(p7[1].abs().sum()) == 0
    p7[1].fill_(5)                           # the kernels reset their counters; a reuse keeps them
    assert ws.get(7, 10, 1) is p7 and ws.get(7, 1000, 10) is p7
    p8 = ws.get(8, 10, 1)
    assert p8 is not p7 and p8[0].data_ptr() != p7[0].data_ptr()
    assert ws.pointers(7, 1000, 10) == (p7[0].data_ptr(), p7[1].data_ptr())
    # No counters asked (the mma family's partials): none made, pointer 0.
    assert ws.get(9, 64)[1] is None and ws.pointers(9, 64)[1] == 0


def test_growth_at_least_doubles_and_keeps_the_old_pair_alive():
    ws = StreamWorkspace("cpu")
    first = ws.get(0, 100, 4)
    grown = ws.get(0, 101, 4)                 # one more float: doubled, not 101
    assert grown is not first and grown[0].numel() == 200 and grown[1].numel() == 4
    assert int(grown[1].abs().sum()) == 0     # fresh counters are zero again
    big = ws.get(0, 1000, 100)                # past double: exactly what was asked
    assert big[0].numel() == 1000 and big[1].numel() == 100
    assert ws.retired == [first, grown]       # a queued launch or a captured graph may read them
    assert ws.get(0, 64, 1) is big


@pytest.mark.parametrize("capturing", [False, True])
def test_a_new_pair_synchronises_the_device_unless_capturing(monkeypatch, capturing):
    """The counters' zero fill runs on torch's current stream, not necessarily the kernel's: one
    synchronise per allocation orders it (none while capturing, where it is not allowed)."""
    real_empty, real_zeros = torch.empty, torch.zeros
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: real_empty(*a, **{**kw, "device": "cpu"}))
    monkeypatch.setattr(torch, "zeros", lambda *a, **kw: real_zeros(*a, **{**kw, "device": "cpu"}))
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: syncs.append(str(dev)))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
    ws = StreamWorkspace(torch.device("cuda", 1))
    ws.get(5, 10, 2)
    ws.get(5, 10, 2)                          # reused: nothing to order
    ws.get(6, 10, 2)
    assert syncs == ([] if capturing else ["cuda:1", "cuda:1"])
