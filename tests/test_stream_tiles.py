"""The stream family's one-wave seed rule (cudal2.stream_tiles) against the H200 decode sweep it was
fitted to, and its invariants: valid specs, one wave of CTAs, none where the family does not serve."""
from __future__ import annotations

import dataclasses
import math

import pytest

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import is_valid, stream_smem
from cudal2.stream_tiles import stream_candidates
from cudal2.rl.staged import decode_lead, decode_wgmma, seed_specs

H200 = dataclasses.replace(DeviceInfo.target("sm_90a"), name="NVIDIA H200", sm_count=132)


@pytest.mark.parametrize("shape", ["1x4096x4096:nt", "7x1000x4096:nt", "16x14336x4096:nt", "1x512x3584:nt",
                                   "33x4096x1000", "4096x7x4096", "64x8192x8192:nt", "3x3000x120:nt", "2x1000x16:nt",
                                   "256x256x512:nt", "512x2048x256", "100x130x72:nt"])     # small, > 64 tokens
def test_one_wave_valid_and_distinct(shape):
    p = Problem.parse(shape)
    specs = stream_candidates(p, H200, 8)
    assert specs and len(specs) == len({s.text for s in specs})
    for s in specs:
        assert s.family == "stream" and is_valid(s, p, H200)
        ctas = math.ceil(max(p.M, p.N) / s.bm) * math.ceil(min(p.M, p.N) / s.bn) * s.split_k
        per_sm = H200.smem_per_sm // (stream_smem(s.to_dict(), p.layout) + 1024)
        assert ctas <= per_sm * H200.sm_count           # every CTA resident at once
        if min(p.M, p.N) <= 64:
            assert s.bn >= min(p.M, p.N) or s.bn == 64         # the token tile covers the tokens
        else:
            assert s.bn in (32, 64)                            # more tokens: the two widest token tiles


def test_first_pick_is_the_measured_best_where_the_sweep_agrees():
    # H200 2026-12-04 (bench/results/h200-sm90/decode/decode_h200-sm90_d7f3eb3.json): the fastest of
    # ~180 one-wave specs at 1x4096x4096 nt and 4x3584x3584 nt was bm=32 warps=8 stages=8 split_k=1.
    for shape in ("1x4096x4096:nt", "4x3584x3584:nt"):
        top = stream_candidates(Problem.parse(shape), H200, 1)[0]
        assert (top.bm, top.bn, top.warps, top.stages, top.split_k) == (32, 16, 8, 8, 1)


def test_split_k_only_where_the_tiles_leave_sms_idle():
    few = stream_candidates(Problem.parse("1x512x3584:nt"), H200, 8)       # 32 tiles of 16 rows
    assert all(s.split_k > 1 for s in few if s.bm == 16)
    many = stream_candidates(Problem.parse("1x18944x3584:nt"), H200, 8)    # 1184 tiles of 16 rows
    assert all(s.split_k == 1 for s in many)


def test_none_outside_the_family():
    assert stream_candidates(Problem.parse("128x4096x4096:nt"), H200, 8) == []
    assert stream_candidates(Problem.parse("1024x1024x1024:nt"), H200, 8) == []      # 2.1 GFLOP: not small
    assert stream_candidates(Problem.parse("1x4096x4096:nt"), H200, 0) == []


def test_decode_seeds_lead_with_the_rule():
    p = Problem.parse("4x4096x4096:nt")
    for kind in ("auto", "model"):
        seeds = seed_specs(8, p, H200, ("triton", "cuda"), kind)
        lead = decode_lead(8, p, H200, ("triton", "cuda"))
        # six: three of the stream rule's, then three of the wave model's wgmma specs that trim A
        # (no 2-CTA cluster: wgmma.cu's A_TRIM needs CLUSTER == 1), each valid
        assert seeds[:6] == lead == stream_candidates(p, H200, 3) + decode_wgmma(3, p, H200, ("triton", "cuda"))
        assert [s.family for s in lead] == ["stream"] * 3 + ["wgmma"] * 3
        assert all(s.cluster == 1 and is_valid(s, p, H200) for s in lead[3:])
        assert len(seeds) == 8 == len({s.text for s in seeds})
    mid = Problem.parse("32x8192x8192:nt")                     # 16 < min(M, N) <= 32: one of each
    assert [s.family for s in decode_lead(8, mid, H200, ("triton", "cuda"))] == ["stream", "wgmma"]
    assert [s.family for s in seed_specs(8, mid, H200, ("triton", "cuda"), "auto")].count("stream") == 1
    assert [s.family for s in decode_lead(1, p, H200, ("triton", "cuda"))] == ["stream"]
    sm80 = dataclasses.replace(H200, cc=(8, 0))                 # no wgmma: the lead is all stream
    assert [s.family for s in decode_lead(8, p, sm80, ("triton", "cuda"))] == ["stream"] * 6
    skinny = Problem.parse("64x8192x8192:nt")                  # min(M, N) = 64: none (measured to lose)
    assert decode_lead(8, skinny, H200, ("triton", "cuda")) == []
    assert decode_lead(8, p, H200, ("triton",)) == []           # no cuda backend: no stream seeds
    assert [s.family for s in seed_specs(8, p, H200, ("triton",), "auto")].count("stream") == 0
    assert seed_specs(8, p, H200, ("triton", "cuda"), "fixed")[0].family != "stream"   # fixed stays fixed


def test_past_64_tokens_the_family_serves_exactly_the_small_class():
    """stream_serves past min(M, N) = 64 is the small class of ../shared/classes.py (stats.shape_class
    is its tested copy), over the whole grid: a change to either shows here."""
    from cudal2.problems import grid
    from cudal2.spec import stream_serves
    from cudal2.stats import shape_class
    wide = [p for p in grid("nt") if min(p.M, p.N) > 64]
    assert len(wide) > 500
    assert all(stream_serves(p.M, p.N, p.K) == (shape_class(p.M, p.N, p.K) == "small") for p in wide)
    assert sum(stream_serves(p.M, p.N, p.K) for p in wide) > 100
