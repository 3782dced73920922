"""KernelSpec: one frozen description of a GEMM kernel, and the one validity check.

The backends render a spec into source, the policy samples specs field by field with invalid
values masked out, and the store and registry key rows by the spec's canonical text. All of them
use the rules in this file (the stream family's in spec_stream.py; the mask that samples by them
in spec_mask.py), so "valid" means one thing everywhere.

Canonical text: every field as `key=value`, space separated, in FIELDS order, e.g.
  backend=triton family=tiled bm=128 bn=128 bk=64 warps=8 stages=4 group_m=8 split_k=1 subtile=1 warp_spec=0 cluster=1
Each `key=value` is one policy token.

group_m orders the tiles (grouped so the tiles in flight share operands in L2): g > 0 walks groups of
g tile rows column by column (1 = row-major, the raster along N); g < 0 (the CUDA families mma and
wgmma) walks groups of -g tile columns row by row (-1 = column-major, the raster along M).

family=wgmma (CUDA, sm_90a; kernels_cuda/wgmma.cu): bm 64/128/256 over the consumer warpgroups, bn
any multiple of 16 (nn: B's N-major tile in TMA boxes of 64/32/16 columns, `nn_b_cols`), bk 32/64/128,
warps 8 (one consumer warpgroup) or 12 (two) beside the producer warpgroup (lite: 4 or 8, no
producer), warp_spec 1 = cooperative consumers, 2 = ping-pong, 0 = lite (one CTA per work unit, the
tiny-shape schedule); split_k = K slices (1-16, powers of two and 3 / 6 / 12) reduced in the same
launch in a fixed order (lite and cooperative: inside a cluster of the slices through distributed
shared memory; ping-pong and cluster=2: through a global workspace), cluster 2 = two CTAs sharing one operand tile by TMA
multicast, each loading half of it into both: the larger tile (bm > bn: A, the pair along N; else B,
the pair along M; `KernelSpec.cluster_shares_a`), stages up to what shared memory holds beside the
epilogue's staging; subtile 2 = the epilogue stages half the tile's columns at a time (half the
staging, so a deeper ring fits: cuBLAS's 256x128 winner runs 4 stages where a whole-tile staging
leaves room for 3).

family=stream (CUDA, decode / skinny: min(M, N) <= 64, or under 1 GFLOP; kernels_cuda/stream.cu) reads the fields as:
bm = rows of the large operand per CTA (16-128), bn = tokens of the small one per CTA (16-64),
warps = K split inside the CTA, stages = 32-k chunks in flight per warp (its cp.async ring),
split_k = K split across CTAs (reduced in the kernel, fixed order); bk (the 32-k chunk), group_m,
subtile, warp_spec, cluster are pinned.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Callable

from .device import DeviceInfo
from .problems import Problem
# The stream family's own rules and sizes (re-exported: the stream backend and the tests read them here).
from .spec_stream import (STREAM_BM, STREAM_MAX_ACC, STREAM_MAX_BN, STREAM_MAX_SMALL,  # noqa: F401
                          STREAM_MAX_STAGES, STREAM_RULES, stream_serves, stream_smem)

FAMILIES = {"triton": ("tiled", "persistent"), "cuda": ("mma", "wgmma", "stream")}

# Sampling order of the fields, and each field's finite set of choices (the policy's vocabulary).
CHOICES: dict[str, tuple] = {
    "backend": ("triton", "cuda"),
    "family": ("tiled", "persistent", "mma", "wgmma", "stream"),
    "bm": (16, 32, 64, 128, 256),
    # wgmma takes N in multiples of 8 up to 256: non-powers of two make whole waves (KERNELS.md 4).
    "bn": tuple(range(16, 257, 16)),
    "bk": (16, 32, 64, 128),
    "warps": (2, 4, 8, 12),
    # Up to what shared memory holds (the _smem rule reads the device's limit); 64x64 TMA tiles
    # fit 13 stages in 227 KB, thin ones more.
    "stages": tuple(range(2, 21)),
    # Tile order: g > 0 groups g tile rows walked down M (1: row-major, the raster along N); g < 0
    # groups -g tile columns walked along N (-1: column-major, the raster along M, whatever the tile
    # rows). Negative orders are rendered by the CUDA families (common.cuh group_tile) only.
    "group_m": (1, 4, 8, 16, -1, -4, -8, -16),
    # Non-powers of two too: clusters of 3 / 6 / 12 K slices give other CTA counts than 2 / 4 / 8 / 16
    # (a cluster cannot span GPCs). The H200 holds 117 / 102 / 84 CTAs in clusters of 3 / 6 / 12
    # against 120 in clusters of 4 or 8 (run 61), and split 3 / 6 won none of run 61's skinny cases:
    # kept for the search to try per shape.
    "split_k": (1, 2, 3, 4, 6, 8, 12, 16),
    "subtile": (1, 2),
    # Triton: 0/1 = the warp-specialisation hint. wgmma: 1 = cooperative consumers (they split each
    # tile's rows), 2 = ping-pong (they take alternate tiles: one's epilogue overlaps the other's MMAs),
    # 0 = lite (no producer warpgroup, no persistent loop: the low-latency schedule for tiny shapes).
    "warp_spec": (0, 1, 2),
    "cluster": (1, 2),
}
FIELDS = tuple(CHOICES)

# Fields a family does not use are pinned to one value, so each kernel has exactly one text.
PINNED = {
    "tiled": {"subtile": 1, "warp_spec": 0, "cluster": 1},
    "persistent": {"split_k": 1, "cluster": 1},
    "mma": {"subtile": 1, "warp_spec": 0, "cluster": 1},
    "wgmma": {},
    "stream": {"bk": 32, "group_m": 1, "subtile": 1, "warp_spec": 0, "cluster": 1},
}
WARPS = {"tiled": (2, 4, 8), "persistent": (4, 8), "mma": (2, 4, 8), "wgmma": (4, 8, 12), "stream": (2, 4, 8)}
# wgmma schedules (warp_spec) and the consumer warpgroups each has for a warp count.
WGMMA_LITE, WGMMA_COOP, WGMMA_PINGPONG = 0, 1, 2
# bk: k-columns per ring stage, one (64) or two (128) 128-byte swizzle atoms, or one 64-byte atom (32).
WGMMA_TILE = {"bm": (64, 128, 256), "bk": (32, 64, 128)}
# Families whose tiles index with tl.arange / power-of-two warp layouts keep power-of-two BN.
POW2_BN_FAMILIES = ("tiled", "persistent", "mma")
TMA_FAMILIES = ("persistent", "wgmma")
# Accumulator registers per thread (fp32) we allow; past this the kernels spill on sm_90
# (255 registers per thread, and A/B fragments, addresses and the pipeline need the rest).
MAX_ACC_REGS = 128
# wgmma with split-K through the global workspace (ping-pong, 2-CTA clusters): the fixed-order
# reduction needs registers beside the accumulators; ptxas (NVRTC 13.0, sm_90a, 2026-12-03)
# spilled 740-950 B at 128 accumulators and none at 96 (1076 B at 128x128 ping-pong split 2,
# 2026-12-06). The cluster split-K (`cluster_split`) stages its accumulators in shared memory
# first and caps its loads in flight: no spill at 128 (128x256 / 256x128, split 2-16, NVRTC 13.0,
# 2026-12-06), so it takes MAX_ACC_REGS.
MAX_ACC_REGS_SPLITK = 96


class SpecError(ValueError):
    """A spec that is malformed or invalid for a problem/device; the message names the field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def nn_box_cols(bn: int) -> int:
    """wgmma, layout nn: columns of one TMA box of B's N-major tile, the largest of 64 / 32 / 16
    dividing BN (the swizzle spans its 128 / 64 / 32-byte rows)."""
    return next(w for w in (64, 32, 16) if bn % w == 0)


