// cudal2 wgmma family (sm_90a): persistent, warp-specialised Hopper GEMM.
//   warpgroup 0      producer: one thread issues TMA loads (cp.async.bulk.tensor.2d) of A and B
//                    tiles into a STAGES-deep ring of 128-byte-swizzled smem, completed on "full"
//                    mbarriers; it waits on "empty" mbarriers before reusing a slot.
//   warpgroups 1..C  consumers: wgmma.mma_async m64nBNk16 from the ring, fp32 accumulators in
//                    registers, guarded fp16 stores straight from the fragments.
// Tiles are handed out persistently (tile t, t + clusters, ...) in GROUP_M order. With CLUSTER=2,
// the two CTAs of a cluster take vertically adjacent tiles, share the B tile, and each loads half
// of it multicast into both CTAs' smem. Layout nt: both operands K-major; nn: B is N-major and
// wgmma reads it through the transpose bit.
// Knobs (macros): BM BN BK(=64) WARPS CONSUMERS STAGES GROUP_M CLUSTER LAYOUT_NT.

#define THREADS (WARPS * 32)
#define A_BYTES (BM * 64 * 2)
#define B_BYTES (BN * 64 * 2)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define MW (BM / CONSUMERS / 64)          // m64 sub-tiles per consumer warpgroup
#define NACC (BN / 2)                     // fp32 accumulators per thread per m64 sub-tile

struct __align__(64) TensorMap { u64 opaque[16]; };   // CUtensorMap: 128 opaque bytes

DEVI void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
DEVI void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
DEVI void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
// Arrive on the barrier at the same smem offset in CTA `cta` of the cluster (itself included).
DEVI void mbar_arrive_cluster(u32 bar, u32 cta) {
#if CLUSTER > 1
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(cta));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
#else
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
#endif
}

