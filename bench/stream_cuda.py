"""CUDA read and write kernels for bench/stream_ceiling.py: how fast the card moves a buffer into its
SMs the ways the GEMM families load, and out of them the ways they store (issue 20's skinny ceiling
and issue 19's shortK one: bench/class_ceiling.py takes the fastest of each).

The read floor came from a Triton kernel alone (2026-12-05): 3.9 TB/s offline at 32 MiB on the H200,
about its HBM rate, though a buffer that size stays in L2 between offline calls and a GEMM's CTAs
were seen pulling ~10 TB/s of (re-read) lines from L2 (run 58). A slow reader would make the floor
too high and a class's ceiling too low, so these read the way our kernels do:

  bulk  TMA's 1D bulk copy (cp.async.bulk global -> shared, completed on an mbarrier), the wgmma
        family's load path: each CTA takes chunks blockIdx.x, + gridDim.x, ... of CHUNK bytes into
        a ring of STAGES slots; thread 0 issues, every thread XORs each landed chunk out of shared
        memory (the data is consumed, as MMAs consume theirs) before thread 0 refills its slot
  ldg   plain 16-byte loads, grid-stride, UNROLL independent ones in flight per thread

Each CTA stores the XOR of every 32-bit word it read into out[blockIdx.x]; the XOR of all CTAs'
must be the buffer's (`check_read`). The write floor came from x.zero_() (2.4 TB/s at 32 MiB on the
H200), and it binds 113 of the 148 shortK grid shapes, so the writers store the way the epilogues do:

  bulk  TMA's 1D bulk store (cp.async.bulk global <- shared, bulk groups), the wgmma family's
        epilogue path: every thread writes its part of a chunk into a ring slot, fences it for the
        async proxy, thread 0 stores the slot and, before the slot is written again, waits until at
        most STAGES - 1 stores are still reading the ring
  stg   plain 16-byte stores, grid-stride, UNROLL per thread per step
Both write word w as pattern(w) = (w * 2654435761 mod 2^32) ^ seed, which `check_write` compares on
the card without a second buffer. Compiled by NVRTC for sm_90a (no header), launched through the
driver on torch's current stream. Knobs per config in READERS; the grid is the card's SM count
times the CTAs each SM holds.
"""
from __future__ import annotations

import ctypes

# What every probe kernel shares (bench/panel_cuda.py's too): the types, the CTA's XOR of what it read
# into out[blockIdx.x], and the pattern writers store.
COMMON = r'''
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// The CTA's XOR of x into out[blockIdx.x] (warp shuffles, then one word per warp in shared memory).
__device__ __forceinline__ void block_xor(u32 x, u32* out) {
    __shared__ u32 part[32];
    for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 y = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) y ^= part[w];
        out[blockIdx.x] = y;
    }
}

__device__ __forceinline__ u32 pattern(u64 w, u32 seed) { return (u32)(w * 2654435761ull) ^ seed; }
__device__ __forceinline__ uint4 pattern4(u64 w, u32 seed) {
    return make_uint4(pattern(w, seed), pattern(w + 1, seed), pattern(w + 2, seed), pattern(w + 3, seed));
}
'''

