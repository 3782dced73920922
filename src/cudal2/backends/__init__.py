"""Kernel backends: Triton and CUDA C++ (NVRTC), behind one interface (base.py)."""
from .base import Artifact, Backend, CompileError, Kernel, LaunchError, build_kernel, get_backend

__all__ = ["Artifact", "Backend", "CompileError", "Kernel", "LaunchError", "build_kernel", "get_backend"]
