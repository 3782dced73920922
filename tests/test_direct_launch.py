"""The direct launch paths on the CPU (issue 6: host overhead), no GPU.

Triton: in a child process, Triton's JIT is made to believe in one sm_90 device whose compiled
kernels launch into a recorder (a stand-in driver, and `compile` returning real CompiledKernel
objects with a recording launcher). The JIT then binds, specialises, keys and caches exactly as on
a card, so each test compares what the JIT path hands the launcher with what TritonKernel's direct
path hands it for the same call: the same compiled kernel (function handle), grid, stream and every
argument (pointers as ints), for each family and layout. A child process, because the stand-in
driver and the patched JIT caches must never meet a real GPU process.

CUDA: CudaKernel.bind against a stand-in driver: the pre-packed argument buffer and the launch
configuration equal what the per-call `_run` packs for the same tensors.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()


# ---- Triton, in the child ---------------------------------------------------------------------------
def _stub():
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import CompiledKernel

    launches = _Launches()
    count = [0]
    compiled = {}           # function id -> what its compile was asked: launch_pdl, the PDL constexpr

    class _Driver:
        def get_current_device(self):
            return 0

        def get_current_stream(self, idx=None):
            return 5

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    triton.runtime.driver.set_active(_Driver())

    def fake_compile(src, target=None, options=None, **kw):
        count[0] += 1
        k = object.__new__(CompiledKernel)
        fid = 1000 + count[0]

        def run(*args):
            launches.append(_norm(args))        # as the launcher sees them, at the launch
        k.module, k._module_pid, k.function, k._run = "stub", None, fid, run
        k.packed_metadata, k.src, k.name, k.hash = (fid, 1, 0), src, f"stub{fid}", str(fid)
        k.metadata = None
        names = list(src.fn.arg_names)
        pdl = src.constants.get((names.index("PDL"),)) if "PDL" in names else None
        compiled[fid] = {"name": src.fn.__name__, "launch_pdl": bool((options or {}).get("launch_pdl")),
                         "PDL": pdl}
        return k

    from cudal2.kernels_triton import persistent, tiled
    for fn in (tiled.tiled_kernel, tiled.splitk_reduce_kernel, persistent.persistent_kernel):
        fn.device_caches[0]
        fn.compile = fake_compile
    # One workspace per device for both paths: the JIT path keys CPU tensors' workspace by stream
    # None (no CUDA stream), the direct path by the raw stream; on a card both use the same int.
    ws = tiled.workspace
    tiled.workspace = lambda numel, device, stream_key=None: ws(numel, device, None)
    from cudal2.backends import triton_direct as td
    td.device_index = lambda: 0
    td.raw_stream = lambda i: 5
    launches.compiled = compiled
    return launches


class _Launches(list):
    compiled: dict


def _norm(args):
    """A launcher call as comparable data: tensors become their data pointers; the JIT's hooks and
    launch metadata (HookChain / LazyDict objects) become their kind."""
    import torch
    g0, g1, g2, stream, fn, meta, lmeta, enter, exit_, *rest = args
    kind = (lambda h: "none" if h is None else ("idle" if getattr(h, "calls", None) == [] else "set"))
    return {"grid": [g0, g1, g2], "stream": stream, "function": fn, "meta": list(meta),
            "hooks": [kind(enter), kind(exit_)],
            "args": [x.data_ptr() if isinstance(x, torch.Tensor) else x for x in rest]}


def _worker() -> None:
    launches = _stub()
    import torch

    from cudal2 import plans
    from cudal2.backends import triton as tb
    from cudal2.backends import triton_direct as td
    from cudal2.backends.base import Artifact
    from cudal2.device import DeviceInfo
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec

    dev = DeviceInfo.target("sm_90a")
    h = torch.float16
    out = {"probe": td.direct_unsupported()}
    cases = [("tiled", "family=tiled bm=32 bn=32 bk=16 warps=2 stages=2 group_m=4", [(100, 17, 300), (1, 48, 64)]),
             ("tiled-sk2", "family=tiled bm=32 bn=32 bk=16 warps=2 stages=2 split_k=2", [(17, 100, 40), (64, 64, 64)]),
             ("persistent", "family=persistent bm=64 bn=64 bk=32 warps=4 stages=2 subtile=2", [(100, 48, 72), (1, 64, 64)]),
             # PDL (load(..., pdl=True); the default where the text asks), both tiled launch shapes
             ("tiled-pdl", "family=tiled bm=32 bn=32 bk=16 warps=2 stages=2 group_m=4", [(100, 17, 300), (1, 48, 64)]),
             ("tiled-sk2-pdl", "family=tiled bm=32 bn=32 bk=16 warps=2 stages=2 split_k=2", [(17, 100, 40), (64, 64, 64)])]
    for name, text, shapes in cases:
        spec = KernelSpec.parse(text)
        for layout in ("nn", "nt"):
            p0 = Problem(*shapes[0], layout)
            art = Artifact("triton", spec, tb.render(spec, p0), b"", {"layout": layout, "device": dev.to_dict()})
            k = tb.load(art, pdl=True if name.endswith("-pdl") else None)
            k._sm_count = 3
            for M, N, K in shapes:
                p = Problem(M, N, K, layout)
                a = torch.randn(M, K).to(h)
                b = torch.randn(*p.b_shape()).to(h)
                c = torch.empty(M, N, dtype=h)
                row = {"case": f"{name}-{layout}-{M}x{N}x{K}", "status0": k.direct_status(M, N, K)}
                launches.clear()
                k.unchecked(a, b, c)                         # first call: the JIT
                row["jit"] = list(launches)
                row["status1"] = k.direct_status(M, N, K)
                launches.clear()
                k.unchecked(a, b, c)                         # then: direct
                row["direct"] = list(launches)
                # New pointers, a 3-d a and c (bind reads pointers only): still direct, new pointers.
                a3, c3 = a.clone().view(2, M // 2, K) if M % 2 == 0 else a.clone(), torch.empty(M, N, dtype=h)
                launches.clear()
                k.bind(M, N, K)(a3, b, c3)
                row["direct_new_ptrs"] = list(launches)
                row["ptrs"] = [a3.data_ptr(), b.data_ptr(), c3.data_ptr()]
                # A misaligned a: through the JIT (tiled: another variant; persistent: refused).
                buf = torch.empty(M * K + 1, dtype=h)
                am = buf[1:].view(M, K)
                am.copy_(a)
                launches.clear()
                try:
                    k.unchecked(am, b, c)
                    row["misaligned"] = list(launches)
                except ValueError as e:
                    row["misaligned"] = str(e)
                # A launch hook set: through the JIT, which calls it.
                from triton import knobs
                seen = []

                def hook(meta):
                    seen.append(1)
                knobs.runtime.launch_enter_hook.add(hook)
                launches.clear()
                try:
                    k.unchecked(a, b, c)
                finally:
                    knobs.runtime.launch_enter_hook.remove(hook)
                row["hooked"] = list(launches)
                row["compiled"] = [launches.compiled[x["function"]] for x in row["jit"]]
                launches.clear()
                k.unchecked(a, b, c)
                row["after_hook"] = list(launches)
                print(json.dumps(row), flush=True)
    # A dispatch plan around the stubbed kernel: out=None, out dense, out aliasing a (temporary).
    spec = KernelSpec.parse(cases[0][1])
    p = Problem(6, 32, 64, "nt")
    k = tb.load(Artifact("triton", spec, tb.render(spec, p), b"", {"layout": "nt", "device": dev.to_dict()}))
    plan = plans.kernel_plan(k, p.M, p.N, p.K, torch.Size((2, 3, p.N)), torch.device("cpu"), "stub")
    a = torch.randn(2, 3, p.K).to(h)
    b = torch.randn(p.N, p.K).to(h)
    launches.clear()
    c1 = plan(a, b, None)
    c2 = plan(a, b, None)
    o = torch.empty(2, 3, p.N, dtype=h)
    r = plan(a, b, o)
    out["plan"] = {"type": type(plan).__name__, "n": len(launches),
                   "ptrs": [x["args"][:3] for x in launches],
                   "want": [[a.data_ptr(), b.data_ptr(), c1.data_ptr()], [a.data_ptr(), b.data_ptr(), c2.data_ptr()],
                            [a.data_ptr(), b.data_ptr(), o.data_ptr()]],
                   "shapes": [list(c1.shape), list(c2.shape)], "out_is_out": r is o,
                   "paths": [x["hooks"] for x in launches]}
    print(json.dumps({"case": "summary", **out}), flush=True)


@pytest.fixture(scope="module")
def reports() -> dict:
    env = {**os.environ}
    env.pop("TRITON_INTERPRET", None)
    r = subprocess.run([sys.executable, str(HERE), "--worker"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return {x["case"]: x for x in rows}


def _cases(reports):
    return [v for k, v in reports.items() if k != "summary"]


def test_direct_path_is_available(reports):
    assert reports["summary"]["probe"] is None, reports["summary"]["probe"]
    assert len(_cases(reports)) == 20


def test_first_call_jit_then_direct_with_the_same_launch(reports):
    for r in _cases(reports):
        assert r["status0"].startswith("jit: no aligned launch"), r["case"]
        assert r["status1"] == "direct", (r["case"], r["status1"])
        jit, direct = r["jit"], r["direct"]
        assert len(jit) == len(direct) >= 1, r["case"]
        for j, d in zip(jit, direct):
            assert j["hooks"] == ["idle", "idle"] and d["hooks"] == ["none", "none"], r["case"]
            # The same compiled kernel, grid, stream and every argument, constexprs included.
            for key in ("function", "meta", "grid", "stream", "args"):
                assert j[key] == d[key], (r["case"], key, j[key], d[key])


def test_tiled_launches_with_pdl_on_sm90(reports):
    """The tiled family on sm_90 loaded with pdl=True (kernels_triton/tiled.py's PDL): both its
    launches (the split-K reduce too) are compiled with the wait (the PDL constexpr) and Triton's
    launch_pdl together, and the direct path launches those very kernels (the test above); loaded
    by default (PDL_BY_DEFAULT off) neither; the persistent family has no PDL constexpr."""
    from cudal2.backends import triton_families as fam
    for r in _cases(reports):
        names = [c["name"] for c in r["compiled"]]
        if r["case"].startswith("tiled"):
            assert names == (["tiled_kernel", "splitk_reduce_kernel"] if "sk2" in r["case"] else ["tiled_kernel"])
            on = "-pdl-" in r["case"] or fam.PDL_BY_DEFAULT
            assert all(c["launch_pdl"] is on and c["PDL"] is on for c in r["compiled"]), r
        else:
            assert names == ["persistent_kernel"] and not r["compiled"][0]["launch_pdl"], r
            assert r["compiled"][0]["PDL"] is None, r


def test_direct_path_passes_each_calls_pointers(reports):
    for r in _cases(reports):
        d, first = r["direct_new_ptrs"], r["direct"]
        assert d[0]["hooks"] == ["none", "none"] and d[0]["function"] == first[0]["function"], r["case"]
        pa, pb, pc = r["ptrs"]
        assert d[0]["args"][:3] == [pa, pb, pc], r["case"]
        assert d[0]["args"][4:] == first[0]["args"][4:], r["case"]        # ints and constexprs
        # The 4th: tiled's ws_ptr (c itself without split-K, the cached workspace with it), or M.
        want4 = pc if r["case"].startswith("tiled") and "sk2" not in r["case"] else first[0]["args"][3]
        assert d[0]["args"][3] == want4, r["case"]


def test_misaligned_pointer_goes_through_the_jit(reports):
    for r in _cases(reports):
        m = r["misaligned"]
        if r["case"].startswith("persistent"):
            assert isinstance(m, str) and "16-byte aligned" in m, r["case"]
        else:
            # Another specialisation (a_ptr not divisible by 16): another compiled kernel.
            assert m[0]["hooks"] == ["idle", "idle"], r["case"]
            assert m[0]["function"] != r["direct"][0]["function"], r["case"]


def test_launch_hooks_route_through_the_jit(reports):
    for r in _cases(reports):
        assert r["hooked"][0]["hooks"] == ["set", "idle"], r["case"]
        assert r["after_hook"][0]["hooks"] == ["none", "none"], r["case"]


def test_bound_plan_launches_on_its_tensors(reports):
    s = reports["summary"]["plan"]
    assert s["type"] == "BoundPlan" and s["n"] == 3 and s["out_is_out"]
    assert s["ptrs"] == s["want"]
    assert s["shapes"] == [[2, 3, 32], [2, 3, 32]]
    assert s["paths"] == [["idle", "idle"], ["none", "none"], ["none", "none"]]   # JIT, direct, direct


def test_set_direct_launch_switches_direct_off_and_on(monkeypatch):
    from cudal2.backends import triton as tb
    from cudal2.backends import triton_direct as td
    from cudal2.backends.base import Artifact
    from cudal2.device import DeviceInfo
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    monkeypatch.setattr(td, "_ENABLED", True)       # restored after the test
    assert td._probe_direct() is None
    td.set_direct_launch(False)
    assert td.direct_unsupported() == "disabled by set_direct_launch(False)"
    spec, p = KernelSpec.parse("family=tiled bm=32 bn=32 bk=16 warps=2 stages=2"), Problem(64, 64, 64)
    dev = DeviceInfo.target("sm_90a").to_dict()
    art = Artifact("triton", spec, tb.render(spec, p), b"", {"layout": "nn", "device": dev})
    k = tb.load(art)                                  # loaded while off: every call through the JIT
    assert k.direct_why == "disabled by set_direct_launch(False)"
    assert k.direct_status(64, 64, 64) == "jit: disabled by set_direct_launch(False)"
    td.set_direct_launch(True)
    assert td.direct_unsupported() is None           # the probe's answer again
    assert tb.load(art).direct_why is None


# ---- CUDA: bind packs what _run packs -------------------------------------------------------------
class _Driver:
    class CUresult:
        CUDA_SUCCESS = 0

    def __init__(self):
        self.launches = []

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, args, extra):
        # Read the argument values now, as the driver does at launch.
        self.launches.append((f, (gx, gy, gz), (bx, by, bz), smem, stream, _unpack(args, f)))
        return (0,)

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_INVALID_VALUE")

    # cuLaunchKernelEx and its config (PDL launches): recorded like cuLaunchKernel, tagged.
    class CUlaunchConfig:
        pass

    class CUlaunchAttribute:
        def __init__(self):
            self.id, self.value = None, types.SimpleNamespace(programmaticStreamSerializationAllowed=0)

    class CUlaunchAttributeID:
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = "programmatic"

    @staticmethod
    def CUstream(s):
        return ("stream", s)

    def cuLaunchKernelEx(self, cfg, f, args, extra):
        (attr,) = cfg.attrs[:cfg.numAttrs]
        pdl = attr.id == "programmatic" and attr.value.programmaticStreamSerializationAllowed == 1
        self.launches.append((f, (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), (cfg.blockDimX, cfg.blockDimY,
                              cfg.blockDimZ), cfg.sharedMemBytes, cfg.hStream[1], _unpack(args, f), pdl))
        return (0,)


_LAYOUT = {"mma": ("Q", "Q", "Q", "Q", "i", "i", "i"), "red": ("Q", "Q", "i", "i"),
           "wgmma": ("128s", "128s", "128s", "Q", "Q", "Q", "i", "i", "i")}


def _unpack(addr: int, f: str) -> list:
    kind = "red" if f == "cudal2_splitk_reduce" else ("wgmma" if f == "cudal2_wgmma" else "mma")
    ptrs = (ctypes.c_void_p * len(_LAYOUT[kind])).from_address(addr)
    out = []
    for p, t in zip(ptrs, _LAYOUT[kind]):
        if t == "Q":
            out.append(ctypes.c_uint64.from_address(p).value)
        elif t == "i":
            out.append(ctypes.c_int.from_address(p).value)
        else:
            out.append(ctypes.string_at(p, 128).hex()[:32])
    return out


def _stand_in_kernel(family: str, layout: str, text: str, monkeypatch):
    import torch

    from cudal2.backends import cuda_launch
    from cudal2.backends.workspace import StreamWorkspace
    from cudal2.spec import KernelSpec
    drv = _Driver()
    monkeypatch.setattr(cuda_launch, "_drv", lambda: drv)
    monkeypatch.setattr(cuda_launch, "stream_getter", lambda: (lambda i: 77))
    # Tensor maps: a deterministic stand-in for cuTensorMapEncodeTiled.
    monkeypatch.setattr(cuda_launch, "_encode", lambda ptr, inner, outer, bi, bo:
                        f"{ptr:x}/{inner}/{outer}/{bi}/{bo}".encode().ljust(128, b"\0"))
    k = object.__new__(cuda_launch.CudaKernel)
    k.spec = KernelSpec.parse(f"backend=cuda family={family} {text}")
    k.family, k.layout, k.device_index, k.sm_count = family, layout, 0, 4
    k.funcs = {n: n for n in cuda_launch.KERNELS[family]}
    k.threads, k.smem, k._tmaps, k._binds = k.spec.warps * 32, 1024, {}, {}
    k._ws = StreamWorkspace("cpu")
    k._u64 = [ctypes.c_uint64() for _ in range(4)]
    k._i32 = [ctypes.c_int() for _ in range(3)]
    if family == "wgmma":
        k._maps = [(ctypes.c_ubyte * 128)() for _ in range(3)]
        slots = k._maps + [k._u64[1], k._u64[2], k._u64[3]] + k._i32
    else:
        slots = k._u64 + k._i32
    k._args = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(s) for s in slots])
    k._red_args = (ctypes.c_void_p * 4)(*[ctypes.addressof(s) for s in (k._u64[3], k._u64[2], k._i32[0], k._i32[1])])
    # A CPU tensor stands in for the split-K workspace (torch.empty on "cuda" is not available).
    real_empty, real_zeros = torch.empty, torch.zeros
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: real_empty(*a, **{**kw, "device": "cpu"}))
    monkeypatch.setattr(torch, "zeros", lambda *a, **kw: real_zeros(*a, **{**kw, "device": "cpu"}))
    return k, drv


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("family,text,shape", [
    ("mma", "bm=64 bn=64 bk=32 warps=4 stages=3", (100, 64, 96)),
    ("mma", "bm=64 bn=64 bk=32 warps=4 stages=3", (17, 33, 40)),          # N % 8: the scalar kernel
    ("mma", "bm=64 bn=64 bk=32 warps=4 stages=3 split_k=2", (64, 64, 128)),
    ("wgmma", "bm=128 bn=128 warps=12 stages=4", (200, 256, 128)),
    ("wgmma", "bm=128 bn=128 warps=12 stages=4 split_k=2", (200, 256, 512)),   # one launch
    ("wgmma", "bm=128 bn=128 warps=12 stages=4 warp_spec=2 split_k=2", (200, 256, 512)),   # workspace
    ("wgmma", "bm=64 bn=64 warps=4 stages=4 warp_spec=0 split_k=4", (200, 256, 1024)),   # cluster split
])
def test_cuda_bind_packs_what_run_packs(monkeypatch, family, text, shape, layout):
    import torch
    k, drv = _stand_in_kernel(family, layout, text, monkeypatch)
    M, N, K = shape
    h = torch.float16
    a, c = torch.empty(M, K, dtype=h), torch.empty(M, N, dtype=h)
    b = torch.empty((K, N) if layout == "nn" else (N, K), dtype=h)
    k._run(M, N, K, a, b, c, k._stream(None))
    want = list(drv.launches)
    drv.launches.clear()
    f = k.bind(M, N, K)
    assert k.bind(M, N, K) is f
    f(a, b, c)
    assert drv.launches == want and len(want) == (2 if "split_k=2" in text and family == "mma" else 1)
    # New pointers: only they change.
    a2 = torch.empty(M, K, dtype=h)
    drv.launches.clear()
    f(a2, b, c)
    got = drv.launches[0]
    assert got[:5] == want[0][:5]
    if family == "mma":
        assert got[5][0] == a2.data_ptr() and got[5][1:3] == want[0][5][1:3] and got[5][4:] == [M, N, K]
    else:
        assert got[5][0] != want[0][5][0] and got[5][1:] == want[0][5][1:]    # a's tensor map moved
        # A fresh output (what a no-out call gets from the caching allocator): only C's map moves.
        c2 = torch.empty(M, N, dtype=h)
        drv.launches.clear()
        f(a2, b, c2)
        got2 = drv.launches[0][5]
        assert got2[:2] == got[5][:2] and got2[2] != got[5][2] and got2[4:] == got[5][4:]
        assert got2[3] == c2.data_ptr() and got[5][3] == c.data_ptr()    # C's pointer slot
        from cudal2.spec import cluster_split
        # Ping-pong split-K reduces through a workspace; lite and cooperative inside the cluster of
        # a tile's slices (no workspace), one CTA per unit: tiles x split_k, no persistent cap
        # (sm_count is 4 here).
        assert (got2[4] != 0) == (k.spec.split_k > 1 and not cluster_split(k.spec))
        if cluster_split(k.spec):
            assert got[1][0] == -(-M // k.spec.bm) * -(-N // k.spec.bn) * k.spec.split_k


def test_decode_steps_encode_only_the_moved_operands_map(monkeypatch):
    """At decode A is a fresh activation each step and B a fixed weight: the bound launch encodes
    A's map when A moves and never B's again; weights of 32 layers x the allocator's alternating
    activation blocks stay cached (a cache of (A, B) pairs held 64 and was cleared every round),
    and each launch still carries the maps of the operands it was given."""
    import torch

    from cudal2.backends import cuda_launch
    k, drv = _stand_in_kernel("wgmma", "nt", "bm=64 bn=64 warps=4 stages=8 warp_spec=0", monkeypatch)
    encoded = []
    stand_in = cuda_launch._encode
    monkeypatch.setattr(cuda_launch, "_encode", lambda ptr, *rest: encoded.append(ptr) or stand_in(ptr, *rest))
    M, N, K = 7, 4096, 4096
    h = torch.float16
    f = k.bind(M, N, K)
    acts = [torch.empty(M, K, dtype=h) for _ in range(3)]
    weights = [torch.empty(N, K, dtype=h) for _ in range(32)]
    c = torch.empty(M, N, dtype=h)
    for step in range(2):
        for layer, w in enumerate(weights):
            encoded.clear()
            a = acts[(step * 32 + layer) % 3]
            f(a, w, c)
            # the maps in this launch are those of a and w (the stand-in map starts with the pointer)
            maps = [bytes(m).rstrip(b"\0").decode().split("/")[0] for m in k._tmaps.values()]
            assert f"{a.data_ptr():x}" in maps and f"{w.data_ptr():x}" in maps
            if step:
                assert encoded == [], f"step 1, layer {layer}: re-encoded {encoded}"
    # a new activation block: only A's map is encoded
    encoded.clear()
    f(torch.empty(M, K, dtype=h), weights[0], c)
    assert len(encoded) == 1
    launched = drv.launches[-1][5]
    assert launched[1] == drv.launches[0][5][1]        # weights[0]'s map, as in its first launch


@pytest.mark.parametrize("family,text,ws_arg", [
    ("mma", "bm=64 bn=64 bk=32 warps=4 stages=3 split_k=2", 3),
    ("wgmma", "bm=128 bn=128 warps=12 stages=4 warp_spec=2 split_k=2", 4),
])
def test_split_k_scratch_is_per_stream(monkeypatch, family, text, ws_arg):
    """Two streams running the same split-K kernel get their own partials (until 2026-12-06 the mma
    family kept one buffer per kernel, which they would have raced on), per call and bound alike: a
    bound launch re-reads the pointer when the stream changes, and when another size grew that
    stream's pair, whose old buffer stays alive (a queued launch or a captured graph may use it)."""
    import torch

    from cudal2.backends import cuda_launch
    k, drv = _stand_in_kernel(family, "nn", text, monkeypatch)
    current = {"s": 77}
    monkeypatch.setattr(cuda_launch, "stream_getter", lambda: (lambda i: current["s"]))
    h = torch.float16

    def operands(M, N, K):
        return torch.empty(M, K, dtype=h), torch.empty(K, N, dtype=h), torch.empty(M, N, dtype=h)

    def main_launches():
        return [(x[4], x[5][ws_arg]) for x in drv.launches if x[0] != "cudal2_splitk_reduce"]
    M, N, K = 200, 256, 512
    a, b, c = operands(M, N, K)
    k._run(M, N, K, a, b, c, 77)
    k._run(M, N, K, a, b, c, 78)
    (s1, w77), (s2, w78) = main_launches()
    assert (s1, s2) == (77, 78) and w77 and w78 and w77 != w78
    drv.launches.clear()
    f = k.bind(M, N, K)
    for s in (77, 78, 77):
        current["s"] = s
        f(a, b, c)
    assert main_launches() == [(77, w77), (78, w78), (77, w77)]
    k._run(4 * M, 4 * N, K, *operands(4 * M, 4 * N, K), 77)       # grows stream 77's pair
    drv.launches.clear()
    current["s"] = 77
    f(a, b, c)
    (_, grown), = main_launches()
    assert grown == k._ws.pairs[77][0].data_ptr() != w77
    assert [p[0].data_ptr() for p in k._ws.retired] == [w77]


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_a_trim_kernels_get_an_a_box_of_m_rows(monkeypatch, layout):
    """A wgmma module built with A_TRIM=1 counts M rows of A per k-tile when M < BM (wgmma.cu's
    a_tx_bytes): its A tensor map must be that tall, or the ring's barrier never completes. Without
    the symbol (every filed kernel) the box stays BM rows. B's map is the same either way."""
    k, _ = _stand_in_kernel("wgmma", layout, "bm=128 bn=64 warps=8 stages=6 warp_spec=0", monkeypatch)
    K, N = 256, 64
    bshape = (K, N) if layout == "nn" else (N, K)

    def boxes(M, trim):
        k.a_trim, k._tmaps = trim, {}
        ta, tb = k._tensor_maps(M, N, K, bshape, 4096, 8192)
        return [m.rstrip(b"\0").decode().split("/")[3:] for m in (ta, tb)]
    for M in (1, 7, 100, 127):
        (a_in, a_rows), b = boxes(M, True)
        assert (a_in, a_rows) == ("64", str(M)) and b == boxes(M, False)[1]
        assert boxes(M, False)[0] == ["64", "128"]
    for M in (128, 129, 1000):
        assert boxes(M, True)[0] == ["64", "128"]


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker()


def test_lite_cp_kernels_get_a_and_b_pointers(monkeypatch):
    """A wgmma module built with LITE_CP=1 (wgmma.cu's cp.async experiment) takes A's and B's
    pointers after M, N, K: the per-call launch and the bound one pack them, and a moved operand
    moves its pointer. Without the symbol (every filed kernel) the argument list is as before."""
    import torch
    k, drv = _stand_in_kernel("wgmma", "nt", "bm=64 bn=16 warps=4 stages=2 warp_spec=0", monkeypatch)
    k.lite_cp, k._ab = True, [ctypes.c_uint64(), ctypes.c_uint64()]
    slots = k._maps + [k._u64[1], k._u64[2], k._u64[3]] + k._i32 + k._ab
    k._args = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(s) for s in slots])
    monkeypatch.setitem(_LAYOUT, "wgmma", _LAYOUT["wgmma"] + ("Q", "Q"))
    M, N, K = 100, 64, 120
    h = torch.float16
    a, b, c = torch.empty(M, K, dtype=h), torch.empty(N, K, dtype=h), torch.empty(M, N, dtype=h)
    k._run(M, N, K, a, b, c, k._stream(None))
    f = k.bind(M, N, K)
    f(a, b, c)
    run, bound = drv.launches[0][5], drv.launches[1][5]
    assert run == bound and run[6:] == [M, N, K, a.data_ptr(), b.data_ptr()]
    a2 = torch.empty(M, K, dtype=h)
    f(a2, b, c)
    assert drv.launches[2][5][9:] == [a2.data_ptr(), b.data_ptr()]


