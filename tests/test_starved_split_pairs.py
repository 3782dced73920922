"""bench/starved_split_pairs.py on the CPU: which problems it picks from a sweep's CSV and which specs
it pairs them with (units near one wave, every spec valid, the 2-CTA cluster variants)."""
from __future__ import annotations

import csv
import math

from bench_import import load_bench

from cudal2.problems import Problem
from cudal2.spec import KernelSpec, is_valid

sp = load_bench("starved_split_pairs")

INFO = ("name, driver_version\nNVIDIA H100 80GB HBM3, 580\n2.11.0 3.6.0 DeviceInfo(name='NVIDIA H100 80GB HBM3', "
        "cc=(9, 0), smem_per_block=232448, smem_per_sm=233472, regs_per_sm=65536, sm_count=132, "
        "l2_bytes=52428800, max_regs_per_thread=255, cluster_ctas=((2, 132), (4, 120), (8, 120), (16, 112)))\n")


def _sweep(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["shape", "layout", "class", "spec", "status", "vs_best_cublas"])
        w.writeheader()
        for shape, layout, cls, status, v in rows:
            w.writerow({"shape": shape, "layout": layout, "class": cls, "spec": "x", "status": status,
                        "vs_best_cublas": v})


def test_card_reads_the_info_line(tmp_path):
    (tmp_path / "info.txt").write_text(INFO)
    d = sp.card(str(tmp_path / "info.txt"))
    assert d.sm_count == 132 and d.smem_per_block == 232448 and dict(d.cluster_ctas)[16] == 112


def test_worst_takes_each_problems_best_and_the_lowest(tmp_path):
    # a problem's ratio is its best spec's; failed rows and other classes do not count
    _sweep(tmp_path / "a.csv", [("512x512x16384", "nt", "starved", "ok", 0.70),
                                ("512x512x16384", "nt", "starved", "ok", 0.81),
                                ("256x256x16384", "nt", "starved", "ok", 0.75),
                                ("256x256x16384", "nt", "starved", "fail", 0.99),
                                ("1024x1024x512", "nt", "shortK", "ok", 0.50),
                                ("128x1024x8192", "nt", "starved", "ok", 0.90)])
    got = sp.worst([str(tmp_path / "a.csv")], 2, "starved")
    assert got == [("256x256x16384", "nt", 0.75), ("512x512x16384", "nt", 0.81)]


def test_pairs_are_valid_near_one_wave_and_hold_the_cluster_variants(tmp_path, capsys):
    (tmp_path / "info.txt").write_text(INFO)
    _sweep(tmp_path / "a.csv", [("512x512x16384", "nn", "starved", "ok", 0.72)])
    assert sp.main(["--sweeps", str(tmp_path / "a.csv"), "--worst", "5", "--card", str(tmp_path / "info.txt")]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")]
    dev = sp.card(str(tmp_path / "info.txt"))
    p = Problem(512, 512, 16384, "nn")
    specs = []
    for ln in lines:
        prob, rest = ln.split("|")
        assert prob == "512x512x16384:nn" and rest.endswith("# starved 0.720")
        s = KernelSpec.parse(rest.split("#")[0].strip())
        assert is_valid(s, p, dev)
        units = math.ceil(512 / s.bm) * math.ceil(512 / s.bn) * s.split_k
        assert 64 <= units <= 264
        specs.append(s)
    key = {(s.bm, s.bn, s.split_k, s.warp_spec, s.cluster) for s in specs}
    # 16 tiles of 128x128: splits 4 / 6 / 8 / 12 / 16 (64-256 units); split 2 (32) and 3 (48) are out
    assert {k[2] for k in key if k[:2] == (128, 128) and k[3] == 1 and k[4] == 1} == {4, 6, 8, 12, 16}
    assert all(k[3] == 1 for k in key)       # cooperative only: ping-pong 128x128 split-K is not valid
    # 64 tiles of 64x64 on 2-CTA clusters: no split (64 units) and splits 2 / 4 (128 / 256)
    assert {k[2] for k in key if k[:2] == (64, 64) and k[4] == 2} == {1, 2, 4}
    assert len(key) == len(specs)                                              # no spec twice
