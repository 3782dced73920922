"""bench/hopper_sweep.py (issue 19's measurement) on the CPU: its shape pick and per-class summary."""

import sqlite3

import pytest

from cudal2.problems import Problem
from cudal2.stats import shape_class
from bench_import import load_bench

hs = load_bench("hopper_sweep")


def test_pick_spreads_over_each_class_and_keeps_the_cubes():
    got = hs.pick_shapes(["starved", "large"], 5, ["nn", "nt"])
    nn = [p for p in got if p.layout == "nn"]
    assert {p.layout for p in got} == {"nn", "nt"} and len(got) == 2 * len(nn)
    starved = [p for p in nn if shape_class(p.M, p.N, p.K) == "starved"]
    large = [p for p in nn if shape_class(p.M, p.N, p.K) == "large"]
    assert len(starved) == 5 and len(large) == 7            # 5 spread + 4096^3 and 8192^3
    assert Problem(4096, 4096, 4096) in large and Problem(8192, 8192, 8192) in large
    flops = [p.flops for p in starved]
    assert flops == sorted(flops)                            # both ends of the class, in order
    assert len(hs.pick_shapes(["mid"], 0, ["nn"])) == 82      # 0: the whole class


def test_summary_takes_the_best_spec_per_shape():
    rows = [
        {"class": "shortK", "layout": "nn", "shape": "a", "vs_best_cublas": 0.9},
        {"class": "shortK", "layout": "nn", "shape": "a", "vs_best_cublas": 1.1},
        {"class": "shortK", "layout": "nn", "shape": "b", "vs_best_cublas": 0.8},
        {"class": "shortK", "layout": "nn", "shape": "c", "vs_best_cublas": None},   # nothing ran
        {"class": "shortK", "layout": "nt", "shape": "a", "vs_best_cublas": 1.2},
    ]
    s = hs.summarize(rows)
    assert s["shortK/nn"] == {"shapes": 2, "geomean": round((1.1 * 0.8) ** 0.5, 4), "worst": 0.8,
                              "best": 1.1, "wins": 1}
    assert s["shortK/nt"]["shapes"] == 1 and s["shortK/nt"]["wins"] == 1


def test_plan_names_each_specs_source_and_summarizes_per_source():
    """--cost-model adds the ranker's best CUDA specs of its pool beside the wave model's, each row
    saying which proposed it, so one run compares the two rankings on the same clock."""
    import dataclasses

    from cudal2.device import DeviceInfo
    from cudal2.spec import is_valid
    from cudal2.tiles import candidates
    dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)

    class Ranker:          # a stand-in for rl.costmodel.CostModel: prefers the smallest tiles
        def rank(self, problem, specs):
            return sorted(specs, key=lambda s: (s.bm * s.bn, s.text))

    p = Problem(256, 512, 2048, "nt")
    got = hs.plan([p], dev, 4, [], lite=1, cost_model=Ranker(), n_cost=3)[p]
    wave = [s.text for s in candidates(p, dev, 4, lite=1)]
    assert list(got)[: len(wave)] == wave and all(got[t] == "wave" for t in wave)
    cost = [t for t, src in got.items() if src == "cost"]
    assert 1 <= len(cost) <= 3 and all(t not in wave for t in cost)
    from cudal2.spec import KernelSpec
    assert all(KernelSpec.parse(t).backend == "cuda" and is_valid(KernelSpec.parse(t), p, dev) for t in cost)
    rows = [{"class": "small", "layout": "nt", "shape": "a", "vs_best_cublas": 0.9, "from": "wave"},
            {"class": "small", "layout": "nt", "shape": "a", "vs_best_cublas": 1.2, "from": "cost"}]
    assert hs.summarize(rows, "wave")["small/nt"]["best"] == 0.9
    assert hs.summarize(rows, "cost")["small/nt"]["best"] == 1.2 and hs.summarize(rows)["small/nt"]["wins"] == 1