SOURCE = COMMON + r'''
#define MAX_STAGES 16

// nbytes: a multiple of chunk; chunk: a multiple of 16 x blockDim.x, at most 64 KB; stages <= 16.
extern "C" __global__ void k_bulk(const unsigned char* g, u64 nbytes, u32 chunk, u32 stages, u32* out) {
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) u64 full[MAX_STAGES];
    const u64 nchunks = nbytes / chunk;
    const u64 mine = blockIdx.x < nchunks ? (nchunks - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    if (threadIdx.x == 0) {
        for (u32 s = 0; s < stages; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_u32(&full[s])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // chunk i of this CTA into slot i % stages
    auto issue = [&](u64 i) {
        const u32 s = (u32)(i % stages), bar = smem_u32(&full[s]), dst = smem_u32(ring + (u64)s * chunk);
        const unsigned char* src = g + (blockIdx.x + i * gridDim.x) * (u64)chunk;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(chunk) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(dst), "l"(src), "r"(chunk), "r"(bar) : "memory");
    };
    if (threadIdx.x == 0)
        for (u64 i = 0; i < stages && i < mine; ++i) issue(i);
    u32 x = 0;
    for (u64 i = 0; i < mine; ++i) {
        const u32 s = (u32)(i % stages), parity = (u32)((i / stages) & 1);
        u32 done = 0;
        while (!done)
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                         "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(smem_u32(&full[s])), "r"(parity) : "memory");
        const uint4* p = reinterpret_cast<const uint4*>(ring + (u64)s * chunk);
        for (u32 j = threadIdx.x; j < chunk / 16; j += blockDim.x) {
            const uint4 v = p[j];
            x ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncthreads();                       // every thread is done with slot s: refill it
        if (threadIdx.x == 0 && i + stages < mine) issue(i + stages);
    }
    block_xor(x, out);
}

template <int U>
__device__ __forceinline__ void ldg(const uint4* __restrict__ g, u64 n16, u32* out) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u32 x = 0;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = __ldg(g + i + u * stride);
#pragma unroll
        for (int u = 0; u < U; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = __ldg(g + i);
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    block_xor(x, out);
}

extern "C" __global__ void k_ldg4(const uint4* g, u64 n16, u32* out) { ldg<4>(g, n16, out); }
extern "C" __global__ void k_ldg8(const uint4* g, u64 n16, u32* out) { ldg<8>(g, n16, out); }

// ---- writers: word w of the buffer gets pattern(w) (COMMON), so the host can check without a copy

template <int U>
__device__ __forceinline__ void stg(uint4* g, u64 n16, u32 seed) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
#pragma unroll
        for (int u = 0; u < U; ++u) g[i + u * stride] = pattern4(4 * (i + u * stride), seed);
    }
    for (; i < n16; i += stride) g[i] = pattern4(4 * i, seed);
}

extern "C" __global__ void k_stg4(uint4* g, u64 n16, u32 seed) { stg<4>(g, n16, seed); }

// nbytes: a multiple of chunk; chunk: a multiple of 16 x blockDim.x, at most 64 KB.
template <int STAGES>
__device__ __forceinline__ void bulk_store(unsigned char* g, u64 nbytes, u32 chunk, u32 seed) {
    extern __shared__ __align__(128) unsigned char ring[];
    const u64 nchunks = nbytes / chunk;
    const u64 mine = blockIdx.x < nchunks ? (nchunks - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    for (u64 i = 0; i < mine; ++i) {
        const u32 s = (u32)(i % STAGES);
        const u64 c = blockIdx.x + i * gridDim.x;
        if (i >= STAGES) {
            // the store issued from slot s STAGES chunks ago has read it: the slot may be written
            if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(STAGES - 1) : "memory");
            __syncthreads();
        }
        uint4* slot = reinterpret_cast<uint4*>(ring + (u64)s * chunk);
        const u64 w0 = c * (chunk / 4);
        for (u32 j = threadIdx.x; j < chunk / 16; j += blockDim.x) slot[j] = pattern4(w0 + 4ull * j, seed);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");    // generic writes -> the async proxy
        __syncthreads();
        if (threadIdx.x == 0) {
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                         :: "l"(g + c * (u64)chunk), "r"(smem_u32(slot)), "r"(chunk) : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
    }
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

extern "C" __global__ void k_bulk_store4(unsigned char* g, u64 nbytes, u32 chunk, u32 seed) {
    bulk_store<4>(g, nbytes, chunk, seed);
}

// ---- the chain (bench/chain_floor.py): what any GEMM kernel does at least, in order. Each CTA reads
// its share of A and B (one buffer here) as ldg<U> does, XORed into out[blockIdx.x]; block_xor's
// barrier comes after every thread's XOR, so every load of the CTA has landed before any thread
// passes it; then the CTA writes its share of C (pattern(w), as stg<4>).
template <int U>
__device__ __forceinline__ void chain(const uint4* __restrict__ g, u64 n16, uint4* c, u64 c16, u32 seed, u32* out) {
    ldg<U>(g, n16, out);
    stg<4>(c, c16, seed);
}

extern "C" __global__ void k_chain4(const uint4* g, u64 n16, uint4* c, u64 c16, u32 seed, u32* out) {
    chain<4>(g, n16, c, c16, seed, out);
}
extern "C" __global__ void k_chain8(const uint4* g, u64 n16, uint4* c, u64 c16, u32 seed, u32* out) {
    chain<8>(g, n16, c, c16, seed, out);
}
'''

