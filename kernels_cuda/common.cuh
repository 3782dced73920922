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
