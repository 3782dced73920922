"""The Triton backend: render / compile / load for the families in kernels_triton/.

render   the family module's source with a footer binding SPEC, LAYOUT, CONSTEXPRS and OPTIONS: a
         standalone text the registry stores, hashes and can load again (`load_source`).
compile  validates the spec (an invalid spec never reaches Triton), then, unless under the
         interpreter, compiles ahead of time with `triton.compile(ASTSource(...), target=GPUTarget)`.
         The signature, constexprs, specialisation attributes and options are produced by the JIT's
         own binder on stand-in arguments shaped like the problem's tensors, so the cache entry the
         CPU worker writes is the very one the JIT looks up when the GPU process launches: the first
         launch loads the cubin from Triton's disk cache instead of compiling. Resource usage
         (registers, spills, stack, shared memory) is read back into Artifact.meta.
load     a TritonKernel (backends/triton_kernel.py): every constexpr dict and launch option is
         fixed in __init__; a call checks its inputs cheaply (`unchecked` skips that, `bind(M, N,
         K)` also fixes the size, for cudal2.plans). The first launch of a size goes through the
         family's `launch` and the JIT; later ones call the compiled kernel's launcher directly
         (backends/triton_direct.py).

Interpreter mode is read once, at import, from TRITON_INTERPRET (`cudal2 check --interpret` sets
it before this module is imported): Triton decides then whether @triton.jit makes a compiled or an
interpreted function, so it cannot change later in the process. Under it compile() records the
source only and kernels run on CPU tensors.
"""
from __future__ import annotations

import inspect
import re
import subprocess
import tempfile
from pathlib import Path

import torch
import triton

from ..device import DeviceInfo
from ..problems import Problem
from ..spec import KernelSpec, SpecError, validate
from .base import Artifact, CompileError
from .triton_direct import INTERPRET    # read from TRITON_INTERPRET once, at import (docstring above)
# the families, constexprs, rendered texts as modules, PDL's rule: shared with the load (triton_kernel)
from .triton_families import (FOOTER, PDL_LINE, constexprs, family_module, load_source,  # noqa: F401
                              module_for, pdl_default, pdl_supported, spec_knobs, text_pdl)
from . import triton_families as _families
from .triton_kernel import TritonKernel, load  # noqa: F401
# ---- render ------------------------------------------------------------------------------------------
def render(spec: KernelSpec, problem: Problem) -> str:
    mod = family_module(spec.family)
    cex, opts = constexprs(spec, problem.layout)
    # PDL is not a constexpr of the text: the footer's PDL_LINE says whether it loads with it
    # (pdl_default; read at the module's attribute so a test can flip the default)
    pdl = cex.pop("PDL", None) is not None and _families.PDL_BY_DEFAULT
    return (inspect.getsource(mod).rstrip() + "\n" + FOOTER
            + f"SPEC = {spec.text!r}\nLAYOUT = {problem.layout!r}\n"
            + f"CONSTEXPRS = {cex!r}\nOPTIONS = {opts!r}\n" + (PDL_LINE if pdl else ""))


# ---- compile -----------------------------------------------------------------------------------------
class _Ptr:
    """What the JIT binder reads of a tensor argument: its dtype and a 16-byte aligned address
    (the aligned case is the one every contiguous torch allocation hits)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def data_ptr(self) -> int:
        return 0


def _launch_args(spec: KernelSpec, p: Problem, mod=None) -> tuple[object, list]:
    """(jit function, positional args) as the launcher passes them for problem p, with stand-ins
    for the tensors; mirrors tiled.launch / persistent.launch (of `mod`: default the family's)."""
    mod = mod or family_module(spec.family)
    h = torch.float16
    M, N, K = p.M, p.N, p.K
    if spec.family == "tiled":
        sbk, sbn = (N, 1) if p.layout == "nn" else (1, K)
        ws = _Ptr(torch.float32 if spec.split_k > 1 else h)
        return mod.tiled_kernel, [_Ptr(h), _Ptr(h), _Ptr(h), ws, M, N, K, K, 1, sbk, sbn, N, 1]
    return mod.persistent_kernel, [_Ptr(h), _Ptr(h), _Ptr(h), M, N, K]


def _jit_kwargs(fn, cex: dict, opts: dict) -> dict:
    """The keyword arguments JITFunction.run adds before binding (3.6: debug, instrumentation_mode;
    3.9 also fpsan_homomorphic_casts), so the options, and with them the cache key, agree."""
    from triton import knobs
    kw = {**cex, **opts, "debug": bool(getattr(fn, "debug", False)) or bool(knobs.runtime.debug)}
    comp = knobs.compilation
    for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):
        if hasattr(comp, name):
            kw[name] = getattr(comp, name)
    return kw


