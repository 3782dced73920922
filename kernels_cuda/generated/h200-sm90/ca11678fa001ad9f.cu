// cudal2 backend=cuda family=wgmma bm=64 bn=16 bk=64 warps=8 stages=7 group_m=1 split_k=8 subtile=1 warp_spec=1 cluster=1 layout=nt
#define BM 64
#define BN 16
#define BK 64
#define WARPS 8
#define STAGES 7
#define GROUP_M 1
#define SPLIT_K 8
#define CLUSTER 1
#define LAYOUT_NT 1
#define CONSUMERS 1
#define PINGPONG 0
#define LITE 0
#define SUBTILE 1
#define EPI_COLS 16
#define MC_A 0
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

template <int TRANS_B>  // m64n16k16
DEVI void wgmma_bn(float* d, u64 da, u64 db, int scale_d) {
    asm volatile("{\n.reg .pred p;\n"
        "setp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "%8, %9, p, 1, 1, 0, %11;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B));
}

// cudal2 wgmma family (sm_90a): persistent, warp-specialised Hopper GEMM with an asynchronous
// TMA-store epilogue and split-K in one launch.
//   LITE=1 (warp_spec 0, the low-latency schedule for tiny and launch-bound shapes): no producer
//                    warpgroup, no setmaxnreg, no persistent loop (one work unit per CTA): thread 0
//                    issues the first STAGES k-tiles at once (all of K where it fits, so one load
//                    latency) and refills each slot as the consumers release it; 1-2 warpgroups.
//   warpgroup 0      producer (LITE=0): one thread issues TMA loads (cp.async.bulk.tensor.2d) of A and B
//                    tiles into a STAGES-deep ring of swizzled smem (128-byte; 64-byte at BK 32),
//                    completed on "full" mbarriers; it waits on "empty" mbarriers before reusing a
//                    slot. It runs ahead into the next work unit while the consumers finish the last one.
//   warpgroups 1..C  consumers: wgmma.mma_async m64nBNk16 from the ring, fp32 accumulators in
//                    registers (setmaxnreg moves registers from the producer to them).
//                    PINGPONG=0 (cooperative): the C warpgroups split each tile's rows.
//                    PINGPONG=1: two warpgroups take alternate work units, whole tiles each, so one
//                    runs its epilogue while the other runs MMAs.
//   epilogue         accumulators -> swizzled smem staging (stmatrix, conflict-free) -> TMA
//                    store (cp.async.bulk.tensor global <- shared), committed as a bulk group and
//                    left in flight: the warpgroup goes straight on to the next unit's MMAs and only
//                    waits for the staging to be read before it writes it again. TMA clips the
//                    tails (rows >= M, cols >= N): no guarded scalar stores. SUBTILE=2 stages half
//                    the tile's columns at a time (the second half waits for the first's store to
//                    read the staging): half the staging, so a deeper ring fits beside it.
//   split-K          SPLIT_K > 1, lite or cooperative (CSPLIT): one CTA per (tile, K-slice), the
//                    tile's slices one thread-block cluster; each stages its fp32 partial in its
//                    idle ring and each sums a share of every slice's partial through distributed
//                    shared memory, in slice order (bit-identical run to run).
//                    Ping-pong or CLUSTER=2: a work unit is (tile, K-slice). Each slice writes its fp32
//                    partial to a workspace in fragment order (coalesced 16-byte stores), then
//                    bumps the tile's counter; the slice that arrives last sums every partial in
//                    slice order 0..SPLIT_K-1 (its own from registers), so the result is
//                    bit-identical whichever CTA is last, stores C, and resets the counter to 0
//                    for the next launch. The launcher zeroes the counters once per workspace.
// Work units are handed out persistently (unit u, u + clusters, ...); tiles in GROUP_M order. With
// CLUSTER=2 the two CTAs of a cluster share one operand tile and each loads half of it multicast
// into both CTAs' smem: MC_A=0, vertically adjacent tiles sharing B; MC_A=1 (BM > BN: A is the
// larger tile), horizontally adjacent tiles sharing A. Layout nt: both operands K-major; nn: B is
// N-major and wgmma reads it through the transpose bit, in TMA boxes of NN_COLS columns (64, 32 or
// 16: the largest dividing BN) swizzled across their 128/64/32-byte rows (hopper.cuh).
// Knobs (macros): BM BN BK (32, 64 or 128 k-columns per ring stage: one 64-byte-swizzle atom, one or
//                 two 128-byte ones; hopper.cuh) WARPS CONSUMERS PINGPONG LITE STAGES GROUP_M CLUSTER
//                 MC_A SPLIT_K LAYOUT_NT SUBTILE EPI_COLS (TMA-store box width: 64, 32 or 16 columns, the largest
//                 dividing BN / SUBTILE) NN_COLS (nn: B's TMA box width, likewise of BN).
// The PTX wrappers it calls (mbarrier, TMA, stmatrix, wgmma, DSMEM) are in hopper.cuh.
// RED_CHUNK (64: all of a slice's groups), EXIT_RELAXED (1), A_TRIM (1 where CLUSTER == 1): on in
// every filed kernel since the H200 measured them (2026-12-05, runs 61-62; NOTES): the cluster
// split-K's remote loads fly together (1.018x over the 15 filed kernels whose SASS it changes, 0
// slower) and its last cluster barrier drops the release (1.057x over 48, 0 slower); A_TRIM: with
// M < BM (decode: a few tokens) A's TMA box is M rows tall, not BM, so no out-of-bounds rows are
// zero-filled per k-tile (1.19x, same spec, over the 48-shape decode set, none slower); the ring's
// rows >= M keep stale values, which reach only C rows >= M, never stored. The launcher sees the
// module's `cudal2_a_trim` symbol and encodes A's map with the same height (backends/cuda_launch.py);
// single-CTA A loads only (a 2-CTA cluster loads A in halves). Define any of them 0 / 1 for the old code.
// EARLY_LOAD (off, 0): the lite schedule's first loads issued before the block-wide barrier (0.98x
// over 13, 7 slower: stays off). EPI_DIRECT (off, 0): the epilogue stores each thread's fp16 pairs
// from its accumulators with guarded 4-byte stores, as the cluster split-K does, in place of
// stmatrix -> staging -> TMA store (0.75x over 171 filed kernels, 166 slower: stays off; the
// ~1 µs of fixed cost over the cp.async families is not the TMA store).
// EPI_WIDE (on where the swizzled boxes would be 16 columns, 7 or more of them: SUB_COLS 112, 144,
// 176, 208, 240): the epilogue stages and stores each SUB_COLS-wide block as one unswizzled TMA-store
// box, where EPI_COLS boxes (the largest of 64 / 32 / 16 columns dividing it) are swizzled across
// their 128 / 64 / 32-byte rows. H100 run 113 (shortK, nt): tiles stored in 16- or 32-column boxes
// ran 0.67-0.95x of best-cublas where 64-column ones ran 0.89-1.02 (7 UTMASTG of 64 rows x 32 B a
// 112-column block). The price: stmatrix into rows SUB_COLS x 2 B apart conflicts 2-way (4-way at
// 32 mod 64, 8-way at 0 mod 64). H100 run 114, the same spec each way in one offline run (wide /
// boxed time): 0.83-0.85 at BN 112 and 240 (shortK: 4096x4096x512, 8192x4096x256), 0.88 at 176; over
// filed kernels 0.99 at 144 (4), 0.98 at 224 (1, 32-column boxes), 1.00 at 112 (2); but 1.00-1.02 at
// 48 / 80 (small tiles, 3-5 boxes), 1.03-1.04 at 96 (4-way) and 1.0-1.35 at 128 / 256 (8-way).
// Run 116, the 10 filed H100 kernels the rule changed: old / new 1.003 geomean (each within 2%);
// run 118, all 148 shortK nt shapes: wide-store tiles best on 38, the class 0.980 where it was 0.975.
// Define it 0 / 1 to force either. The launcher sees the module's `cudal2_epi_wide` and encodes C's
// box to match.
// TIMELINE=1 (bench/cta_timeline.py only; never in a filed kernel): each CTA stamps %globaltimer and
// %clock64 at the events TL_* below into the module's global `cudal2_timeline`, for its first work
// unit: where a short kernel's time goes (prologue, first load, MMAs, reduction, store, exit).
// TMAP_PREFETCH (1, as every filed kernel): thread 0 prefetches the tensor maps at entry. 0 drops it:
// a timeline experiment. Run 61 (H200) put the producer's first load 0.58-0.70 µs after the CTA's
// entry in every case (lite and persistent, after 0 or 200 launches of the same kernel), ~0.5 µs
// after the barriers were ready, and its data in smem 0.1-0.2 µs later: a blocked first issue (the
// descriptor fetch?) or the code before it? TL_PRODUCE (just before the first load) splits the two;
// the variant without the prefetch tells whether the prefetch does anything.
// LITE_CP (0 in every filed kernel; a timeline / variant experiment): the lite schedule, layout nt,
// loads all of a unit's K by cp.async when it fits the ring (K <= STAGES x 64: the tiny shapes),
// every thread copying 16-byte chunks into the same 128-byte-swizzled layout TMA writes, then waits,
// fences the generic proxy's writes for wgmma's async proxy and syncs the CTA; no TMA load and no
// mbarrier on the path to the first MMA (the grid store's small-shape floors: wgmma 5.2-5.6 µs over
// its modelled core, the cp.async families 4.48-4.51; NOTES 2026-12-05). Longer K keeps the TMA ring. The kernel then takes A's and B's
// pointers after M, N, K (the launcher sees the module's `cudal2_lite_cp`).
// PDL (3 by default since 2026-12-06; 0 turns it off): programmatic dependent launch. The launcher launches
// with programmatic stream serialization (it sees the module's `cudal2_pdl`), so the kernel's launch
// and prologue (barrier init, the descriptor prefetch) may overlap the tail of the kernel before it in
// the stream; every thread waits (griddepcontrol.wait: the grids it depends on complete, their writes
// visible) before any global load or store. Its own dependents (a following PDL launch, scheduled
// once every CTA of this grid has triggered or exited, so all of ours are resident by then) are
// triggered (griddepcontrol.launch_dependents; a CTA's first trigger counts): PDL=1 right after the
// wait; PDL=2 late, once the CTA's last loads are issued (the producer) or its last mainloop is done
// (lite); PDL=3 never (at exit). H100 2026-12-06: with an event after every call (the offline loop)
// PDL=1 changes nothing (0.997-0.999x over 163 filed kernels, run 122); without one (400 launches
// back to back, or CUDA-graph replays) PDL=1 is 1.1-1.3x on small shapes but 0.65-0.8x on some
// skinny ones with large rings (runs 123-124). PDL=3, the default: over 115 filed kernels of every
// class 1.127x best-cublas on the graph clock where the same kernels without it ran 1.078x, worst
// 0.985 (run 126); offline 0.999x of them (the wait's cost). EARLY_LOAD (loads before the wait) turns
// the default off.
// K_ROT (0 in every filed kernel; a variant experiment, bench/variant_sweep.py): work unit u loads its
// k-tiles from (u x K_ROT) mod (its tile count) on, wrapping around, and the MMAs take them in that
// order, so the CTAs' concurrent TMA loads fall on different k offsets of their rows instead of all
// on the same one. Why: on the H200's HBM-bound decode shapes the best kernels measured move 3.0-3.3
// TB/s where cuBLAS moves 3.5-3.7 and a reader 3.9 (NOTES 2026-12-07 23:00); whether the loads' common
// offset is the cause is what the variant measures. The fp32 sum's order changes with it.

