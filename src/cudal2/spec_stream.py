"""The stream family's validity rules (decode / skinny: min(M, N) <= 64, and any shape of the small
class, under 1 GFLOP; kernels_cuda/stream.cu).
cudal2.spec adds STREAM_RULES to its one rule list (with the pinned-field rules it owns); each rule
is (field, the fields it reads, check(spec dict, problem, device) -> message or None)."""
from __future__ import annotations

# Field mapping: bm = rows of the large dimension per CTA (16-row MMA blocks), bn = tokens of the
# small dimension per CTA (8-column MMA blocks; more tokens take more CTAs along it), warps = K split
# inside the CTA, stages = 32-k chunks each warp keeps in flight (nn with B large: the depth of each
# warp's cp.async ring), split_k = K split across CTAs (reduced in the kernel, fixed order). bk is
# the 32-k chunk and group_m, subtile, warp_spec, cluster are unused: pinned.
STREAM_MAX_SMALL = 64
STREAM_BM = (16, 32, 64, 128)
STREAM_MAX_BN = 64
STREAM_MAX_STAGES = 8
# fp32 accumulators per thread (bm*bn/32: every warp holds the whole CTA tile, the warps split K):
# up to 64 ptxas (NVRTC 13, sm_90a) compiled every spec tried in 48-229 registers without spilling
# (tests/test_stream_compile.py); the ring is in shared memory, so stages add no registers.
STREAM_MAX_ACC = 64

# Past min(M, N) = 64 the family serves the small class too (2MNK < 1 GFLOP, ../shared/classes.py):
# launch-bound shapes, where what counts is how soon the first bytes arrive, and a stream CTA issues
# its loads at entry (no barrier init, no tensor map, no producer warp); more tokens take more CTAs
# along them (grid.y), the large operand is re-read per token tile, from L2 at these sizes. Added
# 2026-12-07 for the small class's cuBLAS-served shapes (issue 20); measured or not: NOTES.md.
STREAM_SMALL_FLOP = 1e9


def stream_serves(M: int, N: int, K: int) -> bool:
    """Whether the family takes a problem of this size (any K % 8 / N % 8 rule aside)."""
    return min(M, N) <= STREAM_MAX_SMALL or 2.0 * M * N * K < STREAM_SMALL_FLOP


def stream_smem(s, layout: str) -> int:
    """Dynamic smem of a stream kernel: the larger of its cp.async ring and the warps' fp32
    partials (reduced through the same smem after the loop). The ring holds `stages` chunks of
    32 k per thread as 16-byte pieces: 2 per 16 rows of the large operand and 1 per 8 tokens of
    the small one (nn with B large: a per-warp [32 k][bm] slot plus the pieces: the same bytes;
    nn with A large reads the small B [K, N] element-wise and leaves its pieces unused)."""
    w, bm, bn, st = s["warps"], s["bm"], s["bn"], s["stages"]
    pieces = 2 * (bm // 16) + bn // 8
    return max(w * bm * bn * 4, w * 32 * st * pieces * 16)


def _stream_problem(s, p, d):
    if s["family"] != "stream":
        return None
    if not stream_serves(p.M, p.N, p.K):
        return (f"family=stream serves min(M, N) <= {STREAM_MAX_SMALL} (decode / skinny) or shapes under 1 GFLOP, "
                f"got {p.M}x{p.N}x{p.K}")
    if p.K % 8:
        return f"family=stream loads 16 bytes of K at a time: K % 8 == 0, got K={p.K}"
    if p.layout == "nn" and p.M <= p.N and p.N % 8:
        return f"family=stream with layout nn and M <= N streams B by 16-byte rows: N % 8 == 0, got N={p.N}"


def _stream_bm(s, p, d):
    if s["family"] == "stream" and s["bm"] not in STREAM_BM:
        return f"family=stream takes bm in {STREAM_BM} (rows of the large operand per CTA), got {s['bm']}"


def _stream_bn(s, p, d):
    if s["family"] == "stream" and s["bn"] > STREAM_MAX_BN:
        return f"family=stream takes bn <= {STREAM_MAX_BN} (tokens of the small operand per CTA), got {s['bn']}"


def _stream_stages(s, p, d):
    if s["family"] == "stream" and s["stages"] > STREAM_MAX_STAGES:
        return f"family=stream takes stages <= {STREAM_MAX_STAGES} (32-k chunks in flight per warp), got {s['stages']}"


def _stream_acc(s, p, d):
    acc = s["bm"] * s["bn"] // 32
    if s["family"] == "stream" and acc > STREAM_MAX_ACC:
        return (f"tile {s['bm']}x{s['bn']} needs {acc} fp32 accumulator registers per thread (each warp holds "
                f"the whole tile; limit {STREAM_MAX_ACC}): a smaller bm or bn")


def _stream_smem(s, p, d):
    if s["family"] == "stream":
        need = stream_smem(s, p.layout) + 128        # + the static smem ptxas reports (flag, aligned)
        if need > d.smem_per_block:
            return (f"stages={s['stages']} warps={s['warps']} with tile {s['bm']}x{s['bn']} needs {need} B of "
                    f"shared memory ({p.layout}); the device allows {d.smem_per_block} B per block")


STREAM_RULES = [
    ("family", ("family",), _stream_problem),
    ("bm", ("family", "bm"), _stream_bm),
    ("bn", ("family", "bn"), _stream_bn),
    ("bn", ("family", "bm", "bn"), _stream_acc),
    ("stages", ("family", "stages"), _stream_stages),
    ("stages", ("family", "bm", "bn", "warps", "stages"), _stream_smem),
]
