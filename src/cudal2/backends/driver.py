"""The CUDA driver API as the CUDA backend's launchers use it: the bindings module, loaded once,
`check`, which turns a failed call into LaunchError naming the CUDA error, and `pdl_launcher`, a
launch with programmatic stream serialization (wgmma's PDL)."""
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


def pdl_launcher(d, f, grid_x: int, block: int, smem: int):
    """launch(stream, args_address): `f` on a 1-D grid with programmatic stream serialization, through
    the driver module `d` (a kernel built with wgmma.cu's PDL waits for its dependencies itself). The
    launch config is built once; a call sets its stream and launches."""
    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid_x, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
    cfg.sharedMemBytes = smem
    attr = d.CUlaunchAttribute()
    attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    cfg.attrs, cfg.numAttrs = [attr], 1
    ex, stream_t = d.cuLaunchKernelEx, d.CUstream
    last = [None]                 # the stream cfg holds: a call on the same stream sets nothing

    def launch(stream: int, args: int):
        if stream != last[0]:
            cfg.hStream, last[0] = stream_t(stream), stream
        return ex(cfg, f, args, 0)
    return launch
