// cudal2 backend=cuda family=mma bm=32 bn=32 bk=64 warps=4 stages=3 group_m=1 split_k=1 subtile=1 warp_spec=0 cluster=1 layout=nt
#define BM 32
#define BN 32
#define BK 64
#define WARPS 4
#define STAGES 3
#define GROUP_M 1
#define SPLIT_K 1
#define CLUSTER 1
#define LAYOUT_NT 1
#define WM 2
#define WN 2
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

// cudal2 mma family (sm_80+): cp.async multi-stage pipeline -> XOR-swizzled smem -> ldmatrix ->
// mma.sync m16n8k16 (fp16 in, fp32 accumulate) -> guarded fp16 stores (or an fp32 split-K slice).
// Knobs arrive as macros from the renderer: BM BN BK WARPS WM WN STAGES GROUP_M SPLIT_K LAYOUT_NT;
// PDL (pdl.cuh, 1 by default since 2026-12-06, 0 turns it off): every entry point waits for the grids before it first.
//   LAYOUT_NT=0: B is [K,N] row-major (smem [BK][BN], read with ldmatrix.trans)
//   LAYOUT_NT=1: B is [N,K] row-major (smem [BN][BK], read like A)
// Two entry points share one body: _vec (16-byte cp.async, needs K%8==N%8==0 and 16-byte aligned
// pointers) and _scalar (element-wise predicated loads, any shape); the host picks per call.

#define THREADS (WARPS * 32)
#define TM (BM / WM)                  // warp tile rows
#define TN (BN / WN)                  // warp tile cols
#define MI (TM / 16)
#define NI (TN / 8)
#if LAYOUT_NT
#define B_ROWS BN
#define B_COLS BK
#else
#define B_ROWS BK
#define B_COLS BN
#endif

// Element offset of 16-byte chunk c of row r in a [ROWS][COLS] fp16 tile. The chunk index is
// XORed with the row's position inside a 128-byte (8-chunk) bank line, so the 8 row addresses of
// one ldmatrix phase (same logical chunk, 8 consecutive rows) hit 8 distinct 16-byte bank groups.
template <int COLS>
DEVI int swz(int r, int c) {
    constexpr int CPR = COLS / 8;
    constexpr int RPL = CPR >= 8 ? 1 : 8 / CPR;      // rows sharing one 128-byte line
    constexpr int MASK = (CPR >= 8 ? 8 : CPR) - 1;
    return r * COLS + ((c ^ ((r / RPL) & MASK)) << 3);
}

// Copy g[row0 + r][col0 + c] (r < ROWS, c < COLS) into the swizzled tile s, zero outside
// [0, rows_lim) x [0, cols_lim): the masked edges, with no padding copy of the operand.
template <int ROWS, int COLS, bool VEC>
DEVI void load_tile(f16_t* s, const f16_t* g, int ld, int row0, int col0, int rows_lim, int cols_lim, int tid) {
    constexpr int CPR = COLS / 8;
    constexpr int CHUNKS = ROWS * CPR;
#pragma unroll
    for (int i0 = 0; i0 < CHUNKS; i0 += THREADS) {
        int i = i0 + tid;
        if (CHUNKS % THREADS == 0 || i < CHUNKS) {
            int r = i / CPR, c = i % CPR;
            int gr = row0 + r, gc = col0 + c * 8;
            f16_t* dst = s + swz<COLS>(r, c);
            if (VEC) {
                bool ok = gr < rows_lim && gc < cols_lim;     // cols_lim % 8 == 0 here
                const f16_t* src = ok ? g + (long long)gr * ld + gc : g;
                cp_async_16(smem_u32(dst), src, ok ? 16 : 0);
            } else {
                u32 w[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    u32 lo = 0, hi = 0;
                    if (gr < rows_lim && gc + 2 * e < cols_lim) lo = g[(long long)gr * ld + gc + 2 * e];
                    if (gr < rows_lim && gc + 2 * e + 1 < cols_lim) hi = g[(long long)gr * ld + gc + 2 * e + 1];
                    w[e] = lo | (hi << 16);
                }
                asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" :: "r"(smem_u32(dst)),
                             "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
            }
        }
    }
}