#define THREADS (WARPS * 32)
// BK's swizzle atoms (KA columns each, rows of K_ROW_BYTES, KATOMS per k-tile): hopper.cuh.
// Byte offset of k16 step `k` in a K-major tile whose atoms are `atom` bytes apart: its atom, then
// its 32-byte step inside the atom's rows. One atom (BK 32 / 64) is spelled k x 32 so BK 64 compiles
// to the SASS filed before BK was a knob (2026-12-05).
#define K_OFS(k, atom) (KATOMS == 1 ? (k) * 32 : ((k) / (KA / 16)) * (atom) + ((k) % (KA / 16)) * 32)
#define A_ATOM (BM * K_ROW_BYTES)         // one atom of the A tile
#define B_ATOM (BN * K_ROW_BYTES)         // one atom of the (nt) B tile
#define A_BYTES (BM * BK * 2)
#define B_BYTES (BN * BK * 2)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#if PINGPONG
#define CROWS BM                          // output rows a consumer warpgroup owns per unit
#else
#define CROWS (BM / CONSUMERS)
#endif
#define MW (CROWS / 64)                   // m64 sub-tiles per consumer warpgroup
#define NACC (BN / 2)                     // fp32 accumulators per thread per m64 sub-tile
#define NV (MW * NACC / 4)                // float4 groups of accumulators per thread
#define SUB_COLS (BN / SUBTILE)           // columns staged at once
#ifndef EPI_WIDE        // one unswizzled TMA-store box SUB_COLS wide (see the header)
// A value, not an expression of EPI_COLS: the #undef below would turn such an expression off
// where it is read later (the first try, H100 run 115: a wide box staged with the 32-byte
// swizzle's addresses, C wrong, caught by the GPU checker).
#if EPI_COLS == 16 && SUB_COLS >= 112
#define EPI_WIDE 1
#else
#define EPI_WIDE 0
#endif
#endif
#if EPI_WIDE
#undef EPI_COLS
#define EPI_COLS SUB_COLS
__device__ int cudal2_epi_wide;   // tells the launcher to encode C's box SUB_COLS wide, unswizzled
#endif
#define EPI_BOX_BYTES (CROWS * EPI_COLS * 2)
#define EPI_BYTES (CROWS * SUB_COLS * 2)  // staging per consumer warpgroup
// TMA swizzle of the staging box (128/64/32-byte rows): 16-byte chunk bits [4, 4+b) ^= bits [7, 7+b).
#define EPI_SWZ (EPI_WIDE ? 0 : (EPI_COLS == 64 ? 7 : (EPI_COLS == 32 ? 3 : 1)))
#define RCH 8                             // split-K reduction: float4 groups loaded together
#define EMPTY_ARRIVALS ((PINGPONG ? 1 : CONSUMERS) * CLUSTER)
// Split-K reduced inside a cluster of the tile's K slices (lite and cooperative without a 2-CTA
// cluster; one work unit per CTA): see the reduction below. Ping-pong and cluster=2 reduce through
// the global workspace.
#define CSPLIT (SPLIT_K > 1 && !PINGPONG && CLUSTER == 1)

