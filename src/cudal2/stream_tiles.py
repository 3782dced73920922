"""Candidate stream-family specs for a decode / skinny shape (min(M, N) <= 64), by a measured rule,
and for a small-class shape with more tokens (under 1 GFLOP, since 2026-12-07: see below).

At decode a GEMM is one pass over the weight: the launch is latency-bound, so what decides speed
is that every CTA is resident at once (one wave) and keeps enough bytes in flight. Measured on the
H200 (2026-12-04, bench/results/h200-sm90/decode/decode_h200-sm90_d7f3eb3.json: every one-wave
stream spec, ~180 per shape, on 24 nt projections of Llama-3-8B and Qwen2.5-7B at M 1/4/16):
  - one wave: bench/decode.py's earlier two-wave picks ran 0.71-0.78x of best-cublas (run 30); the
    best one-wave spec of each shape 0.82-1.28x (geomean 1.036);
  - split K only until the CTAs cover ~half the SMs or more (the winners: 64-592 CTAs; a split
    costs an fp32 partial round trip through L2);
  - 8 warps (the CTA's K split) where a warp still gets >= 2 chunks of 32 k, then 4, then 2
    (2 on any K);
  - a ring as deep as a warp's chunks allow (<= 8), and a 4-deep one beside it (4 beat 8 on a
    third of the shapes).
Ranked by how close the CTA count is to the SM count, more warps and deeper rings first, this
rule's first 4 specs reached 0.986x (worst 0.928x) of the sweep's best per shape, its first 8
0.988x. The rule ranks; the clock decides.

Past 64 tokens (the small class only, spec_stream.stream_serves) the same rule runs over the token
tiles 32 and 64 (16 would take 4x the CTAs and re-read the large operand 4x more): not measured
when written (2026-12-07); `bench/stream_small.py` writes these specs for the shapes a card serves
by cuBLAS and `bash bench/device_run.sh stream-small` times them.
"""
from __future__ import annotations

import math

from .device import DeviceInfo
from .problems import Problem
from .spec import (STREAM_BM, STREAM_MAX_ACC, STREAM_MAX_STAGES, STREAM_MAX_SMALL, KernelSpec, is_valid, stream_serves,
                   stream_smem)

_SPLITS = (1, 2, 4, 8, 16)   # the measured rule's splits (the grammar has 3 / 6 / 12 too: the search tries them)
_FILL = 0.45        # split K until the CTAs cover this share of the SMs (measured above)
_REGS_FLOOR = 64    # registers per thread at least (ptxas: 48-229 over the stream specs compiled)


def _per_sm(spec: KernelSpec, layout: str, device: DeviceInfo) -> int:
    """CTAs of this spec one SM holds: by shared memory (+ the 1 KB the driver reserves per CTA)
    and by registers at the floor above."""
    by_smem = device.smem_per_sm // (stream_smem(spec.to_dict(), layout) + 1024)
    by_regs = device.regs_per_sm // (spec.warps * 32 * _REGS_FLOOR)
    return max(0, min(by_smem, by_regs))


def stream_candidates(problem: Problem, device: DeviceInfo, n: int = 8) -> list[KernelSpec]:
    """Up to n valid one-wave stream specs for a decode / skinny problem (or a small-class one),
    best ranked first; none for a problem the family does not serve."""
    small, big = min(problem.M, problem.N), max(problem.M, problem.N)
    if n <= 0 or not stream_serves(problem.M, problem.N, problem.K):
        return []
    sms = device.sm_count or 132
    bns = (next((b for b in (16, 32, 48, 64) if b >= small), 64),) if small <= STREAM_MAX_SMALL else (64, 32)
    chunks = math.ceil(problem.K / 32)
    ranked: list[tuple] = []
    for bm, bn in ((bm, bn) for bn in bns for bm in STREAM_BM):
        if bm * bn // 32 > STREAM_MAX_ACC:
            continue
        tiles = math.ceil(big / bm) * math.ceil(small / bn)
        split = next((s for s in _SPLITS if tiles * s >= _FILL * sms), _SPLITS[-1])
        ctas = tiles * split
        for warps in (8, 4, 2):
            per_warp = math.ceil(math.ceil(chunks / split) / warps)
            if per_warp < 2 and warps > 2:      # 2 warps always: short K still gets a spec
                continue
            for stages in dict.fromkeys((min(STREAM_MAX_STAGES, per_warp + 1), min(4, per_warp + 1))):
                for st in range(stages, 1, -1):        # shallower until valid and one wave
                    spec = KernelSpec(backend="cuda", family="stream", bm=bm, bn=bn, bk=32, warps=warps, stages=st,
                                      group_m=1, split_k=split, subtile=1, warp_spec=0, cluster=1)
                    if is_valid(spec, problem, device) and ctas <= _per_sm(spec, problem.layout, device) * sms:
                        ranked.append((round(abs(math.log(ctas / sms)), 3), -warps, -st, spec.text, spec))
                        break
    out: list[KernelSpec] = []
    for *_, spec in sorted(ranked, key=lambda r: r[:4]):
        if spec not in out:
            out.append(spec)
    return out[:n]


__all__ = ["stream_candidates"]
