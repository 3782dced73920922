"""cudal2.evaluate.warm, on a machine without a GPU: compiling ahead in worker processes fills the
backend's disk cache, so the in-process build of the same (spec, problem) is a cache hit (NVRTC for
sm_90a needs no GPU); duplicates compile once; a spec that cannot compile is counted, not raised;
registry_pairs takes kernel entries only and builds a scoped entry for the problem itself."""
from __future__ import annotations

from dataclasses import dataclass

from cudal2.backends import cuda as cuda_backend
from cudal2.device import DeviceInfo
from cudal2.evaluate.warm import registry_pairs, warm_compiles
from cudal2.problems import Problem
from cudal2.spec import KernelSpec

DEV = DeviceInfo.target("sm_90a")
MMA = KernelSpec.parse("backend=cuda family=mma bm=16 bn=32 bk=32 warps=2 stages=3 group_m=1")


def test_compiling_ahead_fills_the_cache_the_build_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path))          # the workers' cache
    monkeypatch.setattr(cuda_backend.BACKEND, "cache_dir", tmp_path / "cubin")   # this process's
    p, q = Problem(100, 72, 136, "nt"), Problem(33, 64, 200, "nn")
    stream = KernelSpec.parse("backend=cuda family=stream bm=16 bn=16 bk=32 warps=8 stages=7 group_m=1")
    big = Problem(1000, 1000, 1000, "nt")      # 2 GFLOP, min(M, N) > 64: no stream kernel serves it
    n, failed, secs = warm_compiles([(MMA, p), (MMA, p), (MMA, q), (stream, big)], DEV, workers=2)
    assert (n, failed) == (3, 1) and secs > 0      # the duplicate once; the stream spec refused
    assert len(list((tmp_path / "cubin").glob("*.cubin"))) == 2   # one source a layout
    art = cuda_backend.BACKEND.compile(MMA, p, DEV)
    assert art.meta["cached"] is True and art.binary
    assert warm_compiles([], DEV) == (0, 0, 0.0)


@dataclass
class _Entry:
    backend: str
    spec: str


class _Reg:
    """A stand-in registry: a kernel entry scoped over M (any M of 64x64), a cuBLAS entry, none."""
    def lookup(self, p, key):
        assert key == "h100-sm90"
        if (p.N, p.K) == (64, 64):
            return _Entry("cuda", MMA.text)
        if p.N == 128:
            return _Entry("cublas", "")
        return None


def test_registry_pairs_takes_the_kernel_entries_for_each_problem():
    ps = [Problem(7, 64, 64, "nt"), Problem(9, 64, 64, "nt"), Problem(7, 128, 64, "nt"), Problem(7, 256, 64, "nt")]
    got = registry_pairs(_Reg(), ps, "h100-sm90")
    assert got == [(MMA, ps[0]), (MMA, ps[1])]