@pytest.mark.parametrize("text", ["bm=128 bn=128 warps=12 stages=4", "bm=64 bn=64 warps=4 stages=4 warp_spec=0 split_k=4"])
def test_pdl_kernels_launch_with_programmatic_serialization(monkeypatch, text):
    """A wgmma module with `cudal2_pdl` (wgmma.cu's default since 2026-12-06) launches through
    cuLaunchKernelEx with programmatic stream serialization, per call and bound alike, with the same
    grid, block, shared memory, stream and arguments as the plain launch."""
    import torch
    k, drv = _stand_in_kernel("wgmma", "nt", text, monkeypatch)
    M, N, K = 200, 256, 512
    h = torch.float16
    a, b, c = torch.empty(M, K, dtype=h), torch.empty(N, K, dtype=h), torch.empty(M, N, dtype=h)
    k._run(M, N, K, a, b, c, k._stream(None))
    plain = drv.launches.pop()
    k.pdl = True
    k._run(M, N, K, a, b, c, k._stream(None))
    k.bind(M, N, K)(a, b, c)
    assert len(drv.launches) == 2 and drv.launches[0] == drv.launches[1] == (*plain, True)
    k._run(M, N, K, a, b, c, 78)          # another stream: the cached launcher's config follows it
    k._run(M, N, K, a, b, c, 77)
    assert [x[4] for x in drv.launches[2:]] == [78, 77] and all(x[6] for x in drv.launches)