def _aot(fn, args: list, kwargs: dict, cc: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature
    target = GPUTarget("cuda", cc, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)


def _resources(compiled) -> dict:
    """Registers / stack / local (spill) bytes from the cubin via Triton's bundled cuobjdump; the
    driver-side n_regs / n_spills exist only once a GPU has loaded the kernel."""
    meta = {"smem_dynamic": int(compiled.metadata.shared), "smem_static": 0}
    cubin = compiled.asm.get("cubin")
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not cubin or not tool.exists():
        return meta
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            out = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True,
                                 text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            return meta
    for key, name in (("REG", "registers"), ("STACK", "stack_bytes"), ("LOCAL", "spills_bytes"),
                      ("SHARED", "smem_static")):
        m = re.search(rf"\b{key}:(\d+)", out)
        if m:
            meta[name] = int(m.group(1))
    return meta


_ARTIFACTS: dict[tuple, Artifact] = {}


def spec_class(p: Problem) -> tuple:
    """What the JIT specialises integers on (== 1, % 16), so problems of one class share a binary."""
    return tuple((x == 1, x % 16 == 0) for x in (p.M, p.N, p.K))


def compile(spec: KernelSpec, problem: Problem, device: DeviceInfo) -> Artifact:  # noqa: A001
    validate(spec, problem, device)
    if spec.backend != "triton":
        raise SpecError("backend", f"the Triton backend cannot compile backend={spec.backend}")
    key = (spec.text, problem.layout, device.cc, spec_class(problem), INTERPRET, _families.PDL_BY_DEFAULT)
    hit = _ARTIFACTS.get(key)
    if hit is not None:
        return Artifact(hit.backend, hit.spec, hit.source, hit.binary, {**hit.meta, "cached": True})
    source = render(spec, problem)
    pdl = pdl_default(spec, device, source=source)
    cex, opts = constexprs(spec, problem.layout, pdl)
    fn, args = _launch_args(spec, problem)
    meta = {"kernel": fn.__name__, "layout": problem.layout, "device": device.to_dict(),
            "triton": triton.__version__, "cached": False}
    if INTERPRET:
        meta["arch"] = "interpreter"
    else:
        cc = device.cc[0] * 10 + device.cc[1]
        try:
            compiled = _aot_launches(family_module(spec.family), spec, problem, cex, opts, cc)[0]
        except Exception as e:  # Triton raises CompilationError, RuntimeError, AssertionError ...
            raise CompileError(f"triton {triton.__version__} failed to compile {spec.text} for sm_{cc}: "
                               f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                               log=str(e)) from e
        meta.update(arch=f"sm_{cc}" + ("a" if cc == 90 else ""), kernel=compiled.metadata.name, pdl=pdl,
                    global_scratch=int(getattr(compiled.metadata, "global_scratch_size", 0) or 0),
                    warp_specialized="ttg.warp_specialize" in compiled.asm.get("ttgir", ""),
                    **_resources(compiled))
    art = Artifact("triton", spec, source, b"", meta)
    _ARTIFACTS[key] = art
    return art


def cubins(source: str, spec: KernelSpec, problem: Problem, device: DeviceInfo) -> list[bytes]:
    """The machine code a rendered text launches for `problem` when loaded by default on `device`
    (compiled ahead of time; the split-K reduce too): what `registry rerender` compares between a
    stored text and its new rendering (backends/sass.py), so an edit that leaves the kernels as they
    were keeps the entry's check and timings."""
    if INTERPRET:
        raise CompileError("no machine code under the Triton interpreter")
    mod = module_for(source, spec.family)
    cex, opts = constexprs(spec, problem.layout, pdl_default(spec, device, mod, source), mod)
    cc = device.cc[0] * 10 + device.cc[1]
    return [k.asm["cubin"] for k in _aot_launches(mod, spec, problem, cex, opts, cc)]


def _aot_launches(mod, spec: KernelSpec, problem: Problem, cex: dict, opts: dict, cc: int) -> list:
    """The compiled kernels of one launch of `mod`'s family, in launch order: the kernel, then (tiled
    with split-K) its reduce."""
    fn, args = _launch_args(spec, problem, mod)
    out = [_aot(fn, args, _jit_kwargs(fn, cex, opts), cc)]
    if spec.family == "tiled" and spec.split_k > 1:
        red = mod.splitk_reduce_kernel
        kw = (mod.reduce_args(cex, opts) if hasattr(mod, "reduce_args") else      # a text from before PDL
              {"SPLIT_K": spec.split_k, "BLOCK": mod.REDUCE_BLOCK, "num_warps": 4, "enable_fp_fusion": True})
        out.append(_aot(red, [_Ptr(torch.float32), _Ptr(torch.float16), problem.M, problem.N, problem.N, 1],
                        {**kw, **_jit_kwargs(red, {}, {})}, cc))
    return out


# ---- load: backends/triton_kernel.py (TritonKernel, load) ----------------------------------------

class _TritonBackend:
    name = "triton"
    render = staticmethod(render)
    compile = staticmethod(compile)
    load = staticmethod(load)


BACKEND = _TritonBackend()
