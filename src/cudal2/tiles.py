"""Candidate wgmma specs for a shape, ranked by a wave-quantisation cost model (no GPU needed).

The Hopper family takes any BN that is a multiple of 16 (both layouts), one-launch
split-K and two consumer schedules, so a shape has thousands of valid specs. This picks the few
worth timing first, from what decides speed on these shapes (`../shared/KERNELS.md`):
  - whole waves: work units (tiles x K slices) over the SM count should land just under a whole
    number of waves (4: non-power-of-two BN);
  - tile efficiency: a wgmma tile's MMA rate grows with its arithmetic intensity BM*BN/(BM+BN)
    (operand bytes per MMA from shared memory), saturating at 128x256;
  - starved shapes (too few tiles to fill the SMs) split K so every SM streams (2), paying one
    fp32 partial write and read per slice;
  - the deepest ring that fits beside the epilogue's staging (3: small tiles need more stages);
  - a split-K reduced in a cluster runs in one wave only if its clusters fit the card's GPCs at
    once (cudal2.cluster_fit, measured on the card): fewer CTAs than SMs do.
The model ranks; the clock decides. `candidates` is the search's seed list for the family and the
spec sweep's list (bench/hopper_sweep.py).
"""
from __future__ import annotations

import math
from dataclasses import replace

from .cluster_fit import cluster_ctas
from .device import DeviceInfo
from .problems import Problem
from .spec import CHOICES, MAX_ACC_REGS_SPLITK, KernelSpec, is_valid, nn_box_cols

_BMS = (64, 128, 256)
# Every split the grammar has (3 / 6 / 12 since 2026-12-05, not measured as seeds yet): on the card
# the cluster counts of every size are probed (cudal2.cluster_fit), so the model counts their cluster
# waves (the H200: 120 CTAs in clusters of 4 or 8, 117 / 102 / 84 in clusters of 3 / 6 / 12, run 61).
_SPLITS = CHOICES["split_k"]


def _intensity_rate(bm: int, bn: int) -> float:
    """Relative MMA throughput of a tile: saturates at the 128x256 tile's intensity (85.3)."""
    return min(1.0, (bm * bn / (bm + bn)) / 85.3) ** 0.6


