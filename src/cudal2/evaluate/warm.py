"""Compiling ahead: the kernels a benchmark is about to time, compiled first in parallel CPU
processes, so each shape's in-process build is a hit in the backends' disk caches (NVRTC's cubins
under ~/.cache/cudal2/cubin, Triton's own cache) instead of a compile on the GPU's clock.
`cudal2 compare` (--warm, the default) and bench/grid_baselines.py use it."""
from __future__ import annotations

import time

from ..device import DeviceInfo
from ..problems import Problem
from ..spec import KernelSpec


def registry_pairs(reg, problems, device_key: str) -> list[tuple[KernelSpec, Problem]]:
    """(spec, problem) for each problem whose registry entry is a kernel (a cuBLAS entry compiles
    nothing); an entry serving a wider scope (an M bucket) is built for the problem itself."""
    out = []
    for p in problems:
        e = reg.lookup(p, device_key)
        if e is not None and e.backend != "cublas" and e.spec:
            out.append((KernelSpec.parse(e.spec), p))
    return out


def warm_compiles(pairs, device: DeviceInfo, workers: int | None = None,
                  timeout_s: float = 600.0) -> tuple[int, int, float]:
    """Compile each distinct (spec, problem) once in worker processes; returns (compiled, failed,
    seconds). A failure is only counted: the in-process build meets it again and reports it where
    it belongs (the row of that shape)."""
    from .procs import CompilePool, available_cpus, backend_compile
    todo = list({(s.text, p.text): (s, p) for s, p in pairs}.values())
    if not todo:
        return 0, 0, 0.0
    t0 = time.monotonic()
    pool = CompilePool(backend_compile, workers or available_cpus(), timeout_s)
    try:
        futs = [f for spec, p in todo for f in pool.submit([spec], p, device)]
        failed = sum(not hasattr(pool.result(f), "binary") for f in futs)
    finally:
        pool.close()
    return len(todo), failed, time.monotonic() - t0
