"""The small interface both backends implement (DESIGN.md: render / compile / Kernel).

  render(spec, problem)          -> source text (what the registry stores and hashes)
  compile(spec, problem, device) -> Artifact: picklable, made without tensors or a GPU, so CPU
                                    worker processes can compile many candidates in parallel
  load(artifact)                 -> Kernel, on the GPU process
  Kernel(a, b, c, stream=None)   -> writes C = A @ B (fp16) for the problem's layout

A Kernel is built for one spec and may serve any problem the spec is valid for (kernels mask their
edges), so the registry can reuse a tuned kernel for a nearby shape.

Optional fast entries, for callers that have already checked the arguments (cudal2.ops' plans):
  kernel.unchecked(a, b, c)      -> the launch without the per-call argument checks
  kernel.bind(M, N, K)           -> f(a, b, c): the launch for one problem size, everything that
                                    depends only on (M, N, K) worked out once. a, b, c must be
                                    dense fp16 tensors (any shape: only their data pointers are
                                    read on the fast path) holding A [M, K], B in the kernel's
                                    layout and C [M, N], 16-byte aligned, on the current device;
                                    it launches on that device's current stream.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..device import DeviceInfo
from ..problems import Problem
from ..spec import KernelSpec


class CompileError(RuntimeError):
    """Compilation failed; `log` holds the compiler's own output."""

    def __init__(self, message: str, log: str = ""):
        self.log = log
        super().__init__(message + (f"\n--- compiler log ---\n{log}" if log else ""))


class LaunchError(RuntimeError):
    """A launch was refused or failed; the message carries the CUDA error name where there is one."""


@dataclass
class Artifact:
    """What compile() returns: enough to load the kernel without compiling again."""
    backend: str
    spec: KernelSpec
    source: str
    binary: bytes = b""                 # cubin (CUDA) or b"" where the backend's own cache holds it
    meta: dict[str, Any] = field(default_factory=dict)   # registers, spills, smem, kernel name ...

    @property
    def binary_hash(self) -> str:
        """Duplicate detection: two specs that compile to the same machine code are one candidate.

        CUDA artifacts carry the cubin, so different specs that compile alike are caught. Triton
        artifacts carry no binary (Triton's cache holds it) and fall back to the rendered source,
        which names the spec: only exact repeats are caught there."""
        return hashlib.sha256(self.binary or self.source.encode()).hexdigest()


@functools.cache
def stream_getter():
    """f(device_index) -> the raw handle (int) of torch's current stream on that device.

    torch._C._cuda_getCurrentRawStream (what Triton's own launcher uses) costs ~0.1 µs; the public
    torch.cuda.current_stream(i).cuda_stream builds a Stream object per call (~1-2 µs). The private
    one is feature-detected, with the public one as the fallback."""
    import torch
    f = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if f is not None:
        return f
    return lambda index: torch.cuda.current_stream(index).cuda_stream


@functools.cache
def device_getter():
    """f() -> torch's current CUDA device index, cheaply (torch._C._cuda_getDevice when present)."""
    import torch
    f = getattr(torch._C, "_cuda_getDevice", None)
    return f if f is not None else torch.cuda.current_device


class Kernel(Protocol):
    spec: KernelSpec

    def __call__(self, a, b, c, stream=None) -> None: ...

    def supports(self, problem: Problem) -> bool: ...


class Backend(Protocol):
    name: str

    def render(self, spec: KernelSpec, problem: Problem) -> str: ...

    def compile(self, spec: KernelSpec, problem: Problem, device: DeviceInfo) -> Artifact: ...

    def load(self, artifact: Artifact) -> Kernel: ...