def test_bks_adds_each_wave_candidate_at_other_k_tiles_and_pairs_them():
    """--bks 32,128: every wave candidate again with bk 32 / 128 and the deepest ring that fits (a
    bk-32 ring holds twice the stages of a bk-64 one in the same bytes; a lite one no more than its
    k-tiles), and bk_pairs divides each
    parent's time by its variant's on the same shape only."""
    import dataclasses

    from cudal2.device import DeviceInfo
    from cudal2.spec import KernelSpec, is_valid
    from cudal2.tiles import candidates
    dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)
    p = Problem(4096, 4096, 512, "nt")
    got = hs.plan([p], dev, 3, [], lite=1, bks=(32, 128))[p]
    wave = candidates(p, dev, 3, lite=1)
    assert any(s.warp_spec == 0 for s in wave)
    for s in wave:
        for bk in (32, 128):
            v = [KernelSpec.parse(t) for t, src in got.items() if src == f"bk{bk}"
                 and dataclasses.replace(KernelSpec.parse(t), bk=64, stages=s.stages) == s]
            assert len(v) <= 1 and all(is_valid(x, p, dev) for x in v)
            if v and bk == 32:
                assert v[0].stages >= min(16, 2 * s.stages - 1)
    assert any(src == "bk32" for src in got.values()) and any(src == "bk128" for src in got.values())
    # a lite variant's ring is no deeper than its unit's k-tiles (all of K in flight, nothing idle)
    import math
    for t, src in got.items():
        v = KernelSpec.parse(t)
        if src.startswith("bk") and v.warp_spec == 0:
            assert v.stages <= max(2, math.ceil(math.ceil(p.K / v.bk) / v.split_k))

    base = "backend=cuda family=wgmma bm=128 bn=128 bk={} warps=12 stages={} group_m=8 split_k=1 subtile=1 warp_spec=1 cluster=1"
    rows = [{"shape": "a", "layout": "nt", "spec": base.format(64, 4), "us": 10.0, "from": "wave"},
            {"shape": "a", "layout": "nt", "spec": base.format(32, 8), "us": 8.0, "from": "bk32"},
            {"shape": "a", "layout": "nt", "spec": base.format(128, 2), "us": 12.5, "from": "bk128"},
            {"shape": "b", "layout": "nt", "spec": base.format(32, 8), "us": 1.0, "from": "bk32"},   # no parent
            {"shape": "c", "layout": "nt", "spec": base.format(64, 4), "us": 5.0, "from": "wave"},
            {"shape": "c", "layout": "nt", "spec": base.format(32, 8), "us": None, "from": "bk32"}]  # failed
    pairs = hs.bk_pairs(rows)
    assert pairs["bk32"] == {"pairs": 1, "geomean": 1.25, "worst": 1.25, "best": 1.25, "faster": 1, "slower": 0}
    assert pairs["bk128"]["geomean"] == 0.8 and pairs["bk128"]["slower"] == 1


def test_groups_add_each_wave_candidate_at_other_tile_orders_and_pair_them():
    """--groups -1,-8,16: every wave candidate again at each tile order valid for it (the CUDA
    families take columns grouped along N), and group_pairs divides the wave parent's time by the
    variant's on the same shape only, ordered by group."""
    import dataclasses

    from cudal2.device import DeviceInfo
    from cudal2.spec import KernelSpec
    from cudal2.tiles import candidates
    dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)
    p = Problem(4096, 4096, 4096, "nt")
    got = hs.plan([p], dev, 3, [], groups=(-1, -8, 8, 16))[p]
    wave = candidates(p, dev, 3)
    for s in wave:
        assert s.group_m == 8
        for g in (-1, -8, 16):
            assert got[dataclasses.replace(s, group_m=g).text] == f"group{g}"
    assert "group8" not in got.values()           # the parent's own order is not a variant
    assert len(got) == 4 * len(wave)

    base = "backend=cuda family=wgmma bm=128 bn=256 bk=64 warps=12 stages=3 group_m={} split_k=1 subtile=1 warp_spec=1 cluster=1"
    rows = [{"shape": "a", "layout": "nt", "spec": base.format(8), "us": 10.0, "from": "wave"},
            {"shape": "a", "layout": "nt", "spec": base.format(-8), "us": 8.0, "from": "group-8"},
            {"shape": "a", "layout": "nt", "spec": base.format(16), "us": 12.5, "from": "group16"},
            {"shape": "a", "layout": "nn", "spec": base.format(-8), "us": 1.0, "from": "group-8"},   # no parent
            {"shape": "c", "layout": "nt", "spec": base.format(8), "us": 5.0, "from": "wave"},
            {"shape": "c", "layout": "nt", "spec": base.format(-8), "us": None, "from": "group-8"}]  # failed
    pairs = hs.group_pairs(rows)
    assert list(pairs) == ["group-8", "group16"]
    assert pairs["group-8"] == {"pairs": 1, "geomean": 1.25, "worst": 1.25, "best": 1.25, "faster": 1, "slower": 0}
    assert pairs["group16"]["geomean"] == 0.8 and pairs["group16"]["slower"] == 1