# name -> (kernel, threads, CTAs per SM, chunk bytes, stages): bulk rings of 128-192 KB per SM (one
# CTA, or two of half the ring), ldg / stg at full occupancy (2048 threads per SM). The bulk store's
# stages are its kernel's template argument (cp.async.bulk.wait_group.read takes a constant).
READERS = {
    "bulk 16K x8": ("k_bulk", 128, 1, 16 << 10, 8),
    "bulk 32K x6": ("k_bulk", 128, 1, 32 << 10, 6),
    "bulk 8K x8 2/SM": ("k_bulk", 128, 2, 8 << 10, 8),
    "ldg x4 t512": ("k_ldg4", 512, 4, 0, 0),
    "ldg x8 t256": ("k_ldg8", 256, 8, 0, 0),
}
WRITERS = {
    "bulk 16K x4": ("k_bulk_store4", 128, 2, 16 << 10, 4),
    "bulk 32K x4": ("k_bulk_store4", 128, 1, 32 << 10, 4),
    "stg x4 t512": ("k_stg4", 512, 4, 0, 0),
}
# name -> (kernel, threads, CTAs per SM, 0, 0); CTAs per SM 0: as many CTAs as the reads need (one
# U-load step per thread), at least 1, at most 4 a SM: a tiny shape pays for no idle CTAs.
CHAINS = {
    "chain x4 t128 fit": ("k_chain4", 128, 0, 0, 0),
    "chain x4 t256 1/SM": ("k_chain4", 256, 1, 0, 0),
    "chain x4 t512 1/SM": ("k_chain4", 512, 1, 0, 0),
    "chain x4 t256 2/SM": ("k_chain4", 256, 2, 0, 0),
    "chain x8 t256 1/SM": ("k_chain8", 256, 1, 0, 0),
    "chain x4 t512 4/SM": ("k_chain4", 512, 4, 0, 0),
}
CHAIN_UNROLL = {"k_chain4": 4, "k_chain8": 8}      # loads in flight per thread (the template's U)
SEED = 0x9E3779B9


def _config(name: str) -> tuple:
    if name in READERS:
        return READERS[name]
    if name in WRITERS:
        return WRITERS[name]
    if name in CHAINS:
        return CHAINS[name]
    raise KeyError(f"no reader, writer or chain named {name!r}")


def config_error(name: str, nbytes: int) -> str | None:
    """Why reader or writer `name` cannot take a buffer of `nbytes`, or None."""
    kernel, threads, per_sm, chunk, stages = _config(name)
    if nbytes % 16:
        return f"{nbytes} B is not a multiple of 16 (16-byte accesses)"
    if kernel.startswith("k_bulk"):
        if chunk % (16 * threads) or chunk > 64 << 10:
            return f"chunk {chunk} B: a multiple of 16 x {threads} threads, at most 64 KB"
        if not 1 <= stages <= 16:
            return f"stages {stages}: 1-16"
        if nbytes % chunk:
            return f"{nbytes} B is not a multiple of the {chunk} B chunk"
    return None


def smem_bytes(name: str) -> int:
    _k, _t, _p, chunk, stages = _config(name)
    return chunk * stages


def kernel_smem() -> dict[str, int]:
    """Per kernel, the most dynamic shared memory any of its configs asks for: the attribute is the
    kernel's, so it is set once to the largest ring (a later, smaller config must not lower it)."""
    most: dict[str, int] = {}
    for name, (kernel, *_rest) in {**READERS, **WRITERS, **CHAINS}.items():
        most[kernel] = max(most.get(kernel, 0), smem_bytes(name))
    return most


def xor_all(data) -> int:
    """The XOR of a buffer's little-endian u32 words (bytes or a contiguous array): what the CTAs'
    outputs XOR to."""
    import numpy as np
    words = np.frombuffer(data, dtype="<u4")
    return int(np.bitwise_xor.reduce(words)) if words.size else 0


def compile_streams(arch: str = "sm_90a") -> bytes:
    from cudal2.nvrtc import compile_cubin
    return compile_cubin(SOURCE, arch, ("-std=c++17",))[0]