def estimate(problem: Problem, bm: int, bn: int, split: int, sms: int, cluster_fit: int | None = None) -> float:
    """Model time (arbitrary units): whole waves of work units, each unit's MMA work at its tile's
    rate plus a fixed per-unit prologue/epilogue, plus the split-K partial traffic.

    `cluster_fit`: for a split-K reduced inside a cluster of the tile's `split` slices, the CTAs
    the card holds at once in such clusters (cudal2.cluster_fit): the waves are counted in whole
    clusters. None (the learned cost model's feature, and a card without the measurement): units
    over SMs.

    On the H200 (2026-12-03, bench/results/h200-sm90/hopper/run25_* vs run26_*) this simple form
    ranked better than one with an L2->SM load term and 2-CTA clusters: that one put split-K and
    cluster specs first, which measured slower (starved geomean 0.76x against 0.96x)."""
    tiles = math.ceil(problem.M / bm) * math.ceil(problem.N / bn)
    units = tiles * split
    waves = math.ceil(units / sms)
    if cluster_fit is not None and split > 1:
        waves = math.ceil(tiles / max(1, cluster_fit // split))
    k = math.ceil(problem.K / split)
    # Units: fp16 FMAs of one SM. A unit's fill/drain (ring fill, epilogue) ~1 us, part hidden by
    # the producer running ahead: 1.5e6 (an H100/H200 SM does ~2048 FMA per clock at ~1.8 GHz).
    unit = bm * bn * k / _intensity_rate(bm, bn) + 1.5e6
    # Split-K: every slice but one writes bm*bn fp32 partials and the last reads them (8 B per
    # element through L2, ~23 B per clock per SM: ~90 FMA-units per byte), spread over the SMs.
    reduce = tiles * bm * bn * 8.0 * (split - 1) * 90 / sms if split > 1 else 0.0
    return waves * unit + reduce


def cluster_overflow(spec: KernelSpec, problem: Problem, device: DeviceInfo) -> bool:
    """A wgmma split-K reduced inside clusters (one cluster of split_k CTAs per tile) whose CTAs
    would fit the SMs in one wave but whose clusters do not fit the card's GPCs at once: the last
    clusters run as a second wave (the run-58 measurement in cudal2.cluster_fit). False where the
    card's cluster counts were not measured (a compile target)."""
    from .spec import cluster_split
    if not device.cluster_ctas or not device.sm_count or not cluster_split(spec):
        return False
    tiles = math.ceil(problem.M / spec.bm) * math.ceil(problem.N / spec.bn)
    per_sm = max(1, device.smem_per_sm // (spec.smem_bytes() + 1024))    # CTAs one SM holds by smem
    if tiles * spec.split_k > device.sm_count * per_sm:
        return False          # more than one wave by SMs anyway: the model's wave count has it
    return tiles > cluster_ctas(device, spec.split_k) * per_sm // spec.split_k


def max_stages(spec: KernelSpec, problem: Problem, device: DeviceInfo) -> KernelSpec | None:
    """The spec with the deepest ring (up to 16) that the one validity rule accepts."""
    for st in range(16, 1, -1):
        s = KernelSpec(**{**spec.to_dict(), "stages": st})
        if is_valid(s, problem, device):
            return s
    return None


def _seedable(spec: KernelSpec) -> bool:
    """False for a split-K spec holding more than 96 accumulators a thread: valid since 2026-12-06
    (the cluster split-K at 128), for the policy to try, but not a seed: on the H100 (run 99, 254
    grid nt shapes) the best such spec ran 0.878x of the best other wave spec over 83 starved shapes
    (best on 3), 0.871x over 118 large and 0.774x over 34 mid (best on none)."""
    return spec.split_k == 1 or spec.acc_regs_per_thread() <= MAX_ACC_REGS_SPLITK


# A ring of at most this many stages at subtile 1 (cooperative, ping-pong) is replaced by its
# subtile-2 form (the epilogue stages half the columns at a time, freeing staging for the ring)
# where that holds a deeper ring. Measured on an H100 (2026-12-07, one offline run each, same-spec
# pairs deeper / parent, geomean): all 148 shortK grid shapes nt / nn (runs 158 / 160), and all 82
# mid and 147 of 187 large nt (run 163):
#   256x128 4 stages over 3               shortK 1.024 / 1.033, mid 1.056, large 1.038
#   128x256 4 over 3                      shortK 1.013 / 1.016, mid 1.049, large 1.017
#   ping-pong 128x128 6 over 4            shortK 1.040 / 1.040, mid 1.084, large 1.060
#   ping-pong 128x128 6 over 5            shortK 1.007 / 1.019, mid+large 1.019 (61 shapes)
#   cooperative 128x128 6 over 5          shortK 0.943 / 0.949, mid 0.989, large 0.935
# Five cooperative stages already hide the loads, and the half-width epilogue costs more than the
# sixth buys; a ping-pong epilogue overlaps the other warpgroup's MMAs, so there the stage still
# pays. On the H200 (run 53, 2026-12-04, 7 large / mid shapes x nn, nt): 256x128 4 over 3 1.032,
# 128x256 0.993, 128x192 5 over 4 1.007. Deeper rings and split-K specs were not measured this way
# and keep subtile 1.
SUBTILE_RING_MAX = {1: 4, 2: 5}      # by warp_spec: cooperative, ping-pong


def deepest(spec: KernelSpec, problem: Problem, device: DeviceInfo) -> KernelSpec | None:
    """The spec with the deepest ring that fits (max_stages), a shallow one deepened by subtile 2
    where that holds more stages (SUBTILE_RING_MAX); None where no ring fits."""
    s = max_stages(spec, problem, device)
    if s is None or s.split_k > 1 or s.subtile != 1 or s.stages > SUBTILE_RING_MAX.get(s.warp_spec, 0):
        return s
    v = max_stages(replace(s, subtile=2), problem, device)
    return v if v is not None and v.stages > s.stages else s


# nn: B's N-major tile comes in TMA boxes of KernelSpec.nn_b_cols columns (64 / 32 / 16, the largest
# dividing BN) under the matching 128 / 64 / 32-byte swizzle, and the narrow ones slow the mainloop.
# On an H100 (2026-12-07, runs 158-167: the same spec on the same grid shape, nt time / nn time,
# geomean): 16-column boxes 0.61 over 688 pairs without a split (large 0.52-0.56, mid 0.56, starved
# 0.66, shortK 0.77) and 0.67 over 211 split-K ones; 32-column 0.92 / 0.90 (291 / 84); 64-column
# 1.007 / 1.001 (6870 / 386). The wave model knows nothing of the layout, so it seeded nn lists with
# BN 80 / 112 / 176 / 208 specs that ran at nt's 0.5-0.7. NN_BOX_COST scales the model's estimate
# for nn by the inverse of those ratios (no-split figures, rounded), so a narrow box wins a place in
# the list only where its waves gain more than it loses.
NN_BOX_COST = {64: 1.0, 32: 1.09, 16: 1.65}


# Deep-K starved shapes: a split that fills about half the SMs with work units. On an H100 (run
# 167, 2026-12-07, hopper/run167_starved_split_pairs.txt: the 20 starved shapes per layout furthest
# under best-cublas, all K 8192-16384, each with every split giving 64-264 units of cooperative 128x128,
# 64x128, 128x64 and 64x64), the fastest split of 128x128 gave 64 units on 32
# of 34 problems, of 64x128 / 128x64 on 24 / 21 of 39 (96 on most others, 128 on 3); only 64x64
# often took 128 (14 of 37). More slices add partials to reduce and, on these bandwidth-bound
# shapes, no MMA rate (128 units in clusters of 4 or 8 do not even fit the card's GPCs at once:
# cudal2.cluster_fit). The two tiles below at that split reached 0.855 of best-cublas (geomean over
# the 40; the best of all specs 0.870, worst 0.62) where the wave list and the ring specs had
# reached 0.769 (runs 164 / 165): the wave model ranks units that fill the card first. Shorter K was
# not measured, nor skinny outputs (the 40 had M and N from 128 to 1024), so the rule stays where it
# was measured: K >= HALF_WAVE_MIN_K, M and N >= HALF_WAVE_MIN_MN. The model's own list is unchanged.
HALF_WAVE_TILES = ((128, 128, 12), (64, 128, 8))      # bm, bn, warps (cooperative)
HALF_WAVE_MIN_K = 8192
HALF_WAVE_MIN_MN = 128


def half_wave_split(problem: Problem, bm: int, bn: int, sms: int) -> int | None:
    """The largest split of the grammar whose work units fill at most half the SMs and more than a
    quarter (run 167 measured 64 units of 132 and more, not fewer), with at least two K-tiles a slice;
    None where no split > 1 does (the tile grid alone fills half the card, or is too small for it)."""
    tiles = math.ceil(problem.M / bm) * math.ceil(problem.N / bn)
    ok = [s for s in _SPLITS if 1 < s and sms // 4 < tiles * s <= sms // 2 and math.ceil(problem.K / 64) >= 2 * s]
    return max(ok) if ok else None


def _wgmma(bm: int, bn: int, warps: int, split: int, warp_spec: int) -> KernelSpec:
    """A list's wgmma base spec: bk 64, group 8, subtile 1, no 2-CTA cluster, a 2-stage ring that
    `deepest` then deepens."""
    return KernelSpec(backend="cuda", family="wgmma", bm=bm, bn=bn, bk=64, warps=warps, stages=2, group_m=8,
                      split_k=split, subtile=1, warp_spec=warp_spec, cluster=1)


def lite_ring(spec: KernelSpec, problem: Problem) -> KernelSpec:
    """A lite spec's ring no deeper than its work unit's k-tiles (all of K in flight at once; a
    deeper ring only holds shared memory), and at least 2."""
    kt = math.ceil(math.ceil(problem.K / spec.bk) / spec.split_k)
    return replace(spec, stages=max(2, min(spec.stages, kt)))


def _lite(spec: KernelSpec, problem: Problem, device: DeviceInfo) -> KernelSpec | None:
    """The lite schedule (warp_spec 0) of a tile: one warpgroup where its accumulators fit (else
    two), a ring just deep enough for a unit's K-tiles (all of K at once: one load latency), the
    tile's split-K where a cluster can reduce it (else the largest smaller one that can)."""
    split = spec.split_k
    while split >= 1:       # lite reduces K slices in a cluster: fewer slices where it cannot take these
        for warps in (4, 8):
            base = KernelSpec(**{**spec.to_dict(), "warps": warps, "warp_spec": 0, "cluster": 1, "stages": 2,
                                 "split_k": split, "subtile": 1})
            if not _seedable(base):
                continue       # two warpgroups then
            deepest = max_stages(base, problem, device)
            if deepest is not None:
                return lite_ring(deepest, problem)
        split //= 2
    return None


def candidates(problem: Problem, device: DeviceInfo, n: int = 8, lite: int = 0) -> list[KernelSpec]:
    """`candidate_groups`' lists one after another: n cooperative, the ping-pong pair, the half-wave
    specs, the lite ones (the sweep's order)."""
    g = candidate_groups(problem, device, n, lite)
    return g["cooperative"] + g["pingpong"] + g["half_wave"] + g["lite"]


def candidate_groups(problem: Problem, device: DeviceInfo, n: int = 8, lite: int = 0) -> dict[str, list[KernelSpec]]:
    """n valid cooperative wgmma specs, best modelled first (distinct tile and split, each with the
    deepest ring that fits, at most two per tile; a shallow ring deepened by subtile 2 where that
    fits more, `deepest`), then ping-pong versions of the two best tiles that allow one (else
    of the best-modelled tiles one warpgroup holds whole), then on deep-K shapes cooperative 128x128
    and 64x128 at the split that fills half the SMs (`half_wave_split`), then lite versions (warp_spec
    0) of the `lite` best tiles (n + 4 + lite at most), each group under its own key (every spec in
    one group only). No 2-CTA clusters: on the H200 (2026-12-03, run 30) a cluster=2 spec ran at 0.93x of the
    same spec without one (median of 208 pairs, 0.49-1.21x) and was the best of its shape on 1 of
    104 (bench/hopper_sweep.py --clusters N tries them)."""
    sms = device.sm_count or 132
    bns = list(range(16, 257, 16))
    # The list's split-K specs are cooperative: one cluster of `split` CTAs per tile, so where the
    # card's cluster counts were measured the waves are counted in clusters.
    fits = {s: cluster_ctas(device, s) for s in _SPLITS if s > 1} if device.cluster_ctas else {}
    scored = []
    for bm in _BMS:
        for bn in bns:
            if bm > 64 and bn < 64:        # thin tiles on two consumer warpgroups waste the MMA shape
                continue
            box = NN_BOX_COST[nn_box_cols(bn)] if problem.layout == "nn" else 1.0
            for split in _SPLITS:
                if split > 1 and math.ceil(problem.K / 64) < 2 * split:
                    continue                   # at least two K-tiles per slice
                scored.append((box * estimate(problem, bm, bn, split, sms, fits.get(split)), bm, bn, split))
    scored.sort()
    out: list[KernelSpec] = []
    per_tile: dict = {}
    for _, bm, bn, split in scored:
        if len(out) >= n:
            break
        if per_tile.get((bm, bn), 0) >= 2:    # spread the list over tiles: the model only ranks
            continue
        for warps, ws in (((8, 1), (12, 1)) if bm == 64 else ((12, 1),)):
            base = _wgmma(bm, bn, warps, split, ws)
            if not _seedable(base):
                continue
            s = deepest(base, problem, device)
            if s is not None and s not in out:
                out.append(s)
                per_tile[(bm, bn)] = per_tile.get((bm, bn), 0) + 1
                break
    def pingpong_bases():
        # ping-pong for the two best tiles of the list a warpgroup can hold whole; where the list's
        # tiles are too large for one warpgroup (128x256 at 256 accumulators a thread), the
        # best-modelled tiles that one holds instead (128x128 first on large shapes). On an H100
        # (runs 158, 163; 2026-12-07, nt, same run) ping-pong 128x128 6 stages subtile 2 was the
        # best spec of 86 of 147 large, 44 of 82 mid and 50 of 148 shortK shapes; the wave lists of
        # 75, 30 and 43 of those held no ping-pong spec (124 of the 147 large lists held none).
        for s in list(out):
            yield replace(s, warps=12, warp_spec=2, subtile=1)
        for _, bm, bn, split in (scored if out else ()):      # n = 0: no candidates at all
            if split == 1:
                yield _wgmma(bm, bn, 12, 1, 2)
    groups = {"cooperative": out, "pingpong": [], "half_wave": [], "lite": []}
    seen = list(out)

    def add(group: str, s: KernelSpec | None) -> None:
        if s is not None and s not in seen:
            groups[group].append(s)
            seen.append(s)
    for base in pingpong_bases():
        if len(groups["pingpong"]) >= 2:
            break
        add("pingpong", deepest(base, problem, device))
    if problem.K >= HALF_WAVE_MIN_K and min(problem.M, problem.N) >= HALF_WAVE_MIN_MN:
        for bm, bn, warps in HALF_WAVE_TILES:
            split = half_wave_split(problem, bm, bn, sms)
            if split is not None:
                add("half_wave", deepest(_wgmma(bm, bn, warps, split, 1), problem, device))
    for s in [s for s in seen if s.warp_spec == 1][:lite]:
        add("lite", _lite(s, problem, device))
    return groups