def test_refuses_a_torch_only_bar_unless_asked(monkeypatch, capsys, tmp_path):
    """When the cuBLAS baselines cannot be built (nvmath-python missing, or a wheel that does not
    import: 2026-12-04), the sweep stops with the one-line refusal instead of measuring against
    torch.matmul alone; --torch-only goes on (here to the no-GPU exit)."""
    import cudal2.baselines as bl
    monkeypatch.setattr(bl, "unbuildable", lambda names: {n: "unavailable: nvmath-python failed to import"
                                                          for n in sorted(names) if n != "torch"})
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert hs.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: best-cublas cannot be formed: cublas-nn, cublas-tn, cublaslt-autotune")
    assert "--torch-only" in err and "--baselines" not in err
    assert hs.main(["--out", str(tmp_path), "--torch-only"]) == 3
    monkeypatch.setattr(bl, "unbuildable", lambda names: {})
    assert hs.main(["--out", str(tmp_path)]) == 3          # all buildable: on to the GPU check


def test_compiled_in_order_yields_each_shape_once_its_own_compiles_are_done():
    """The sweep times a shape as soon as its specs are compiled (bench/hopper_sweep.py's
    compiled_in_order): problems in order, each with its own compile errors only, a (spec, layout)
    shared by two shapes compiled once, and the later shapes' compiles still running when the first
    is yielded (a stand-in compile that blocks on the last shape's spec until released)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from cudal2.problems import Problem

    release, calls = threading.Event(), []

    def fake_compile(args):
        text, shape, layout, _ = args
        calls.append((text, layout))
        if text == "late":
            assert release.wait(10), "never released"
        return text, layout, "boom" if text == "bad" else None

    p1, p2, p3 = Problem(100, 200, 300, "nt"), Problem(64, 64, 64, "nt"), Problem(64, 64, 64, "nn")
    specs = {p1: {"a": "wave", "bad": "wave"}, p2: {"a": "wave", "late": "wave"}, p3: {"a": "wave"}}
    with ThreadPoolExecutor(4) as ex:
        it = hs.compiled_in_order([p1, p2, p3], specs, {}, ex, compile_fn=fake_compile)
        p, errors = next(it)
        assert p == p1 and errors == {("bad", "nt"): "boom"}
        assert not release.is_set()                      # p2's "late" compile has not finished
        release.set()
        rest = list(it)
    assert [p for p, _ in rest] == [p2, p3] and all(e == {} for _, e in rest)
    assert sorted(calls) == sorted([("a", "nt"), ("bad", "nt"), ("late", "nt"), ("a", "nn")])


def test_extra_file_adds_the_other_families_where_valid(tmp_path):
    """--extra-file (bench/small_extra.txt): each line a spec of any backend, comments dropped, a bad
    line refused before any compile; plan tries each where it is valid ("extra"), beside the wave
    model's wgmma specs, and a shape where one is not valid does not get it."""
    import dataclasses

    import pytest

    from cudal2.device import DeviceInfo
    from cudal2.spec import KernelSpec, SpecError, is_valid
    from bench_import import BENCH
    dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)
    texts = hs.extra_specs("", str(BENCH / "small_extra.txt"))
    fams = {KernelSpec.parse(t).family for t in texts}
    assert len(texts) == 8 and fams == {"tiled", "mma", "stream"}
    p = Problem(512, 512, 256, "nn")
    got = hs.plan([p], dev, 4, texts)[p]
    extra = [t for t, src in got.items() if src == "extra"]
    assert extra and set(extra) <= set(texts)
    assert extra == [t for t in texts if is_valid(KernelSpec.parse(t), p, dev)]
    assert all(KernelSpec.parse(t).family == "wgmma" for t, src in got.items() if src == "wave")
    split = "backend=triton family=tiled bm=32 bn=64 bk=64 warps=4 stages=2 split_k=3"
    f = tmp_path / "x.txt"
    f.write_text(f"# a comment\n\n{split}  # why\n")
    assert hs.extra_specs("family=mma bm=16 bn=32 bk=32 warps=2 stages=3", str(f)) == [
        KernelSpec.parse("family=mma bm=16 bn=32 bk=32 warps=2 stages=3").text, KernelSpec.parse(split).text]
    f.write_text("family=tiled bm=63\n")
    with pytest.raises((SpecError, ValueError)):
        hs.extra_specs("", str(f))


