// cudal2 backend=cuda family=stream bm=16 bn=32 bk=32 warps=4 stages=3 group_m=1 split_k=1 subtile=1 warp_spec=0 cluster=1 layout=nt
#define BM 16
#define BN 32
#define BK 32
#define WARPS 4
#define STAGES 3
#define GROUP_M 1
#define SPLIT_K 1
#define CLUSTER 1
#define LAYOUT_NT 1
// cudal2 CUDA kernels: shared header-free helpers (NVRTC compiles these without any CUDA header,
// so the CPU-only CI machine needs nothing but the nvrtc wheel).
#pragma once

typedef unsigned short f16_t;          // fp16 storage; arithmetic happens in PTX
typedef unsigned int u32;
typedef unsigned long long u64;

#define DEVI __device__ __forceinline__

DEVI u32 smem_u32(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// Two fp32 -> packed fp16x2 (round to nearest); lo lands in the low half.
DEVI u32 pack_f16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

DEVI f16_t f32_to_f16(float x) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}

// 16-byte async copy global->shared; src_bytes < 16 zero-fills the rest (0 = pure zero fill).
DEVI void cp_async_16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes));
}
DEVI void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> DEVI void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

DEVI void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
DEVI void ldmatrix_x4_trans(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

// D += A(16x16, row) * B(16x8, col), fp16 in, fp32 accumulate.
DEVI void mma_16816(float* d, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

DEVI void st_global_u32(void* p, u32 v) { asm volatile("st.global.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
DEVI void st_global_u16(void* p, f16_t v) { asm volatile("st.global.b16 [%0], %1;" :: "l"(p), "h"(v) : "memory"); }

// Tile order, grouped so that the tiles in flight share operands in L2 (the Triton-tutorial
// grouping). group > 0: `group` consecutive tile rows are walked column by column (the B tiles they
// share stay in L2); 1 is the raster along N (row-major), group >= the tile rows the raster along M.
// group < 0: the transpose, -group tile columns walked row by row (the A tiles stay in L2). GROUP_M
// is a macro, so the branch folds away.
DEVI void group_rows(int pid, int rows, int cols, int group, int& r_out, int& c_out) {
    int per_group = group * cols;
    int g = pid / per_group;
    int first = g * group;
    int gsize = min(rows - first, group);
    int r = pid % per_group;
    r_out = first + r % gsize;
    c_out = r / gsize;
}

DEVI void group_tile(int pid, int tiles_m, int tiles_n, int group_m, int& tm, int& tn) {
    if (group_m > 0) group_rows(pid, tiles_m, tiles_n, group_m, tm, tn);
    else group_rows(pid, tiles_n, tiles_m, -group_m, tn, tm);
}

// cudal2 CUDA kernels: programmatic dependent launch for the mma and stream families (rendered after
// common.cuh; wgmma.cu has its own, with the trigger variants and its default).
// PDL (1 by default since 2026-12-06; 0 turns it off): programmatic dependent launch. Each entry
// point (PDL_WAIT() first) waits for the grids before it in the stream (griddepcontrol.wait:
// complete, their writes visible) and the launcher, seeing `cudal2_pdl`, launches it with programmatic stream serialization: its launch overlaps their tail where no event
// sits between calls (wgmma, H100 2026-12-06: 1.127x best-cublas over 115 filed kernels on the
// graph clock where it ran 1.078x without). There is no explicit trigger: dependents launch as
// this grid exits (wgmma's PDL=3). H100 2026-12-06 (run 129, bench/graph_clock.py): over the 27
// filed mma / stream kernels (small class, nn and nt) PDL=1 ran 1.369x best-cublas on the graph
// clock where the build without ran 1.191x (every one faster, 0.22-0.30 us a call), and 0.999x of
// it offline. sm_90+ only: on an older arch nothing changes.
#ifndef PDL
#define PDL 1
#endif
#if PDL && __CUDA_ARCH__ >= 900
__device__ int cudal2_pdl;      // tells the launcher to launch with programmatic stream serialization
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define PDL_WAIT() do { } while (0)
#endif

// cudal2 stream family (sm_80+; decode / skinny GEMMs, min(M, N) <= 64): the large operand is
// read once from HBM with 16-byte loads, many in flight per SM; mma.sync m16n8k16 (fp16 in, fp32
// accumulate) with the roles swapped so the large operand is always the MMA "A" side (16 rows of
// the large dimension) and the small one (tokens, up to BN of them per CTA) is the MMA "N" side.
//
// Two entry points, the host picks per call:
//   cudal2_stream_b  M <= N: the large operand is B (R = N rows), the small one A (T = M tokens);
//                    C[t][r] is written transposed from the MMA tile.
//   cudal2_stream_a  M >  N: the large operand is A (R = M rows), the small one B (T = N tokens).
// How the large operand X(r, k) reaches the MMA:
//   K-contiguous (nt B, or A): a per-thread ("private") cp.async ring, STAGES chunks of 32 k deep:
//     each thread copies exactly the 16-byte pieces its own MMAs need into its own smem slots and
//     reads them back with ld.shared.v4 -- no barrier, no swizzle, and the bytes in flight do not
//     depend on ptxas's register scheduling (direct register loads were measured, in SASS, to be
//     interleaved with the MMAs: ~4 loads in flight). A thread's pieces: 8 consecutive k of row r
//     and of row r+8; those 8 k fill the A fragments of two k16 MMAs. The order of the k summation
//     is free, so the small operand's B fragment uses the same k permutation: thread t then needs
//     8 consecutive k of token t/4, also one 16-byte piece. Per 32-k chunk, thread (g = lane/4,
//     q = lane%4), MMA step s in {0,1}:
//       MMA k {2q, 2q+1, 2q+8, 2q+9} of step s  <->  actual k  8q + 4s + {0, 1, 2, 3}.
//     (nn with M > N: the small operand B [K, N] is not K-contiguous; it is read element-wise,
//     one chunk ahead in registers.)
//   N-contiguous (nn B with M <= N): a per-warp cp.async ring of STAGES slots of [32 k][BM rows],
//     XOR-swizzled, plus each lane's small-operand pieces; ldmatrix.trans with row addresses picked
//     so the fragments come out in the same k permutation (so the small operand is again one
//     16-byte piece per token and chunk).
// Work split: grid (ceil(R/BM), ceil(T/BN), SPLIT_K). A CTA's K range is split into 32-k chunks,
// warp w takes chunks w, w + WARPS, ...; each warp keeps STAGES - 1 chunks in flight (its ring).
// Warp partials are reduced through shared memory in warp order; with SPLIT_K > 1 each CTA writes an fp32 partial to a workspace and the last CTA of
// the output tile (atomic counter) sums the SPLIT_K partials in split order 0..S-1 (bit-identical
// whichever CTA arrives last) and resets the counter for the next launch.
// Knobs (spec field -> macro): bm -> BM rows of the large dim per CTA (16..128), bn -> BN tokens per
// CTA (16..64), warps -> WARPS (K split inside the CTA), stages -> STAGES (32-k chunks in flight per
// warp / ring depth), split_k -> SPLIT_K (K split across CTAs). bk is the chunk, pinned to 32.
// Needs K % 8 == 0 and 16-byte aligned A and B (the host checks); M, N any size >= 1.
// PDL (pdl.cuh, 1 by default since 2026-12-06, 0 turns it off): both entry points wait for the grids before them first.

#define THREADS (WARPS * 32)
#define MI (BM / 16)
#define NI (BN / 8)
#define CPR (BM / 8)                  // 16-byte chunks per ring row (cp.async path)

DEVI void lds_16(u32* r, u32 addr) {
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
DEVI float ldg_cg_f32(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
    return v;
}

// Ring swizzle: row kk of a [32][BM] slot, chunk c -> c ^ swz_key(kk). The 8 rows one ldmatrix
// phase reads are kk = 8a + b + even constant (a < 4, b < 2): the key makes their 16-byte bank
// groups distinct for BM >= 32.
DEVI int swz_key(int kk) {
    if (CPR >= 8) return (((kk >> 3) & 3) << 1) | (kk & 1);
    if (CPR == 4) return (kk >> 3) & 3;
    return (kk >> 3) & 1;
}

// nn with A large: 8 consecutive k (k0 .. k0+7) of token t of the small B [K, N] (stride N),
// packed as the B fragment wants them; zero when out of range.
DEVI void load_small_strided(u32* y, const f16_t* __restrict__ Y, int t, int T, int k0, int K, int N, bool ok) {
    y[0] = y[1] = y[2] = y[3] = 0;
    if (!ok || t >= T || k0 >= K) return;
    const f16_t* p = Y + (long long)k0 * N + t;
#pragma unroll
    for (int e = 0; e < 4; ++e)
        y[e] = (u32)p[(long long)(2 * e) * N] | ((u32)p[(long long)(2 * e + 1) * N] << 16);
}

template <bool BIGB>
DEVI void stream_body(const f16_t* __restrict__ A, const f16_t* __restrict__ B, f16_t* __restrict__ C,
                      float* __restrict__ ws, u32* __restrict__ cnt, int M, int N, int K) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ int s_last;
    constexpr bool X_KCONTIG = !(BIGB && !LAYOUT_NT);
    const int R = BIGB ? N : M, T = BIGB ? M : N;
    const f16_t* __restrict__ X = BIGB ? B : A;
    const f16_t* __restrict__ Y = BIGB ? A : B;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int r0 = blockIdx.x * BM, t0 = blockIdx.y * BN, z = blockIdx.z;
    const int nch = (K + 31) >> 5;
    const int c0 = (int)((long long)z * nch / SPLIT_K), c1 = (int)((long long)(z + 1) * nch / SPLIT_K);

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    if constexpr (X_KCONTIG) {
        // ---- private-ring path: each thread cp.asyncs exactly the 16-byte pieces it will feed to
        // its own MMAs into its own smem slots (no barrier, no swizzle: lane-contiguous 16-byte
        // slots are conflict-free), STAGES chunks deep, so the bytes in flight do not depend on how
        // ptxas schedules registers. Slot piece p of stage s of thread tid: ((s * PER + p) * THREADS + tid).
        constexpr bool Y_VEC = BIGB || LAYOUT_NT;            // small operand K-contiguous
        constexpr int PER = 2 * MI + (Y_VEC ? NI : 0);
        f16_t* ring = reinterpret_cast<f16_t*>(smem_raw);
        const int mine = c1 - c0 - warp > 0 ? (c1 - c0 - warp + WARPS - 1) / WARPS : 0;
        auto slot_addr = [&](int st, int piece) { return smem_u32(ring + ((st * PER + piece) * THREADS + tid) * 8); };
        auto issue = [&](int i, int st) {
            const int k = (c0 + warp + i * WARPS) * 32 + q * 8;
            const bool kok = k < K;
#pragma unroll
            for (int i2 = 0; i2 < MI; ++i2)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = r0 + i2 * 16 + g + h * 8;
                    const bool ok = kok && r < R;
                    cp_async_16(slot_addr(st, 2 * i2 + h), ok ? X + (long long)r * K + k : X, ok ? 16 : 0);
                }
            if constexpr (Y_VEC) {
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const int t = t0 + j * 8 + g;
                    const bool ok = kok && t < T;
                    cp_async_16(slot_addr(st, 2 * MI + j), ok ? Y + (long long)t * K + k : Y, ok ? 16 : 0);
                }
            }
        };
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < mine) issue(s, s);
            cp_async_commit();
        }
        // nn with A large: B [K, N] is read element-wise, one chunk ahead in registers.
        u32 ynext[Y_VEC ? 1 : NI][4];
        if constexpr (!Y_VEC) {
#pragma unroll
            for (int j = 0; j < NI; ++j) load_small_strided(ynext[j], Y, t0 + j * 8 + g, T, c0 * 32 + warp * 32 + q * 8, K, N, mine > 0);
        }
        for (int i = 0; i < mine; ++i) {
            cp_async_wait<STAGES - 2>();     // this thread's chunk i landed (only its own pieces)
            const int st = i % STAGES;
            u32 xa[MI][2][4], yb[NI][4];
#pragma unroll
            for (int i2 = 0; i2 < MI; ++i2)
#pragma unroll
                for (int h = 0; h < 2; ++h) lds_16(xa[i2][h], slot_addr(st, 2 * i2 + h));
            if constexpr (Y_VEC) {
#pragma unroll
                for (int j = 0; j < NI; ++j) lds_16(yb[j], slot_addr(st, 2 * MI + j));
            } else {
                const int k = (c0 + warp + (i + 1) * WARPS) * 32 + q * 8;
#pragma unroll
                for (int j = 0; j < NI; ++j) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) yb[j][e] = ynext[j][e];
                    load_small_strided(ynext[j], Y, t0 + j * 8 + g, T, k, K, N, i + 1 < mine);
                }
            }
            // Slot (i - 1) % STAGES was read into registers in the last iteration: refill it.
            if (i + STAGES - 1 < mine) issue(i + STAGES - 1, (i + STAGES - 1) % STAGES);
            cp_async_commit();
#pragma unroll
            for (int s2 = 0; s2 < 2; ++s2)
#pragma unroll
                for (int i2 = 0; i2 < MI; ++i2) {
                    const u32 a[4] = {xa[i2][0][2 * s2], xa[i2][1][2 * s2], xa[i2][0][2 * s2 + 1], xa[i2][1][2 * s2 + 1]};
#pragma unroll
                    for (int j = 0; j < NI; ++j) mma_16816(acc[i2][j], a, yb[j][2 * s2], yb[j][2 * s2 + 1]);
                }
        }
        cp_async_wait<0>();
    } else {
        // ---- cp.async path (nn, B large and N-contiguous): a per-warp ring, ldmatrix.trans ----
        // A stage: [32 k][BM] of B (swizzled), then each lane's 16-byte pieces of the small operand.
        constexpr int SS = 32 * (BM + BN);                  // halves per stage
        f16_t* ring = reinterpret_cast<f16_t*>(smem_raw) + warp * (STAGES * SS);
        const int mine = c1 - c0 - warp > 0 ? (c1 - c0 - warp + WARPS - 1) / WARPS : 0;
        auto issue = [&](int i, int slot) {
            const int c = c0 + warp + i * WARPS;
            f16_t* dst = ring + slot * SS;
            const int ky = c * 32 + q * 8;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int t = t0 + j * 8 + g;
                const bool ok = ky < K && t < T;
                cp_async_16(smem_u32(dst + 32 * BM + (j * 32 + lane) * 8), ok ? Y + (long long)t * K + ky : Y, ok ? 16 : 0);
            }
#pragma unroll
            for (int p0 = 0; p0 < 32 * CPR; p0 += 32) {
                const int p = p0 + lane, kk = p / CPR, cc = p % CPR;
                const int k = c * 32 + kk, n = r0 + cc * 8;
                const bool ok = k < K && n < R;                      // R = N, N % 8 == 0 here
                cp_async_16(smem_u32(dst + kk * BM + ((cc ^ swz_key(kk)) << 3)),
                            ok ? X + (long long)k * N + n : X, ok ? 16 : 0);
            }
        };
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < mine) issue(s, s);
            cp_async_commit();
        }
        for (int i = 0; i < mine; ++i) {
            cp_async_wait<STAGES - 2>();
            __syncwarp();              // chunk i landed for every lane; slot (i-1) % STAGES is free
            if (i + STAGES - 1 < mine) issue(i + STAGES - 1, (i + STAGES - 1) % STAGES);
            cp_async_commit();
            const f16_t* sl = ring + (i % STAGES) * SS;
            u32 yb[NI][4];
#pragma unroll
            for (int j = 0; j < NI; ++j) lds_16(yb[j], smem_u32(sl + 32 * BM + (j * 32 + lane) * 8));
            const int mq = lane >> 3, rr = lane & 7;
#pragma unroll
            for (int st = 0; st < 2; ++st) {
                // Matrix mq (a0..a3), its row rr <-> MMA k rr (+8 for mq >= 2): actual k as above.
                const int kk = 8 * (rr >> 1) + 4 * st + 2 * (mq >> 1) + (rr & 1);
#pragma unroll
                for (int i2 = 0; i2 < MI; ++i2) {
                    const int cc = 2 * i2 + (mq & 1);
                    u32 a[4];
                    ldmatrix_x4_trans(smem_u32(sl + kk * BM + ((cc ^ swz_key(kk)) << 3)), a[0], a[1], a[2], a[3]);
#pragma unroll
                    for (int j = 0; j < NI; ++j) mma_16816(acc[i2][j], a, yb[j][2 * st], yb[j][2 * st + 1]);
                }
            }
        }
        cp_async_wait<0>();
    }

    // ---- reduce the warps' partials in warp order (the ring's smem is reused) ----
    __syncthreads();
    float* red = reinterpret_cast<float*>(smem_raw);
    float* part = red + warp * (BM * BN);
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = i * 16 + g + (e >> 1) * 8, t = j * 8 + 2 * q + (e & 1);
                part[BIGB ? t * BM + r : r * BN + t] = acc[i][j][e];
            }
    __syncthreads();
    // Element e of the tile: BIGB r fastest (C[t][r] row), else t fastest (C[r][t] row).
