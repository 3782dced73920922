"""The direct launch of compiled Triton kernels: the launch after a problem size's first, without
Triton's JIT in the way.

Why it exists: a launch through the JIT (`JITFunction[grid](...)`) cost 15-26 µs of host time per
call on the H200, the direct path ~1-2 µs; for small and mid-sized matmuls that host time, not the
GPU, set eager latency. TritonKernel (backends/triton_kernel.py) makes the first launch of a size through
the JIT, then records the compiled kernel the JIT chose for it and from then on calls that kernel's
launcher itself.

How the specialisation stays right: one record per (M, N, K) and device, made from 16-byte aligned
pointers by the JIT's own `warmup` on the very arguments the direct path passes (so both agree on
the kernel by construction); a call takes the direct path only with aligned pointers and no launch
hooks, else it goes through the JIT. The details are in the comment below.

`set_direct_launch(False)` turns the direct path off for kernels loaded after it (every call then
goes through the JIT); `direct_unsupported()` says why a process cannot or does not use it.
"""
from __future__ import annotations

import inspect
import os

import torch
import triton
from triton import knobs as _triton_knobs

from .base import device_getter, stream_getter


# JITFunction.run (triton 3.6 and 3.9 alike) ends a launch with
#     kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata,
#                launch_metadata, launch_enter_hook, launch_exit_hook, *bound_args.values())
# and spends ~15-25 µs of Python before it on every call: binding and specialising every argument,
# the cache key, the cache lookup, the global-value check, launch_metadata. After the first launch of
# a problem size through the JIT, TritonKernel makes that same last call itself, with the compiled
# kernel the JIT holds for those arguments (a "record"). Why that is the same launch:
#  - the arguments differ from call to call only in the data pointers. Every int and constexpr follows
#    from (M, N, K), the layout and the spec (strides are those of contiguous tensors), so one record
#    per (M, N, K) fixes the specialisation of every int (== 1 is a constexpr, % 16, i32 or i64);
#  - pointers are specialised on 16-byte alignment: records are made from aligned pointers only, and
#    a call takes the direct path only when all its pointers are aligned; any other call goes
#    through the JIT, which picks or compiles the variant that fits;
#  - records are per device, as the JIT's caches are (a function handle belongs to one context);
#  - launch hooks (knobs.runtime.launch_enter_hook / launch_exit_hook, e.g. a profiler) or a stages
#    inspection hook: the direct path passes no hooks, so while one is set every call uses the JIT;
#  - a JITFunction with pre-run hooks or used global values is never recorded (the JIT checks them
#    per call);
#  - what the JIT reads per call from Triton's knobs into the cache key (TRITON_DEBUG, the
#    instrumentation / fpsan modes) is read once, when the record is made: changing those in the
#    middle of a process does not reach sizes already recorded.
# The record is made with `fn.warmup(...)` on the same arguments the direct path passes (a cache hit
# after the launch: no compile), so the direct path and the JIT agree on the kernel by construction;
# tests/test_direct_launch.py checks on the CPU (a stand-in driver under the real JIT) that both
# paths hand the launcher the same kernel, grid, stream and arguments, and tests/test_direct_gpu.py
# that the two give bit-identical results on a card.
# Where the JIT does not end its launch that way (another Triton), the interpreter, or after
# set_direct_launch(False), every call goes through the JIT as before.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")   # read once (backends/triton.py)
_DIRECT_PROBE: list = []
_MULTI = False             # more than one visible GPU: records and streams per current device
_MULTI_READ = False
_ENABLED = True            # set_direct_launch


def set_direct_launch(enabled: bool) -> None:
    """Turn the direct launch on (the default) or off. TritonKernel decides at load, so this
    applies to kernels loaded after the call; kernels already loaded keep their path."""
    global _ENABLED
    _ENABLED = bool(enabled)


def direct_unsupported() -> str | None:
    """None if this process can launch compiled Triton kernels directly, else the reason."""
    if not _ENABLED:
        return "disabled by set_direct_launch(False)"
    if not _DIRECT_PROBE:
        _DIRECT_PROBE.append(_probe_direct())
    return _DIRECT_PROBE[0]


def _probe_direct() -> str | None:
    if INTERPRET:
        return "the Triton interpreter"
    try:
        from triton import knobs
        from triton.compiler import CompiledKernel
        from triton.runtime.jit import JITFunction
        src = "".join(inspect.getsource(JITFunction.run).split())
    except Exception as e:  # noqa: BLE001 - any failure means: use the JIT
        return f"cannot read triton's JITFunction.run ({type(e).__name__})"
    want = ("kernel.run(grid_0,grid_1,grid_2,stream,kernel.function,kernel.packed_metadata,launch_metadata,"
            "knobs.runtime.launch_enter_hook,knobs.runtime.launch_exit_hook,*bound_args.values())")
    if want not in src:
        return f"triton {triton.__version__}'s JITFunction.run launches differently"
    if not (hasattr(CompiledKernel, "run") and hasattr(JITFunction, "warmup")
            and hasattr(knobs.runtime, "launch_enter_hook") and hasattr(knobs.runtime, "launch_exit_hook")):
        return f"triton {triton.__version__} lacks CompiledKernel.run / JITFunction.warmup / launch hooks"
    return None