def test_main_times_each_shape_after_its_compiles_and_writes_as_it_goes(monkeypatch, tmp_path):
    """The whole sweep on a machine without a GPU, the card and the timing stood in (the device,
    the no-GPU exit, the baselines, sweep_shape): the wave specs and the extra file's specs of
    every backend compile in the workers (NVRTC and Triton for sm_90a), each shape is handed its own
    compile errors and timed in order, the CSV / JSON hold every timed shape, and a time limit
    reached stops before the next shape."""
    import csv
    import dataclasses
    import json

    import cudal2.baselines as bl
    import cudal2.device
    import cudal2.versions
    from cudal2.device import DeviceInfo
    from bench_import import BENCH
    import sys
    dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)
    # the workers unpickle hopper_sweep._compile by module name (on the card it runs as __main__)
    monkeypatch.setitem(sys.modules, "hopper_sweep", hs)
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(bl, "unbuildable", lambda names: {})
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr(cudal2.device, "current", lambda: dev)
    monkeypatch.setattr(cudal2.versions, "source_commit", lambda: "abc1234")
    monkeypatch.setattr(cudal2.versions, "collect", lambda: {})
    seen = []

    def fake_sweep(p, specs, dev_, min_ms, errors):
        seen.append((p.shape, dict(errors)))
        return [{"shape": p.shape, "layout": p.layout, "class": "small", "spec": t,
                 "status": "ok" if (t, p.layout) not in errors else "compile failed", "best_cublas": "torch",
                 "best_cublas_us": 6.0, "us": 5.0, "spread": 0.01, "vs_best_cublas": 1.2, "tflops": 1.0,
                 "cluster_ctas": None, "from": src, "baselines_missing": ""} for t, src in specs.items()]
    monkeypatch.setattr(hs, "sweep_shape", fake_sweep)
    args = ["--out", str(tmp_path), "--layouts", "nn", "--shapes", "256x256x256,64x512x1024", "--n-cands", "2",
            "--extra-file", str(BENCH / "small_extra.txt"), "--jobs", "2", "--tag", "t"]
    assert hs.main(args) == 0
    assert [s for s, _ in seen] == ["256x256x256", "64x512x1024"]
    assert all(e == {} for _, e in seen), seen                       # every spec compiled
    rows = list(csv.DictReader(open(tmp_path / "t_abc1234.csv")))
    fams = {r["spec"].split("family=")[1].split()[0] for r in rows}
    assert {"wgmma", "tiled", "mma", "stream"} <= fams
    # stream at both: min(M, N) = 64, and (since 2026-12-07) any small-class shape, 256^3 too
    assert {r["shape"] for r in rows if "family=stream" in r["spec"]} == {"256x256x256", "64x512x1024"}
    doc = json.loads((tmp_path / "t_abc1234.json").read_text())
    assert doc["summary"]["small/nn"]["shapes"] == 2
    seen.clear()
    assert hs.main(args + ["--time-limit", "0"]) == 0 and seen == []   # the box reached before the first
    # its compiles were running when the box closed: killed, and no pool thread left for exit to
    # wait on (stop 59's CI hung there: the kill came after shutdown had dropped the processes)
    import threading
    assert not [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread"]


def test_pairs_give_each_problem_its_own_specs_where_valid(tmp_path):
    """--pairs: a problem per line with the spec to time there; a spec the validity rule refuses at
    its problem is left out of that problem's plan (not of the others'); a bad line fails first."""
    import dataclasses

    import pytest

    from cudal2.device import DeviceInfo
    dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)
    a = "backend=cuda family=wgmma bm=64 bn=32 bk=64 warps=8 stages=16 group_m=8 split_k=1 subtile=1 warp_spec=1 cluster=1"
    b = a.replace("bn=32", "bn=64").replace("stages=16", "stages=13")
    f = tmp_path / "pairs.txt"
    f.write_text(f"# header\n1000x200x512:nn|{a}  # small 1.02 0.55\n1000x200x512:nn|{b}\n"
                 f"1000x202x512:nn|{a}\n")       # N % 8 != 0: TMA refuses it there
    pairs = hs.read_pairs(str(f))
    assert list(pairs) == [Problem(1000, 200, 512, "nn"), Problem(1000, 202, 512, "nn")]
    specs = hs.plan(list(pairs), dev, 0, [])
    assert specs == {p: {} for p in pairs}                   # --n-cands 0: no wave candidates
    hs.add_pairs(specs, pairs, dev)
    assert list(specs[Problem(1000, 200, 512, "nn")].items()) == [(a, "pair"), (b, "pair")]
    assert specs[Problem(1000, 202, 512, "nn")] == {}
    f.write_text(f"1000x200x512|{a}\n")
    with pytest.raises(SystemExit, match=r"pairs.txt:1: not 'MxNxK:layout\|spec'"):
        hs.read_pairs(str(f))
    f.write_text("1000x200x512:nn|backend=cuda family=nope\n")
    with pytest.raises(SystemExit, match="pairs.txt:1: "):
        hs.read_pairs(str(f))