#if CLUSTER > 1
#define CLUSTER_ATTR __cluster_dims__(CLUSTER, 1, 1)
#elif CSPLIT
#define CLUSTER_ATTR __cluster_dims__(SPLIT_K, 1, 1)    // a tile's K slices: one cluster
#else
#define CLUSTER_ATTR
#endif

#ifndef TIMELINE
#define TIMELINE 0
#endif
#ifndef RED_CHUNK
#define RED_CHUNK 64    // cluster split-K: float4 groups whose remote loads fly together (see there)
#endif
#ifndef EXIT_RELAXED
#define EXIT_RELAXED 1  // cluster split-K: the last cluster barrier without a release (see there)
#endif
#ifndef EARLY_LOAD
#define EARLY_LOAD 0    // lite: thread 0 issues the first loads before the block-wide barrier (see there)
#endif
#ifndef A_TRIM
#define A_TRIM (CLUSTER == 1)   // A's TMA box only M rows tall when M < BM (see the header)
#endif
#ifndef EPI_DIRECT
#define EPI_DIRECT 0    // the epilogue stores from registers, no TMA store (see the header)
#endif
#ifndef TMAP_PREFETCH
#define TMAP_PREFETCH 1 // thread 0 prefetches the three tensor maps at entry (see the header)
#endif
#ifndef K_ROT
#define K_ROT 0         // unit u's k-tiles from a rotated start (see the header)
#endif
#if K_ROT && (EARLY_LOAD || LITE_CP)
#error "K_ROT: not with EARLY_LOAD or LITE_CP (their first loads take k-tile kt0)"
#endif
#ifndef LITE_CP
#define LITE_CP 0       // lite, nt: all of K by cp.async when it fits the ring, no TMA load (see the header)
#endif
#if LITE_CP
#if !LITE || !LAYOUT_NT || CLUSTER > 1 || EARLY_LOAD || BK != 64
#error "LITE_CP: the lite schedule (warp_spec 0), layout nt, BK 64, no 2-CTA cluster, no EARLY_LOAD"
#endif
__device__ int cudal2_lite_cp;  // tells the launcher to pass A's and B's pointers after M, N, K
#endif
#ifndef PDL            // programmatic dependent launch (see the header)
#if EARLY_LOAD
#define PDL 0
#else
#define PDL 3
#endif
#endif
#if PDL
#if EARLY_LOAD
#error "PDL: EARLY_LOAD loads before the dependency wait"
#endif
__device__ int cudal2_pdl;      // tells the launcher to launch with programmatic stream serialization
#endif
#if A_TRIM
#if CLUSTER > 1
#error "A_TRIM: a 2-CTA cluster loads A in halves of BM / CLUSTER rows"
#endif
__device__ int cudal2_a_trim;   // tells the launcher to encode A's box M rows tall when M < BM
#endif
// Bytes of one k-tile of A that land in the ring: what the mbarrier's transaction count expects.
DEVI u32 a_tx_bytes(int M) { return (A_TRIM && M < BM) ? (u32)M * (BK * 2u) : (u32)A_BYTES; }
#define TL_ENTRY 0      // consumer 0's first thread enters the kernel
#define TL_READY 1      // barriers initialised (after the cluster-wide sync)
#define TL_PRODUCE 2    // the producer thread is about to issue its first load (its unit computed)
#define TL_LOAD 3       // the producer thread has issued its first load(s) (lite: the first STAGES)
#define TL_FULL 4       // consumer 0 sees its first k-tile land
#define TL_MMA 5        // consumer 0's MMAs of the first unit are done
#define TL_REDUCE 6     // split-K: the unit's slices are summed (cluster) / this slice reduced (workspace)
#define TL_STORE 7      // the epilogue's TMA stores are issued
#define TL_EXIT 8       // consumer 0's first thread leaves
#define TL_PARTIAL 9    // cluster split-K: every slice's fp32 partial written and visible (barrier passed)
#define TL_SUMMED 10    // cluster split-K: this thread's groups summed and stored (before the exit barrier)
#define TL_EVENTS 11
#define TL_MAX_CTAS 4096
#define TL_THREAD (LITE ? 0 : 128)      // consumer warpgroup 0's first thread
#if TIMELINE
__device__ u64 cudal2_timeline[TL_MAX_CTAS * TL_EVENTS * 2];   // [cta][event][globaltimer ns, clock64]
__device__ u32 cudal2_timeline_sm[TL_MAX_CTAS];
DEVI void tl_stamp(int ev) {
    if (blockIdx.x >= TL_MAX_CTAS) return;
    u64 t, c;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c) :: "memory");
    cudal2_timeline[(blockIdx.x * TL_EVENTS + ev) * 2] = t;
    cudal2_timeline[(blockIdx.x * TL_EVENTS + ev) * 2 + 1] = c;
    if (ev == TL_ENTRY) {
        u32 sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        cudal2_timeline_sm[blockIdx.x] = sm;
    }
}
#define TL(ev, cond) do { if (cond) tl_stamp(ev); } while (0)
#else
#define TL(ev, cond) do { } while (0)
#endif

