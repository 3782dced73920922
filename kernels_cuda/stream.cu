// cudal2 stream family, round 2 (sm_80+; decode / skinny GEMMs, min(M, N) <= 64): the large operand
// is read once from HBM, 16 bytes per cp.async, many chunks in flight per SM, by CTAs that stay
// resident for the whole call (stream-K: one wave, every SM busy to within one 32-k chunk);
// mma.sync m16n8k16 (fp16 in, fp32 accumulate) with the roles swapped so the large operand is the
// MMA "A" side (16 rows of the large dimension) and the small one (tokens) the MMA "N" side.
//
// Two entry points, the host picks per call:
//   cudal2_stream_b  M <= N: the large operand is B (R = N rows), the small one A (T = M tokens);
//                    C[t][r] is written transposed from the MMA tile.
//   cudal2_stream_a  M >  N: the large operand is A (R = M rows), the small one B (T = N tokens).
//
// Work split (stream-K). Output tiles are BM rows x BN tokens; tile = xi * TY + yi (token tiles of
// the same rows next to each other, so their weight rows meet in L2). The work is the linear list
// of (tile, 32-k chunk) pairs, tile-major: W = tiles * nch. CTA p of G (grid = min(resident CTAs,
// tiles * SPLIT_K), chosen by the host from the SM count and the occupancy) takes the chunks
// [p W / G, (p + 1) W / G) and walks them in order; its pipeline runs across tile boundaries, so
// a CTA never drains between tiles. Inside the CTA the WARPS warps split the BM rows (BMW = BM /
// WARPS rows each, 16-row MMA blocks) and all walk the same chunks: no cross-warp reduction, no
// __syncthreads in the kernel.
// A run of chunks of one tile inside one CTA is a segment. A whole-tile segment is stored to C from
// the registers. A partial one (a tile cut by a CTA boundary: at most the first and the last segment
// of a CTA) is written, per warp, as fp32 fragments to the CTA's workspace slot (0: its first
// segment, 1: its last), and the warp bumps the counter of (tile, warp); the warp that completes
// the count sums the partials of CTAs p_first..p_last of the tile in that order (bit-identical
// whoever arrives last), stores C and resets the counter for the next launch.
//
// How the large operand X(r, k) reaches the MMA:
//   K-contiguous (nt, or A large): a per-thread ("private") cp.async ring, STAGES chunks deep: each
//     thread copies exactly the 16-byte pieces its own MMAs need into its own smem slots and reads
//     them back with ld.shared.v4 -- no barrier, no swizzle, and the bytes in flight do not depend
//     on ptxas's register scheduling. A thread's pieces: 8 consecutive k of row r and of row r+8;
//     those 8 k fill the A fragments of two k16 MMAs. The order of the k summation is free, so the
//     small operand's B fragment uses the same k permutation: thread (g = lane/4, q = lane%4) needs
//     8 consecutive k of token g (+8j), one 16-byte piece. Per 32-k chunk, MMA step s in {0,1}:
//       MMA k {2q, 2q+1, 2q+8, 2q+9} of step s  <->  actual k  8q + 4s + {0, 1, 2, 3}.
//     Token pieces are copied through L1 (cp.async.ca: the WARPS warps of a CTA read the same ones);
//     weight pieces bypass it (.cg). Pieces of tokens >= T or rows >= R are not loaded at all: an
//     MMA output column (row) depends only on its own B column (A row), and those outputs are never
//     stored. Pieces past K are zero-filled on both sides.
//     (nn with M > N: the small operand B [K, N] is not K-contiguous. With N % 8 == 0 each warp
//     copies its [32 k][BN] tile of B into its lanes' token pieces (swizzled) and reads the B
//     fragments with ldmatrix.trans, rows picked for the same k permutation; otherwise B is read
//     element-wise, one chunk ahead in registers.)
//   N-contiguous (nn B with M <= N): a per-warp cp.async ring of STAGES slots of [32 k][BMW rows],
//     XOR-swizzled, plus each lane's small-operand pieces; ldmatrix.trans with row addresses picked
//     so the fragments come out in the same k permutation.
// Knobs (spec field -> macro): bm -> BM rows of the large dim per CTA (16 * WARPS multiples),
// bn -> BN tokens per tile (16..64), warps -> WARPS (split BM), stages -> STAGES (ring depth in 32-k
// chunks; STAGES - 1 in flight per warp), split_k -> SPLIT_K (at most tiles * SPLIT_K CTAs). bk is
// the chunk, pinned to 32. Needs K % 8 == 0 and 16-byte aligned A and B (the host checks).

