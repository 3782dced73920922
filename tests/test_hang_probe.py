"""bench/hang_probe.py's source patch: every anchor it probes is still in the wgmma template (a
missing one is skipped silently on the card, so the drift is caught here), and the patched kernel
compiles for sm_90a (NVRTC, no GPU) without spills."""
import pytest

from bench_import import load_bench
from cudal2.backends.cuda import CudaBackend
from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import KernelSpec

hp = load_bench("hang_probe")


@pytest.mark.parametrize("text", ["bm=128 bn=128 warps=12 stages=5",                      # cooperative
                                  "bm=64 bn=128 warps=12 stages=6 warp_spec=2",           # ping-pong
                                  "bm=64 bn=64 warps=8 stages=6 split_k=2"])              # cluster split-K
def test_every_anchor_is_in_the_template_and_the_probe_compiles(tmp_path, text):
    be = CudaBackend(cache_dir=tmp_path)
    spec = KernelSpec.parse(f"backend=cuda family=wgmma {text}")
    p = Problem(1000, 1000, 4096, "nt")
    src = be.render(spec, p)
    for anchor, _before, _after in hp.PATCHES:
        assert anchor in src, anchor
    patched = hp.patch(src)
    # every occurrence of an anchor gets its calls (TL_STORE's line is there twice: EPI_DIRECT's too)
    calls = sum(src.count(a) * (bool(b) + bool(af)) for a, b, af in hp.PATCHES[1:])
    assert patched.count("hp(") == 1 + calls and calls >= 5
    art = be.compile_source(spec, patched, DeviceInfo.target().arch, "nt")
    assert art.meta["spills_bytes"] == 0