DEVI void cluster_sync() {
#if CLUSTER > 1
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __syncthreads();
#endif
}

// A work unit: tile (tm, tn) of this CTA and its K-tile range [kt0, kt1). The grid of cluster
// tiles is ctiles_m x ctiles_n (the tile grid with the shared dimension halved, rounded up: a
// partner past the edge loads zeros and stores nothing).
DEVI void unit_of(int u, int ctiles_m, int ctiles_n, int ktiles, u32 rank, int& tm, int& tn, int& split,
                  int& kt0, int& kt1) {
    const int t = u / SPLIT_K;
    split = u % SPLIT_K;
    int cm, cn;
    group_tile(t, ctiles_m, ctiles_n, GROUP_M, cm, cn);
#if MC_A
    tm = cm;
    tn = cn * CLUSTER + rank;
#else
    tm = cm * CLUSTER + rank;
    tn = cn;
#endif
    kt0 = split * ktiles / SPLIT_K;
    kt1 = (split + 1) * ktiles / SPLIT_K;
}

// The k-tile the i-th load of unit u takes (kt = kt0 + i): kt itself, or with K_ROT rotated in [kt0, kt1).
DEVI int kt_load(int kt, int kt0, int kt1, int u) {
#if K_ROT
    const int n = kt1 - kt0, r = kt - kt0 + (int)((unsigned)(u * K_ROT) % (unsigned)n);
    return kt0 + (r >= n ? r - n : r);
#else
    return kt;
#endif
}

// One float4 group of a thread's fragment as fp16 pairs straight to C (guarded): y[0..1] at (row,
// col..col+1), y[2..3] 8 rows down. The cluster split-K's store and EPI_DIRECT's.
DEVI void store_group(u32* __restrict__ C, int M, int N, int row, int col, float y0, float y1, float y2,
                      float y3) {
    if (col < N) {
        if (row < M) C[((long long)row * N + col) / 2] = pack_f16x2(y0, y1);
        if (row + 8 < M) C[((long long)(row + 8) * N + col) / 2] = pack_f16x2(y2, y3);
    }
}

DEVI void ring_advance(int& s, u32& phase, int n) {
    const int x = s + n;
    phase ^= (x / STAGES) & 1;
    s = x % STAGES;
}

#if LITE_CP
// Rows [row0, row0 + rows) x k-columns [k0, k0 + 64) of a K-major operand (ld = K) into the smem
// tile at dst as TMA's 128-byte swizzle lays it: row r at r x 128 B, its 16-byte chunk j at
// (j ^ (r % 8)) x 16 (dst is 1024-aligned). Rows >= rows_lim and columns >= K are zero-filled
// (K % 8 == 0, the family's TMA rule: a chunk is all in or all out).
DEVI void cp_tile(u32 dst, const f16_t* __restrict__ g, int row0, int rows, int rows_lim, int k0, int K) {
    for (int q = threadIdx.x; q < rows * 8; q += THREADS) {
        const int r = q >> 3, j = q & 7, row = row0 + r, k = k0 + 8 * j;
        const bool ok = row < rows_lim && k < K;
        cp_async_16(dst + r * 128 + ((j ^ (r & 7)) << 4), ok ? g + (long long)row * K + k : g, ok ? 16 : 0);
    }
}
#endif