#define THREADS (WARPS * 32)
#define BMW (BM / WARPS)              // rows of the large operand per warp
#define MI (BMW / 16)
#define NI (BN / 8)
#define CPR (BMW / 8)                 // 16-byte chunks per ring row (nn, B large)

static_assert(BM % (16 * WARPS) == 0, "family=stream: bm must split into 16-row blocks per warp");

DEVI void lds_16(u32* r, u32 addr) {
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
DEVI float ldg_cg_f32(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
    return v;
}
// 16-byte async copy through L1 (the small operand: every warp of the CTA reads the same pieces).
DEVI void cp_async_16_ca(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes));
}
// The same, issued only where `on` (a predicated instruction, not a branch around it).
DEVI void cp_async_16_cg_if(u32 dst, const void* src, int src_bytes, bool on) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p cp.async.cg.shared.global [%0], [%1], 16, %2;\n}\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes), "r"((int)on));
}
DEVI void cp_async_16_ca_if(u32 dst, const void* src, int src_bytes, bool on) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p cp.async.ca.shared.global [%0], [%1], 16, %2;\n}\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes), "r"((int)on));
}

// Ring swizzle (nn, B large): row kk of a [32][BMW] slot, chunk c -> c ^ swz_key(kk).
DEVI int swz_key(int kk) {
    if (CPR >= 8) return (((kk >> 3) & 3) << 1) | (kk & 1);
    if (CPR == 4) return (kk >> 3) & 3;
    return (kk >> 3) & 1;
}

// nn with A large and N % 8 == 0: the warp's [32 k][BN] tile of the small B is kept in the lanes'
// token pieces of a stage, piece (kk, chunk cc) at position kk * NI + (cc ^ swz_y(kk)) (position
// pos = lane slot pos % 32 of piece 2 * MI + pos / 32); the 8 rows one ldmatrix phase reads get
// distinct 16-byte bank groups for NI = 8.
DEVI int swz_y(int kk) {
    if (NI == 8) return (((kk >> 3) & 3) << 1) | (kk & 1);
    if (NI == 4) return (kk >> 3) & 3;
    if (NI == 2) return (kk >> 3) & 1;
    return 0;
}

// nn with A large, N % 8 != 0: 8 consecutive k (k0 .. k0+7) of token t of the small B [K, N] (stride N),
// packed as the B fragment wants them; zero when out of range.
DEVI void load_small_strided(u32* y, const f16_t* __restrict__ Y, int t, int T, int k0, int K, int N, bool ok) {
    y[0] = y[1] = y[2] = y[3] = 0;
    if (!ok || t >= T || k0 >= K) return;
    const f16_t* p = Y + (long long)k0 * N + t;
#pragma unroll
    for (int e = 0; e < 4; ++e)
        y[e] = (u32)p[(long long)(2 * e) * N] | ((u32)p[(long long)(2 * e + 1) * N] << 16);
}

