"""Route a model's fp16 nn.Linear layers through the registry, reversibly.

nn.Linear computes y = x W^T + b with W [out, in] = [N, K]: the "nt" problem with M = the number of
tokens (every leading dimension of x flattened). A patched layer whose input and weight are float16
calls cudal2.matmul(x, W, layout="nt") and adds the bias after (an in-place add on the fresh output
when no gradient is needed, so no extra allocation); any other dtype runs the layer's original
forward, which is what a fallback to torch means, bit for bit; so does a 1-D input (one vector).

Under torch.compile, cudal2.matmul becomes the `cudal2::hgemm` op; when autograd must record the
call (training), the op is used in eager too, since it carries the backward formula.

The patch is an instance attribute `forward` bound to the module; unpatch_linear deletes it (or puts
back an instance-level forward the module already had), restoring the exact original.
"""
from __future__ import annotations

import types

import torch
from torch import nn

from .ops import matmul

_SAVED = "_cudal2_saved_forward"
_NONE = object()      # marks "the module had no instance-level forward"


def _forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    w = self.weight
    # A 1-D x (one vector; nn.Linear accepts it) is no GEMM cudal2 serves: cudal2.matmul needs [..., M, K].
    if x.dtype is not torch.float16 or w.dtype is not torch.float16 or x.dim() < 2:
        return getattr(self, _SAVED)(x) if getattr(self, _SAVED) is not _NONE else nn.Linear.forward(self, x)
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
        y = torch.ops.cudal2.hgemm(x, w, "nt")
        return y if self.bias is None else y + self.bias
    y = matmul(x, w, layout="nt")
    if self.bias is not None:
        if torch.compiler.is_compiling():
            return y + self.bias
        y.add_(self.bias)
    return y


def patch_linear(model: nn.Module) -> int:
    """Patch every nn.Linear in `model` (the model itself included); returns how many were patched.

    Layers already patched are left alone, so patching twice is harmless.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"patch_linear takes an nn.Module, got {type(model).__name__}")
    n = 0
    for mod in model.modules():
        if isinstance(mod, nn.Linear) and _SAVED not in mod.__dict__:
            mod.__dict__[_SAVED] = mod.__dict__.get("forward", _NONE)
            mod.forward = types.MethodType(_forward, mod)
            n += 1
    return n


def unpatch_linear(model: nn.Module) -> int:
    """Undo patch_linear on every layer of `model`; returns how many were restored."""
    n = 0
    for mod in model.modules():
        if _SAVED in mod.__dict__:
            saved = mod.__dict__.pop(_SAVED)
            if saved is _NONE:
                mod.__dict__.pop("forward", None)
            else:
                mod.forward = saved
            n += 1
    return n


def is_patched(mod: nn.Module) -> bool:
    return _SAVED in mod.__dict__
