"""NVRTC through cuda-python: CUDA C++ source -> cubin for one architecture, no GPU needed.

The bottom layer under the CUDA backend (backends/cuda.py turns NvrtcError into its CompileError
and caches what it compiles) and the card's cluster probe (cluster_fit.py); it imports nothing of
cudal2, so both can use it without an import cycle.
"""
from __future__ import annotations


class NvrtcError(RuntimeError):
    """NVRTC refused the source; `log` holds its own output."""

    def __init__(self, message: str, log: str = ""):
        self.message, self.log = message, log
        super().__init__(message)


def compile_cubin(source: str, arch: str, options: tuple[str, ...]) -> tuple[bytes, str]:
    """(cubin, NVRTC's log) of `source` for `arch` (e.g. sm_90a) with `options`."""
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"cudal2.cu", 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcError(f"nvrtcCreateProgram failed: {err.name}")
    try:
        opts = [f"-arch={arch}".encode()] + [o.encode() for o in options]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        # NVRTC writes into the buffer it is handed. An empty log has size 1 (its NUL), and
        # b" " * 1 is CPython's shared one-byte object: writing there turned every b" " of the
        # process into b"\x00" (torch.load then failed on a checkpoint; tests/test_nvrtc.py).
        # A buffer of two bytes or more is a fresh object.
        buf = b" " * (n + 1)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf[:n].rstrip(b"\x00").decode(errors="replace")
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise NvrtcError(f"NVRTC failed ({res.name}) for {arch}", log)
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * (size + 1)          # a fresh object, as above
        (res,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise NvrtcError(f"nvrtcGetCUBIN failed ({res.name})", log)
        return cubin[:size], log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


__all__ = ["NvrtcError", "compile_cubin"]
