"""cudal2: RL-searched half-precision GEMM kernels for Hopper, and the registry that serves them.

    import cudal2
    c = cudal2.matmul(a, b, layout="nt")      # tuned kernel for this shape (or a measured range holding it), else torch
    cudal2.patch_linear(model)                # fp16 nn.Linear layers through the registry
    cudal2.unpatch_linear(model)

`import cudal2` stays light: torch, Triton and the CUDA bindings load on first use of matmul /
patch_linear (module __getattr__), so the CLI and CPU tools start quickly.
"""
from __future__ import annotations

from .problems import Problem
from .spec import KernelSpec

__version__ = "0.1.0"
__all__ = ["matmul", "patch_linear", "unpatch_linear", "Problem", "KernelSpec", "__version__"]

_LAZY = {"matmul": ("ops", "matmul"), "patch_linear": ("linear", "patch_linear"),
         "unpatch_linear": ("linear", "unpatch_linear")}


def __dir__() -> list[str]:
    # The lazy names too, so help(cudal2) and tab completion list the public functions.
    return sorted(set(globals()) | set(_LAZY))


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{mod}", __name__), attr)
        globals()[name] = value     # later lookups skip __getattr__
        return value
    raise AttributeError(f"module 'cudal2' has no attribute {name!r}")