@pytest.mark.parametrize("pdl", [False, True])
def test_fixed_launch_is_the_launch_with_grid_block_smem_bound(pdl):
    """driver.fixed_launch (every bound size's launch): go(stream, args, extra) launches exactly what
    the per-call launcher does with the same function, grid, block and shared memory; with PDL
    through cuLaunchKernelEx, its config's stream following the caller's from call to call."""
    import ctypes

    from cudal2.backends.driver import fixed_launch, pdl_launch
    drv = _Driver()
    slots = [ctypes.c_uint64(v) for v in (1, 2, 3, 4)] + [ctypes.c_int(v) for v in (5, 6, 7)]
    arr = (ctypes.c_void_p * 7)(*[ctypes.addressof(x) for x in slots])     # kept alive: args is its address
    args = ctypes.addressof(arr)
    go = fixed_launch(drv, "cudal2_mma_vec", (9, 1, 2), (128, 1, 1), 4096, pdl)
    per_call = pdl_launch(drv) if pdl else drv.cuLaunchKernel
    for s in (77, 78, 78, 77):
        assert go(s, args, 0) == (0,)
        per_call("cudal2_mma_vec", 9, 1, 2, 128, 1, 1, 4096, s, args, 0)
    bound, want = drv.launches[0::2], drv.launches[1::2]
    assert bound == want and [x[4] for x in bound] == [77, 78, 78, 77]
    assert bound[0][:4] == ("cudal2_mma_vec", (9, 1, 2), (128, 1, 1), 4096) and bound[0][5] == [1, 2, 3, 4, 5, 6, 7]
    assert all(len(x) == (7 if pdl else 6) and (not pdl or x[6]) for x in bound)
