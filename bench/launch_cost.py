"""What a short kernel pays before its work, on the PROTOCOL clock: the launch by what the kernel
asks of it, and the first load by how it is made (issue 20's small class, issue 19's fixed cost).

The small grid shapes are launch-bound: an empty kernel costs ~3.4 µs on the offline clock, cuBLAS's
64^3 ~5.0, our cp.async kernels (mma, stream) ~4.4-4.9 and the TMA ones (wgmma) ~0.2-0.5 µs more
(the grid store, run 37, run 61). Run 61's timeline put the wgmma kernels' first load 0.58-0.70 µs
after entry. This probe times, interleaved in one run (cudal2.timing.offline, and server with L2
wiped), kernels that differ in one thing each:

  launch     an empty kernel: 1 CTA of 128 threads; 132 CTAs; 384 threads; parameter blocks of
             0 / 52 / 432 bytes (pointers; three 128-byte tensor maps, wgmma's); 0 / 100 / 200 KB of
             dynamic shared memory; a 2-CTA cluster; torch.cuda._sleep(0) (PROTOCOL's t_launch)
  first load one CTA loads a 64x64 fp16 tile (8 KB, L2-resident offline) and writes one word:
             by TMA (cp.async.bulk.tensor + mbarrier) with and without the tensor-map prefetch at
             entry, by cp.async (16 B a thread, 4 each), by plain 16-byte loads

Each kernel is compiled by NVRTC for sm_90a here (no header; what it computes is checked once: the
loads' XOR of the tile) and launched through the driver on torch's current stream.

  source bench/device_env.sh
  python3 bench/launch_cost.py --out $OUT [--min-ms 20] [--server-calls 30]

Writes launch_cost_<device>_<commit>.json / .md (card, commit, command) and prints the table: per
case the offline median and server mean, and each minus the empty 1x128 kernel's.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

SOURCE = r'''
typedef unsigned int u32;
typedef unsigned long long u64;
struct __align__(64) TensorMap { u64 opaque[16]; };

extern "C" __global__ void k_none() {}

extern "C" __global__ void k_ptrs(const void* a, const void* b, void* c, void* d, int M, int N, int K) {}

extern "C" __global__ void k_tmaps(const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb,
                                   const __grid_constant__ TensorMap tc, void* c, void* ws, void* cnt,
                                   int M, int N, int K) {}

extern "C" __global__ void __cluster_dims__(2, 1, 1) k_cluster() {}

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// The check: every thread XORs 16 of the tile's 2048 words (word t + 128 i, no bank conflicts), then
// thread 0 folds the 128 partials (fold_out, k_ldg's fold too). (2026-12-05, H100: with thread 0
// reading all 2048 words serially the TMA and cp.async cases measured +3.6 µs over empty, ld.global
// +0.4: the serial read, not the load.)
__device__ __forceinline__ void fold_out(u32 x, u32* out) {
    __shared__ u32 part[128];
    part[threadIdx.x] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 y = 0;
        for (int i = 0; i < 128; ++i) y ^= part[i];
        out[0] = y;
    }
}

__device__ __forceinline__ void xor_out(u32 tile, u32* out) {
    u32 x = 0;
    for (int i = 0; i < 16; ++i) {
        u32 w;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(w) : "r"(tile + 4u * (threadIdx.x + 128u * i)));
        x ^= w;
    }
    fold_out(x, out);
}

// One 64x64 fp16 tile (8 KB) into shared memory by TMA, then its XOR into out[0].
template <bool PREFETCH>
__device__ __forceinline__ void tma_one(const TensorMap* t, u32* out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) u64 bar;
    const u32 b = smem_u32(&bar), dst = (smem_u32(smem) + 1023u) & ~1023u;
    if (threadIdx.x == 0) {
        if (PREFETCH) asm volatile("prefetch.tensormap [%0];" :: "l"((u64)t) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 8192;" :: "r"(b) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {0, 0}], [%2];" :: "r"(dst), "l"((u64)t), "r"(b) : "memory");
    }
    u32 done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(b) : "memory");
    xor_out(dst, out);
}

extern "C" __global__ void k_tma(const __grid_constant__ TensorMap t, u32* out) { tma_one<false>(&t, out); }
extern "C" __global__ void k_tma_pf(const __grid_constant__ TensorMap t, u32* out) { tma_one<true>(&t, out); }

// The same tile by cp.async (16 B per thread and copy, 4 copies each of 128 threads).
extern "C" __global__ void k_cpasync(const unsigned char* g, u32* out) {
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 s = smem_u32(smem);
    for (int i = 0; i < 4; ++i) {
        const int c = threadIdx.x + 128 * i;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s + 16 * c), "l"(g + 16 * c) : "memory");
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    xor_out(s, out);
}

// The same tile by plain 16-byte loads into registers, XOR-reduced through shared memory.
extern "C" __global__ void k_ldg(const uint4* g, u32* out) {
    u32 x = 0;
    for (int i = 0; i < 4; ++i) { const uint4 v = g[threadIdx.x + 128 * i]; x ^= v.x ^ v.y ^ v.z ^ v.w; }
    fold_out(x, out);
}
'''

# name -> (function, grid CTAs, threads, dynamic smem bytes, argument kind)
CASES = {
    "empty 1x128": ("k_none", 1, 128, 0, "none"),
    "empty 132x128": ("k_none", 132, 128, 0, "none"),
    "empty 1x384": ("k_none", 1, 384, 0, "none"),
    "params 52 B": ("k_ptrs", 1, 128, 0, "ptrs"),
    "params 432 B (3 tensor maps)": ("k_tmaps", 1, 128, 0, "tmaps"),
    "smem 100 KB": ("k_none", 1, 128, 100 * 1024, "none"),
    "smem 200 KB": ("k_none", 1, 128, 200 * 1024, "none"),
    "cluster 2": ("k_cluster", 2, 128, 0, "none"),
    "load: TMA": ("k_tma", 1, 128, 8192 + 1024, "tma"),
    "load: TMA + prefetch": ("k_tma_pf", 1, 128, 8192 + 1024, "tma"),
    "load: cp.async": ("k_cpasync", 1, 128, 8192, "tile"),
    "load: ld.global": ("k_ldg", 1, 128, 0, "tile"),
}
BASE = "empty 1x128"


def xor_words(data: bytes) -> int:
    """The XOR of a little-endian u32 sequence: what the load kernels store."""
    import array
    a = array.array("I", data)
    x = 0
    for w in a:
        x ^= w
    return x


class Probe:
    """The module, its functions and each case's argument block, built once on the current device."""

    def __init__(self, cubin: bytes):
        import torch

        from cudal2.backends.cuda_launch import _context, _encode
        from cudal2.backends.driver import check, drv
        self.d, self.check = drv(), check
        _context(torch.cuda.current_device())
        self.module = check(self.d.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.funcs = {}
        attr = self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        for name, (fn, _g, _t, smem, _k) in CASES.items():
            if fn not in self.funcs:
                self.funcs[fn] = check(self.d.cuModuleGetFunction(self.module, fn.encode()), fn)
            if smem > 48 * 1024:
                check(self.d.cuFuncSetAttribute(self.funcs[fn], attr, smem), f"{fn}: {smem} B smem")
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.tile = torch.randn(64, 64, device="cuda", dtype=torch.float16, generator=gen)
        self.out = torch.zeros(4, device="cuda", dtype=torch.int32)
        tmap = _encode(self.tile.data_ptr(), 64, 64, 64, 64)
        self._keep = []                      # the ctypes slots each argument array points at
        u64 = lambda v: ctypes.c_uint64(v)   # noqa: E731
        i32 = lambda v: ctypes.c_int(v)      # noqa: E731
        blob = lambda b: (ctypes.c_ubyte * 128).from_buffer_copy(b)   # noqa: E731
        slots = {"none": [],
                 "ptrs": [u64(0), u64(0), u64(0), u64(0), i32(64), i32(64), i32(64)],
                 "tmaps": [blob(tmap), blob(tmap), blob(tmap), u64(0), u64(0), u64(0), i32(64), i32(64), i32(64)],
                 "tma": [blob(tmap), u64(self.out.data_ptr())],
                 "tile": [u64(self.tile.data_ptr()), u64(self.out.data_ptr())]}
        self.args = {}
        for kind, s in slots.items():
            self._keep.append(s)
            self.args[kind] = (ctypes.c_void_p * max(1, len(s)))(*[ctypes.addressof(x) for x in s]) if s else None

    def fn(self, name: str):
        """The case's launch as the clock calls it: no status check on the hot path (each case
        was launched once through `launch_checked` before any timing)."""
        import torch
        f, grid, threads, smem, kind = CASES[name]
        func, args, d = self.funcs[f], self.args[kind], self.d
        argp = ctypes.addressof(args) if args is not None else 0

        def launch():
            return d.cuLaunchKernel(func, grid, 1, 1, threads, 1, 1, smem,
                                    torch.cuda.current_stream().cuda_stream, argp, 0)
        return launch

    def launch_checked(self, name: str) -> None:
        """One launch of the case with its status checked, then synchronised (a launch the driver
        refused would otherwise be timed as a very fast kernel)."""
        import torch
        self.check(self.fn(name)(), f"cuLaunchKernel({name})")
        torch.cuda.synchronize()

    def check_loads(self) -> dict[str, bool]:
        """Each load kernel's XOR against the tile's bytes on the host."""
        import torch
        want = xor_words(self.tile.cpu().numpy().tobytes())
        ok = {}
        for name, (_f, _g, _t, _s, kind) in CASES.items():
            if kind in ("tma", "tile"):
                self.out.zero_()
                self.launch_checked(name)
                ok[name] = int(self.out[0].item()) & 0xFFFFFFFF == want
        return ok


def compile_probe(arch: str = "sm_90a") -> bytes:
    from cudal2.nvrtc import compile_cubin
    return compile_cubin(SOURCE, arch, ("-std=c++17",))[0]


def deltas(rows: list[dict]) -> list[dict]:
    """Each row's offline / server time minus the empty 1x128 kernel's (same run)."""
    base = next((r for r in rows if r["case"] == BASE), None)
    out = []
    for r in rows:
        r = dict(r)
        if base:
            r["offline_minus_empty_us"] = round(r["offline_us"] - base["offline_us"], 3)
            r["server_minus_empty_us"] = round(r["server_us"] - base["server_us"], 3)
        out.append(r)
    return out


def markdown(rows: list[dict], card: str, commit: str, command: str) -> str:
    out = [f"# Launch and first-load costs on {card} (commit {commit})", "", f"    {command}", "",
           "| case | offline µs (median) | minus empty | server µs (mean) | minus empty |",
           "| --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['case']} | {r['offline_us']:.3f} | {r.get('offline_minus_empty_us', 0):+.3f} | "
                   f"{r['server_us']:.3f} | {r.get('server_minus_empty_us', 0):+.3f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--min-ms", type=float, default=20.0, help="offline: at least this much GPU time per case")
    ap.add_argument("--server-calls", type=int, default=30)
    args = ap.parse_args(argv)
    if args.min_ms <= 0 or args.server_calls < 1:
        ap.error("--min-ms must be > 0 and --server-calls >= 1")
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: launch_cost measures the card", file=sys.stderr)
        return 3
    from cudal2 import timing
    from cudal2.device import current
    from cudal2.versions import collect, source_commit
    commit, key, card = source_commit(), current().key, torch.cuda.get_device_name()
    command = "python3 bench/launch_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    probe = Probe(compile_probe())
    for name in CASES:
        probe.launch_checked(name)              # LaunchError names a case the driver refused
    bad = [n for n, ok in probe.check_loads().items() if not ok]
    if bad:
        print(f"error: load kernels returned the wrong XOR: {bad}", file=sys.stderr)
        return 1
    fns = {name: probe.fn(name) for name in CASES}
    fns["torch.cuda._sleep(0)"] = lambda: torch.cuda._sleep(0)
    # how the offline loop went (the drain check: runs 91-92 timed empty kernels 8-12 µs here)
    loop: dict = {}
    off = timing.offline(fns, min_calls=200, min_ms=args.min_ms, report=loop)
    print(f"offline loop: {loop}")
    srv = timing.server(fns, calls=args.server_calls)
    rows = deltas([{"case": n, "offline_us": round(off[n].median_us, 3), "offline_spread": round(off[n].spread, 3),
                    "server_us": round(srv[n].mean_us, 3), "server_p50_us": round(srv[n].p50_us, 3)}
                   for n in fns])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"launch_cost_{key}_{commit}"
    stem.with_suffix(".json").write_text(json.dumps({"card": card, "device": key, "commit": commit, "command": command,
                                                     "versions": collect(), "offline_loop": loop, "rows": rows},
                                                    indent=1) + "\n")
    md = markdown(rows, card, commit, command)
    stem.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
