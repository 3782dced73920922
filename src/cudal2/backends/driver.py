"""The CUDA driver API as the CUDA backend's launchers use it: the bindings module, loaded once,
`check`, which turns a failed call into LaunchError naming the CUDA error, and `pdl_launch`, a
cuLaunchKernel with programmatic stream serialization (the families' PDL)."""
from __future__ import annotations

import functools

from .base import LaunchError


@functools.cache          # called on every launch: one import lookup, not one per call
def drv():
    from cuda.bindings import driver
    return driver


def check(result, what: str, d=None):
    """Unpack a cuda.bindings (status, value...) tuple; raise LaunchError naming the error. `d`:
    the driver module that made the call (default: the real one)."""
    d = d or drv()
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != d.CUresult.CUDA_SUCCESS:
        e2, name = d.cuGetErrorName(err)
        label = name.decode() if e2 == d.CUresult.CUDA_SUCCESS and name else str(err)
        raise LaunchError(f"{what} failed: {label}")
    return rest[0] if len(rest) == 1 else (rest or None)


def _pdl_config(d, gx, gy, gz, bx, by, bz, smem):
    """A cuLaunchKernelEx config with programmatic stream serialization (its stream set by the caller)."""
    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bx, by, bz
    cfg.sharedMemBytes = smem
    attr = d.CUlaunchAttribute()
    attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    cfg.attrs, cfg.numAttrs = [attr], 1
    return cfg


def pdl_launch(d):
    """A drop-in for d.cuLaunchKernel (same arguments, same result) that launches through
    cuLaunchKernelEx with programmatic stream serialization: the kernel (built with a family's PDL)
    waits for the grids before it itself, so its launch may overlap their tail. One launch config per
    (function, grid, block, shared memory), built once; its stream is set only when it changes. The
    per-call path's launcher; a bound size uses `fixed_launch`, which needs no lookup."""
    configs: dict = {}
    ex, stream_t = d.cuLaunchKernelEx, d.CUstream

    def launch(f, gx, gy, gz, bx, by, bz, smem, stream, args, extra):
        key = (id(f), gx, gy, gz, bx, by, bz, smem)
        ent = configs.get(key)
        if ent is None:
            if len(configs) >= 256:
                configs.clear()
            ent = configs[key] = [_pdl_config(d, gx, gy, gz, bx, by, bz, smem), None, f]   # f kept alive with its id
        if ent[1] != stream:
            ent[0].hStream, ent[1] = stream_t(stream), stream
        return ex(ent[0], f, args, extra)
    return launch


def fixed_launch(d, f, grid: tuple, block: tuple, smem: int, pdl: bool):
    """go(stream, args, extra): f's launch at one grid, block and shared memory, everything but the
    stream and the argument buffer fixed once (a bound size's launch: no per-call lookup). Plain
    cuLaunchKernel, or with `pdl` cuLaunchKernelEx with programmatic stream serialization."""
    if not pdl:
        return functools.partial(d.cuLaunchKernel, f, *grid, *block, smem)
    cfg, ex, stream_t, last = _pdl_config(d, *grid, *block, smem), d.cuLaunchKernelEx, d.CUstream, [None]

    def go(stream, args, extra):
        if last[0] != stream:
            cfg.hStream, last[0] = stream_t(stream), stream
        return ex(cfg, f, args, extra)
    return go
