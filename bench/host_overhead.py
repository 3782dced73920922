"""CPU only: the Python host cost of cudal2's eager path, with the GPU launch stubbed out.

  python3 bench/host_overhead.py                      # prints a table
  python3 bench/host_overhead.py --out DIR            # also DIR/host_overhead.{csv,json}

No GPU is needed or touched. Triton's JIT runs for real up to the launcher: a stand-in driver
(device 0, stream 0, an sm_90 target) is made active, the JIT binds, specialises, keys and looks up
its cache as on a card, and the cached "compiled kernel" is a real `CompiledKernel` object whose
launcher is a no-op (no C launcher, no cuLaunchKernel). So each figure is the Python work per call
that stands between the caller and the driver, which is what issue 6 is about; the C launcher and
the driver add the same few µs to every path on a card (bench/eager_latency.py measures those).

Paths, per shape (µs per call, best of --repeats runs of --calls calls):
  jit          the family's `launch` through `JITFunction.__getitem__(grid)(...)` (the old hot path)
  unchecked    `TritonKernel.unchecked(a, b, c)` (what the plans called before `bind`)
  bound        `TritonKernel.bind(M, N, K)(a, b, c)` (the plans' launch; absent on old code)
  plan_noop    the dispatch plan the registry builds, around a no-op kernel, out=None: the
               plan's own cost (the torch.empty of the output included)
  plan_noop_out  the same with a dense `out=`
  matmul       `cudal2.matmul(a, b, layout=...)` end to end (plan lookup + plan + stubbed Triton)
  matmul_out   the same with `out=`
  empty        `torch.empty(M, N, dtype=fp16, device=...)` alone, as the plan allocates its output
               (the CPU allocator here; CUDA's caching allocator on a card costs about as much)
The CPU tensors stand in for CUDA ones: every per-call test the plans make (contiguity, alignment,
overlap, shapes) runs the same on either.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from cudal2.report import write_rows_csv

SHAPES = "1x4096x4096:nt,16x4096x4096:nt,128x4096x4096:nt,64x64x64:nn,512x512x512:nn,128x4096x4096:nn"


def _stub_triton():
    """Make Triton's JIT believe in one sm_90 device whose kernels launch into a no-op."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import CompiledKernel

    class _Driver:
        def get_current_device(self):
            return 0

        def get_current_stream(self, idx=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    triton.runtime.driver.set_active(_Driver())

    def _noop(*args):
        return None

    def fake_compile(src, target=None, options=None, **kw):
        k = object.__new__(CompiledKernel)
        k.module, k._module_pid, k.function, k._run = "stub", None, 1, _noop
        k.packed_metadata, k.src, k.name, k.hash = (4, 1, 0), src, "stub", "0"
        k.metadata = None
        return k

    from cudal2.kernels_triton import persistent, tiled
    for fn in (tiled.tiled_kernel, tiled.splitk_reduce_kernel, persistent.persistent_kernel):
        fn.device_caches[0]          # builds the binder for "device 0" with the stand-in target
        fn.compile = fake_compile
    import importlib
    # The direct path reads the device and stream through these (torch's CPU build has neither);
    # they live in backends/triton_direct.py (in backends/triton.py on older code).
    for modname in ("cudal2.backends.triton_direct", "cudal2.backends.triton"):
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        for name in ("device_index", "raw_stream"):
            if hasattr(mod, name):
                setattr(mod, name, (lambda *a: 0))


class _Noop:
    """A kernel whose launch does nothing, offering what the current code's plans use."""

    def __call__(self, a, b, c, stream=None):
        return None

    def unchecked(self, a, b, c):
        return None

    def bind(self, M, N, K):
        return self.unchecked


def _time(fn, calls: int, repeats: int) -> float:
    for _ in range(min(calls, 200)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def measure(shapes: str, calls: int, repeats: int, families: list[str]) -> list[dict]:
    _stub_triton()
    import cudal2
    from cudal2 import ops, plans
    from cudal2.backends import triton as tb
    from cudal2.backends.base import Artifact
    from cudal2.device import DeviceInfo
    from cudal2.problems import parse_shapes
    from cudal2.spec import KernelSpec, default_spec, is_valid

    dev = DeviceInfo.target("sm_90a")
    h = torch.float16
    rows = []
    for p in parse_shapes(shapes):
        for fam in families:
            if fam.startswith("tiled-sk"):
                spec = KernelSpec.parse(f"backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=3 "
                                        f"split_k={fam[len('tiled-sk'):]}")
                if not is_valid(spec, p, dev):
                    continue
            else:
                spec = default_spec(fam, p, dev)
            art = Artifact("triton", spec, tb.render(spec, p), b"", {"layout": p.layout, "device": dev.to_dict()})
            k = tb.load(art)
            k._sm_count = 132
            a = torch.randn(p.M, p.K).to(h)
            b = torch.randn(*p.b_shape()).to(h)
            c = torch.empty(p.M, p.N, dtype=h)
            out = torch.empty(p.M, p.N, dtype=h)
            mod = tb.family_module(spec.family)
            cex, opts = tb.constexprs(spec, p.layout)
            if spec.family == "persistent":
                def jit():
                    mod.install_allocator()
                    mod.launch(a, b, c, p.layout, cex, opts, 132)
            else:
                def jit():
                    mod.launch(a, b, c, p.layout, cex, opts, None)
            shape = torch.Size((p.M, p.N))
            make = plans.kernel_plan     # the plan the registry would build
            noop_plan = make(_Noop(), p.M, p.N, p.K, shape, a.device, "noop")
            row = {"problem": p.text, "family": fam, "spec": spec.text,
                   "jit_us": _time(jit, calls, repeats),
                   "unchecked_us": _time(lambda: k.unchecked(a, b, c), calls, repeats)}
            if hasattr(k, "bind"):
                bound = k.bind(p.M, p.N, p.K)
                row["bound_us"] = _time(lambda: bound(a, b, c), calls, repeats)
                row["direct"] = k.direct_status(p.M, p.N, p.K) if hasattr(k, "direct_status") else ""
            row["plan_noop_us"] = _time(lambda: noop_plan(a, b, None), calls, repeats)
            row["plan_noop_out_us"] = _time(lambda: noop_plan(a, b, out), calls, repeats)
            ops.clear_cache()
            ops._PLANS[(a.shape, b.shape, a.dtype, b.dtype, a.device, b.device, p.layout, False)] = \
                make(k, p.M, p.N, p.K, shape, a.device, "stub")
            lay = p.layout
            row["matmul_us"] = _time(lambda: cudal2.matmul(a, b, layout=lay), calls, repeats)
            row["matmul_out_us"] = _time(lambda: cudal2.matmul(a, b, layout=lay, out=out), calls, repeats)
            dims, dev_ = tuple(shape), a.device
            row["empty_us"] = _time(lambda: torch.empty(*dims, dtype=h, device=dev_), calls, repeats)
            ops.clear_cache()
            rows.append(row)
            print("  ".join(f"{k_}={v:.2f}" if isinstance(v, float) else f"{k_}={v}"
                            for k_, v in row.items() if k_ != "spec"), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--families", default="tiled,persistent,tiled-sk2",
                    help="tiled, persistent, tiled-skN (tiled with split_k=N)")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="directory for host_overhead.{csv,json}")
    args = ap.parse_args(argv)
    rows = measure(args.shapes, args.calls, args.repeats, args.families.split(","))
    if args.out:
        import triton
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"torch": torch.__version__, "triton": triton.__version__, "calls": args.calls,
                "repeats": args.repeats, "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "what": "CPU, GPU launch stubbed: Python µs per call (best of repeats)"}
        (out / "host_overhead.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        write_rows_csv(out / "host_overhead.csv", rows)
        print(f"wrote {out}/host_overhead.json, .csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