def _hook_idle(h) -> bool:
    # triton 3.6 / 3.9 hold a HookChain (never None); a hook is installed when its list is non-empty.
    return h is None or (getattr(h, "calls", None) == [])


def hooks_idle() -> bool:
    rt = _triton_knobs.runtime
    return (_hook_idle(rt.launch_enter_hook) and _hook_idle(rt.launch_exit_hook)
            and getattr(rt, "add_stages_inspection_hook", None) is None)


def device_index() -> int:
    """torch's current device index. Replaces itself with torch's getter on first use, so the
    launchers' per-call global lookup finds the C function directly."""
    global device_index
    device_index = device_getter()
    return device_index()


def raw_stream(index: int) -> int:
    """The raw handle of torch's current stream on device `index` (replaces itself, as above)."""
    global raw_stream
    raw_stream = stream_getter()
    return raw_stream(index)


def _multi() -> bool:
    global _MULTI, _MULTI_READ
    if not _MULTI_READ:
        _MULTI = torch.cuda.device_count() > 1 if torch.cuda.is_available() else False
        _MULTI_READ = True
    return _MULTI


def record(fn, ptrs: list, ints: dict, cex: dict, opts: dict, grid: tuple):
    """(run, function, packed_metadata, g0, g1, g2, tail, kernel) for launching `fn` directly with
    the JIT's own compiled kernel for these arguments, or a str: why not. `ptrs` are the pointer
    arguments (tensors) in order, `ints` the other runtime arguments by name, `cex` the constexprs."""
    if fn.pre_run_hooks or fn.used_global_vals:
        return f"{fn.__name__} has pre-run hooks or used global values (the JIT checks them per call)"
    names = fn.arg_names
    vals = {**ints, **cex}
    if len(names) != len(ptrs) + len(vals) or any(n not in vals for n in names[len(ptrs):]):
        return f"{fn.__name__}'s parameters {names} are not the ones the direct path passes"
    k = fn.warmup(*ptrs, grid=grid, **vals, **opts)
    if hasattr(k, "result"):          # an async-compile future (triton 3.6 with async mode on)
        k = k.result()
    run = k.run                       # loads the module on first use, sets k.function
    if getattr(k, "function", None) is None or not hasattr(k, "packed_metadata"):
        return "the compiled kernel has no function handle / packed metadata"
    g = tuple(grid) + (1, 1)
    tail = tuple(vals[n] for n in names[len(ptrs):])
    return (run, k.function, k.packed_metadata, g[0], g[1], g[2], tail, k)


# The direct launcher TritonKernel binds per size, one for every family: per call only the data
# pointers, the device (with several GPUs), the stream and the hook check; everything else is in the
# record. `first` is the size's JIT launch (which also makes the record), `records` maps device
# index -> record(s). It lives here so that its per-call global lookups (_MULTI, device_index,
# raw_stream) find what this module's functions have set.
def bound(first, records, *, install=None, workspace=None, ws_numel: int = 0):
    """f(a, b, c), the direct launch of one size. The family decides what the launch passes:
      tiled          (neither)    one launch: a, b, c and c again (the unused workspace argument)
      tiled split-K  `workspace`  two launches: a, b, c, workspace, then the reduce of (workspace, c);
                                  `workspace(numel, device, stream_key)` is the family's
                                  (kernels_triton/tiled.py), `ws_numel` its size
      persistent     `install`    one launch: a, b, c, after `install()`, the family's
                                  install_allocator (kernels_triton/persistent.py)"""
    def launch(a, b, c):
        pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
        dev = device_index() if _MULTI else 0
        r = records.get(dev)
        # Misaligned pointers go to the JIT path, whose launch refuses them with a clear error.
        if r is None or (pa | pb | pc) & 15 or not hooks_idle():
            return first(a, b, c, dev)
        s = raw_stream(dev)
        if workspace is not None:
            # Looked up every call, keyed as the JIT path keys it: another kernel may have grown
            # (replaced) the shared per-(device, stream) buffer since the last call.
            pw = workspace(ws_numel, c.device, s).data_ptr()
            (run, fn, meta, g0, g1, g2, tail, _), (rrun, rfn, rmeta, r0, r1, r2, rtail, _) = r
            run(g0, g1, g2, s, fn, meta, None, None, None, pa, pb, pc, pw, *tail)
            rrun(r0, r1, r2, s, rfn, rmeta, None, None, None, pw, pc, *rtail)
            return
        run, fn, meta, g0, g1, g2, tail, _ = r
        if install is None:
            run(g0, g1, g2, s, fn, meta, None, None, None, pa, pb, pc, pc, *tail)
            return
        # Device-side TMA descriptors need Triton's global scratch: the launcher asks the allocator
        # installed in this thread (persistent.scratch_allocator, cached per device and stream) on
        # every launch, the direct one as the JIT's, so it is installed here per call too.
        install()
        run(g0, g1, g2, s, fn, meta, None, None, None, pa, pb, pc, *tail)
    _multi()
    return launch
