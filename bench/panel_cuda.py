"""The tiled chain for bench/chain_floor.py --panels: what a GEMM kernel that gives each CTA one output
tile and one K slice does at least, in order (issue 20: is the small-class target reachable by a tiled
kernel?).

The chain (stream_cuda.py's k_chain) shares the bytes of A and B evenly over the CTAs; a tiled kernel
cannot: the CTA of tile (bm x bn) and K slice s reads its whole A panel (bm rows of its slice) and B
panel (bn rows of the N x K operand, layout nt), so A is read once per tile column and B once per
tile row. k_panel does exactly that and nothing else: 16-byte loads (U in flight per thread), XORed
into out[blockIdx.x]; after block_xor's barrier (every load of the CTA has landed) it writes its tile
with 16-byte stores: fp16 C (split 1) or an fp32 partial into a workspace slot (split > 1; the
reduction a split-K kernel does after that is left out, so the floor stays below one). No MMA, no
shared-memory staging. The fastest (bm, bn, split) per shape is a floor for kernels of that shape
that do not share operand tiles between CTAs (a 2-CTA multicast cluster halves one operand's L2
reads; each SM still takes in its whole panels).

Measured (H100 run 174, 2026-12-07, 22 shapes, `--every 4`): **k_panel is no floor**. torch.matmul
ran faster than its best config on 6 shapes offline (M 64, N 1024-12288: 64x12288x1024 10.4 µs
against 14.7); cuBLAS's best or cudal2's filed kernel beat it on 12 of the 22 offline (7 of 17 small,
all 5 skinny), 13 counting server mode; `class_ceiling.py` drops it where a kernel beat it. A guess
at why, not measured: 8 KB in flight per CTA (128 threads x U = 4 x 16 B) where a TMA pipeline keeps
16-64 KB, two integer divisions per load in the address math, tiles capped at 128.

So k_panel_bulk (kind "bulk", 2026-12-07, not run on a card yet) moves the same panels the way a TMA
ring does: 1D bulk copies (cp.async.bulk, one a row piece, issued by warp 0's lanes) into 16 KB
shared-memory slots, up to 8 in flight (128 KB), each completing on its mbarrier; the CTA XORs a
landed slot out of shared memory and frees it with one barrier; tiles up to 256. Its per-CTA XOR is
k_panel's (same panels), so the same host check holds. chain_floor.py times both kinds and keeps the
fastest config per shape.

CTA b: slice b % split, tile b / split (tiles row-major, ceil(N / bn) a row); K and N multiples of 8
(16-byte rows and stores), BN a multiple of 8. The host check (`expected_xors`, `written_words`)
mirrors that index math in numpy.
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stream_cuda  # noqa: E402  (bench/ is not a package)

WRITE_TILE = r'''
// After the CTA's loads (block_xor's barrier): its tile, the fp16 C (split 1: ra rows of rb / 8
// 16-byte words) or an fp32 partial (ra x rb words at the CTA's workspace slot), as pattern4 words.
__device__ __forceinline__ void write_tile(uint4* C, uint4* ws, u32 N, u32 m0, u32 n0, u32 ra, u32 rb, u32 bm,
                                           u32 bn, u32 split, u32 seed) {
    if (split == 1) {
        const u32 cw = rb / 8;
        for (u32 j = threadIdx.x; j < ra * cw; j += blockDim.x) {
            const u64 q = ((u64)(m0 + j / cw) * N + n0) / 8 + j % cw;
            C[q] = pattern4(4 * q, seed);
        }
    } else {
        const u64 q0 = (u64)blockIdx.x * bm * bn / 4;
        for (u32 j = threadIdx.x; j < ra * rb / 4; j += blockDim.x) ws[q0 + j] = pattern4(4 * (q0 + j), seed);
    }
}
'''

PANEL_KERNEL = r'''
#define U 4
extern "C" __global__ void k_panel(const uint4* __restrict__ A, const uint4* __restrict__ B, uint4* C, uint4* ws,
                                   u32 M, u32 N, u32 K, u32 bm, u32 bn, u32 split, u32 seed, u32* out) {
    const u32 s = blockIdx.x % split, t = blockIdx.x / split, tiles_n = (N + bn - 1) / bn;
    const u32 m0 = (t / tiles_n) * bm, n0 = (t % tiles_n) * bn;
    const u32 ra = min(bm, M - m0), rb = min(bn, N - n0);
    const u32 kw = K / 8, per = (kw + split - 1) / split;           // 16-byte words: a row, a slice
    const u32 k0 = min(kw, s * per), w = min(kw, k0 + per) - k0;
    const u32 na = ra * w, total = (ra + rb) * w, step = blockDim.x;
    u32 x = 0;
    u32 i = threadIdx.x;
    for (; i + (U - 1) * step < total; i += U * step) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const u32 j = i + u * step, jj = j < na ? j : j - na;
            const uint4* row = j < na ? A + (u64)(m0 + jj / w) * kw : B + (u64)(n0 + jj / w) * kw;
            v[u] = __ldg(row + k0 + jj % w);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < total; i += step) {
        const u32 jj = i < na ? i : i - na;
        const uint4* row = i < na ? A + (u64)(m0 + jj / w) * kw : B + (u64)(n0 + jj / w) * kw;
        const uint4 v = __ldg(row + k0 + jj % w);
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    block_xor(x, out);
    write_tile(C, ws, N, m0, n0, ra, rb, bm, bn, split, seed);
}
'''

BULK_KERNEL = r'''
// k_panel_bulk: k_panel's CTA work with its panels brought into shared memory as a TMA ring brings a
// GEMM's: the CTA's ra + rb row slices of rbytes each, laid end to end, move in slots of SLOT bytes
// (the last one short), each slot by 1D bulk copies (one a row piece, spread over warp 0's lanes)
// completing on the slot's mbarrier, `stages` slots in flight; every thread XORs a landed slot out of
// shared memory (what wgmma would read), then a CTA barrier frees it for the slot `stages` on.
// SLOT and MAX_STAGES: the Python constants of the same names, #defined ahead of this text.
extern "C" __global__ void k_panel_bulk(const unsigned char* __restrict__ A, const unsigned char* __restrict__ B,
                                        uint4* C, uint4* ws, u32 M, u32 N, u32 K, u32 bm, u32 bn, u32 split,
                                        u32 seed, u32* out, u32 stages) {
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) u64 full[MAX_STAGES];
    const u32 s = blockIdx.x % split, t = blockIdx.x / split, tiles_n = (N + bn - 1) / bn;
    const u32 m0 = (t / tiles_n) * bm, n0 = (t % tiles_n) * bn;
    const u32 ra = min(bm, M - m0), rb = min(bn, N - n0);
    const u32 kw = K / 8, per = (kw + split - 1) / split;
    const u32 k0 = min(kw, s * per), w = min(kw, k0 + per) - k0;
    const u64 rbytes = (u64)w * 16, total = (ra + rb) * rbytes, rowb = (u64)K * 2;
    const u32 nslots = (u32)((total + SLOT - 1) / SLOT), lane = threadIdx.x & 31, step = blockDim.x;
    if (threadIdx.x == 0) {
        for (u32 i = 0; i < stages; ++i)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_u32(&full[i])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // Slot i (warp 0): bytes [lo, hi) of the panels, row r's piece by lane r % 32.
    auto issue = [&](u32 i) {
        const u64 lo = (u64)i * SLOT, hi = min(total, lo + SLOT);
        const u32 bar = smem_u32(&full[i % stages]), dst = smem_u32(ring + (i % stages) * SLOT);
        if (lane == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"((u32)(hi - lo)) : "memory");
        __syncwarp();
        for (u64 r = lo / rbytes + lane; r * rbytes < hi; r += 32) {
            const u64 p0 = max(lo, r * rbytes), p1 = min(hi, (r + 1) * rbytes);
            const unsigned char* row = r < ra ? A + (m0 + r) * rowb : B + (n0 + (r - ra)) * rowb;
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(dst + (u32)(p0 - lo)), "l"(row + (u64)k0 * 16 + (p0 - r * rbytes)),
                            "r"((u32)(p1 - p0)), "r"(bar) : "memory");
        }
    };
    if (threadIdx.x < 32)
        for (u32 i = 0; i < stages && i < nslots; ++i) issue(i);
    u32 x = 0;
    for (u32 i = 0; i < nslots; ++i) {
        const u32 st = i % stages, parity = (i / stages) & 1;
        u32 done = 0;
        while (!done)
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(smem_u32(&full[st])), "r"(parity) : "memory");
        const uint4* q = reinterpret_cast<const uint4*>(ring + st * SLOT);
        const u32 n16 = (u32)((min(total, (u64)(i + 1) * SLOT) - (u64)i * SLOT) / 16);
        for (u32 j = threadIdx.x; j < n16; j += step) {
            const uint4 v = q[j];
            x ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncthreads();                        // every thread is done with slot st: refill it
        if (threadIdx.x < 32 && i + stages < nslots) issue(i + stages);
    }
    block_xor(x, out);
    write_tile(C, ws, N, m0, n0, ra, rb, bm, bn, split, seed);
}
'''
SLOT, MAX_STAGES = 16384, 8          # k_panel_bulk's slot bytes and ring depth (128 KB at most)
BULK_KERNEL = f"#define SLOT {SLOT}u\n#define MAX_STAGES {MAX_STAGES}\n" + BULK_KERNEL
SOURCE = stream_cuda.COMMON + WRITE_TILE + PANEL_KERNEL + BULK_KERNEL
THREADS = 128
SPLITS = (1, 2, 4, 8, 16)
# k_panel (16-byte loads through registers) and k_panel_bulk (bulk copies into a shared-memory ring),
# each over its tiles: the bulk probe also takes 256 (cuBLAS's skinny kernels run tiles past 128).
KINDS = {"panel": (16, 32, 64, 128), "bulk": (16, 32, 64, 128, 256)}


def config_error(m: int, n: int, k: int, bm: int, bn: int, split: int, sms: int) -> str | None:
    """Why tile (bm, bn) with `split` K slices does not make a tiled chain of (m, n, k), or None: the
    16-byte rule, a slice of at least 64 k, at most 16 CTAs an SM (past that the launch alone costs),
    no tile at least twice the side it covers (half of it covers the side already: the same CTAs)."""
    if k % 8 or n % 8 or bn % 8:
        return "K, N and BN must be multiples of 8 (16-byte rows and stores)"
    if bm >= 2 * m and bm > 16 or bn >= 2 * n and bn > 16:
        return f"tile {bm}x{bn}: half of it covers {m}x{n} already"
    if split > 1 and k // split < 64:
        return f"split {split}: a slice under 64 of K={k}"
    ctas = -(-m // bm) * -(-n // bn) * split
    if ctas > 16 * sms:
        return f"{ctas} CTAs: over 16 an SM"
    return None


def configs(m: int, n: int, k: int, sms: int, kinds=tuple(KINDS)) -> list[tuple[str, int, int, int]]:
    """(kind, bm, bn, split) of every probe config of (m, n, k)."""
    return [(kind, bm, bn, s) for kind in kinds for bm in KINDS[kind] for bn in KINDS[kind] for s in SPLITS
            if not config_error(m, n, k, bm, bn, s, sms)]


def bulk_stages(m: int, n: int, k: int, bm: int, bn: int, split: int) -> int:
    """k_panel_bulk's ring depth: as many slots as the largest CTA's panels fill, at most MAX_STAGES."""
    k0, k1 = slice_words(k, split, 0)          # slice 0 is the widest
    panel = (min(bm, m) + min(bn, n)) * (k1 - k0) * 16
    return max(1, min(MAX_STAGES, -(-panel // SLOT)))


def ctas(m: int, n: int, bm: int, bn: int, split: int):
    """Per CTA, in launch order: (m0, rows of A, n0, rows of B, k-slice index)."""
    tiles_n = -(-n // bn)
    for t in range(-(-m // bm) * tiles_n):
        m0, n0 = (t // tiles_n) * bm, (t % tiles_n) * bn
        for s in range(split):
            yield m0, min(bm, m - m0), n0, min(bn, n - n0), s


def slice_words(k: int, split: int, s: int) -> tuple[int, int]:
    """The 16-byte words [k0, k1) of a row that slice s reads (as k_panel splits a row's K / 8)."""
    kw = k // 8
    per = -(-kw // split)
    k0 = min(kw, s * per)
    return k0, min(kw, k0 + per)


def expected_xors(a_words, b_words, m: int, n: int, k: int, bm: int, bn: int, split: int, cache: dict | None = None):
    """What k_panel's (and k_panel_bulk's) CTAs store in out, in launch order: the XOR of every u32
    word of their A and B panels (a_words, b_words: the operands as uint32 arrays of M x K/2 and
    N x K/2). Each operand's rows are XORed once per slice layout (kept in `cache` across a shape's
    configs: a 512 MB weight is reduced 5 times, not once a config) and the tiles pair them up."""
    import numpy as np

    def columns(name: str, words, rows: int):
        key = (name, split)
        if cache is None or key not in cache:
            bounds = [slice_words(k, split, s) for s in range(split)]
            cols = np.stack([np.bitwise_xor.reduce(words[:, 4 * k0:4 * k1], axis=1) if k1 > k0
                             else np.zeros(rows, dtype=np.uint32) for k0, k1 in bounds], axis=1)   # rows x split
            if cache is None:
                return cols
            cache[key] = cols
        return cache[key]

    def blocks(name: str, words, rows: int, tile: int):
        return np.bitwise_xor.reduceat(columns(name, words, rows), np.arange(0, rows, tile), axis=0)  # blocks x split
    xa, xb = blocks("a", a_words, m, bm), blocks("b", b_words, n, bn)
    tiles_n = xb.shape[0]
    t = np.arange(xa.shape[0] * tiles_n)
    return (xa[t // tiles_n] ^ xb[t % tiles_n]).reshape(-1).astype(np.uint32)


def written_words(m: int, n: int, bm: int, bn: int, split: int):
    """The u32 word indices k_panel writes: of C (split 1: all of it) or of the workspace (each CTA's
    slot, bm * bn words apart, its first ra * rb)."""
    import numpy as np
    if split == 1:
        return np.arange(m * n // 2)
    return np.concatenate([b * bm * bn + np.arange(ra * rb) for b, (_m0, ra, _n0, rb, _s)
                           in enumerate(ctas(m, n, bm, bn, split))])


def pattern(words, seed: int = stream_cuda.SEED):
    import numpy as np
    return ((words.astype(np.uint64) * 2654435761) & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(seed)


class Panels:
    """k_panel and k_panel_bulk loaded on the current device; launches bound to one problem's buffers
    and a config."""

    def __init__(self, sms: int):
        import torch

        from cudal2.backends.cuda_launch import _context
        from cudal2.backends.driver import check, drv
        from cudal2.nvrtc import compile_cubin
        self.d, self.check, self.sms = drv(), check, sms
        _context(torch.cuda.current_device())
        cubin = compile_cubin(SOURCE, "sm_90a", ("-std=c++17",))[0]
        self.module = check(self.d.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.funcs = {kind: check(self.d.cuModuleGetFunction(self.module, name), name.decode())
                      for kind, name in (("panel", b"k_panel"), ("bulk", b"k_panel_bulk"))}
        attr = self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(self.d.cuFuncSetAttribute(self.funcs["bulk"], attr, MAX_STAGES * SLOT), "k_panel_bulk: its ring's smem")

    def fn(self, a, b, c, ws, out, kind: str, bm: int, bn: int, split: int):
        """A launch of probe `kind` over a (M x K), b (N x K), writing c (M x N fp16) or ws."""
        m, k = a.shape
        n = b.shape[0]
        why = config_error(m, n, k, bm, bn, split, self.sms)
        if kind not in KINDS or bm not in KINDS[kind] or bn not in KINDS[kind]:
            why = f"kind {kind!r} takes tiles {KINDS.get(kind)}"
        if why:
            raise ValueError(f"{kind} {bm}x{bn} split {split} at {m}x{n}x{k}: {why}")
        grid = -(-m // bm) * -(-n // bn) * split
        if out.numel() < grid or (split > 1 and ws.numel() < grid * bm * bn):
            raise ValueError(f"{kind} {bm}x{bn} split {split}: out or workspace too small for {grid} CTAs")
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        slots = [u64(a.data_ptr()), u64(b.data_ptr()), u64(c.data_ptr()), u64(ws.data_ptr()), u32(m), u32(n), u32(k),
                 u32(bm), u32(bn), u32(split), u32(stream_cuda.SEED), u64(out.data_ptr())]
        smem = 0
        if kind == "bulk":
            stages = bulk_stages(m, n, k, bm, bn, split)
            slots.append(u32(stages))
            smem = stages * SLOT
        return stream_cuda.bound_launch(self.d, self.funcs[kind], grid, THREADS, smem, slots)

    def check_fn(self, a, b, c, ws, out, kind: str, bm: int, bn: int, split: int, words, cache=None) -> bool:
        """One checked launch: every CTA's XOR is its panels' (`words`: a's and b's uint32 arrays on the
        host; `cache`: expected_xors' across the shape's configs) and every word it writes holds pattern(w)."""
        import numpy as np
        import torch
        m, k = a.shape
        n = b.shape[0]
        out.zero_()
        (c if split == 1 else ws).view(torch.int32).fill_(0x5A5A5A5A)
        f = self.fn(a, b, c, ws, out, kind, bm, bn, split)
        self.check(f(), f"cuLaunchKernel({kind} {bm}x{bn} split {split})")
        torch.cuda.synchronize()
        if not np.array_equal(out[: f.grid].cpu().numpy().view(np.uint32), expected_xors(*words, m, n, k, bm, bn, split, cache)):
            return False
        idx = written_words(m, n, bm, bn, split)
        got = (c if split == 1 else ws).view(torch.int32).cpu().numpy().view(np.uint32).reshape(-1)[idx]
        return bool(np.array_equal(got, pattern(idx)))
