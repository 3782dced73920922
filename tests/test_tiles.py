"""cudal2.tiles: the wgmma candidates are valid, distinct, and follow the wave model (no GPU)."""
from __future__ import annotations

import dataclasses

import pytest

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import is_valid
from cudal2.tiles import candidates, estimate

H200 = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)


@pytest.mark.parametrize("shape,layout", [("4096x4096x512", "nn"), ("4096x4096x512", "nt"),
                                          ("64x64x8192", "nt"), ("512x256x16384", "nn"),
                                          ("1000x3000x1000", "nt"), ("8192x8192x8192", "nn")])
def test_candidates_are_valid_and_distinct(shape, layout):
    p = Problem.parse(shape, layout)
    got = candidates(p, H200, 8)
    assert 8 <= len(got) <= 12        # n, two ping-pong, up to two half-wave splits (<= n + 4)
    assert all(s.family == "wgmma" and is_valid(s, p, H200) for s in got)
    assert len({s.text for s in got}) == len(got)


def test_starved_shapes_split_k_and_full_ones_do_not():
    starved = candidates(Problem(256, 512, 8192, "nt"), H200, 8)
    assert starved[0].split_k > 1            # 8 tiles of 64x64 on 132 SMs: split K
    full = candidates(Problem(8192, 8192, 8192, "nn"), H200, 8)
    assert full[0].split_k == 1 and (full[0].bm, full[0].bn) in ((128, 256), (256, 128))


