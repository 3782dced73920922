"""bench/stream_small.py: which small-class shapes past 64 tokens the stream sweep times (the card's
cuBLAS-served ones, then weak kernel entries with --served all), in what order (fewest re-read bytes
first), and that its file is what `bench/hopper_sweep.py --pairs` reads: valid specs at each shape."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import pytest

from bench_import import load_bench
from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.registry import Registry
from cudal2.registry.index import shipped_root
from cudal2.spec import KernelSpec, is_valid
from cudal2.stats import shape_class

ss = load_bench("stream_small")
H100 = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)


def test_reread_bytes_counts_every_tile_of_both_operands():
    s = KernelSpec.parse("backend=cuda family=stream bm=16 bn=32 bk=32 warps=4 stages=3 group_m=1")
    # 256 rows / 16 x 256 tokens / 32 = 128 CTAs, each (16 + 32) rows of K = 512 halves
    assert ss.reread_bytes(Problem(256, 256, 512, "nt"), s) == 128 * 48 * 512 * 2
    # the large dimension is the larger of M and N whichever it is; split-K does not change the sum
    split = KernelSpec.parse("backend=cuda family=stream bm=16 bn=32 bk=32 warps=4 stages=3 group_m=1 split_k=4")
    assert ss.reread_bytes(Problem(100, 300, 64), split) == 19 * 4 * 48 * 64 * 2 == ss.reread_bytes(Problem(300, 100, 64), s)


@dataclass
class _E:
    backend: str
    time_us: float = 0.0
    best_cublas_us: float = 0.0


class _Reg:
    """Entries by shape text: a cuBLAS one, kernels at 1.05 and 1.20 of best-cublas, none elsewhere."""
    def __init__(self, entries):
        self.entries = entries

    def lookup(self, p, key):
        return self.entries.get(p.shape)


def test_pick_takes_cublas_served_first_then_weak_kernels_only_with_all(monkeypatch):
    grid = [Problem(*s, "nt") for s in ((128, 128, 512), (256, 256, 512), (512, 512, 512), (64, 4096, 1024),
                                        (1024, 1024, 1024), (2048, 128, 512))]
    monkeypatch.setattr("cudal2.problems.grid", lambda layout: grid)
    reg = _Reg({"128x128x512": _E("cublas"), "256x256x512": _E("cuda", 10.0, 10.5),     # kernel at 1.05
                "512x512x512": _E("cuda", 10.0, 12.0),                                    # kernel at 1.20
                "2048x128x512": _E("cublas"), "64x4096x1024": _E("cublas"), "1024x1024x1024": _E("cublas")})
    cost = {"128x128x512": 5, "2048x128x512": 1}
    got = ss.pick(reg, "h100-sm90", "nt", "cublas", 1.10, lambda p: cost.get(p.shape, 0))
    # 64 tokens (the family's old domain, searched) and 2.1 GFLOP (not small) never; cheaper first
    assert [(r, p.shape) for r, p in got] == [(1.0, "2048x128x512"), (1.0, "128x128x512")]
    got = ss.pick(reg, "h100-sm90", "nt", "all", 1.10, lambda p: cost.get(p.shape, 0))
    assert [p.shape for _, p in got] == ["2048x128x512", "128x128x512", "256x256x512"]
    assert got[-1][0] == pytest.approx(1.05)


def test_the_shipped_h100_pairs_file_is_what_the_sweep_reads(tmp_path):
    out = tmp_path / "stream_small_nt.pairs"
    assert ss.main(["--layout", "nt", "--out", str(out), "--device-key", "h100-sm90", "--sms", "132"]) == 0
    hs = load_bench("hopper_sweep")
    pairs = hs.read_pairs(str(out))
    reg = Registry.load(shipped_root())
    assert len(pairs) >= 40           # 57 of the H100's 67 small nt cuBLAS entries past 64 tokens (2026-12-07)
    firsts = []
    for p, texts in pairs.items():
        assert p.layout == "nt" and shape_class(p.M, p.N, p.K) == "small" and min(p.M, p.N) > 64
        assert reg.lookup(p, "h100-sm90").backend == "cublas"
        assert texts and all(is_valid(KernelSpec.parse(t), p, H100) for t in texts)
        assert all(KernelSpec.parse(t).family == "stream" for t in texts)
        firsts.append(min(ss.reread_bytes(p, KernelSpec.parse(t)) for t in texts))
    assert firsts == sorted(firsts)   # the likeliest wins first: a sweep cut short has timed them
    text = out.read_text()
    assert re.search(r"# no one-wave stream spec: .*12288x256x64", text)   # listed, not timed


def test_without_a_card_a_dry_run_needs_the_key_and_sms(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("cudal2.device.gpu_available", lambda: False)
    assert ss.main(["--layout", "nn", "--out", str(tmp_path / "x.pairs")]) == 2
    assert "--device-key and --sms" in capsys.readouterr().err
    assert ss.main(["--layout", "nn", "--out", str(tmp_path / "x.pairs"), "--device-key", "b200-sm100",
                    "--sms", "148"]) == 2
    assert "no b200-sm100 entries" in capsys.readouterr().err


def test_report_takes_each_shapes_fastest_checked_stream_spec(tmp_path):
    st = "backend=cuda family=stream bm={} bn={} bk=32 warps=4 stages=3 group_m=1 split_k=1 subtile=1 warp_spec=0 cluster=1"
    wg = "backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=8 stages=6 group_m=8 split_k=1 subtile=1 warp_spec=1 cluster=1"
    head = "shape,layout,class,spec,status,best_cublas,best_cublas_us,us,spread,vs_best_cublas,tflops,cluster_ctas,from,baselines_missing"

    def row(shape, spec, status, us, ratio):
        return f'{shape},nt,small,{spec},{status},torch,6.0,{us},0.01,{ratio},1.0,,pair,'
    lines = [head,
             row("128x128x512", st.format(16, 32), "ok", 5.0, 1.2),          # 1.6 MB
             row("128x128x512", st.format(16, 64), "ok", 5.5, 1.09),
             row("256x256x512", st.format(16, 32), "ok", 6.0, 1.0),          # 6.3 MB
             row("256x256x512", st.format(32, 64), "wrong result", 1.0, 6.0),  # failed: never the best
             row("512x1024x256", st.format(32, 64), "ok", 7.5, 0.8),          # 12.6 MB
             row("512x1024x256", wg, "ok", 4.0, 1.5)]                          # another family: not counted
    csv_path = tmp_path / "sweep.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "t.md"
    assert ss.main(["--report", str(csv_path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "3 shapes with a checked stream kernel (1 specs failed on 1 shapes); 1 at >= 1.01x" in text
    assert f"geomean {(1.2 * 1.0 * 0.8) ** (1 / 3):.3f}" in text
    assert "rank correlation of re-read MB with the ratio: -1.00" in text
    body = [ln for ln in text.splitlines() if ln.startswith("| ") and "x" in ln.split("|")[1]]
    assert [ln.split("|")[1].strip() for ln in body] == ["128x128x512:nt", "256x256x512:nt", "512x1024x256:nt"]
    assert "bm=16 bn=32 warps=4 stages=3 split_k=1 | 5.00 | 6.00 | 1.200 | 1.6 |" in body[0]
