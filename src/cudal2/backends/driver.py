"""The CUDA driver API as the CUDA backend's launchers use it: the bindings module, loaded once,
and `check`, which turns a failed call into LaunchError naming the CUDA error."""
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