@dataclass(frozen=True)
class KernelSpec:
    backend: str = "triton"
    family: str = "tiled"
    bm: int = 128
    bn: int = 128
    bk: int = 64
    warps: int = 8
    stages: int = 4
    group_m: int = 8
    split_k: int = 1
    subtile: int = 1
    warp_spec: int = 0
    cluster: int = 1

    # ---- text form ------------------------------------------------------------------------------
    @property
    def text(self) -> str:
        return " ".join(f"{k}={getattr(self, k)}" for k in FIELDS)

    def __str__(self) -> str:
        return self.text

    def tokens(self) -> list[str]:
        return self.text.split()

    @classmethod
    def parse(cls, text: str) -> "KernelSpec":
        """Parse `key=value` pairs (any order, comma or space separated). Missing fields take the
        family's pinned value or the dataclass default; unknown keys and bad values raise SpecError."""
        vals: dict[str, object] = {}
        for tok in text.replace(",", " ").split():
            if "=" not in tok:
                raise SpecError("spec", f"token {tok!r} is not key=value")
            k, v = tok.split("=", 1)
            if k not in CHOICES:
                raise SpecError(k, f"unknown field (fields: {', '.join(FIELDS)})")
            if k in vals:
                raise SpecError(k, "given twice")
            choices = CHOICES[k]
            if isinstance(choices[0], int):
                if not v.lstrip("-").isdigit():
                    raise SpecError(k, f"{v!r} is not an integer")
                v = int(v)
            if v not in choices:
                raise SpecError(k, f"{v!r} is not one of {choices}")
            vals[k] = v
        if not vals:
            raise SpecError("spec", "empty spec text")
        backend = vals.get("backend")
        family = vals.get("family")
        if family is None:
            family = FAMILIES[backend or "triton"][0]
            vals["family"] = family
        if backend is None:
            backend = next((b for b, fams in FAMILIES.items() if family in fams), "triton")
            vals["backend"] = backend
        for k, v in PINNED.get(family, {}).items():
            vals.setdefault(k, v)
        if family == "wgmma":
            vals.setdefault("bk", 64)
            vals.setdefault("warp_spec", 1)
        return cls(**vals)

    def to_dict(self) -> dict:
        # Every field is a scalar, so a shallow dict equals asdict's deep copy; asdict was 20 of 45 s
        # of a CPU replay of 20 grid shapes (each validity check converts the spec once).
        return {f: getattr(self, f) for f in FIELDS}

    # ---- derived quantities used by rules and backends ------------------------------------------
    @property
    def consumers(self) -> int:
        """wgmma: warpgroups that run MMAs (besides one producer warpgroup, except in lite)."""
        return wgmma_consumers(self.warps, self.warp_spec)

    @property
    def pingpong(self) -> bool:
        return self.family == "wgmma" and self.warp_spec == 2

    @property
    def cluster_shares_a(self) -> bool:
        """wgmma cluster=2: the pair shares the A tile (the CTAs sit side by side along N) when it is
        the larger tile (bm > bn), else the B tile (along M). The shared tile is what multicast halves
        per CTA, so sharing the larger one saves the most L2->SM traffic: cuBLAS's H200 winners pair
        the same way (nvjet 256x128 "1x2" at 4096^3, 128x128 and 64x128 "2x1": run 29). With a
        256x128 tile sharing B, cluster=2 ran 0.78-0.84x of the same spec alone (run 30)."""
        return self.family == "wgmma" and self.cluster > 1 and self.bm > self.bn

    @property
    def nn_b_cols(self) -> int:
        """wgmma, layout nn: columns of one TMA box of the N-major B tile, the largest of 64/32/16
        dividing BN; its rows are 128/64/32 bytes, and the smem swizzle (the wgmma descriptor's
        layout type) is the one that spans them."""
        return nn_box_cols(self.bn)

    @property
    def epi_cols(self) -> int:
        """wgmma: width of the swizzled TMA-store box (the largest of 64/32/16 columns dividing the
        BN / subtile columns the epilogue stages at once). Where that is 16 columns and there would
        be 7 or more boxes (BN / subtile 112, 144, 176, 208, 240), wgmma.cu stores one unswizzled box
        the whole width instead (EPI_WIDE: 0.83-0.88x the time on shortK, H100 run 114)."""
        return next(w for w in (64, 32, 16) if (self.bn // self.subtile) % w == 0)

    def smem_bytes(self) -> int:
        """Shared memory the kernel needs (an upper bound of the compiled figure for Triton persistent,
        see persistent_smem; an estimate for tiled; exact for CUDA)."""
        if self.family == "stream":
            return stream_smem(self.to_dict(), "nt")   # ring or partials: the same in both layouts
        if self.family == "persistent":
            return persistent_smem(self.to_dict())
        ring = ring_bytes(self.to_dict())
        if self.family == "wgmma":
            # + the epilogue's staging (a whole tile per warpgroup in ping-pong) + 1 KB that the
            # kernel spends aligning the ring to the 128B-swizzle atom. Mbarriers are static.
            staging = self.bm * self.bn * 2 * (2 if self.pingpong else 1) // self.subtile
            # The cluster split-K stages its fp32 partial (bm*bn*4 B) in the idle ring + the
            # staging (_split_ring says when they hold it).
            return ring + staging + 1024
        return ring

    def acc_regs_per_thread(self) -> int:
        return _acc_per_thread(self.to_dict())


# Triton persistent (kernels_triton/persistent.py): what Triton allocates in shared memory, an upper
# bound of the compiled kernel's `metadata.shared` (what the launch asks of the device) for sm_90.
# Measured 2026-12-04 on CPU (bench/persistent_smem.py --grid; triton 3.9.0 and 3.6.0, GPUTarget
# cuda 90: 1,448 specs x nn/nt, bm 16-256, bn 16-256, bk 16-128, warps 4/8, subtile 1/2, warp_spec
# 0/1, 2-20 stages; 5,590 compiled, 202 compile errors, all warp_spec=1 with 4 warps). Neither the
# layout (nn/nt B descriptor) nor the problem size (4 shapes tried) changed a figure; the versions
# differ only in the partitioned case below. For bm >= 64 (wgmma) this is exact except there:
#   ring      stages x (A + B tiles): Triton's TMA pipeline keeps all `stages` buffers;
#   barriers  one 8 B mbarrier per stage;
#   staging   the TMA store's bm x bn/subtile fp16 tile;
#   scratch   subtile=2 splits the accumulator (reshape/permute/split); when the wgmma layout puts
#             warps side by side along N (bm=64 with 8 warps: warpsPerCTA [4, 2]) the split goes
#             through a layout conversion whose scratch is half the fp32 tile, at least 8 KB
#             (bn=32: the whole tile). It is live beside the ring in the flattened loop
#             (warp_spec=0); with warp_spec=1 the ring is allocated inside the tile loop and freed
#             before the epilogue, so the scratch reuses its space.
# warp_spec=1 with 4 warps is partitioned by Triton on Hopper (ttg.warp_specialize: a producer and
# two consumer warpgroups): the consumers split bm >= 128 rows and take alternate 64-row tiles,
# so the staging is max(bm, 128) x bn/subtile fp16, and the partitions add mbarrier arrays (5-11
# of them, 8 B per stage each, more in 3.9 than 3.6; all measured within 96 B per stage + 328 B:
# counted as 128 B per stage + 512 B, over by 296-2168 B).
# bm < 64 compiles to mma v2 (no wgmma) with stages - 1 buffers: at least 4 KB under this count.
# The H200 failures this models: 64x128x32 st18 sub2 ws1 w4 asked 238472 B, 64x256x64 st5 sub2
# w8 asked 253992 B, over the H200's 232448 B, where the old estimate (ring + staging) said 229376
# and 221184 B.
PERSISTENT_WS_BARRIERS = (128, 512)       # (B per stage, B fixed) of the partitioned loop's mbarriers


def ring_bytes(s) -> int:
    """The operand ring of a spec (a mapping of its fields): `stages` fp16 A and B k-tiles."""
    return s["stages"] * (s["bm"] + s["bn"]) * s["bk"] * 2


def persistent_smem(s) -> int:
    """Shared memory a persistent spec (a mapping of its fields) asks at launch: see above."""
    bm, bn, st, sub = s["bm"], s["bn"], s["stages"], s["subtile"]
    ring = ring_bytes(s)
    staging = bm * (bn // sub) * 2
    if bm < 64:
        return ring + 8 * st + staging
    if s["warp_spec"] and s["warps"] == 4:
        per_stage, fixed = PERSISTENT_WS_BARRIERS
        return ring + max(bm, 128) * (bn // sub) * 2 + per_stage * st + fixed
    scratch = max(bm * bn * 2, 8192) if sub > 1 and bm < 16 * s["warps"] else 0
    if s["warp_spec"]:
        return staging + max(ring + 8 * st, scratch)
    return ring + 8 * st + staging + scratch


def wgmma_consumers(warps: int, warp_spec: int) -> int:
    """Warpgroups holding accumulators: lite has no producer warpgroup, the others have one."""
    return warps // 4 - (0 if warp_spec == WGMMA_LITE else 1)


def cluster_split(spec: "KernelSpec") -> bool:
    """wgmma split-K reduced inside a thread-block cluster of the tile's K slices (distributed
    shared memory; one CTA per (tile, slice)): lite and cooperative without a 2-CTA cluster. Ping-pong
    and cluster=2 keep the persistent loop and reduce through a global workspace."""
    return (spec.family == "wgmma" and spec.split_k > 1 and spec.warp_spec != WGMMA_PINGPONG
            and spec.cluster == 1)


def mma_warp_layout(bm: int, bn: int, warps: int) -> tuple[int, int]:
    """How the mma family arranges its warps over the CTA tile (rows, cols): longer side gets more."""
    if warps == 2:
        return (2, 1) if bm >= bn else (1, 2)
    if warps == 4:
        return (2, 2)
    return (4, 2) if bm >= bn else (2, 4)


# ---- the rules -------------------------------------------------------------------------------------
# A rule names the fields it reads; the policy's mask applies it as soon as those fields are chosen.
# `check(s, problem, device)` gets a mapping of field values and returns None or the message.
Rule = tuple[str, tuple[str, ...], Callable]


def _family(s, p, d):
    if s["family"] not in FAMILIES[s["backend"]]:
        return f"{s['family']!r} is not a {s['backend']} family (choose from {FAMILIES[s['backend']]})"


def _arch(s, p, d):
    if s["family"] == "wgmma" and d.cc != (9, 0):
        return f"wgmma needs sm_90a (Hopper); device is sm_{d.cc[0]}{d.cc[1]}"
    if s["family"] == "persistent" and d.cc < (9, 0):
        return f"persistent uses TMA, which needs sm_90+; device is sm_{d.cc[0]}{d.cc[1]}"
    if d.cc < (8, 0):
        return f"cudal2 kernels need sm_80+; device is sm_{d.cc[0]}{d.cc[1]}"


def _pinned(field):
    def check(s, p, d):
        want = PINNED.get(s["family"], {}).get(field)
        if want is not None and s[field] != want:
            return f"family={s['family']} does not use {field}; it must be {want}"
    return check


def _warps(s, p, d):
    if s["warps"] not in WARPS[s["family"]]:
        return f"family={s['family']} takes warps in {WARPS[s['family']]}, got {s['warps']}"


def _wgmma_tile(field):
    def check(s, p, d):
        if s["family"] == "wgmma" and s[field] not in WGMMA_TILE[field]:
            return f"wgmma takes {field} in {WGMMA_TILE[field]} (64-row warpgroup MMA, 64/128-byte swizzle atoms), got {s[field]}"
    return check


def _bn(s, p, d):
    bn, f = s["bn"], s["family"]
    if f in POW2_BN_FAMILIES and bn & (bn - 1):
        return f"family={f} takes a power-of-two bn, got {bn}"


def _acc_per_thread(s) -> int:
    if s["family"] == "wgmma":
        # Cooperative (and lite) consumers split the tile; a ping-pong warpgroup holds a whole tile.
        threads = 128 if s["warp_spec"] == 2 else wgmma_consumers(s["warps"], s["warp_spec"]) * 128
    else:
        threads = s["warps"] * 32
    return s["bm"] * s["bn"] // max(threads, 1)


def _warp_spec(s, p, d):
    f, ws = s["family"], s["warp_spec"]
    if f == "wgmma" and ws not in (0, 1, 2):
        return f"wgmma takes warp_spec 0 (lite), 1 (cooperative) or 2 (ping-pong), got {ws}"
    if f == "wgmma" and ws == 0 and s["warps"] not in (4, 8):
        return "warp_spec=0 (lite) runs one or two warpgroups and no producer: warps=4 or 8"
    if f == "wgmma" and ws != 0 and s["warps"] == 4:
        return f"warp_spec={ws} needs a producer warpgroup besides the consumers: warps=8 or 12 (or warp_spec=0)"
    if f == "wgmma" and ws == 2 and s["warps"] != 12:
        return "warp_spec=2 (ping-pong) needs two consumer warpgroups: warps=12"
    if f != "wgmma" and ws == 2:
        return f"warp_spec=2 (ping-pong) is a wgmma schedule; family={f} takes 0 or 1"
    # Triton partitions a 4-warp warp_spec=1 loop itself (a producer and two consumer warpgroups,
    # persistent_smem below). On the H200 (triton 3.6, 2026-12-04, run 49's store: every persistent
    # warp_spec=1 measurement of runs 46-49) 29 of its 132 compiled evaluations wrote NaN/inf into C
    # (the checker's random or guard check: 1 to 629,145 values, intermittent: the same specs also
    # passed) and 48 more failed to compile; 8 warps: 309 of 309 correct.
    if f == "persistent" and ws == 1 and s["warps"] == 4:
        return ("warp_spec=1 with warps=4 is refused: Triton's own partition of it wrote non-finite "
                "values on 22% of H200 evaluations (NOTES.md); use warps=8 or warp_spec=0")


# warp_spec values a family takes (the others pin it to 0).
SCHEDULES = {"wgmma": (0, 1, 2), "persistent": (0, 1)}


def _any_schedule(check):
    """A rule that reads warp_spec before the policy has chosen it (warp_spec comes late in FIELDS,
    the tile rules early): while it is unchosen (None) the rule passes if some schedule passes, so
    the mask prunes as soon as the tile is chosen instead of after every later field."""
    def wrapped(s, p, d):
        if s.get("warp_spec") is not None:
            return check(s, p, d)
        msgs = [check({**s, "warp_spec": w}, p, d) for w in SCHEDULES.get(s["family"], (0,))]
        return None if any(m is None for m in msgs) else msgs[0]
    wrapped.reads_schedule = True      # the mask re-runs it when warp_spec is chosen (_rules_at)
    return wrapped


def _tile_warps(s, p, d):
    f, bm, bn, w = s["family"], s["bm"], s["bn"], s["warps"]
    if f == "stream":
        return None                    # every warp holds the whole tile: _stream_acc
    if f == "wgmma":
        c = 1 if s["warp_spec"] == 2 else wgmma_consumers(w, s["warp_spec"])
        if c < 1:
            return f"warps={w} leaves no consumer warpgroup beside the producer"
        if bm % (64 * c):
            return f"bm={bm} must split into {c} consumer warpgroups of 64-row multiples"
    elif f == "mma":
        wm, wn = mma_warp_layout(bm, bn, w)
        if bm % (16 * wm) or bn % (16 * wn):
            return f"tile {bm}x{bn} does not split into {wm}x{wn} warps of 16x16 multiples"
    elif bm * bn < w * 256:
        return f"tile {bm}x{bn} gives each of {w} warps less than a 16x16 block"


# Cluster split-K (`cluster_split`) reduces a tile's K slices inside one thread-block cluster:
# at most Hopper's largest cluster, 16 CTAs (8 is the portable size; the launcher opts such kernels
# in to the non-portable 16). split_k's choices end at 16: this rule guards a grown grammar.
MAX_CLUSTER_SPLIT = 16


def _cluster_split_size(s, p, d):
    if cluster_split(KernelSpec(**s)) and s["split_k"] > MAX_CLUSTER_SPLIT:
        return (f"split_k={s['split_k']} reduces in a cluster of split_k CTAs (warp_spec {s['warp_spec']}): "
                f"at most {MAX_CLUSTER_SPLIT}")


def _splitk_regs(s, p, d):
    acc = _acc_per_thread(s)
    if s["family"] == "wgmma" and s["split_k"] > 1 and acc > MAX_ACC_REGS_SPLITK \
            and not cluster_split(KernelSpec(**s)):
        return (f"split_k={s['split_k']} with tile {s['bm']}x{s['bn']} needs {acc} accumulator registers "
                f"per thread; the wgmma split-K reduction spills past {MAX_ACC_REGS_SPLITK}: use a smaller tile")


def _acc_regs(s, p, d):
    if s["family"] == "stream":
        return None                    # _stream_acc
    acc = _acc_per_thread(s)
    if acc > MAX_ACC_REGS:
        return (f"tile {s['bm']}x{s['bn']} needs {acc} fp32 accumulator registers per thread with "
                f"warps={s['warps']} (limit {MAX_ACC_REGS}): use more warps or a smaller tile")


# wgmma's static smem (2 x STAGES mbarriers, the ping-pong turn barriers, split-K flags): at most
# 20 stages x 16 B + 32 B; ptxas counts it beside the dynamic smem against the same limit.
WGMMA_STATIC_SMEM = 384


def _smem(s, p, d):
    need = KernelSpec(**s).smem_bytes() + (WGMMA_STATIC_SMEM if s["family"] == "wgmma" else 0)
    if need > d.smem_per_block:
        return (f"stages={s['stages']} with tile {s['bm']}x{s['bn']}x{s['bk']} needs {need} B of shared "
                f"memory; the device allows {d.smem_per_block} B per block")


def _subtile(s, p, d):
    if s["bn"] % (s["subtile"] * 16):
        return f"bn={s['bn']} does not split into {s['subtile']} epilogue subtiles of 16-column multiples"


def _split_ring(s, p, d):
    # The cluster split-K stages its fp32 partial (bm x bn x 4 B) in the idle ring and the staging
    # behind it (bm x bn x 2 B / subtile; the epilogue itself does not use the staging there: each
    # slice stores its share of C from registers): ring + staging >= bm x bn x 4 B. At subtile 1
    # that is bk x stages >= bm*bn/(bm+bn) (always true at bk 64 from 2 stages; bk 32 with 2-3
    # stages can miss it); subtile 2 frees half the staging for a deeper ring where the ring alone
    # holds three quarters of the partial (128x256 split-K: 4 stages where 3 fit at subtile 1).
    if s["family"] != "wgmma" or not cluster_split(KernelSpec(**s)):
        return None
    ring, need = ring_bytes(s), s["bm"] * s["bn"] * 4 - s["bm"] * s["bn"] * 2 // s["subtile"]
    if ring < need:
        return (f"split_k={s['split_k']} reduces through the ring, which at stages={s['stages']}, "
                f"bk={s['bk']} and subtile={s['subtile']} ({ring} B) cannot hold the {s['bm']}x{s['bn']} "
                f"fp32 partial beside the staging: more stages, a larger bk or subtile=1")


def _split_k(s, p, d):
    ktiles = -(-p.K // s["bk"])
    if s["split_k"] > ktiles:
        return f"split_k={s['split_k']} exceeds the {ktiles} K-tiles of K={p.K} with bk={s['bk']}"


def _tma_align(s, p, d):
    if s["family"] in TMA_FAMILIES and (p.K % 8 or p.N % 8):
        return (f"family={s['family']} uses TMA, which needs 16-byte row strides: N % 8 == 0 and "
                f"K % 8 == 0, got N={p.N} K={p.K}")


# Families whose templates take a negative group_m (the order grouped along N): common.cuh's group_tile.
COLUMN_GROUP_FAMILIES = ("mma", "wgmma")


def _group_order(s, p, d):
    if "group_m" in PINNED.get(s["family"], {}):
        return None                    # the pin's own rule names the one value
    if s["group_m"] < 0 and s["family"] not in COLUMN_GROUP_FAMILIES:
        return (f"group_m={s['group_m']} (tile columns grouped along N) is a CUDA template order "
                f"({', '.join(COLUMN_GROUP_FAMILIES)}); family={s['family']} groups tile rows: 1, 4, 8 or 16")


def _cluster(s, p, d):
    if s["cluster"] > 1 and s["family"] != "wgmma":
        return f"cluster={s['cluster']} is only supported by the wgmma family"
    if s["cluster"] > 1 and s["warp_spec"] == WGMMA_LITE:
        return "cluster=2 needs the persistent schedules (warp_spec 1 or 2); lite (warp_spec=0) runs without"


RULES: list[Rule] = [
    ("family", ("backend", "family"), _family),
    ("family", ("family",), _arch),
    ("family", ("family",), _tma_align),
    ("bm", ("family", "bm"), _wgmma_tile("bm")),
    ("bn", ("family", "bn"), _bn),
    ("bk", ("family", "bk"), _wgmma_tile("bk")),
    ("warps", ("family", "warps"), _warps),
    ("warps", ("family", "bm", "bn", "warps"), _any_schedule(_tile_warps)),
    ("warps", ("family", "bm", "bn", "warps"), _any_schedule(_acc_regs)),
    ("stages", ("family", "bm", "bn", "bk", "warps", "stages", "subtile"), _any_schedule(_smem)),
    ("group_m", ("family", "group_m"), _group_order),
    ("split_k", ("family", "split_k"), _pinned("split_k")),
    ("split_k", ("bk", "split_k"), _split_k),
    ("split_k", ("family", "bm", "bn", "bk", "stages", "split_k", "warp_spec", "subtile", "cluster"), _split_ring),
    ("split_k", ("family", "bm", "bn", "warps", "split_k", "cluster"), _any_schedule(_splitk_regs)),
    ("subtile", ("family", "subtile"), _pinned("subtile")),
    ("subtile", ("bn", "subtile"), _subtile),
    ("warp_spec", ("family", "warp_spec"), _pinned("warp_spec")),
    ("warp_spec", ("family", "warps", "warp_spec"), _warp_spec),
    ("cluster", ("family", "split_k", "warp_spec", "cluster"), _cluster_split_size),
    ("cluster", ("family", "cluster"), _pinned("cluster")),
    ("cluster", ("family", "warp_spec", "cluster"), _cluster),
]


def _add_rules(rules: list) -> None:
    """Insert each rule after the last one of its field or an earlier field (RULES runs in FIELDS
    order, so `validate` names the earliest field at fault)."""
    for rule in rules:
        at = FIELDS.index(rule[0])
        pos = max((i for i, r in enumerate(RULES) if FIELDS.index(r[0]) <= at), default=-1)
        RULES.insert(pos + 1, rule)


_add_rules(STREAM_RULES + [
    ("bk", ("family", "bk"), _pinned("bk")),
    ("group_m", ("family", "group_m"), _pinned("group_m")),
])

# Every field at its default: the mask (spec_mask.py) completes a partial spec with these.
DEFAULTS = {f.name: f.default for f in fields(KernelSpec)}


def violations(spec: KernelSpec | dict, problem: Problem, device: DeviceInfo) -> list[tuple[str, str]]:
    """Every rule the spec breaks, as (field, message)."""
    s = spec.to_dict() if isinstance(spec, KernelSpec) else dict(spec)
    out = []
    for field, _needs, check in RULES:
        msg = check(s, problem, device)
        if msg:
            out.append((field, msg))
    return out


def validate(spec: KernelSpec, problem: Problem, device: DeviceInfo) -> KernelSpec:
    """Raise SpecError naming the first field at fault; return the spec if it is valid."""
    bad = violations(spec, problem, device)
    if bad:
        raise SpecError(*bad[0])
    return spec


def is_valid(spec: KernelSpec | dict, problem: Problem, device: DeviceInfo) -> bool:
    """`not violations(...)`, stopping at the first broken rule: rl/costrank.py's random draws are
    ~93% invalid and most fail one of the tile rules, so checking the rest after it was wasted."""
    s = spec.to_dict() if isinstance(spec, KernelSpec) else spec
    return not any(check(s, problem, device) for _field, _needs, check in RULES)


# ---- defaults --------------------------------------------------------------------------------------
# Preferred specs per family, best guess first; the first valid one for a problem is its default.
# Large tiles for large problems, small ones when M or N is small. Tuned figures live in NOTES.md.
PREFERRED = {
    "tiled": ["bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8", "bm=128 bn=128 bk=64 warps=8 stages=4 group_m=8",
              "bm=64 bn=128 bk=64 warps=4 stages=4 group_m=8", "bm=64 bn=64 bk=64 warps=4 stages=4 group_m=8",
              "bm=32 bn=64 bk=64 warps=4 stages=4", "bm=16 bn=64 bk=64 warps=2 stages=4",
              "bm=16 bn=32 bk=32 warps=2 stages=2"],
    "persistent": ["bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8 subtile=2",
                   "bm=128 bn=128 bk=64 warps=8 stages=4 group_m=8 subtile=2",
                   "bm=64 bn=128 bk=64 warps=4 stages=4 group_m=8", "bm=64 bn=64 bk=64 warps=4 stages=4",
                   "bm=32 bn=64 bk=64 warps=4 stages=3", "bm=16 bn=64 bk=64 warps=4 stages=3"],
    "mma": ["bm=128 bn=128 bk=32 warps=8 stages=4 group_m=8", "bm=64 bn=128 bk=32 warps=4 stages=4 group_m=8",
            "bm=64 bn=64 bk=32 warps=4 stages=4", "bm=32 bn=64 bk=32 warps=2 stages=4",
            "bm=32 bn=32 bk=32 warps=2 stages=3", "bm=16 bn=32 bk=32 warps=2 stages=3"],
    "wgmma": ["bm=128 bn=256 bk=64 warps=12 stages=3 group_m=8", "bm=128 bn=128 bk=64 warps=12 stages=5 group_m=8",
              "bm=64 bn=128 bk=64 warps=8 stages=5 group_m=8", "bm=64 bn=64 bk=64 warps=8 stages=6"],
    # bm runs along the large dimension, bn along the tokens (decode M = 1..16 first).
    "stream": ["bm=64 bn=16 warps=8 stages=2 split_k=4", "bm=32 bn=32 warps=8 stages=2 split_k=4",
               "bm=32 bn=64 warps=8 stages=2 split_k=2", "bm=128 bn=16 warps=8 stages=2 split_k=2",
               "bm=16 bn=16 warps=4 stages=4 split_k=2", "bm=16 bn=16 warps=2 stages=2"],
}


def fits(problem: Problem, spec: KernelSpec) -> bool:
    """The tile is no larger than the problem rounded up to a power of two (a larger one computes
    mostly masked lanes). stream: bm runs along the larger of M, N and bn along the smaller."""
    if spec.family == "stream":
        big, small = max(problem.M, problem.N), min(problem.M, problem.N)
        return spec.bm <= max(16, _pow2_ceil(big)) and spec.bn <= max(16, _pow2_ceil(small))
    return spec.bm <= max(16, _pow2_ceil(problem.M)) and spec.bn <= max(16, _pow2_ceil(problem.N))


def _fit(problem: Problem, text: str) -> bool:
    return fits(problem, KernelSpec.parse(text))


def _pow2_ceil(x: int) -> int:
    return 1 << (x - 1).bit_length()


def default_spec(family: str, problem: Problem, device: DeviceInfo) -> KernelSpec:
    """The family's default for a problem: the first preferred spec that is valid and fits."""
    backend = next(b for b, fams in FAMILIES.items() if family in fams)
    cands = [KernelSpec.parse(f"backend={backend} family={family} {t}") for t in PREFERRED[family]]
    fitting = [c for c in cands if _fit(problem, c.text)] or cands
    for c in fitting + cands:
        if is_valid(c, problem, device):
            return c
    reasons = "; ".join(f"{f}: {m}" for f, m in violations(cands[-1], problem, device))
    raise SpecError("family", f"no default {family} spec is valid for {problem}: {reasons}")


def with_fields(spec: KernelSpec, **kw) -> KernelSpec:
    return replace(spec, **kw)