def test_nn_family_gaps_lists_the_other_layouts_best_never_run_here():
    gap = load_bench("nn_family_gaps")
    a = "backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=8 stages=13 group_m=8 split_k=1 subtile=1 warp_spec=1 cluster=1"
    b = a.replace("stages=13", "stages=8")
    m = {"512x512x512:nt": {a: 1.10, b: 1.05}, "512x512x512:nn": {b: 0.80},    # a never ran on nn
         "1024x1024x1024:nt": {a: 1.0}, "1024x1024x1024:nn": {a: 0.99}}        # it did here
    rows = gap.gaps(m, "nn", "nt", "h200-sm90")
    assert rows == [("small", "512x512x512:nn", a, 1.10, 0.80)]
    assert gap.gaps(m, "nn", "nt", "h200-sm90", top=2) == rows                # b ran on nn already


def test_nn_family_gaps_names_a_missing_store_and_a_device_the_stores_lack(tmp_path):
    gap = load_bench("nn_family_gaps")
    with pytest.raises(SystemExit, match=r"--stores .*nope\.db: no such file"):
        gap.main(["--stores", str(tmp_path / "nope.db"), "--out", str(tmp_path / "gaps.txt")])
    con = sqlite3.connect(tmp_path / "a.db")
    con.execute("create table measurements (spec text, problem text, device text, status text, "
                "time_us real, best_cublas_us real)")
    con.execute("insert into measurements values ('backend=cuda family=wgmma bm=64', '64x64x64:nt', "
                "'h200-sm90', 'ok', 8.0, 9.0)")
    con.commit()
    con.close()
    with pytest.raises(SystemExit, match="no ok wgmma measurement of --device h100-sm90"):
        gap.main(["--stores", str(tmp_path / "a.db"), "--device", "h100-sm90", "--out", str(tmp_path / "gaps.txt")])
    assert not (tmp_path / "gaps.txt").exists()
