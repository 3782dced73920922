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