def test_deep_k_starved_shapes_get_the_half_wave_splits():
    """Run 167 (H100): on deep-K starved shapes the split whose units fill half the SMs (64 of 132)
    beat the wave list's splits (which fill the card). 512x512x16384: 16 tiles of 128x128 -> split 4
    (64 units; split 6 would make 96), 16 of 64x128 x 2 -> split 2; 256x256x16384: 4 tiles of 128x128
    -> split 16, 8 of 64x128 -> split 8. Cooperative, one K-slice cluster a tile (cluster=1), deepest
    ring. Shorter K, skinny outputs and shapes whose tiles alone fill half the card get none."""
    from cudal2.tiles import half_wave_split
    for shape, want in (("512x512x16384", {(128, 128): 4, (64, 128): 2}),
                        ("256x256x16384", {(128, 128): 16, (64, 128): 8}),
                        ("1024x256x12288", {(128, 128): 4, (64, 128): 2})):
        p = Problem.parse(shape, "nn")
        for (bm, bn), split in want.items():
            assert half_wave_split(p, bm, bn, 132) == split
            assert -(-p.M // bm) * -(-p.N // bn) * split == 64
        got = {(s.bm, s.bn, s.split_k): s for s in candidates(p, H200, 4)}
        for (bm, bn), split in want.items():
            s = got[(bm, bn, split)]
            assert s.warp_spec == 1 and s.cluster == 1 and s.subtile == 1 and is_valid(s, p, H200)
            assert s.warps == (12 if bm == 128 else 8)
            assert not is_valid(dataclasses.replace(s, stages=s.stages + 1), p, H200) or s.stages == 16
    # outside the measured domain: K under 8192, a skinny output, tiles that fill half the card
    for shape in ("512x512x4096", "64x4096x16384", "2048x2048x16384"):
        p = Problem.parse(shape, "nt")
        assert not any(s.warp_spec == 1 and (s.bm, s.bn) in ((128, 128), (64, 128)) and s.split_k > 1
                       and s.split_k == half_wave_split(p, s.bm, s.bn, 132) for s in candidates(p, H200, 4))
    # (without the K bound 512x512x4096 would get them: its split exists)
    assert half_wave_split(Problem.parse("512x512x4096", "nt"), 128, 128, 132) == 4
    assert half_wave_split(Problem.parse("2048x2048x16384", "nt"), 128, 128, 132) is None   # 256 tiles
    assert half_wave_split(Problem.parse("64x64x16384", "nt"), 128, 128, 132) is None       # 1 tile x 16


def test_deepest_ring_that_fits():
    s = candidates(Problem(64, 64, 8192, "nt"), H200, 8)[0]
    bigger = dataclasses.replace(s, stages=s.stages + 1)
    assert s.stages == 16 or not is_valid(bigger, Problem(64, 64, 8192, "nt"), H200)


def test_estimate_prefers_whole_waves():
    p = Problem(4096, 4096, 512)
    # 132 SMs: 128x256 tiles (512) make 3.9 waves; 128x240 tiles (544) spill into a 5th wave.
    assert estimate(p, 128, 256, 1, 132) < estimate(p, 128, 240, 1, 132)


@pytest.mark.parametrize("shape,layout", [("64x64x64", "nn"), ("256x512x256", "nt"), ("128x256x12288", "nn"),
                                          ("1000x3000x1000", "nt")])
def test_lite_candidates_hold_a_units_k_at_once(shape, layout):
    """The lite schedule of the best tiles: valid, one warpgroup where the tile's accumulators fit
    in 128 threads, and a ring exactly as deep as a unit's K-tiles (capped by shared memory and 16), so
    every load of a tiny shape is issued at once and no smem is reserved for slots never used."""
    p = Problem.parse(shape, layout)
    got = candidates(p, H200, 4, lite=3)
    lite = [s for s in got if s.warp_spec == 0]
    assert len(lite) == 3 and all(is_valid(s, p, H200) for s in lite)
    for s in lite:
        ktiles = -(-(-(-p.K // 64)) // s.split_k)
        assert s.cluster == 1 and s.warps == (4 if s.bm * s.bn // 128 <= 128 else 8)
        deeper = dataclasses.replace(s, stages=s.stages + 1)
        # (tiles.max_stages stops at 16: a 64x32 nn tile's ring of 12 KB stages would fit 18)
        assert s.stages == max(2, min(ktiles, 16)) or not is_valid(deeper, p, H200)
    assert candidates(p, H200, 4) == [s for s in got if s.warp_spec != 0]    # lite=0: unchanged list


def test_a_shallow_ring_is_deepened_by_the_half_width_epilogue():
    """256x128 holds 3 stages beside a whole-tile staging and 4 beside half of it: the candidate is
    the 4-stage subtile-2 spec (runs 53, 158, 160). A ring already 5 deep, a split-K spec and a lite
    one keep subtile 1; every candidate is still the deepest ring its own subtile allows."""
    from cudal2.spec import KernelSpec
    from cudal2.tiles import SUBTILE_RING_MAX, max_stages
    p = Problem(4096, 4096, 512, "nt")
    got = candidates(p, H200, 8, lite=2)
    tiles = {(s.bm, s.bn, s.warp_spec, s.split_k): s for s in got}
    big = tiles[(256, 128, 1, 1)]
    assert (big.subtile, big.stages) == (2, 4)
    assert max_stages(dataclasses.replace(big, subtile=1), p, H200).stages == 3
    for s in got:
        assert max_stages(s, p, H200) == s
        if s.subtile == 2:
            assert s.split_k == 1 and s.warp_spec in (1, 2)
            assert max_stages(dataclasses.replace(s, subtile=1), p, H200).stages <= SUBTILE_RING_MAX[s.warp_spec]
        elif s.warp_spec and s.split_k == 1 and s.bn % 32 == 0:
            # not deepened: the ring was deep already or half the staging buys no stage
            shallow = max_stages(dataclasses.replace(s, subtile=2), p, H200)
            assert s.stages > SUBTILE_RING_MAX[s.warp_spec] or shallow is None or shallow.stages <= s.stages
    assert all(s.subtile == 1 for s in got if s.warp_spec == 0 or s.split_k > 1)
    starved = candidates(Problem(1024, 1024, 8192, "nt"), H200, 8)
    assert all(s.subtile == 1 for s in starved if s.split_k > 1)
    # ping-pong of the best-modelled tile one warpgroup holds (the list's own tiles hold 256
    # accumulators a thread): 128x128, 5 stages beside two whole-tile stagings, 6 beside halves
    pp = [s for s in got if s.warp_spec == 2]
    assert pp and (pp[0].bm, pp[0].bn, pp[0].subtile, pp[0].stages) == (128, 128, 2, 6)
    coop = KernelSpec.parse("family=wgmma bm=128 bn=128 warps=12 stages=5")
    assert max_stages(coop, p, H200).stages >= 5 > SUBTILE_RING_MAX[1]


def test_nn_lists_pay_for_narrow_b_boxes():
    """nn: B's N-major tile in 16-column TMA boxes (BN not a multiple of 32) ran at ~0.61 of the same
    spec in nt on an H100 (runs 158-167, 688 pairs), 32-column ones at ~0.92, 64-column at parity. The
    nn list ranks by the model's estimate times NN_BOX_COST, so at 4096x4096x512 (where nt's list
    holds odd tiles) nn holds no 16-column BN; nt's list is unchanged by the rule."""
    from cudal2.spec import nn_box_cols
    from cudal2.tiles import NN_BOX_COST
    assert NN_BOX_COST[64] == 1.0 < NN_BOX_COST[32] < NN_BOX_COST[16]
    assert [nn_box_cols(b) for b in (64, 128, 96, 160, 80, 176, 208)] == [64, 64, 32, 32, 16, 16, 16]
    saved = dict(NN_BOX_COST)
    try:
        for shape in ("4096x4096x512", "512x256x16384", "1000x3000x1000", "2048x1536x4096"):
            nt = candidates(Problem.parse(shape, "nt"), H200, 8)
            nn = candidates(Problem.parse(shape, "nn"), H200, 8)
            NN_BOX_COST.update({64: 1.0, 32: 1.0, 16: 1.0})
            nn_flat = candidates(Problem.parse(shape, "nn"), H200, 8)
            NN_BOX_COST.update(saved)
            # without the cost the nn list is nt's tiles; with it, 16-column tiles only where nt's
            # model gap to the next tile exceeds 1.65x (none of these shapes)
            assert [(s.bm, s.bn, s.split_k) for s in nn_flat] == [(s.bm, s.bn, s.split_k) for s in nt]
            assert all(nn_box_cols(s.bn) >= 32 for s in nn)
            if any(nn_box_cols(s.bn) == 16 for s in nt):
                assert [(s.bm, s.bn) for s in nn] != [(s.bm, s.bn) for s in nt]
    finally:
        NN_BOX_COST.update(saved)
