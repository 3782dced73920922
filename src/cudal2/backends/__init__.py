"""Kernel backends: Triton and CUDA C++ (NVRTC), behind one interface (base.py).

Owns: the interface (base.py: Artifact, Kernel, Backend, the errors, torch's stream/device getters),
the Triton backend (triton.py, its direct launch triton_direct.py) and the CUDA backend (cuda.py,
its launch cuda_launch.py); `get_backend` / `build_kernel` here pick one by name.
May import: spec, problems, device and the kernel families (cudal2.kernels_triton / kernels_cuda);
never check, timing, evaluate, registry, ops or cli. Inside: triton -> triton_direct -> base and
cuda -> cuda_launch -> base, one direction; this package's `get_backend` imports a backend only
when it is asked for, so one need not load both.
"""
from __future__ import annotations

from ..device import DeviceInfo
from ..problems import Problem
from ..spec import KernelSpec, validate
from .base import Artifact, Backend, CompileError, Kernel, LaunchError

__all__ = ["Artifact", "Backend", "CompileError", "Kernel", "LaunchError", "build_kernel", "get_backend"]


def get_backend(name: str) -> Backend:
    """The backend object by name ('triton' or 'cuda'); imported lazily so one need not load both."""
    if name == "triton":
        from .triton import BACKEND
    elif name == "cuda":
        from .cuda import BACKEND
    else:
        raise ValueError(f"unknown backend {name!r}: choose 'triton' or 'cuda'")
    return BACKEND


def build_kernel(spec: KernelSpec, problem: Problem, device: DeviceInfo) -> Kernel:
    """Validate, compile (cached by the backend) and load: the one-call path for a GPU process."""
    validate(spec, problem, device)
    be = get_backend(spec.backend)
    return be.load(be.compile(spec, problem, device))
