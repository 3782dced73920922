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
from a table of cards. `measure` needs a GPU; `cudal2.device.current()` records its answer on the
DeviceInfo (`cluster_ctas`), and a compile target has none (the rules then assume every SM fits).
"""
from __future__ import annotations

SIZES = (2, 4, 8, 16)
_THREADS = 128
# One kernel per cluster size: the size is compiled in (as the wgmma family's cluster split-K is).
PROBE = "\n".join(f'extern "C" __global__ void __cluster_dims__({s}, 1, 1) cudal2_cluster_probe{s}() {{}}'
                  for s in SIZES)


def measure(device_index: int, arch: str, smem_per_block: int, sm_count: int) -> tuple[tuple[int, int], ...]:
    """((cluster size, CTAs resident at once), ...) for SIZES at one CTA per SM (the probe asks
    for `smem_per_block` of dynamic shared memory). Raises on any driver or NVRTC failure."""
    from .backends.cuda import OPTIONS, _nvrtc_compile
    from .backends.cuda_launch import _context, _drv, check
    cubin, _ = _nvrtc_compile(PROBE, arch, OPTIONS)
    _context(device_index)
    d = _drv()
    module = check(d.cuModuleLoadData(cubin), "cuModuleLoadData(cluster probe)")
    try:
        out = []
        smem_attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        np_attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        for size in SIZES:
            f = check(d.cuModuleGetFunction(module, f"cudal2_cluster_probe{size}".encode()), "cuModuleGetFunction")
            check(d.cuFuncSetAttribute(f, smem_attr, smem_per_block), "cuFuncSetAttribute(smem)")
            if size > 8:        # past the portable cluster size the kernel must opt in
                check(d.cuFuncSetAttribute(f, np_attr, 1), "cuFuncSetAttribute(non-portable cluster)")
            cfg = d.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = size * max(1, sm_count // size), 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = _THREADS, 1, 1
            cfg.sharedMemBytes, cfg.numAttrs = smem_per_block, 0
            n = int(check(d.cuOccupancyMaxActiveClusters(f, cfg), f"cuOccupancyMaxActiveClusters({size})"))
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