#if SPLIT_K > 1
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    float* my_ws = ws + ((long long)z * gridDim.x * gridDim.y + tile) * (BM * BN);
#endif
    for (int e = tid; e < BM * BN; e += THREADS) {
        const int r = BIGB ? e % BM : e / BN, t = BIGB ? e / BM : e % BN;
        if (r0 + r >= R || t0 + t >= T) continue;          // only real outputs reach the workspace
        float v = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) v += red[w * (BM * BN) + e];
#if SPLIT_K > 1
        my_ws[e] = v;
#else
        const long long o = BIGB ? (long long)(t0 + t) * N + r0 + r : (long long)(r0 + r) * N + t0 + t;
        C[o] = f32_to_f16(v);
#endif
    }
#if SPLIT_K > 1
    // Last CTA of the tile sums the SPLIT_K partials in split order, then resets the counter.
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(cnt + tile, 1u) == (u32)(SPLIT_K - 1);
    __syncthreads();
    if (s_last) {
        __threadfence();
        const long long stride = (long long)gridDim.x * gridDim.y * (BM * BN);
        const float* base = ws + (long long)tile * (BM * BN);
        for (int e = tid; e < BM * BN; e += THREADS) {
            const int r = BIGB ? e % BM : e / BN, t = BIGB ? e / BM : e % BN;
            if (r0 + r < R && t0 + t < T) {
                float v = 0.f;
#pragma unroll
                for (int s = 0; s < SPLIT_K; ++s) v += ldg_cg_f32(base + s * stride + e);
                const long long o = BIGB ? (long long)(t0 + t) * N + r0 + r : (long long)(r0 + r) * N + t0 + t;
                C[o] = f32_to_f16(v);
            }
        }
        if (tid == 0) cnt[tile] = 0u;
    }
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
cudal2_stream_b(const f16_t* A, const f16_t* B, f16_t* C, float* ws, u32* cnt, int M, int N, int K) {
    PDL_WAIT();
    stream_body<true>(A, B, C, ws, cnt, M, N, K);
}

extern "C" __global__ void __launch_bounds__(THREADS)
cudal2_stream_a(const f16_t* A, const f16_t* B, f16_t* C, float* ws, u32* cnt, int M, int N, int K) {
    PDL_WAIT();
    stream_body<false>(A, B, C, ws, cnt, M, N, K);
}