// A position in the CTA's list of chunks: tile, chunk c of it, its row tile xi and token tile yi.
struct Cur {
    int tile, c, xi, yi;
};
DEVI Cur cur_at(int L, int nch, int TY) {
    Cur s;
    s.tile = L / nch;
    s.c = L - s.tile * nch;
    s.xi = s.tile / TY;
    s.yi = s.tile - s.xi * TY;
    return s;
}
DEVI void cur_next(Cur& s, int nch, int TY) {
    if (++s.c == nch) {
        s.c = 0;
        ++s.tile;
        if (++s.yi == TY) { s.yi = 0; ++s.xi; }
    }
}
// The even split of W chunks over G CTAs (W < 2^31, G <= W; the host checks): CTA p starts at
// p * base + min(p, rem) (the first rem CTAs take base + 1 chunks), base = W / G, rem = W % G.
struct Split {
    int base, rem;
};
DEVI int cta_start(int p, Split sp) { return p * sp.base + min(p, sp.rem); }
DEVI int cta_of(int L, Split sp) {
    const int big = sp.rem * (sp.base + 1);
    return L < big ? L / (sp.base + 1) : sp.rem + (L - big) / sp.base;
}

template <bool BIGB>
DEVI void stream_body(const f16_t* __restrict__ A, const f16_t* __restrict__ B, f16_t* __restrict__ C,
                      float* __restrict__ ws, u32* __restrict__ cnt, int M, int N, int K) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    constexpr bool X_KCONTIG = !(BIGB && !LAYOUT_NT);
    constexpr bool Y_VEC = BIGB || LAYOUT_NT;               // small operand K-contiguous
    const int R = BIGB ? N : M, T = BIGB ? M : N;
    const f16_t* __restrict__ X = BIGB ? B : A;
    const f16_t* __restrict__ Y = BIGB ? A : B;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int nch = (K + 31) >> 5;
    const int TY = (T + BN - 1) / BN;
    const int W = ((R + BM - 1) / BM) * TY * nch;
    const int G = gridDim.x, p = blockIdx.x;
    const Split sp = {W / G, W % G};
    const int l0 = cta_start(p, sp);
    const int total = sp.base + (p < sp.rem ? 1 : 0);        // >= 1: the host keeps G <= W
    const int wrow = warp * BMW;                              // this warp's rows inside a tile

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    // ---- the end of a segment [cs, ce] of tile `cu` (slot 0: the CTA's first segment) ----
    auto flush = [&](const Cur& cu, int cs, int slot) {
        const int rb = cu.xi * BM + wrow, tb = cu.yi * BN;
        const bool whole = cs == 0 && cu.c == nch - 1;
        auto store = [&](int i, int j, int e, float v) {
            const int r = rb + i * 16 + g + (e >> 1) * 8, t = tb + j * 8 + 2 * q + (e & 1);
            if (r < R && t < T) {
                const long long o = BIGB ? (long long)t * N + r : (long long)r * N + t;
                C[o] = f32_to_f16(v);
            }
        };
        if (whole) {
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) store(i, j, e, acc[i][j][e]);
            return;
        }
        // Fragment order: element (i, j, e) of lane l at ((i * NI + j) * 4 + e) * 32 + l (coalesced);
        // only real outputs are written and read back.
        float* mine = ws + ((long long)(p * 2 + slot) * WARPS + warp) * (BMW * BN);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = rb + i * 16 + g + (e >> 1) * 8, t = tb + j * 8 + 2 * q + (e & 1);
                    if (r < R && t < T) mine[((i * NI + j) * 4 + e) * 32 + lane] = acc[i][j][e];
                }
        const int ts = cu.tile * nch;
        const int pf = cta_of(ts, sp), pl = cta_of(ts + nch - 1, sp);
        __threadfence();
        __syncwarp();
        u32 last = 0;
        if (lane == 0) last = atomicAdd(cnt + cu.tile * WARPS + warp, 1u) == (u32)(pl - pf);
        last = __shfl_sync(0xffffffffu, last, 0);
        if (last) {
            __threadfence();
            // Sum the partials in CTA order pf..pl (acc is reused as the sum; its own partial is
            // read back from the workspace like the others).
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
            // Unrolled so the loads of several partials are in flight together (the adds stay in order).
#pragma unroll (X_KCONTIG && Y_VEC ? 4 : 2)
            for (int pp = pf; pp <= pl; ++pp) {
                const int sl = cta_start(pp, sp) < ts ? 1 : 0;
                const float* src = ws + ((long long)(pp * 2 + sl) * WARPS + warp) * (BMW * BN);
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int j = 0; j < NI; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int r = rb + i * 16 + g + (e >> 1) * 8, t = tb + j * 8 + 2 * q + (e & 1);
                            if (r < R && t < T) acc[i][j][e] += ldg_cg_f32(src + ((i * NI + j) * 4 + e) * 32 + lane);
                        }
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) store(i, j, e, acc[i][j][e]);
            if (lane == 0) cnt[cu.tile * WARPS + warp] = 0u;
        }
    };

    Cur is = cur_at(l0, nch, TY);          // the next chunk to issue
    Cur cs = is;                           // the chunk being computed
    int seg_c = cs.c, slot = 0;            // first chunk of the running segment; its workspace slot

    if constexpr (X_KCONTIG) {
        // ---- private ring: slot piece pc of stage st of thread tid at ((st * PER + pc) * THREADS + tid) ----
        constexpr int PER = 2 * MI + NI;
        f16_t* ring = reinterpret_cast<f16_t*>(smem_raw);
        auto slot_addr = [&](int st, int piece) { return smem_u32(ring + ((st * PER + piece) * THREADS + tid) * 8); };
        // nn with A large: B's [32 k][BN] tile through smem when its rows are 16-byte pieces.
        const bool ytile = !Y_VEC && (N & 7) == 0;
        auto ytile_addr = [&](int st, int pos) {
            return smem_u32(ring + ((st * PER + 2 * MI + pos / 32) * THREADS + warp * 32 + pos % 32) * 8);
        };
        auto issue = [&](const Cur& cu, int st) {
            const int k = cu.c * 32 + q * 8;
            const int kb = k < K ? 16 : 0;
            const int r = cu.xi * BM + wrow + g;                 // this lane's first row
            const f16_t* xp = kb ? X + ((long long)r * K + k) : X;
            const long long kstep = kb ? K : 0;                  // past K: every piece reads X, zero-filled
#pragma unroll
            for (int i2 = 0; i2 < MI; ++i2)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    cp_async_16_cg_if(slot_addr(st, 2 * i2 + h), xp + (i2 * 16 + h * 8) * kstep, kb,
                                      r + i2 * 16 + h * 8 < R);
            if constexpr (Y_VEC) {
                const int t = cu.yi * BN + g;
                const f16_t* yp = kb ? Y + ((long long)t * K + k) : Y;
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    cp_async_16_ca_if(slot_addr(st, 2 * MI + j), yp + j * 8 * kstep, kb, t + j * 8 < T);
            } else {
                if (ytile) {
#pragma unroll
                    for (int m = 0; m < NI; ++m) {
                        const int pos = m * 32 + lane, kk = pos / NI, cc = (pos % NI) ^ swz_y(kk);
                        const int ky = cu.c * 32 + kk, t = cu.yi * BN + cc * 8;
                        const bool ok = ky < K && t < T;          // T = N, N % 8 == 0: whole pieces
                        cp_async_16_ca(slot_addr(st, 2 * MI + m), ok ? Y + (long long)ky * N + t : Y, ok ? 16 : 0);
                    }
                }
            }
        };
#pragma unroll 1
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < total) { issue(is, s); cur_next(is, nch, TY); }
            cp_async_commit();
        }
        // nn with A large and N % 8 != 0: B [K, N] is read element-wise, one chunk ahead in registers.
        u32 ynext[Y_VEC ? 1 : NI][4];
        if constexpr (!Y_VEC) {
#pragma unroll
            for (int j = 0; j < NI; ++j) load_small_strided(ynext[j], Y, cs.yi * BN + j * 8 + g, T, cs.c * 32 + q * 8, K, N, !ytile);
        }
        int st = 0, st_in = STAGES - 1;    // the stage to compute, the stage to refill