class Streams:
    """The module loaded on the current device, and a launch per reader or writer bound to one buffer."""

    def __init__(self, cubin: bytes, sms: int):
        import torch

        from cudal2.backends.cuda_launch import _context
        from cudal2.backends.driver import check, drv
        self.d, self.check, self.sms = drv(), check, sms
        _context(torch.cuda.current_device())
        self.module = check(self.d.cuModuleLoadData(cubin), "cuModuleLoadData")
        attr = self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.funcs = {}
        for kernel, smem in kernel_smem().items():
            self.funcs[kernel] = check(self.d.cuModuleGetFunction(self.module, kernel.encode()), kernel)
            if smem > 48 << 10:
                check(self.d.cuFuncSetAttribute(self.funcs[kernel], attr, smem), f"{kernel}: {smem} B smem")

    def grid(self, name: str, n16: int = 0) -> int:
        """CTAs of `name`'s launch (a chain's "fit" config: by the 16-byte words it reads, n16)."""
        _k, threads, per_sm, _c, _s = _config(name)
        if per_sm:
            return self.sms * per_sm
        return max(1, min(4 * self.sms, -(-n16 // (threads * CHAIN_UNROLL[_k]))))

    def chain_fn(self, name: str, inp, c, out):
        """A launch of chain `name`: read `inp`, then write the pattern into `c` (both contiguous
        CUDA tensors of a multiple of 16 bytes), each CTA's XOR into out[:grid]."""
        kernel, threads, *_rest = _config(name)
        nin, nc = inp.numel() * inp.element_size(), c.numel() * c.element_size()
        if nin % 16 or nc % 16:
            raise ValueError(f"{name}: {nin} B in, {nc} B out: each must be a multiple of 16")
        grid = self.grid(name, nin // 16)
        if out.numel() < grid:
            raise ValueError(f"{name} needs an out of at least {grid} words (one per CTA)")
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        slots = [u64(inp.data_ptr()), u64(nin // 16), u64(c.data_ptr()), u64(nc // 16), u32(SEED), u64(out.data_ptr())]
        return bound_launch(self.d, self.funcs[kernel], grid, threads, 0, slots)

    def check_chain(self, name: str, inp, c, out, want: int) -> bool:
        """One checked launch of chain `name`: its CTAs' outputs XOR to `inp`'s words (`want`) and
        every word of `c` (first filled with something else) holds pattern(w)."""
        import numpy as np
        import torch
        out.zero_()
        c.view(torch.int32).fill_(0x5A5A5A5A)
        f = self.chain_fn(name, inp, c, out)
        self.check(f(), f"cuLaunchKernel({name})")
        torch.cuda.synchronize()
        got = out[: f.grid].cpu().numpy().view(np.uint32)
        return int(np.bitwise_xor.reduce(got)) == want and holds_pattern(c)

    def fn(self, name: str, buf, out=None):
        """A launch of reader `name` reading `buf` (a contiguous CUDA tensor) into out[:grid], or of
        writer `name` writing the pattern into `buf`: no status check on the hot path (check_read /
        check_write launch it once, checked, before any timing)."""
        kernel, threads, _p, chunk, stages = _config(name)
        nbytes = buf.numel() * buf.element_size()
        why = config_error(name, nbytes)
        if why:
            raise ValueError(f"{name}: {why}")
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        if name in WRITERS:
            slots = ([u64(buf.data_ptr()), u64(nbytes), u32(chunk), u32(SEED)] if kernel == "k_bulk_store4"
                     else [u64(buf.data_ptr()), u64(nbytes // 16), u32(SEED)])
        else:
            if out is None or out.numel() < self.grid(name):
                raise ValueError(f"{name} needs an out of at least {self.grid(name)} words (one per CTA)")
            slots = ([u64(buf.data_ptr()), u64(nbytes), u32(chunk), u32(stages), u64(out.data_ptr())]
                     if kernel == "k_bulk" else [u64(buf.data_ptr()), u64(nbytes // 16), u64(out.data_ptr())])
        return bound_launch(self.d, self.funcs[kernel], self.grid(name), threads, smem_bytes(name), slots)

    def check_read(self, name: str, buf, out, want: int) -> bool:
        """One checked launch of `name`: do its CTAs' outputs XOR to the buffer's words (`want`)?"""
        import numpy as np
        import torch
        out.zero_()
        self.check(self.fn(name, buf, out)(), f"cuLaunchKernel({name})")
        torch.cuda.synchronize()
        got = out[: self.grid(name)].cpu().numpy().view(np.uint32)
        return int(np.bitwise_xor.reduce(got)) == want

    def check_write(self, name: str, buf) -> bool:
        """One checked launch of writer `name` over `buf` (first filled with something else): does
        every word hold pattern(w)?"""
        import torch
        buf.view(torch.int32).fill_(0x5A5A5A5A)
        self.check(self.fn(name, buf)(), f"cuLaunchKernel({name})")
        torch.cuda.synchronize()
        return holds_pattern(buf)


def bound_launch(d, func, grid: int, threads: int, smem: int, slots: list):
    """launch() of `func` over `grid` CTAs of `threads` with the argument `slots` (ctypes values), on
    torch's current stream at each call, returning the driver's status; launch.grid is the grid. The
    launch holds its slots and their pointer array (launch.keep: the driver reads them by address),
    not the buffers they point at. No check on the hot path: callers check a first launch."""
    import torch
    args = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(s) for s in slots])
    argp = ctypes.addressof(args)

    def launch():
        return d.cuLaunchKernel(func, grid, 1, 1, threads, 1, 1, smem, torch.cuda.current_stream().cuda_stream, argp, 0)
    launch.grid, launch.keep = grid, (slots, args)
    return launch


def holds_pattern(buf) -> bool:
    """Every 32-bit word w of `buf` (a CUDA tensor) is pattern(w): compared on the card, 64 Mi words
    at a time."""
    import torch
    words = buf.view(torch.int32)
    step = 1 << 26
    for lo in range(0, words.numel(), step):
        hi = min(words.numel(), lo + step)
        w = torch.arange(lo, hi, device=words.device, dtype=torch.int64)
        want = ((w * 2654435761) & 0xFFFFFFFF) ^ SEED
        if not torch.equal(words[lo:hi].to(torch.int64) & 0xFFFFFFFF, want):
            return False
    return True
