"""bench/sweep_leads.py: a sweep's winners become generate's leads only where they beat the filed entry."""
import csv

from bench_import import load_bench

from cudal2.problems import Problem
from cudal2.spec import KernelSpec

sl = load_bench("sweep_leads")

FIELDS = ["shape", "layout", "class", "spec", "status", "best_cublas", "best_cublas_us", "us", "spread",
          "vs_best_cublas", "tflops", "cluster_ctas", "from", "baselines_missing"]
BIG = "backend=cuda family=wgmma bm=128 bn=256 bk=64 warps=12 stages=3 group_m=8 split_k=2 subtile=1 warp_spec=1 cluster=1"
SMALL = "backend=cuda family=wgmma bm=128 bn=128 bk=64 warps=12 stages=6 group_m=8 split_k=1 subtile=1 warp_spec=1 cluster=1"


def _row(shape, layout, spec, ratio, status="ok"):
    return {"shape": shape, "layout": layout, "spec": spec, "status": status,
            "vs_best_cublas": "" if ratio is None else str(ratio)}


def test_winners_take_the_fastest_spec_over_the_bar():
    rows = [_row("512x4096x8192", "nt", SMALL, 1.02), _row("512x4096x8192", "nt", BIG, 1.11),
            _row("512x4096x8192", "nn", BIG, 1.005),                  # under the 1.01 bar
            _row("1024x1024x8192", "nt", BIG, 1.5, status="check failed: nan"),
            _row("1024x1024x8192", "nt", SMALL, None)]                # did not run
    got = sl.winners(rows, 1.01)
    assert list(got) == [("512x4096x8192", "nt")]
    assert got[("512x4096x8192", "nt")]["spec"] == BIG


def test_leads_skip_shapes_the_registry_already_serves_faster(tmp_path, monkeypatch):
    path = tmp_path / "sweep.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, restval="")
        w.writeheader()
        w.writerow(_row("512x4096x8192", "nt", BIG, 1.11))
        w.writerow(_row("1024x1024x8192", "nn", BIG, 1.20))
        w.writerow(_row("2048x1024x16384", "nt", SMALL, 1.04))
    # filed: 1024x1024x8192:nn already at 1.25x; 2048x1024x16384:nt a cuBLAS entry (1.0)
    monkeypatch.setattr(sl, "filed_speedups", lambda registry, device: {"1024x1024x8192:nn": 1.25,
                                                                         "2048x1024x16384:nt": 1.0})
    out, shapes = tmp_path / "leads.txt", tmp_path / "shapes.txt"
    assert sl.main([str(path), "--out", str(out), "--shapes-out", str(shapes)]) == 0
    from rl.leads import read_leads
    leads = read_leads(out)
    assert list(leads) == ["512x4096x8192:nt", "2048x1024x16384:nt"]            # fastest first
    assert leads["512x4096x8192:nt"] == [KernelSpec.parse(BIG)]
    assert (tmp_path / "shapes.nt.txt").read_text().split() == ["512x4096x8192", "2048x1024x16384"]
    assert not (tmp_path / "shapes.nn.txt").exists()
    assert Problem.parse("2048x1024x16384", "nt").text in leads