#pragma unroll 1
        for (int i = 0; i < total; ++i) {
            cp_async_wait<STAGES - 2>();     // this thread's chunk i landed (only its own pieces)
            u32 xa[MI][2][4], yb[NI][4];
#pragma unroll
            for (int i2 = 0; i2 < MI; ++i2)
#pragma unroll
                for (int h = 0; h < 2; ++h) lds_16(xa[i2][h], slot_addr(st, 2 * i2 + h));
            if constexpr (Y_VEC) {
#pragma unroll
                for (int j = 0; j < NI; ++j) lds_16(yb[j], slot_addr(st, 2 * MI + j));
            } else if (ytile) {
                __syncwarp();              // every lane's pieces of the tile landed
                const int mq = lane >> 3, rr = lane & 7;
#pragma unroll
                for (int s2 = 0; s2 < 2; ++s2)
#pragma unroll
                    for (int j = 0; j < NI; j += 2) {
                        // Matrix mq: k half mq & 1 (MMA k +8), token block j + (mq >> 1); its row rr
                        // <-> MMA k rr: actual k 8 (rr >> 1) + 4 s2 + 2 (mq & 1) + (rr & 1), as for X.
                        const int kk = 8 * (rr >> 1) + 4 * s2 + 2 * (mq & 1) + (rr & 1), cc = j + (mq >> 1);
                        ldmatrix_x4_trans(ytile_addr(st, kk * NI + (cc ^ swz_y(kk))),
                                          yb[j][2 * s2], yb[j][2 * s2 + 1], yb[j + 1][2 * s2], yb[j + 1][2 * s2 + 1]);
                    }
                __syncwarp();              // read by every lane before any lane refills a stage
            } else {
                Cur nx = cs;
                cur_next(nx, nch, TY);
#pragma unroll
                for (int j = 0; j < NI; ++j) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) yb[j][e] = ynext[j][e];
                    load_small_strided(ynext[j], Y, nx.yi * BN + j * 8 + g, T, nx.c * 32 + q * 8, K, N, i + 1 < total);
                }
            }
            // Stage (i - 1) % STAGES was read into registers in the last iteration: refill it.
            if (i + STAGES - 1 < total) { issue(is, st_in); cur_next(is, nch, TY); }
            cp_async_commit();
            st_in = st;
            st = st + 1 == STAGES ? 0 : st + 1;
