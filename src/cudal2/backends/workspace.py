"""Split-K scratch of a loaded CUDA kernel, one pair per stream: fp32 partials and zeroed int32 counters.

Every CUDA family with a split-K keeps one `StreamWorkspace` per loaded kernel (mma and wgmma in
backends/cuda_launch.py, stream in backends/cuda_stream.py). The rules, and why:
- One pair per stream handle: the same kernel launched on two streams at once must not share
  partials or counters (issue 19: "safe when two streams run the same kernel"). Until 2026-12-06 the
  mma family kept one buffer per kernel, which two streams would have raced on.
- A pair is the same object for as long as it fits, so a bound launch (backends/cuda_bind.py)
  re-reads its pointers only when the pair changed (an identity check per call).
- A size that needs more replaces the pair, at least doubling it (a run of growing sizes
  reallocates a few times); the old pair is kept alive: a launch queued on the stream may still
  use it, and a CUDA graph captured earlier holds its pointers for every replay. Doubling bounds
  what the retired pairs hold to the size of the live one.
- The counters are zeroed when allocated (the kernels reset each counter they use, so that is the
  only fill). The fill runs on torch's current stream, which need not be the stream the kernel is
  launched on: the device is synchronised once after an allocation, except while a graph is being
  captured (no synchronise is allowed then; the fill is captured on the capturing stream, where the
  captured kernel follows it).
"""
from __future__ import annotations


def _grown(need: int, old: int) -> int:
    """The new length: the old one where it still fits, else at least double it."""
    return old if need <= old else max(need, 2 * old)


class StreamWorkspace:
    def __init__(self, device):
        self.device = device                  # where the pairs live (a torch device or its name)
        self.pairs: dict[int, tuple] = {}     # stream handle -> (partials, counters or None)
        self.retired: list[tuple] = []

    def get(self, stream: int, floats: int, counters: int = 0) -> tuple:
        """This stream's (partials, counters) with at least `floats` fp32 and `counters` int32
        entries (counters None where none are asked for); the same object while it fits."""
        have = self.pairs.get(stream)
        if have is not None and have[0].numel() >= floats and (
                counters == 0 or (have[1] is not None and have[1].numel() >= counters)):
            return have
        import torch
        old_f = have[0].numel() if have is not None else 0
        old_c = have[1].numel() if have is not None and have[1] is not None else 0
        part = torch.empty(_grown(floats, old_f), dtype=torch.float32, device=self.device)
        cnt = None
        if counters or old_c:
            cnt = torch.zeros(_grown(counters, old_c), dtype=torch.int32, device=self.device)
        if have is not None:
            self.retired.append(have)
        if torch.device(self.device).type == "cuda" and not torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize(self.device)
        pair = self.pairs[stream] = (part, cnt)
        return pair

    def pointers(self, stream: int, floats: int, counters: int = 0) -> tuple[int, int]:
        """(partials pointer, counters pointer or 0) of `get`."""
        part, cnt = self.get(stream, floats, counters)
        return part.data_ptr(), (cnt.data_ptr() if cnt is not None else 0)


__all__ = ["StreamWorkspace"]
