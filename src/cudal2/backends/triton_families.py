"""What the Triton backend's render, compile and load share (backends/triton.py, triton_kernel.py):
the family modules (kernels_triton/), a spec's constexprs and launch options, the rendered texts
imported as modules, and the rule for the tiled family's programmatic dependent launch."""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
import tempfile
from pathlib import Path

from ..device import DeviceInfo
from ..spec import KernelSpec, SpecError
from .triton_direct import INTERPRET    # read from TRITON_INTERPRET once, at import (backends/triton.py)

FOOTER = "\n# ---- cudal2: the spec this text was rendered for ----\n"


def family_module(family: str):
    if family == "tiled":
        from ..kernels_triton import tiled as mod
    elif family == "persistent":
        from ..kernels_triton import persistent as mod
    else:
        raise SpecError("family", f"{family!r} is not a Triton family (choose tiled or persistent)")
    return mod


def spec_knobs(spec: KernelSpec, mod) -> tuple[dict, dict]:
    cex = {name: getattr(spec, field) for field, name in mod.KNOBS.items()}
    opts = {name: getattr(spec, field) for field, name in mod.LAUNCH_OPTIONS.items()}
    # Explicit, because the default moved: 3.6 fuses by default, 3.9 warns that 3.10 will not.
    # Fusion (FMA contraction) touches address and epilogue arithmetic only; the dot is MMA.
    opts["enable_fp_fusion"] = True
    return cex, opts


# The tiled family's programmatic dependent launch (gdc_wait first, Triton's launch_pdl), on by
# default since run 131 (H100, 2026-12-06, bench/graph_clock.py --families tiled --variant PDL=1,
# 13 filed tiled kernels): graph clock 1.231x best-cublas with PDL against 1.065x without (every
# shape faster), offline unchanged (1.086 / 1.084). `load(artifact, pdl=False)` turns it off.
# The choice is written into each rendered text's footer (PDL_LINE), and a text loads as its footer
# says: a registry entry runs the machine code it was checked on, and `registry rerender` sees the
# flip as a new text whose kernels differ (a pending re-check), not as the same text run otherwise.
PDL_BY_DEFAULT = True
PDL_LINE = "PDL = True\n"


def text_pdl(source: str) -> bool:
    """Whether a rendered text asks to load with PDL (its footer's PDL_LINE; none before 2026-12-06)."""
    parts = source.split(FOOTER, 1)
    return len(parts) == 2 and PDL_LINE in parts[1].splitlines(keepends=True)


def pdl_default(spec: KernelSpec, device: DeviceInfo, mod=None, source: str | None = None) -> bool:
    """Whether a kernel loads with PDL when not told, where `pdl_supported`: as a stored text's
    footer says (`source`), else as a new rendering would (PDL_BY_DEFAULT)."""
    want = PDL_BY_DEFAULT if source is None else text_pdl(source)
    return want and pdl_supported(spec, device, mod)


def pdl_supported(spec: KernelSpec, device: DeviceInfo, mod=None) -> bool:
    """Programmatic dependent launch (kernels_triton/tiled.py's header): the tiled family on sm_90+,
    compiled (not under the interpreter), where the kernel text has the PDL constexpr (a stored
    text from before 2026-12-06 has not). The persistent family has none: its device-side TMA
    descriptors are written to a scratch buffer shared per stream before anything could wait."""
    if spec.family != "tiled" or INTERPRET or tuple(device.cc) < (9, 0) or not _triton_launches_pdl():
        return False
    mod = mod or family_module("tiled")
    # HAS_GDC: the wait is Triton's, not the no-op stand-in (a PDL launch without it would race).
    return "PDL" in mod.tiled_kernel.arg_names and getattr(mod, "HAS_GDC", False)


def _triton_launches_pdl() -> bool:
    """Triton's CUDA options know launch_pdl (since 3.4; an unknown option would be dropped
    silently, and the kernel would wait without the launch that makes the wait mean anything)."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:  # pragma: no cover
        return False
    return "launch_pdl" in getattr(CUDAOptions, "__dataclass_fields__", {})


def constexprs(spec: KernelSpec, layout: str, pdl: bool = False, mod=None) -> tuple[dict, dict]:
    """The constexprs and launch options of `mod` (default: the installed family module; else a
    stored text's, `module_for`) for spec and layout."""
    mod = mod or family_module(spec.family)
    cex, opts = spec_knobs(spec, mod)
    if spec.family == "persistent":
        cex = mod.constexprs_for(cex, layout)
    elif "PDL" in mod.tiled_kernel.arg_names:       # a stored text from before PDL has none
        # Passed either way: the direct path passes every parameter by name. The constexpr (the
        # wait in the kernel) and the launch attribute go together: a PDL launch of a kernel that
        # does not wait could read what the grid before it still writes.
        cex["PDL"] = bool(pdl)
        if pdl:
            opts["launch_pdl"] = True
    return cex, opts


_LOADED: dict[str, object] = {}


def load_source(source: str):
    """Import a rendered text as a module. Triton reads kernel source through `inspect`, so the
    text goes to a file (named by its hash, under the user cache) and is imported from there."""
    h = hashlib.sha256(source.encode()).hexdigest()[:16]
    if h in _LOADED:
        return _LOADED[h]
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cudal2" / "triton_src"
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"k_{h}.py"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".py")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"cudal2_triton_{h}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    _LOADED[h] = mod
    return mod


def module_for(source: str, family: str):
    """The installed family module when the text is its current rendering, else the text itself."""
    mod = family_module(family)
    body = source.split(FOOTER, 1)[0]
    return mod if body == inspect.getsource(mod).rstrip() + "\n" else load_source(source)
