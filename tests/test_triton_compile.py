"""Each Triton family compiles for sm_90 on a machine without a GPU (ASTSource + GPUTarget), and
what it asks for matches what validation assumed.

The sm_90 compiles run in a child process with TRITON_INTERPRET unset: under the interpreter
@triton.jit makes no compilable function, and another test in this process may have switched it on.

Shared-memory bound, and why: spec.smem_bytes() is what `validate` compares with the device limit.
If a compiled kernel needed more than that, validation would pass specs that then fail to launch;
so the compiled figure must not exceed it: for persistent at all (its estimate counts the
mbarriers and the epilogue's scratch, tests/test_persistent_smem.py), for tiled by no more than the
pipeline's mbarriers (8 B per stage and buffer; 1 KB covers them). It must also be at least the
(stages - 1) operand buffers that Triton's pipeliner keeps in flight: less would mean the stages
knob did not reach the compiler.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, SpecError

HERE = Path(__file__).resolve()
BARRIER_SLACK = 1024
PROBLEM = "4096x4096x4096"
EXTRA = [  # beyond each family's default: split-K (two kernels), warp specialisation, no subtiling
    "family=tiled bm=64 bn=64 bk=32 warps=4 stages=3 split_k=4",
    "family=persistent bm=128 bn=128 bk=64 warps=8 stages=4 subtile=2 warp_spec=1",
    "family=persistent bm=128 bn=128 bk=64 warps=8 stages=3 subtile=1",
]


def _worker() -> None:
    from cudal2.backends import get_backend
    from cudal2.spec import default_spec

    be = get_backend("triton")
    dev = DeviceInfo.target("sm_90a")
    for layout in ("nn", "nt"):
        p = Problem.parse(PROBLEM, layout)
        specs = [default_spec(f, p, dev) for f in ("tiled", "persistent")] + [KernelSpec.parse(t) for t in EXTRA]
        for s in specs:
            art = be.compile(s, p, dev)
            again = be.compile(s, p, dev)
            meta = {k: v for k, v in art.meta.items() if k != "device"}
            print(json.dumps({"spec": s.text, "layout": layout, "meta": meta, "smem_est": s.smem_bytes(),
                              "second_cached": again.meta["cached"]}), flush=True)


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(HERE), "--worker"], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_every_family_compiles_for_sm90(compiled):
    fams = {(KernelSpec.parse(r["spec"]).family, r["layout"]) for r in compiled}
    assert fams == {(f, lay) for f in ("tiled", "persistent") for lay in ("nn", "nt")}
    for r in compiled:
        m = r["meta"]
        assert m["arch"] == "sm_90a" and m["cached"] is False
        assert m["kernel"] in ("tiled_kernel", "persistent_kernel")
        # 255 is the sm_90 per-thread register limit; a figure past it would be a parse error.
        assert 0 < m.get("registers", 1) <= 255
        assert m.get("spills_bytes", 0) == 0, f"{r['spec']} spills {m['spills_bytes']} B"


def test_shared_memory_matches_spec_estimate(compiled):
    for r in compiled:
        s = KernelSpec.parse(r["spec"])
        smem = r["meta"]["smem_dynamic"]
        in_flight = (s.stages - 1) * (s.bm * s.bk + s.bk * s.bn) * 2
        slack = 0 if s.family == "persistent" else BARRIER_SLACK
        assert in_flight <= smem <= r["smem_est"] + slack, (r["spec"], smem, r["smem_est"])
        assert smem <= DeviceInfo.target("sm_90a").smem_per_block


def test_persistent_uses_device_descriptors(compiled):
    # Device-side TMA descriptors live in Triton's global scratch (128 B each, 3 per program);
    # the tiled family makes none.
    for r in compiled:
        fam = KernelSpec.parse(r["spec"]).family
        scratch = r["meta"]["global_scratch"]
        assert (scratch >= 3 * 128) if fam == "persistent" else (scratch == 0), (r["spec"], scratch)


def test_second_compile_hits_cache(compiled):
    assert all(r["second_cached"] for r in compiled)


def test_cache_hit_skips_triton_compile(monkeypatch):
    # In this process (any interpreter mode): once compiled, the same spec + device + problem class
    # must come from the in-process cache without calling triton.compile at all.
    import triton

    from cudal2.backends import get_backend
    be = get_backend("triton")
    dev = DeviceInfo.target("sm_90a")
    s = KernelSpec.parse("family=tiled bm=32 bn=32 bk=32 warps=2 stages=2")
    first = be.compile(s, Problem(64, 64, 64), dev)
    monkeypatch.setattr(triton, "compile", lambda *a, **k: pytest.fail("recompiled a cached spec"))
    second = be.compile(s, Problem(128, 64, 64), dev)       # same specialisation class
    assert second.meta["cached"] is True and second.source == first.source


@pytest.mark.parametrize("text,shape,field", [
    ("family=persistent bm=64 bn=64 bk=64 warps=4 stages=4", "128x100x128", "family"),   # N % 8: TMA
    ("family=tiled bm=256 bn=256 bk=128 warps=8 stages=6", "512x512x512", "warps"),      # acc regs
    ("family=tiled bm=64 bn=64 bk=64 warps=4 stages=4 split_k=16", "64x64x128", "split_k"),
])
def test_invalid_specs_never_reach_the_compiler(monkeypatch, text, shape, field):
    import triton

    from cudal2.backends import get_backend
    monkeypatch.setattr(triton, "compile", lambda *a, **k: pytest.fail("an invalid spec reached triton.compile"))
    with pytest.raises(SpecError) as e:
        get_backend("triton").compile(KernelSpec.parse(text), Problem.parse(shape), DeviceInfo.target("sm_90a"))
    assert e.value.field == field


def test_render_is_standalone_and_loadable(tmp_path, monkeypatch):
    from cudal2.backends import get_backend
    from cudal2.backends.triton import load_source
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    s = KernelSpec.parse("family=persistent bm=64 bn=128 bk=64 warps=4 stages=4 subtile=2")
    text = get_backend("triton").render(s, Problem(256, 256, 256, "nt"))
    mod = load_source(text)
    assert mod.SPEC == s.text and mod.LAYOUT == "nt"
    assert mod.CONSTEXPRS == {"BM": 64, "BN": 128, "BK": 64, "GROUP_M": 8, "EPILOGUE_SUBTILE": 2,
                              "WARP_SPECIALIZE": False, "B_NT": True, "FLATTEN": True}
    assert mod.OPTIONS == {"num_warps": 4, "num_stages": 4, "enable_fp_fusion": True}
    assert callable(mod.launch) and hasattr(mod, "persistent_kernel")


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker()
