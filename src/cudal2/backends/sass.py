"""Machine code of a CUDA source: its SASS, to tell whether an edited template still compiles an
entry to the very kernel that was checked and timed.

`cudal2 registry rerender` uses it: a kernel family edited for new knobs (wgmma's MC_A and SUBTILE,
2026-12-04) re-renders every filed spec to new text, but where NVRTC turns the new text into the
same SASS as the filed one, the filed check and timings are still the kernel's own (114 of the 118
shipped wgmma entries then; the other 4 differed by register names in the epilogue's addressing).
Triton entries the same way (`same_triton_machine_code`): the kernels a stored text and its new
rendering compile to for the entry's problem, each loaded as its footer says (PDL: a text rendered
with the default on loads with it, one from before does not, so the flip reads as other SASS).
cuobjdump comes from the CUDA toolkit on PATH or the copy the triton wheel ships.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path


def cuobjdump() -> str | None:
    tool = shutil.which("cuobjdump")
    if tool:
        return tool
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.is_file() else None


def sass_lines(cubin: bytes, tool: str) -> list[str]:
    """The cubin's SASS, one instruction (or encoding word) per line, instruction offsets dropped:
    two kernels are the same machine code when these lists are equal."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True,
                             timeout=120).stdout
    lines = (re.sub(r"/\*[0-9a-f]{4,}\*/", "", line).strip() for line in out.splitlines() if "/*" in line)
    return [line for line in lines if line]


def same_machine_code(old_source: str, new_source: str, arch: str) -> bool | None:
    """True / False: the two CUDA sources do / do not compile (NVRTC, `arch`) to the same SASS;
    None: no cuobjdump here, or either fails to compile (then nothing can be said)."""
    from .cuda import cubin_of
    tool = cuobjdump()
    if tool is None:
        return None
    try:
        old = sass_lines(cubin_of(old_source, arch), tool)
        new = sass_lines(cubin_of(new_source, arch), tool)
    except Exception:
        return None
    return old == new


def same_triton_machine_code(old_source: str, new_source: str, spec, problem, device) -> bool | None:
    """True / False: the two Triton texts do / do not compile to the same SASS for `problem` on
    `device` (backends/triton.py: cubins); None: no cuobjdump, the interpreter, or a failed compile."""
    from . import triton as tb
    tool = cuobjdump()
    if tool is None:
        return None
    try:
        old = [sass_lines(c, tool) for c in tb.cubins(old_source, spec, problem, device)]
        new = [sass_lines(c, tool) for c in tb.cubins(new_source, spec, problem, device)]
    except Exception:
        return None
    return old == new