template <bool VEC>
DEVI void hgemm_body(const f16_t* __restrict__ A, const f16_t* __restrict__ B, f16_t* __restrict__ C,
                     float* __restrict__ ws, int M, int N, int K) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    f16_t* sA = reinterpret_cast<f16_t*>(smem_raw);
    f16_t* sB = sA + STAGES * BM * BK;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    int tm, tn;
    group_tile(blockIdx.x, tiles_m, tiles_n, GROUP_M, tm, tn);
    const int m0 = tm * BM, n0 = tn * BN;

    const int ktiles = (K + BK - 1) / BK;
    const int z = blockIdx.z;
    const int kt0 = (int)((long long)z * ktiles / SPLIT_K);
    const int kt1 = (int)((long long)(z + 1) * ktiles / SPLIT_K);
    const int nk = kt1 - kt0;

    auto load_stage = [&](int kt, int st) {
        const int k0 = kt * BK;
        load_tile<BM, BK, VEC>(sA + st * BM * BK, A, K, m0, k0, M, K, tid);
#if LAYOUT_NT
        load_tile<BN, BK, VEC>(sB + st * BN * BK, B, K, n0, k0, N, K, tid);
#else
        load_tile<BK, BN, VEC>(sB + st * BK * BN, B, N, k0, n0, K, N, tid);
#endif
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) load_stage(kt0 + s, s);
        cp_async_commit();
    }

    for (int t = 0; t < nk; ++t) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();     // stage t landed for all threads; stage t-1 is free to overwrite
        const int nxt = t + STAGES - 1;
        if (nxt < nk) load_stage(kt0 + nxt, nxt % STAGES);
        cp_async_commit();

        const f16_t* a_s = sA + (t % STAGES) * BM * BK;
        const f16_t* b_s = sB + (t % STAGES) * BK * BN;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            u32 af[MI][4];
            u32 bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                int row = wm * TM + i * 16 + (lane & 15);
                int chunk = kk * 2 + (lane >> 4);
                ldmatrix_x4(smem_u32(a_s + swz<BK>(row, chunk)), af[i][0], af[i][1], af[i][2], af[i][3]);
            }
#pragma unroll
            for (int j2 = 0; j2 < NI / 2; ++j2) {
#if LAYOUT_NT
                int n = wn * TN + j2 * 16 + (lane & 7) + ((lane >> 4) << 3);
                int chunk = kk * 2 + ((lane >> 3) & 1);
                ldmatrix_x4(smem_u32(b_s + swz<BK>(n, chunk)),
                            bf[2 * j2][0], bf[2 * j2][1], bf[2 * j2 + 1][0], bf[2 * j2 + 1][1]);
#else
                int k = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                int chunk = (wn * TN + j2 * 16) / 8 + (lane >> 4);
                ldmatrix_x4_trans(smem_u32(b_s + swz<BN>(k, chunk)),
                                  bf[2 * j2][0], bf[2 * j2][1], bf[2 * j2 + 1][0], bf[2 * j2 + 1][1]);
#endif
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma_16816(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
    }
    cp_async_wait<0>();

    // Epilogue: thread holds (row g, cols 2q..2q+1) and (row g+8, same cols) of each 16x8 block.
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int col = n0 + wn * TN + j * 8 + (lane & 3) * 2;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm * TM + i * 16 + (lane >> 2) + h * 8;
                if (row >= M) continue;
                const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
#if SPLIT_K > 1
                float* dst = ws + ((long long)z * M + row) * N + col;
                if (col < N) dst[0] = v0;
                if (col + 1 < N) dst[1] = v1;
#else
                f16_t* dst = C + (long long)row * N + col;
                if (VEC) {             // N % 8 == 0: the pair is all in or all out, 4-byte aligned
                    if (col < N) st_global_u32(dst, pack_f16x2(v0, v1));
                } else {
                    if (col < N) st_global_u16(dst, f32_to_f16(v0));
                    if (col + 1 < N) st_global_u16(dst + 1, f32_to_f16(v1));
                }
#endif
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
cudal2_mma_vec(const f16_t* A, const f16_t* B, f16_t* C, float* ws, int M, int N, int K) {
    PDL_WAIT();
    hgemm_body<true>(A, B, C, ws, M, N, K);
}

extern "C" __global__ void __launch_bounds__(THREADS)
cudal2_mma_scalar(const f16_t* A, const f16_t* B, f16_t* C, float* ws, int M, int N, int K) {
    PDL_WAIT();
    hgemm_body<false>(A, B, C, ws, M, N, K);
}

// Split-K reduction: C = fp16(sum over the SPLIT_K fp32 slices), a fixed order, so deterministic.
extern "C" __global__ void __launch_bounds__(256)
cudal2_splitk_reduce(const float* __restrict__ ws, f16_t* __restrict__ C, int M, int N) {
    PDL_WAIT();                 // the slices the launch before it wrote
    const long long total = (long long)M * N;
    for (long long i = blockIdx.x * 256LL + threadIdx.x; i < total; i += (long long)gridDim.x * 256) {
        float s = 0.f;
#pragma unroll
        for (int z = 0; z < SPLIT_K; ++z) s += ws[z * total + i];
        C[i] = f32_to_f16(s);
    }
}