DEVI void tma_load(u32 dst, const TensorMap* map, int c0, int c1, u32 bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
#if CLUSTER > 1
// Same box written to the same smem offset of every CTA in `mask`, completing on each one's barrier.
DEVI void tma_load_mc(u32 dst, const TensorMap* map, int c0, int c1, u32 bar, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
#endif

// wgmma smem descriptors, 128-byte swizzle (mode 1 in bits 62-63), addresses in 16-byte units.
// K-major: rows of 64 fp16 (128 B), 8-row core groups 1024 B apart (SBO); LBO unused.
DEVI u64 desc_kmajor(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
// N-major (nn B): 64-wide N blocks of 64 k-rows x 128 B are 8192 B apart (LBO), 8-k-row groups
// 1024 B apart (SBO).
DEVI u64 desc_nmajor(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(8192 >> 4) << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

DEVI void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
DEVI void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> DEVI void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

#if CLUSTER > 1
#define CLUSTER_ATTR __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_ATTR
#endif

DEVI void cluster_sync() {
#if CLUSTER > 1
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __syncthreads();
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) CLUSTER_ATTR
cudal2_wgmma(const __grid_constant__ TensorMap tmA, const __grid_constant__ TensorMap tmB,
             f16_t* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ __align__(8) u64 full_bar[STAGES];
    __shared__ __align__(8) u64 empty_bar[STAGES];
    // 128-byte swizzle atoms repeat every 1024 B; the descriptors assume 1024-aligned tiles.
    const u32 ring = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const u32 full0 = smem_u32(&full_bar[0]), empty0 = smem_u32(&empty_bar[0]);

    u32 rank = 0;
#if CLUSTER > 1
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
#endif
    const int wg = threadIdx.x / 128, tig = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, CONSUMERS * CLUSTER);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_sync();    // barriers initialised (and visible cluster-wide) before anyone uses them

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int ctiles_m = (tiles_m + CLUSTER - 1) / CLUSTER;     // cluster-rows of tiles
    const int total = ctiles_m * tiles_n;
    const int ktiles = (K + 63) / 64;
    const int cid = blockIdx.x / CLUSTER, nclusters = gridDim.x / CLUSTER;

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tig == 0) {
            int s = 0;
            u32 phase = 0;
            for (int t = cid; t < total; t += nclusters) {
                int cm, tn;
                group_tile(t, ctiles_m, tiles_n, GROUP_M, cm, tn);
                const int tm = cm * CLUSTER + rank;
                for (int kt = 0; kt < ktiles; ++kt) {
                    mbar_wait(empty0 + 8 * s, phase ^ 1);
                    const u32 fb = full0 + 8 * s, sa = ring + s * STAGE_BYTES, sb = sa + A_BYTES;
                    mbar_expect_tx(fb, STAGE_BYTES);
                    tma_load(sa, &tmA, kt * 64, tm * BM, fb);
#if CLUSTER == 1
#if LAYOUT_NT
                    tma_load(sb, &tmB, kt * 64, tn * BN, fb);
#else
                    for (int j = 0; j < BN / 64; ++j) tma_load(sb + j * 8192, &tmB, tn * BN + j * 64, kt * 64, fb);
#endif
#else
                    const unsigned short mask = (1u << CLUSTER) - 1;
#if LAYOUT_NT
                    tma_load_mc(sb + rank * (B_BYTES / CLUSTER), &tmB, kt * 64, tn * BN + rank * (BN / CLUSTER), fb, mask);
#else
                    for (int j = 0; j < BN / 64; ++j)
                        tma_load_mc(sb + j * 8192 + rank * (8192 / CLUSTER), &tmB, tn * BN + j * 64,
                                    kt * 64 + rank * (64 / CLUSTER), fb, mask);
#endif
#endif
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
            }
        }
    } else {
#if CONSUMERS == 1
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
#else
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
#endif
        const int c = wg - 1, warp = tig / 32, lane = tig % 32;
        float acc[MW][NACC];
        int s = 0, prev = 0;
        u32 phase = 0;
        auto release = [&](int slot) {
            if (tig == 0)
                for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(empty0 + 8 * slot, r);
        };
        for (int t = cid; t < total; t += nclusters) {
            int cm, tn;
            group_tile(t, ctiles_m, tiles_n, GROUP_M, cm, tn);
            const int tm = cm * CLUSTER + rank;
            for (int kt = 0; kt < ktiles; ++kt) {
                mbar_wait(full0 + 8 * s, phase);
                const u32 sa = ring + s * STAGE_BYTES, sb = sa + A_BYTES;
                wgmma_fence();
#pragma unroll
                for (int k16 = 0; k16 < 4; ++k16) {
#if LAYOUT_NT
                    const u64 db = desc_kmajor(sb + k16 * 32);
#else
                    const u64 db = desc_nmajor(sb + k16 * 2048);
#endif
#pragma unroll
                    for (int mw = 0; mw < MW; ++mw) {
                        const u64 da = desc_kmajor(sa + (c * MW + mw) * 8192 + k16 * 32);
                        wgmma_bn<LAYOUT_NT ? 0 : 1>(acc[mw], da, db, (kt | k16) != 0);
                    }
                }
                wgmma_commit();
                // Keep this stage's MMAs in flight; once the previous stage's group is done its
                // slot goes back to the producer(s).
                wgmma_wait<1>();
                if (kt > 0) release(prev);
                prev = s;
                if (++s == STAGES) { s = 0; phase ^= 1; }
            }
            wgmma_wait<0>();
            release(prev);
            // Fragment layout of m64nN f32: warp w owns rows 16w..16w+15; acc[4j+0,1] sit at row
            // lane/4, cols 8j + 2(lane%4) + {0,1}; acc[4j+2,3] at row lane/4 + 8. N % 8 == 0 (spec
            // rule), so a column pair is all in or all out.
#pragma unroll
            for (int mw = 0; mw < MW; ++mw) {
                const int row = tm * BM + (c * MW + mw) * 64 + warp * 16 + lane / 4;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                    const int col = tn * BN + j * 8 + (lane % 4) * 2;
                    if (col < N) {
                        if (row < M)
                            st_global_u32(C + (long long)row * N + col, pack_f16x2(acc[mw][4 * j], acc[mw][4 * j + 1]));
                        if (row + 8 < M)
                            st_global_u32(C + (long long)(row + 8) * N + col,
                                          pack_f16x2(acc[mw][4 * j + 2], acc[mw][4 * j + 3]));
                    }
                }
            }
        }
    }
#if CLUSTER > 1
    cluster_sync();    // no CTA may exit while its partner can still multicast into it or arrive on it
#endif
}
