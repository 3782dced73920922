"""bench/graph_clock.py and bench/pdl_probe.py without a GPU: which filed entries graph_clock picks,
its summary arithmetic, and both scripts' refusals; the timing needs a card."""
import math
import types

import pytest
from bench_import import load_bench

from cudal2.problems import Problem

gc = load_bench("graph_clock")
pp = load_bench("pdl_probe")


def _entry(shape: str, t: float):
    return types.SimpleNamespace(prob=Problem.parse(shape), time_us=t, problem=shape)


def test_pick_spreads_each_class_and_layout_over_its_filed_times():
    small = [_entry(f"64x64x{64 * i}:nt", float(i)) for i in range(1, 11)]        # small, 1..10 µs
    skinny = [_entry("64x8192x4096:nt", 20.0), _entry("64x16384x4096:nt", 30.0)]
    got = gc.pick(list(reversed(small)) + skinny, 4)
    times = sorted(e.time_us for e in got if e.prob.N == 64)
    assert times == [1.0, 4.0, 7.0, 10.0]            # every 3rd of 10 by filed time, at most 4
    assert sum(e.prob.N > 64 for e in got) == 2      # a class with fewer than the cap keeps them all


def test_summary_per_class_layout_and_all():
    rows = [{"class": "small", "layout": "nt", "filed graph / best-cublas": 1.2, "PDL=3 graph / best-cublas": 1.5},
            {"class": "small", "layout": "nt", "filed graph / best-cublas": 0.8, "PDL=3 graph / best-cublas": 1.0},
            {"class": "skinny", "layout": "nn", "filed graph / best-cublas": 1.1, "PDL=3 graph / best-cublas": 0.9}]
    s = gc.summarize(rows)
    assert s["small:nt"]["filed graph / best-cublas"]["geomean"] == pytest.approx(math.sqrt(1.2 * 0.8), abs=1e-4)
    assert s["small:nt"]["PDL=3 graph / best-cublas"] == {"n": 2, "geomean": pytest.approx(math.sqrt(1.5), abs=1e-4),
                                                          "worst": 1.0, "wins": 1}
    assert s["all"]["filed graph / best-cublas"]["n"] == 3 and s["skinny:nn"]["PDL=3 graph / best-cublas"]["wins"] == 0


def test_bad_arguments_are_refused(tmp_path):
    for bad in (["--variant", "PDL"], ["--classes", "tiny"], ["--layouts", "tn"], ["--per-class", "0"],
                ["--families", "persistent"], ["--server-calls", "0"], ["--tag", "a/b"],
                ["--resume", str(tmp_path / "missing.json")]):
        with pytest.raises(SystemExit):
            gc.main(["--out", str(tmp_path / "g"), *bad])
    for bad in (["--pdl", "4"], ["--calls", "0"], ["--max-entries", "0"]):
        with pytest.raises(SystemExit):
            pp.main(["--out", str(tmp_path / "p"), *bad])
    assert not (tmp_path / "g").exists() and not (tmp_path / "p").exists()


def test_resume_keeps_the_timed_rows_of_the_same_kind_of_run(tmp_path):
    import gzip
    import json
    doc = {"device": "h100-sm90", "lost": True,
           "rows": [{"problem": "64x64x64:nt", "lost offline / best-cublas": 1.01},
                    {"problem": "64x64x128:nt", "note": "RuntimeError: lost failed the check"}]}
    path = tmp_path / "g.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    dev, rows = gc.resumed_rows(str(path), lost=True)
    assert dev == "h100-sm90" and [r["problem"] for r in rows] == ["64x64x64:nt"]   # a failed shape runs again
    with pytest.raises(ValueError, match="was a --lost run"):
        gc.resumed_rows(str(path), lost=False)
    (tmp_path / "x.json").write_text(json.dumps({"device": "h100-sm90"}))
    with pytest.raises(ValueError, match="no rows"):
        gc.resumed_rows(str(tmp_path / "x.json"), lost=False)


def test_triton_variant_is_pdl_on_or_off_only():
    """A Triton entry's variant is the load's pdl (kernels_triton/tiled.py); template macros are refused
    before anything compiles."""
    from cudal2.device import DeviceInfo
    from cudal2.spec import KernelSpec
    spec = KernelSpec.parse("backend=triton family=tiled bm=64 bn=64 bk=32 warps=4 stages=3")
    for bad in ({"PDL": 2}, {"EPI_WIDE": 1}, {"PDL": 1, "A_TRIM": 0}):
        with pytest.raises(ValueError, match="PDL=0 or PDL=1"):
            gc.triton_variant(spec, Problem.parse("64x64x64:nt"), DeviceInfo.target("sm_90a"), bad)


def test_lost_takes_the_cublas_entries_best_unfiled_kernel(tmp_path):
    """--lost: a cuBLAS entry of the classes and layouts asked, with a best lost kernel of the
    families asked, is timed as that kernel; kernel entries, other classes / layouts / families and
    cuBLAS entries with no kernel measured are left out."""
    from cudal2.registry import Entry, Registry
    wg = "backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=8 stages=6 split_k=1 subtile=1 warp_spec=1 cluster=1"
    tl = "backend=triton family=tiled bm=64 bn=64 bk=32 warps=4 stages=3"

    def cub(shape, spec):
        times = {"best_kernel_spec": spec, "best_kernel_us": 5.5} if spec else {}
        return Entry(problem=shape, device="h200-sm90", backend="cublas", time_us=5.6, best_cublas_us=5.6,
                     baselines_us={"torch": 5.6}, times=times)
    reg = Registry.load(tmp_path, create=True)
    for shape, spec in (("256x512x256:nn", wg), ("512x512x512:nt", tl), ("128x128x128:nn", None),
                        ("4096x4096x4096:nn", wg), ("64x64x64:nt", wg)):
        reg.add(cub(shape, spec), None)
    got = gc.lost_entries(Registry.load(tmp_path), "h200-sm90", ["nn"], ["small"], ["wgmma"])
    assert [(e.problem, e.spec, e.time_us) for e in got] == [("256x512x256:nn", wg, 5.5)]
    got = gc.lost_entries(Registry.load(tmp_path), "h200-sm90", ["nt"], ["small"], ["wgmma", "tiled"])
    assert sorted(e.problem for e in got) == ["512x512x512:nt", "64x64x64:nt"]
    assert gc.lost_entries(Registry.load(tmp_path), "h100-sm90", ["nn", "nt"], ["small"], ["wgmma"]) == []
    # --lost-min: 5.6 / 5.5 = 1.018 of best-cublas where measured; an amended entry's own ratio counts
    assert len(gc.lost_entries(Registry.load(tmp_path), "h200-sm90", ["nt"], ["small"], ["wgmma", "tiled"], 1.018)) == 2
    assert gc.lost_entries(Registry.load(tmp_path), "h200-sm90", ["nt"], ["small"], ["wgmma", "tiled"], 1.02) == []
    reg = Registry.load(tmp_path)
    e = reg.entries["h200-sm90"]["64x64x64:nt"]
    e.times = {**e.times, "best_kernel_vs_best_cublas": 0.96}
    reg.add(e, None)
    got = gc.lost_entries(Registry.load(tmp_path), "h200-sm90", ["nt"], ["small"], ["wgmma", "tiled"], 0.97)
    assert [x.problem for x in got] == ["512x512x512:nt"]
