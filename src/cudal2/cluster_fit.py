"""How many CTAs in thread-block clusters of each size a card holds at once, measured on the card.

A cluster's CTAs must be co-resident on SMs of one GPC, and a card's GPCs do not all have the same
number of SMs, so fewer CTAs fit in clusters than there are SMs: a launch of more clusters than fit
runs the rest as a second wave. The wgmma family's cluster split-K launches one cluster of split_k
CTAs per output tile, one CTA per SM by shared memory, so whether its clusters fit decides whether
it runs in one wave or two. Measured on the H200 (2026-12-04, run 58,
bench/results/h200-sm90/hopper/run58_skinny_ksweep_*): at 64x2048xK nt, bm=64 bn=64 split_k=4 (32
clusters of 4, 128 CTAs) ran 1.8x the time of bn=96 split_k=4 (22 clusters, 88 CTAs) at K=256 and
1.4x at K=4096, where it moves 3/4 of the bytes per CTA.

The count comes from the driver (cuOccupancyMaxActiveClusters) for a probe kernel per cluster size
that takes a whole SM's shared memory (one CTA per SM, as the wgmma specs that split K do), never
from a table of cards. It imports nothing of cudal2 but NVRTC's wrapper (cudal2.nvrtc), so
cudal2.device can call it without an import cycle through the backends. `measure` needs a GPU; `cudal2.device.current()` records its answer on the
DeviceInfo (`cluster_ctas`), and a compile target has none (the rules then assume every SM fits).
"""
from __future__ import annotations

# Every size a cluster may have (8 portable, 16 with the opt-in): the wgmma family launches 2, 4, 8
# and 16 today (cluster=2, split_k a power of two); the sizes between are measured so a grown
# split_k grammar can be judged from the card's counts, not guessed (the GPCs' SM counts decide).
SIZES = tuple(range(2, 17))
_THREADS = 128
# One kernel per cluster size: the size is compiled in (as the wgmma family's cluster split-K is).
PROBE = "\n".join(f'extern "C" __global__ void __cluster_dims__({s}, 1, 1) cudal2_cluster_probe{s}() {{}}'
                  for s in SIZES)


def _driver():
    """cuda.bindings.driver (a function so tests can stand it in)."""
    from cuda.bindings import driver
    return driver


def _ok(d, result, what: str):
    """The value of a driver call's (status, value...) tuple; RuntimeError naming a failure."""
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")
    return rest[0] if rest else None


def _on_device(device_index: int):
    """torch's primary context of the card, current on this thread while the probe runs."""
    import torch
    torch.empty(1, device=f"cuda:{device_index}")      # creates the context if torch has none yet
    return torch.cuda.device(device_index)


def measure(device_index: int, arch: str, smem_per_block: int, sm_count: int) -> tuple[tuple[int, int], ...]:
    """((cluster size, CTAs resident at once), ...) for SIZES at one CTA per SM (the probe asks
    for `smem_per_block` of dynamic shared memory). Raises on any driver or NVRTC failure."""
    from .nvrtc import compile_cubin
    cubin, _ = compile_cubin(PROBE, arch, ("-std=c++17",))
    d = _driver()
    _ok(d, d.cuInit(0), "cuInit")          # once per process; torch's runtime has usually done it
    with _on_device(device_index):
        module = _ok(d, d.cuModuleLoadData(cubin), "cuModuleLoadData(cluster probe)")
        try:
            out = []
            smem_attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            np_attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            for size in SIZES:
                f = _ok(d, d.cuModuleGetFunction(module, f"cudal2_cluster_probe{size}".encode()), "cuModuleGetFunction")
                _ok(d, d.cuFuncSetAttribute(f, smem_attr, smem_per_block), "cuFuncSetAttribute(smem)")
                if size > 8:        # past the portable cluster size the kernel must opt in
                    _ok(d, d.cuFuncSetAttribute(f, np_attr, 1), "cuFuncSetAttribute(non-portable cluster)")
                cfg = d.CUlaunchConfig()
                cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = size * max(1, sm_count // size), 1, 1
                cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = _THREADS, 1, 1
                cfg.sharedMemBytes, cfg.numAttrs = smem_per_block, 0
                n = int(_ok(d, d.cuOccupancyMaxActiveClusters(f, cfg), f"cuOccupancyMaxActiveClusters({size})"))
                out.append((size, n * size))
            return tuple(out)
        finally:
            d.cuModuleUnload(module)


def cluster_ctas(device, size: int) -> int:
    """CTAs in clusters of `size` that `device` (a DeviceInfo) holds at once at one CTA per SM: the
    measured count, else (a compile target, a failed probe, a size not probed) every SM's, rounded
    down to whole clusters."""
    sms = device.sm_count or 0
    if size <= 1:
        return sms
    for s, n in device.cluster_ctas or ():
        if s == size:
            return n
    return sms // size * size


__all__ = ["SIZES", "PROBE", "measure", "cluster_ctas"]