#pragma unroll
            for (int s2 = 0; s2 < 2; ++s2)
#pragma unroll
                for (int i2 = 0; i2 < MI; ++i2) {
                    const u32 a[4] = {xa[i2][0][2 * s2], xa[i2][1][2 * s2], xa[i2][0][2 * s2 + 1], xa[i2][1][2 * s2 + 1]};
#pragma unroll
                    for (int j = 0; j < NI; ++j) mma_16816(acc[i2][j], a, yb[j][2 * s2], yb[j][2 * s2 + 1]);
                }
            if (cs.c == nch - 1 || i == total - 1) {
                flush(cs, seg_c, slot);
#pragma unroll
                for (int i2 = 0; i2 < MI; ++i2)
#pragma unroll
                    for (int j = 0; j < NI; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[i2][j][e] = 0.f;
                slot = 1;
                seg_c = 0;
            }
            cur_next(cs, nch, TY);
        }
        cp_async_wait<0>();
    } else {
        // ---- nn, B large and N-contiguous: a per-warp ring, ldmatrix.trans ----
        // A stage: [32 k][BMW] of B (swizzled), then each lane's 16-byte pieces of the small operand.
        constexpr int SS = 32 * (BMW + BN);                 // halves per stage
        f16_t* ring = reinterpret_cast<f16_t*>(smem_raw) + warp * (STAGES * SS);
        auto issue = [&](const Cur& cu, int sl) {
            f16_t* dst = ring + sl * SS;
            const int ky = cu.c * 32 + q * 8;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int t = cu.yi * BN + j * 8 + g;
                const bool ok = ky < K && t < T;
                cp_async_16_ca(smem_u32(dst + 32 * BMW + (j * 32 + lane) * 8), ok ? Y + (long long)t * K + ky : Y, ok ? 16 : 0);
            }
            const int rb = cu.xi * BM + wrow;
#pragma unroll
            for (int p0 = 0; p0 < 32 * CPR; p0 += 32) {
                const int pc = p0 + lane, kk = pc / CPR, cc = pc % CPR;
                const int k = cu.c * 32 + kk, n = rb + cc * 8;
                const bool ok = k < K && n < R;                      // R = N, N % 8 == 0 here
                cp_async_16(smem_u32(dst + kk * BMW + ((cc ^ swz_key(kk)) << 3)),
                            ok ? X + (long long)k * N + n : X, ok ? 16 : 0);
            }
        };