// Load k-tile kt of tile (tm, tn) into ring slot s once its consumers have released it.
DEVI void produce(const TensorMap* tmA, const TensorMap* tmB, u32 ring, u32 full0, u32 empty0, int tm, int tn,
                  int kt, u32 rank, int& s, u32& phase, u32 a_tx) {
    mbar_wait(empty0 + 8 * s, phase ^ 1);
    const u32 fb = full0 + 8 * s, sa = ring + s * STAGE_BYTES, sb = sa + A_BYTES;
    mbar_expect_tx(fb, a_tx + B_BYTES);
    // One TMA box per swizzle atom of the k-tile (two at BK 128, atom a at a x A_ATOM / B_ATOM).
#if MC_A
    // Half of the shared A tile's rows from each CTA, into both; B is this CTA's own.
    tma_load_mc(sa + rank * (A_ATOM / CLUSTER), tmA, kt * BK, tm * BM + rank * (BM / CLUSTER), fb,
                (1u << CLUSTER) - 1);
    if (KATOMS > 1)
        tma_load_mc(sa + A_ATOM + rank * (A_ATOM / CLUSTER), tmA, kt * BK + KA, tm * BM + rank * (BM / CLUSTER),
                    fb, (1u << CLUSTER) - 1);
#else
    tma_load(sa, tmA, kt * BK, tm * BM, fb);
    if (KATOMS > 1) tma_load(sa + A_ATOM, tmA, kt * BK + KA, tm * BM, fb);
#endif
#if CLUSTER == 1 || MC_A
#if LAYOUT_NT
    tma_load(sb, tmB, kt * BK, tn * BN, fb);
    if (KATOMS > 1) tma_load(sb + B_ATOM, tmB, kt * BK + KA, tn * BN, fb);
#else
    for (int j = 0; j < BN / NN_COLS; ++j)
        tma_load(sb + j * NN_BLOCK_BYTES, tmB, tn * BN + j * NN_COLS, kt * BK, fb);
#endif
#else
    const unsigned short mask = (1u << CLUSTER) - 1;
#if LAYOUT_NT
    tma_load_mc(sb + rank * (B_ATOM / CLUSTER), tmB, kt * BK, tn * BN + rank * (BN / CLUSTER), fb, mask);
    if (KATOMS > 1)
        tma_load_mc(sb + B_ATOM + rank * (B_ATOM / CLUSTER), tmB, kt * BK + KA, tn * BN + rank * (BN / CLUSTER),
                    fb, mask);
#else
    for (int j = 0; j < BN / NN_COLS; ++j)
        tma_load_mc(sb + j * NN_BLOCK_BYTES + rank * (NN_BLOCK_BYTES / CLUSTER), tmB, tn * BN + j * NN_COLS,
                    kt * BK + rank * (BK / CLUSTER), fb, mask);
#endif
#endif
    if (++s == STAGES) { s = 0; phase ^= 1; }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) CLUSTER_ATTR
cudal2_wgmma(const __grid_constant__ TensorMap tmA, const __grid_constant__ TensorMap tmB,
             const __grid_constant__ TensorMap tmC, u32* __restrict__ C, float* __restrict__ ws,
             int* __restrict__ counters,
             int M, int N, int K
#if LITE_CP
             , const f16_t* __restrict__ Ag, const f16_t* __restrict__ Bg
#endif
             ) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    __shared__ __align__(8) u64 full_bar[STAGES];
    __shared__ __align__(8) u64 empty_bar[STAGES];
    __shared__ int last_flag[CONSUMERS];
    __shared__ __align__(8) u64 turn_bar[2];    // PINGPONG: whose mainloop is next
    // 128-byte swizzle atoms repeat every 1024 B; the descriptors assume 1024-aligned tiles.
    const u32 ring = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const u32 epi = ring + STAGES * STAGE_BYTES;          // CONSUMERS staging tiles, 1024-aligned
    const u32 full0 = smem_u32(&full_bar[0]), empty0 = smem_u32(&empty_bar[0]);
    TL(TL_ENTRY, threadIdx.x == TL_THREAD);

    u32 rank = 0;
#if CLUSTER > 1
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
#endif
    const int wg = threadIdx.x / 128, tig = threadIdx.x % 128;
#if LITE
    int ps = 0;                  // thread 0's producer position in the ring
    u32 pphase = 0;
#endif
#if LITE && EARLY_LOAD
    int early_next = 0;          // the first unit's next k-tile to load, once thread 0 issued the first
#endif
    if (threadIdx.x == 0) {
#if TMAP_PREFETCH
        // Fetch the descriptors while the barriers are set up, not at the first copy.
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<u64>(&tmA)) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<u64>(&tmB)) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<u64>(&tmC)) : "memory");
#endif
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, EMPTY_ARRIVALS);
        }
        mbar_init(smem_u32(&turn_bar[0]), 1);
        mbar_init(smem_u32(&turn_bar[1]), 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#if LITE && EARLY_LOAD
        {
            // An experiment (off in every filed kernel until a card measures it): the first unit's
            // loads leave before the block-wide barrier and the work-unit arithmetic, so neither
            // is on the path to the first k-tile landing. Thread 0 initialised the barriers itself
            // (its fence orders the init before its copies); the other threads wait on them only
            // after the barrier. Lite has no cluster: a unit per CTA, unit = blockIdx.x.
            const int tm_ = (M + BM - 1) / BM, tn_ = (N + BN - 1) / BN;
            int tm, tn, split, kt0, kt1;
            unit_of(blockIdx.x, tm_, tn_, (K + BK - 1) / BK, 0, tm, tn, split, kt0, kt1);
            TL(TL_PRODUCE, true);
            for (early_next = kt0; early_next < kt1 && early_next < kt0 + STAGES; ++early_next)
                produce(&tmA, &tmB, ring, full0, empty0, tm, tn, early_next, 0, ps, pphase, a_tx_bytes(M));
            TL(TL_LOAD, true);
        }
#endif
    }
    cluster_sync();    // barriers initialised (and visible cluster-wide) before anyone uses them
#if PDL
    // Nothing above touched global memory (the tensor maps are kernel parameters).
    asm volatile("griddepcontrol.wait;" ::: "memory");
#if PDL == 1
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#endif
    TL(TL_READY, threadIdx.x == TL_THREAD);

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
#if MC_A
    const int ctiles_m = tiles_m, ctiles_n = (tiles_n + CLUSTER - 1) / CLUSTER;   // cluster-columns
#else
    const int ctiles_m = (tiles_m + CLUSTER - 1) / CLUSTER, ctiles_n = tiles_n;   // cluster-rows
