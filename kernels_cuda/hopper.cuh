// cudal2 Hopper PTX wrappers (sm_90a) for the wgmma family: mbarriers, TMA loads/stores and bulk
// groups, stmatrix, wgmma fences and smem descriptors, distributed shared memory and cluster
// barriers. Header-free like common.cuh; reads the family's CLUSTER macro (multicast, remote
// arrivals) and is rendered after the #define preamble (kernels_cuda/__init__.py).
#pragma once

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
    // Default semantics (release at CTA scope), as CUTLASS's ClusterBarrier::arrive: the slot's
    // readers are the wgmmas already waited for. With `.release.cluster` here every cluster=2 spec
    // ran 1.5-2.1x slower than the same spec without a cluster; with the default, 0.93x median
    // (0.49-1.21x, 208 pairs; H200, 2026-12-03, runs 28 and 30).
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
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
DEVI void tma_store(const TensorMap* map, u32 src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(src) : "memory");
}
DEVI void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// The staging may be written again once the bulk stores have read it (not yet landed in global).
DEVI void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// Barrier over one warpgroup (ids 1.. ; 0 is __syncthreads).
DEVI void wg_bar(int id) { asm volatile("bar.sync %0, 128;" :: "r"(id) : "memory"); }
DEVI void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
DEVI void st_cg_f4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
// L2 loads: partials written by other CTAs of this launch must not come from a stale L1 line.
DEVI void ld_cg_f4(const float* p, float& a, float& b, float& c, float& d) {
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(p) : "memory");
}

// wgmma smem descriptors, addresses in 16-byte units, the swizzle's layout type in bits 62-63.
// K-major: rows of K_ROW_BYTES (the family's atom: 64 fp16 = 128 B, 128-byte swizzle, type 1; or
// 32 fp16 = 64 B, 64-byte swizzle, type 2), 8-row core groups 8 rows apart (SBO); LBO unused.
#ifndef BK
#define BK 64
#endif
#if BK != 32 && BK != 64 && BK != 128
#error "wgmma: BK is 32, 64 or 128"
#endif
// A k-tile of a K-major operand is KATOMS swizzle atoms side by side: KA = 64 columns (128-byte
// rows, 128-byte swizzle) at BK 64 / 128, KA = 32 (64-byte rows, 64-byte swizzle) at BK 32, each
// one TMA box of KA columns by the tile's rows (the launcher encodes the same box).
#define KA (BK < 64 ? BK : 64)
#define KATOMS (BK / KA)
#define K_ROW_BYTES (KA * 2)
DEVI u64 desc_kmajor(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)((8 * K_ROW_BYTES) >> 4) << 32) |
           ((u64)(K_ROW_BYTES == 128 ? 1 : 2) << 62);
}
// N-major (nn B): the tile is BN / NN_COLS blocks of BK k-rows x NN_COLS columns (rows of
// NN_ROW_BYTES = 128, 64 or 32 B, each block one TMA box swizzled across its row). Blocks are
// NN_BLOCK_BYTES apart (LBO), 8-k-row groups 8 rows apart (SBO); the layout type is the swizzle
// spanning a row: 1 = 128 B, 2 = 64 B, 3 = 32 B (the canonical MN-major layouts of the PTX ISA's
// wgmma shared-memory matrix descriptors).
#ifndef NN_COLS
#define NN_COLS 64
#endif
#define NN_ROW_BYTES (NN_COLS * 2)
#define NN_BLOCK_BYTES (BK * NN_ROW_BYTES)
#define NN_LAYOUT_TYPE (NN_COLS == 64 ? 1 : (NN_COLS == 32 ? 2 : 3))
DEVI u64 desc_nmajor(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(NN_BLOCK_BYTES >> 4) << 16) |
           ((u64)((8 * NN_ROW_BYTES) >> 4) << 32) | ((u64)NN_LAYOUT_TYPE << 62);
}

DEVI void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
DEVI void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> DEVI void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

DEVI void st_shared_f4(u32 addr, float a, float b, float c, float d) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
// 16 bytes at smem offset `addr` of CTA `cta` of the cluster.
DEVI void ld_dsmem_f4(u32 addr, u32 cta, float* x) {
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(cta));
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3]) : "r"(remote) : "memory");
}
// Every thread of every CTA in the cluster: smem writes before it are visible to loads after it.
DEVI void cluster_barrier() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