#pragma unroll 1
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < total) { issue(is, s); cur_next(is, nch, TY); }
            cp_async_commit();
        }
        int st = 0, st_in = STAGES - 1;
#pragma unroll 1
        for (int i = 0; i < total; ++i) {
            cp_async_wait<STAGES - 2>();
            __syncwarp();              // chunk i landed for every lane; stage (i-1) % STAGES is free
            if (i + STAGES - 1 < total) { issue(is, st_in); cur_next(is, nch, TY); }
            cp_async_commit();
            const f16_t* sl = ring + st * SS;
            st_in = st;
            st = st + 1 == STAGES ? 0 : st + 1;
            u32 yb[NI][4];
#pragma unroll
            for (int j = 0; j < NI; ++j) lds_16(yb[j], smem_u32(sl + 32 * BMW + (j * 32 + lane) * 8));
            const int mq = lane >> 3, rr = lane & 7;
#pragma unroll
            for (int s2 = 0; s2 < 2; ++s2) {
                // Matrix mq (a0..a3), its row rr <-> MMA k rr (+8 for mq >= 2): actual k as above.
                const int kk = 8 * (rr >> 1) + 4 * s2 + 2 * (mq >> 1) + (rr & 1);
#pragma unroll
                for (int i2 = 0; i2 < MI; ++i2) {
                    const int cc = 2 * i2 + (mq & 1);
                    u32 a[4];
                    ldmatrix_x4_trans(smem_u32(sl + kk * BMW + ((cc ^ swz_key(kk)) << 3)), a[0], a[1], a[2], a[3]);
#pragma unroll
                    for (int j = 0; j < NI; ++j) mma_16816(acc[i2][j], a, yb[j][2 * s2], yb[j][2 * s2 + 1]);
                }
            }
            if (cs.c == nch - 1 || i == total - 1) {
                flush(cs, seg_c, slot);
#pragma unroll
                for (int i2 = 0; i2 < MI; ++i2)
#pragma unroll
                    for (int j = 0; j < NI; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[i2][j][e] = 0.f;
                slot = 1;
                seg_c = 0;
            }
            cur_next(cs, nch, TY);
        }
        cp_async_wait<0>();
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
cudal2_stream_b(const f16_t* A, const f16_t* B, f16_t* C, float* ws, u32* cnt, int M, int N, int K) {
    stream_body<true>(A, B, C, ws, cnt, M, N, K);
}

extern "C" __global__ void __launch_bounds__(THREADS)
cudal2_stream_a(const f16_t* A, const f16_t* B, f16_t* C, float* ws, u32* cnt, int M, int N, int K) {
    stream_body<false>(A, B, C, ws, cnt, M, N, K);
}