#endif
    const int total = ctiles_m * ctiles_n * SPLIT_K;            // work units
    const int ktiles = (K + BK - 1) / BK;
    const int cid = blockIdx.x / CLUSTER, nclusters = gridDim.x / CLUSTER;

#if !LITE
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tig == 0) {
            int s = 0;
            u32 phase = 0;
            for (int u = cid; u < total; u += nclusters) {
                int tm, tn, split, kt0, kt1;
                unit_of(u, ctiles_m, ctiles_n, ktiles, rank, tm, tn, split, kt0, kt1);
                for (int kt = kt0; kt < kt1; ++kt) {
                    TL(TL_PRODUCE, u == cid && kt == kt0);
                    produce(&tmA, &tmB, ring, full0, empty0, tm, tn, kt_load(kt, kt0, kt1, u), rank, s, phase, a_tx_bytes(M));
                    TL(TL_LOAD, u == cid && kt == kt0);
                }
            }
#if PDL == 2
            asm volatile("griddepcontrol.launch_dependents;" ::: "memory");   // every load issued
#endif
        }
    } else {
#if CONSUMERS == 1
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
#else
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
#endif
        const int c = wg - 1;
#else
    {
        const int c = wg;
#endif
        const int warp = tig / 32, lane = tig % 32;
        const u32 stage_c = epi + c * EPI_BYTES;
        float acc[MW][NACC];
        int s = 0, prev = 0, mine = 0;
        u32 phase = 0, turn_phase = 0;
        auto release = [&](int slot) {
            if (tig == 0)
                for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(empty0 + 8 * slot, r);
        };
        for (int u = cid; u < total; u += nclusters) {
            int tm, tn, split, kt0, kt1;
            unit_of(u, ctiles_m, ctiles_n, ktiles, rank, tm, tn, split, kt0, kt1);
#if PINGPONG
            // Units alternate between the two warpgroups; skip the other's ring stages. Mainloops
            // take turns (the other's must be done before this one starts): the ring's parity
            // waits are then never a whole phase ahead of the barrier, and one warpgroup's
            // epilogue runs while the other's MMAs do.
            if ((mine++ & 1) != c) { ring_advance(s, phase, kt1 - kt0); continue; }
            if (mine > 1) mbar_wait(smem_u32(&turn_bar[c]), turn_phase), turn_phase ^= 1;
            const int row0 = tm * BM;
#else
            const int row0 = tm * BM + c * CROWS;
#endif
#if LITE
            // Every slot is free at the start: issue the first STAGES k-tiles together.
            int next = kt0;
#if LITE_CP
            const bool cp_all = kt1 - kt0 <= STAGES;    // uniform: the whole unit's K fits the ring
            if (cp_all) {
                TL(TL_PRODUCE, threadIdx.x == 0 && u == cid);
                for (int i = 0; i < kt1 - kt0; ++i) {
                    const u32 sa = ring + ((s + i) % STAGES) * STAGE_BYTES;
                    cp_tile(sa, Ag, tm * BM, BM, M, (kt0 + i) * 64, K);
                    cp_tile(sa + A_BYTES, Bg, tn * BN, BN, N, (kt0 + i) * 64, K);
                }
                next = kt1;                             // nothing left for thread 0 to refill
                asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
                // cp.async writes through the generic proxy, wgmma reads through the async one
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                __syncthreads();                        // every thread's chunks are in
            } else
#else
            constexpr bool cp_all = false;
#endif
#if EARLY_LOAD
            if (u == cid) next = early_next;        // issued before the barrier (thread 0's value)
            else
#endif
            if (threadIdx.x == 0) {
                TL(TL_PRODUCE, u == cid);
                for (; next < kt1 && next < kt0 + STAGES; ++next)
                    produce(&tmA, &tmB, ring, full0, empty0, tm, tn, kt_load(next, kt0, kt1, u), rank, ps, pphase, a_tx_bytes(M));
            }
#if !EARLY_LOAD
            TL(TL_LOAD, threadIdx.x == 0 && u == cid);
#endif
#endif
            for (int kt = kt0; kt < kt1; ++kt) {
#if LITE
                if (!cp_all)                            // LITE_CP's loads are all in already
#endif
                mbar_wait(full0 + 8 * s, phase);
                TL(TL_FULL, tig == 0 && c == 0 && u == cid && kt == kt0);
                const u32 sa = ring + s * STAGE_BYTES, sb = sa + A_BYTES;
                wgmma_fence();
#pragma unroll
                for (int k16 = 0; k16 < BK / 16; ++k16) {
#if LAYOUT_NT
                    const u64 db = desc_kmajor(sb + K_OFS(k16, B_ATOM));
#else
                    const u64 db = desc_nmajor(sb + k16 * 16 * NN_ROW_BYTES);
#endif
#pragma unroll
                    for (int mw = 0; mw < MW; ++mw) {
#if PINGPONG
                        const u64 da = desc_kmajor(sa + mw * (64 * K_ROW_BYTES) + K_OFS(k16, A_ATOM));
#else
                        const u64 da = desc_kmajor(sa + (c * MW + mw) * (64 * K_ROW_BYTES) + K_OFS(k16, A_ATOM));
#endif
                        wgmma_bn<LAYOUT_NT ? 0 : 1>(acc[mw], da, db, (kt != kt0 || k16 != 0) ? 1 : 0);
                    }
                }
                wgmma_commit();
                // Keep this stage's MMAs in flight; once the previous stage's group is done its
                // slot goes back to the producer(s).
                wgmma_wait<1>();
                if (kt > kt0) {
                    release(prev);
#if LITE
                    // The slot just released takes the next k-tile (once every warpgroup let go).
                    if (threadIdx.x == 0 && next < kt1)
                        produce(&tmA, &tmB, ring, full0, empty0, tm, tn, kt_load(next++, kt0, kt1, u), rank, ps, pphase, a_tx_bytes(M));
#endif
                }
                prev = s;
                if (++s == STAGES) { s = 0; phase ^= 1; }
            }
            wgmma_wait<0>();
#if PDL == 2 && LITE
            if (u + nclusters >= total) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
            TL(TL_MMA, tig == 0 && c == 0 && u == cid);
            release(prev);
#if PINGPONG
            if (tig == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_u32(&turn_bar[c ^ 1])) : "memory");
#endif
#if CSPLIT
            {
                // Split-K through distributed shared memory: the tile's SPLIT_K slices are one
                // cluster. Each puts its fp32 partial in its own idle ring (fragment order), then
                // slice r sums float4 groups [r*VPS, (r+1)*VPS) of every thread's fragment over all
                // slices' partials in slice order 0..SPLIT_K-1 (bit-identical run to run) and
                // stores them. No workspace, no counters, no global round trip: the remote loads
                // of a group are in flight at once. One unit per CTA, so the ring is idle now (every
                // load issued was consumed) and the producer warpgroup has exited: the cluster
                // barriers wait for non-exited threads only.
                constexpr int VPS = (NV + SPLIT_K - 1) / SPLIT_K;
                const u32 red = ring + (u32)c * (NV * 128 * 16);
#if CONSUMERS > 1
                // the other warpgroup's MMAs may still read the ring (consumer threads only)
                asm volatile("bar.sync 8, %0;" :: "n"(CONSUMERS * 128) : "memory");
#endif
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    const float* a = &acc[(4 * v) / NACC][(4 * v) % NACC];
                    st_shared_f4(red + (u32)(v * 128 + tig) * 16, a[0], a[1], a[2], a[3]);
                }
                cluster_barrier();           // every slice's partial written and visible
                TL(TL_PARTIAL, tig == 0 && c == 0 && u == cid);
                const int row_w = tm * BM + c * CROWS + warp * 16 + lane / 4;
                // RCHUNK groups' remote loads are issued before any of them is summed: the loads
                // are volatile asm, so the stores of a group would otherwise close its loads' flight
                // and each group pays a DSMEM round trip of its own (SASS: VPS rounds of SPLIT_K
                // LD.E.128 then STG). RED_CHUNK 1 was the filed kernels' code before 2026-12-05.
                // With more than 96 accumulators a thread (the 128x256 / 256x128 tiles) the loads in
                // flight are capped at 64 registers (x below): all of a slice's groups at once spilled
                // (ptxas, NVRTC 13.0: 752 B at 128x256 split 2). At most 96 the cap is off, so the
                // filed kernels' SASS does not change.
                constexpr int RLIM = MW * NACC > 96 ? (16 / SPLIT_K > 0 ? 16 / SPLIT_K : 1) : VPS;
                constexpr int RCHUNK = RED_CHUNK < VPS ? (RED_CHUNK < RLIM ? RED_CHUNK : RLIM) : (VPS < RLIM ? VPS : RLIM);
#pragma unroll
                for (int j0 = 0; j0 < VPS; j0 += RCHUNK) {
                    if (split * VPS + j0 >= NV) break;
                    float x[RCHUNK][SPLIT_K][4];
#pragma unroll
                    for (int jj = 0; jj < RCHUNK; ++jj) {
                        const int v = split * VPS + j0 + jj;
                        if (j0 + jj >= VPS || v >= NV) break;
                        const u32 off = red + (u32)(v * 128 + tig) * 16;
#pragma unroll
                        for (int sp = 0; sp < SPLIT_K; ++sp) ld_dsmem_f4(off, sp, x[jj][sp]);
                    }
#pragma unroll
                    for (int jj = 0; jj < RCHUNK; ++jj) {
                        const int v = split * VPS + j0 + jj;
                        if (j0 + jj >= VPS || v >= NV) break;
                        float* y = x[jj][0];
#pragma unroll
                        for (int sp = 1; sp < SPLIT_K; ++sp)
#pragma unroll
                            for (int e = 0; e < 4; ++e) y[e] += x[jj][sp][e];
                        // Group v is acc[mw][4j..4j+3], mw = v / (NACC/4): [4j+0,1] at row lane/4,
                        // cols 8j + 2(lane%4) + {0,1}; [4j+2,3] 8 rows down.
                        const int mw = v / (NACC / 4), j = v % (NACC / 4);
                        store_group(C, M, N, row_w + mw * 64, tn * BN + 8 * j + 2 * (lane % 4), y[0], y[1], y[2], y[3]);
                    }
                }
                TL(TL_SUMMED, tig == 0 && c == 0 && u == cid);
#if EXIT_RELAXED
                // No slice leaves while another may read its partial. Its own remote loads are
                // complete (their sums were stored), so the arrive needs no release: the relaxed
                // form drops the MEMBAR.ALL.GPU that waits for this thread's C stores.
                asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
#else
                cluster_barrier();           // no slice leaves while another may read its partial
#endif
                TL(TL_REDUCE, tig == 0 && c == 0 && u == cid);
                continue;
            }
#elif SPLIT_K > 1
            {
                // Tiles of the cluster grid (a partner past the edge has its own counter).
                const int tile = tm * (ctiles_n * (MC_A ? CLUSTER : 1)) + tn;
#if PINGPONG
                const int slot = tile;                 // a tile's slices may land on either warpgroup
#else
                const int slot = tile * CONSUMERS + c;
#endif
                float* part = ws + (long long)slot * SPLIT_K * NV * 512;   // [split][NV][128 thr][4]
#pragma unroll
                for (int v = 0; v < NV; ++v) {
                    const float* a = &acc[(4 * v) / NACC][(4 * v) % NACC];
                    st_cg_f4(part + ((long long)(split * NV + v) * 128 + tig) * 4, a[0], a[1], a[2], a[3]);
                }
                __threadfence();        // partial visible device-wide before the counter moves
                wg_bar(1 + c);
                if (tig == 0) last_flag[c] = atomicAdd(&counters[slot], 1) == SPLIT_K - 1;
                wg_bar(1 + c);
                if (!*(volatile int*)&last_flag[c]) continue;
                __threadfence();
                // Sum in slice order 0..SPLIT_K-1 (bit-identical whoever is last), RCH float4
                // groups at a time: their loads are in flight together (one L2 latency per slice
                // per chunk, not per group: 2026-12-03 H200, one group at a time made split-K
                // slower than no split).
#pragma unroll
                for (int v0 = 0; v0 < NV; v0 += RCH) {
                    float t[RCH][4];
#pragma unroll 1
                    for (int sp = 0; sp < SPLIT_K; ++sp) {
                        float x[RCH][4];
#pragma unroll
                        for (int j = 0; j < RCH; ++j) {
                            if (v0 + j >= NV) break;
                            const float* a = &acc[(4 * (v0 + j)) / NACC][(4 * (v0 + j)) % NACC];
                            if (sp == split) { x[j][0] = a[0]; x[j][1] = a[1]; x[j][2] = a[2]; x[j][3] = a[3]; }
                            else ld_cg_f4(part + ((long long)(sp * NV + v0 + j) * 128 + tig) * 4,
                                          x[j][0], x[j][1], x[j][2], x[j][3]);
                        }
#pragma unroll
                        for (int j = 0; j < RCH; ++j) {
                            if (v0 + j >= NV) break;
#pragma unroll
                            for (int e = 0; e < 4; ++e) t[j][e] = sp == 0 ? x[j][e] : t[j][e] + x[j][e];
                        }
                    }
#pragma unroll
                    for (int j = 0; j < RCH; ++j) {
                        if (v0 + j >= NV) break;
                        float* a = &acc[(4 * (v0 + j)) / NACC][(4 * (v0 + j)) % NACC];
                        a[0] = t[j][0]; a[1] = t[j][1]; a[2] = t[j][2]; a[3] = t[j][3];
                    }
                }
                if (tig == 0) counters[slot] = 0;    // ready for the next launch
                TL(TL_REDUCE, tig == 0 && c == 0 && u == cid);
            }
#endif
#if EPI_DIRECT
            {
                // The experiment's epilogue: each thread stores its fp16 pairs straight from the
                // accumulators (the cluster split-K's store), no staging, barrier or TMA store.
                const int rbase = row0 + warp * 16 + lane / 4;
#pragma unroll
                for (int mw = 0; mw < MW; ++mw)
#pragma unroll
                    for (int j = 0; j < NACC / 4; ++j) {
                        store_group(C, M, N, rbase + mw * 64, tn * BN + 8 * j + 2 * (lane % 4), acc[mw][4 * j],
                                    acc[mw][4 * j + 1], acc[mw][4 * j + 2], acc[mw][4 * j + 3]);
                    }
                TL(TL_STORE, tig == 0 && c == 0 && u == cid);
                continue;
            }
#endif
            // Epilogue, SUBTILE column blocks of SUB_COLS. The staging must have been read by the
            // previous TMA store (the last unit's, or this unit's previous block) before it is
            // written again.
#pragma unroll
            for (int h = 0; h < SUBTILE; ++h) {
                if (tig == 0) bulk_wait_read();
                wg_bar(1 + c);
                // Fragment layout of m64nN f32: warp w owns rows 16w..16w+15; acc[4j+0,1] sit at row
                // lane/4, cols 8j + 2(lane%4) + {0,1}; acc[4j+2,3] at row lane/4 + 8: per 8-column
                // block, the mma.sync C layout, so stmatrix.x4 writes two blocks x 16 rows at once
                // (4x fewer shared stores than 4-byte ones); lane l gives the address of row l%8 of
                // matrix l/8 (rows +8 for odd matrices, the second block for matrices 2-3). Each
                // such row is one 16-byte chunk of the swizzled box, so the swizzle applies unchanged.
#pragma unroll
                for (int mw = 0; mw < MW; ++mw) {
                    const int r = mw * 64 + warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
                    for (int j = h * (SUB_COLS / 8); j < (h + 1) * (SUB_COLS / 8); j += 2) {
                        const int col = (j + (lane >> 4)) * 8 - h * SUB_COLS;   // within the block
                        const u32 o = r * (EPI_COLS * 2) + (col % EPI_COLS) * 2;
                        stmatrix_x4(stage_c + (col / EPI_COLS) * EPI_BOX_BYTES + (o ^ (((o >> 7) & EPI_SWZ) << 4)),
                                    pack_f16x2(acc[mw][4 * j], acc[mw][4 * j + 1]),
                                    pack_f16x2(acc[mw][4 * j + 2], acc[mw][4 * j + 3]),
                                    pack_f16x2(acc[mw][4 * j + 4], acc[mw][4 * j + 5]),
                                    pack_f16x2(acc[mw][4 * j + 6], acc[mw][4 * j + 7]));
                    }
                }
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // st.shared -> TMA's proxy
                wg_bar(1 + c);
                // A cluster partner past N's edge (MC_A) stores nothing; TMA clips every other box.
                if (tig == 0 && row0 < M && (!MC_A || tn * BN < N)) {
#pragma unroll
                    for (int b = 0; b < SUB_COLS / EPI_COLS; ++b)
                        tma_store(&tmC, stage_c + b * EPI_BOX_BYTES, tn * BN + h * SUB_COLS + b * EPI_COLS, row0);
                    bulk_commit();
                }
            }
            TL(TL_STORE, tig == 0 && c == 0 && u == cid);
        }
        // The CTA may exit once the last stores have read the staging: the writes complete on their
        // own (as CUTLASS's sm90 epilogue tail), so a tiny kernel does not wait a global round trip.
        if (tig == 0) bulk_wait_read();
    }
#if CLUSTER > 1
    cluster_sync();    // no CTA may exit while its partner can still multicast into it or arrive on it
#endif
    TL(TL_EXIT, threadIdx.x == TL_THREAD);
}
