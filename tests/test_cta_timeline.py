"""bench/cta_timeline.py and the wgmma family's TIMELINE stamps, on the CPU: the summary's
arithmetic on hand-made stamps, the case parser, and (NVRTC, no GPU) that the stamps compile in and
cost nothing when off, which is what lets every filed wgmma kernel carry the TL() call sites."""
import re
from pathlib import Path

import pytest

from cudal2.kernels_cuda import render
from cudal2.spec import KernelSpec
from bench_import import load_bench

ROOT = Path(__file__).resolve().parents[1]
ct = load_bench("cta_timeline")

# A lite split-K spec (cluster reduction, no TMA store), a persistent cooperative tile, a ping-pong
# workspace split-K and a 2-CTA cluster sharing A: the paths the stamps sit on.
SPECS = ("backend=cuda family=wgmma bm=64 bn=96 bk=64 warps=4 stages=8 group_m=1 split_k=4 subtile=1 warp_spec=0 cluster=1",
         "backend=cuda family=wgmma bm=128 bn=256 bk=64 warps=12 stages=4 group_m=8 split_k=1 subtile=2 warp_spec=1 cluster=1",
         "backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=12 stages=8 group_m=4 split_k=4 subtile=2 warp_spec=2 cluster=1",
         "backend=cuda family=wgmma bm=256 bn=128 bk=64 warps=12 stages=3 group_m=8 split_k=1 subtile=2 warp_spec=1 cluster=2")


def _cta(entry_ns, offsets_ns, mhz=2000.0):
    """A CTA's len(EVENTS) (globaltimer, clock64) pairs: entry at entry_ns, event i at entry + offsets[i-1]
    (None: not stamped), the clock counting mhz cycles per µs from an arbitrary origin."""
    out = [(entry_ns, 10_000)]
    for off in offsets_ns + [None] * (len(ct.EVENTS) - 1 - len(offsets_ns)):    # the split-K's, unstamped
        out.append((0, 0) if off is None else (entry_ns + off, 10_000 + round(off * mhz / 1000)))
    return out


def test_summary_times_are_per_cta_and_missing_events_are_skipped():
    # CTA 0 enters at 1000 ns, CTA 1 at 1500 ns; the second never reduced (a split-K slice that was
    # not last) and stored nothing; a third CTA without an exit stamp (outside the buffer) is left out.
    # offsets of ready, produce, load, full, mma, reduce, store, exit
    a = _cta(1000, [200, 250, 300, 900, 4000, 4500, 5000, 6000], mhz=1980.0)
    b = _cta(1500, [400, 450, 500, 1100, 4200, None, None, 5000], mhz=1980.0)
    c = [(2000, 1)] + [(0, 0)] * (len(ct.EVENTS) - 1)
    s = ct.summarize([a, b, c], event_us=7.25)
    assert s["ctas"] == 2
    assert s["skew_median_us"] == pytest.approx(0.25) and s["skew_max_us"] == pytest.approx(0.5)
    assert s["span_us"] == pytest.approx(6.0)            # first entry 1000 -> last exit 7000 ns
    assert s["events"]["ready"]["median_us"] == pytest.approx(0.3)       # median of 0.2 and 0.4
    assert s["events"]["produce"]["median_us"] == pytest.approx(0.35)
    assert s["events"]["mma"]["max_us"] == pytest.approx(4.2)
    assert s["events"]["reduce"] == {"ctas": 1, "median_us": 4.5, "p90_us": 4.5, "max_us": 4.5}
    assert s["sm_mhz_median"] == pytest.approx(1980.0, abs=0.2)
    assert s["event_us"] == 7.25


def test_summary_refuses_an_uninstrumented_buffer():
    with pytest.raises(ValueError, match="TIMELINE=1"):
        ct.summarize([[(0, 0)] * len(ct.EVENTS), [(0, 0)] * len(ct.EVENTS)])


def test_case_parser_and_table():
    assert ct.parse_case("64x2048x4096:nt | backend=cuda family=wgmma bm=64") == \
        ("64x2048x4096:nt", "backend=cuda family=wgmma bm=64", {})
    assert ct.parse_case("64x64x64:nt|s|RED_CHUNK=8, X=-1") == ("64x64x64:nt", "s", {"RED_CHUNK": 8, "X": -1})
    assert ct.prefix({"RED_CHUNK": 8}) == "#define RED_CHUNK 8\n"
    for bad in ("64x2048x4096:nt", "a|b|c|d", "|spec", "s|t|RED_CHUNK", "s|t|RED_CHUNK=x", "s|t|TIMELINE=0"):
        with pytest.raises(ValueError, match="expected|NAME=INTEGER"):
            ct.parse_case(bad)
    summ = ct.summarize([_cta(5000, [100, 150, 200, 300, 400, None, 600, 700])], event_us=1.0)
    md = ct.table([{"shape": "64x64x64:nt", "spec": "s", "defines": {"RED_CHUNK": 4},
                    "runs": [{"before": 0, "summary": summ}]}])
    row = md.splitlines()[2]
    assert row.startswith("| 64x64x64:nt | s RED_CHUNK=4 | 0 | 1.0 |")
    assert "| 0.10 | 0.15 | 0.20 | 0.30 | 0.40 | - | 0.60 | 0.70 | - | - |" in row


def test_the_committed_cases_parse_and_are_valid_specs():
    """bench/timeline_cases.txt is what the next card session runs: every line a valid wgmma spec
    for its shape on sm_90a that compiles with the stamps and no spills (a typo there would cost a
    device call)."""
    from cudal2.device import DeviceInfo
    from cudal2.nvrtc import compile_cubin
    from cudal2.problems import Problem
    from cudal2.spec import validate
    lines = [l for l in (ROOT / "bench" / "timeline_cases.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert len(lines) == 36
    for line in lines:
        shape, text, defines = ct.parse_case(line)
        spec = KernelSpec.parse(text)
        assert spec.family == "wgmma"
        prob = Problem.parse(shape)
        validate(spec, prob, DeviceInfo.target("sm_90a"))
        _, log = compile_cubin(ct.TIMELINE_DEFINE + ct.prefix(defines) + render(spec, prob.layout), "sm_90a",
                               ("-std=c++17", "--ptxas-options=-v"))
        assert re.search(r"0 bytes spill stores", log), (line, log)


def test_the_small_probe_pairs_every_variant_with_its_filed_kernel():
    """bench/timeline_cases_small.txt is the short call's subset: a variant's row says something only
    beside the same shape and spec built as filed, so every variant case needs that plain case too."""
    from cudal2.device import DeviceInfo
    from cudal2.problems import Problem
    from cudal2.spec import validate
    cases = [ct.parse_case(l) for l in (ROOT / "bench" / "timeline_cases_small.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    plain = {(shape, text) for shape, text, defines in cases if not defines}
    variants = [(shape, text) for shape, text, defines in cases if defines]
    assert variants and plain
    for shape, text in variants:
        assert (shape, text) in plain, (shape, text)
    for shape, text, _ in cases:
        validate(KernelSpec.parse(text), Problem.parse(shape), DeviceInfo.target("sm_90a"))


def test_bad_arguments_fail_before_any_gpu_work(capsys):
    with pytest.raises(SystemExit):
        ct.main(["--case", "64x64x64:nt|x", "--before", "-1", "--out", "/tmp/unused"])
    with pytest.raises(ValueError, match="expected"):
        ct.main(["--case", "no-bar", "--out", "/tmp/unused"])
    with pytest.raises(SystemExit):
        ct.main(["--out", "/tmp/unused"])                  # no case at all


def _sass_tool():
    from cudal2.backends.sass import cuobjdump
    return cuobjdump()


@pytest.mark.parametrize("text", SPECS)
def test_stamps_compile_in_and_are_free_when_off(text):
    """TIMELINE=1 compiles for sm_90a with the stamp buffer and no spills; the filed source (TIMELINE
    unset) compiles to the same SASS as the template with every TL() line deleted."""
    from cudal2.backends.sass import same_machine_code
    from cudal2.nvrtc import compile_cubin
    spec = KernelSpec.parse(text)
    src = render(spec, "nt")
    cubin, log = compile_cubin(ct.TIMELINE_DEFINE + src, "sm_90a", ("-std=c++17", "--ptxas-options=-v"))
    assert b"cudal2_timeline" in cubin
    assert re.search(r"0 bytes spill stores", log), log
    if _sass_tool() is None:
        pytest.skip("no cuobjdump on PATH or in the triton wheel: the SASS comparison needs one")
    stripped = "\n".join(l for l in src.splitlines() if not l.strip().startswith("TL("))
    assert stripped != src
    assert same_machine_code(src, stripped, "sm_90a") is True


# ---- bench/clock_watch.py (issue 19: the SM clock during a sustained back-to-back run) ----------
cw = load_bench("clock_watch")


def test_smi_samples_parse_and_fall_into_their_phase():
    text = ("2026/12/05 10:00:00.000, 1980, 350.5, 40, 0x0000000000000000\n"
            "2026/12/05 10:00:01.000, 1755, 699.0, 55, 0x0000000000000004\n"
            "2026/12/05 10:00:02.000, 1740, 698.0, 57, 0x0000000000000004\n"
            "2026/12/05 10:00:03.000, [N/A], 300.0, 50, 0x0\n"      # skipped: not a number
            "2026/12/05 10:00:04.0")                                  # skipped: a cut last line
    s = cw.parse_smi(text)
    assert [x["sm_mhz"] for x in s] == [1980.0, 1755.0, 1740.0]
    t0 = s[0]["t"]
    # Phase [t0, t0 + 3 s]: its middle 80% is [t0 + 0.3, t0 + 2.7]: the samples at 1 s and 2 s.
    mid = cw.phase_samples(s, t0, t0 + 3.0)
    assert [x["sm_mhz"] for x in mid] == [1755.0, 1740.0]
    row = cw.summarize_phase("ours", 209.8, mid)
    assert row == {"name": "ours", "us": 209.8, "samples": 2, "sm_mhz": 1747.5, "sm_mhz_min": 1740.0,
                   "power_w": 698.5, "temp_c": 57.0, "reasons": ["0x0000000000000004"]}
    assert cw.summarize_phase("idle", 1.0, []) == {"name": "idle", "us": 1.0, "samples": 0}


def test_clock_watch_refuses_bad_arguments():
    with pytest.raises(SystemExit):
        cw.main(["--spec", "x", "--seconds", "0", "--out", "/tmp/unused"])


def test_stamp_buffer_is_read_in_the_kernels_layout():
    """Stamped.read / .sms against a stand-in driver holding a buffer laid out as wgmma.cu writes
    it: cudal2_timeline[(cta * TL_EVENTS + event) * 2 + {0: globaltimer, 1: clock64}]."""
    import array
    import ctypes

    n_ev = len(ct.EVENTS)
    stamps = array.array("Q", [0] * (ct.MAX_CTAS * n_ev * 2))
    for cta in range(3):
        for ev in range(n_ev):
            stamps[(cta * n_ev + ev) * 2] = 1_000_000 * (cta + 1) + 100 * ev
            stamps[(cta * n_ev + ev) * 2 + 1] = 7 * ev + cta
    sms = array.array("I", [0] * ct.MAX_CTAS)
    sms[0:3] = array.array("I", [5, 77, 131])
    bufs = {b"cudal2_timeline": stamps, b"cudal2_timeline_sm": sms}
    ok = object()

    class Drv:
        def cuModuleGetGlobal(self, module, name):
            b = bufs[name]
            return ok, b.buffer_info()[0], len(b) * b.itemsize

        def cuMemcpyDtoH(self, dst, src, n):
            ctypes.memmove(dst, src, n)
            return (ok,)

    st = ct.Stamped.__new__(ct.Stamped)
    st.kernel = type("K", (), {"module": None})()
    st._d, st._check = Drv(), lambda res, what: res[1:] if len(res) > 2 else None
    st.ptr, st.nbytes = st._global(b"cudal2_timeline")
    st.sm_ptr, st.sm_bytes = st._global(b"cudal2_timeline_sm")
    raw = st.read(3)
    assert raw[1][0] == (2_000_000, 1) and raw[2][7] == (3_000_700, 51)
    assert st.sms(3) == [5, 77, 131]
    assert ct.summarize(raw)["events"]["exit"]["median_us"] == pytest.approx(0.1 * ct.EXIT)
    assert ct.summarize(raw)["events"]["summed"]["median_us"] == pytest.approx(0.1 * (n_ev - 1))


# ---- on the card ---------------------------------------------------------------------------------
# The reduction experiments must pass the full checker and stay bit-identical run to run (the sum
# order is unchanged: slice 0..SPLIT_K-1) before any of them may become the filed code.
# (VPS, the float4 groups each slice sums, is 4, 2 and 8: RED_CHUNK 2 and 64 both change the code.)
VARIANT_SPECS = ("backend=cuda family=wgmma bm=64 bn=128 bk=64 warps=8 stages=8 group_m=8 split_k=4 subtile=1 warp_spec=1 cluster=1",
                 "backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=4 stages=3 group_m=8 split_k=4 subtile=1 warp_spec=0 cluster=1",
                 "backend=cuda family=wgmma bm=128 bn=128 bk=64 warps=12 stages=5 group_m=8 split_k=2 subtile=1 warp_spec=1 cluster=1")


# EARLY_LOAD (lite only: the first loads before the block-wide barrier), with and without split-K;
# TMAP_PREFETCH=0 (no tensor-map prefetch at entry), persistent and lite.
LITE_ONE = "backend=cuda family=wgmma bm=64 bn=16 bk=64 warps=4 stages=2 group_m=8 split_k=1 subtile=1 warp_spec=0 cluster=1"
VARIANTS = [(t, d) for t in VARIANT_SPECS
            for d in ({"RED_CHUNK": 64}, {"EXIT_RELAXED": 1}, {"RED_CHUNK": 2, "EXIT_RELAXED": 1})] + \
           [(VARIANT_SPECS[1], {"EARLY_LOAD": 1}), (LITE_ONE, {"EARLY_LOAD": 1})] + \
           [(VARIANT_SPECS[0], {"TMAP_PREFETCH": 0}), (LITE_ONE, {"TMAP_PREFETCH": 0})]


@pytest.mark.gpu
@pytest.mark.parametrize("text,defines", VARIANTS)
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_reduction_variants_pass_the_checker_and_are_deterministic(gpu_device, layout, text, defines):
    import torch
    from cudal2.check import check_kernel, make_inputs
    from cudal2.problems import Problem
    p = Problem(100, 1000, 3000, layout)                 # off every tile grid, K split unevenly
    spec = KernelSpec.parse(text)
    kernel = ct.build_variant(spec, p, gpu_device, ct.prefix(defines))
    report = check_kernel(kernel, p, "cuda")
    assert report.passed, "\n".join(r.line() for r in report.results)
    filed = ct.build_variant(spec, p, gpu_device, "")
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(5))
    outs = []
    for k in (kernel, kernel, filed):
        c = torch.full((p.M, p.N), float("nan"), dtype=torch.float16, device="cuda")
        k(a, b, c)
        outs.append(c)
    torch.cuda.synchronize()
    # bit-identical run to run, and to the filed kernel: the same sums in the same order
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


@pytest.mark.gpu
def test_stamped_launch_reads_back_in_event_order(gpu_device, tmp_path):
    """One case end to end on the card: every CTA stamps entry <= ready <= first data <= MMAs done
    <= exit, the span fits inside the CUDA-event time of the launch, the SM clock is a clock."""
    res = ct.run_case("256x1000x3000:nt", VARIANT_SPECS[1], {"RED_CHUNK": 64}, [0, 20], 2, gpu_device)
    assert "error" not in res, res.get("error")
    assert set(res["offline_us"]) == {"filed", "stamped", "variant"}
    for run in res["runs"]:
        ev = {name: i for i, name in enumerate(ct.EVENTS)}
        for cta in run["stamps"]:
            t = [cta[ev[n]][0] for n in ("entry", "ready", "full", "mma", "exit")]
            assert all(t) and t == sorted(t)
            # the producer thread's own two stamps, in its program order
            assert 0 < cta[ev["produce"]][0] <= cta[ev["load"]][0]
        s = run["summary"]
        assert s["ctas"] == res["grid_ctas"]
        assert s["span_us"] <= s["event_us"] + 1.0          # globaltimer and events: ~1 µs apart at most
        assert 500 < s["sm_mhz_median"] < 3000


@pytest.mark.parametrize("stage,at_least", [("probe", 6), ("next", 0), ("next-probe", 1), ("ring", 2),
                                            ("small_sweep", 1), ("stream-small", 2), ("stream-file", 1),
                                            ("next-lost", 0), ("tiled-stream", 2)])
def test_the_probe_stage_names_what_exists(stage, at_least):
    """bench/device_run.sh's probe and next stages (a card session's first call), the stages next
    runs and a function name GPU tests, a cases file, scripts and other stages by name: a typo there
    costs a device call."""
    import shlex
    text = (ROOT / "bench" / "device_run.sh").read_text()
    if stage == "small_sweep":          # a function: its body; the lists it names by layout
        probe = text[text.index("small_sweep() {"):text.index("\n}\n", text.index("small_sweep() {"))]
        assert "h100_small_$lay" in probe
        assert all((ROOT / "bench" / f"h100_small_{lay}.txt").is_file() for lay in ("nn", "nt"))
    else:
        # the stage's case label: "    next)" or, with arguments, "    next|next:*)" / "    ring:*)"
        at = re.search(rf"^    {stage}[|):]", text, re.M).start()
        probe = text[at:text.index(";;", at)]
    if stage.startswith(("next", "stream-file", "tiled-stream")):   # it runs other stages: each must have a label
        # stage words start lower-case: the rest of a line is arithmetic in a stage's argument
        called = [w.split(":")[0] for line in re.findall(r'bash "\$0" ([^\n;]+)', probe) for w in line.split()
                  if re.match(r"[a-z]", w)]
        assert {"next": {"krot", "chain", "next-lost"}, "next-probe": {"tests", "chain", "server"},
                "next-lost": {"lost"}, "stream-file": {"tests"},
                "tiled-stream": {"tests", "chain", "stream-small"}}[stage] <= set(called)
        for name in called:             # a label of its own, or one alternative of a shared one
            assert re.search(rf"^    (?:[^\n)]*\|)?{name}[|):]", text, re.M), name
    # a quoted list assigned to a variable (VAR="a b") counts word by word
    words = [w.rpartition("=")[2] for w in shlex.split(probe.replace("\\\n", " "), comments=True)
             for w in w.split()]
    # a stage word such as graph:bench/graph_small_nt.txt:nt:300 names its file second (server:, tests: too)
    words += [w.split(":")[1] for w in words if w.startswith(("graph:", "server:", "tests:"))]
    paths = [w for w in words if w.startswith(("tests/", "bench/"))]
    assert len(paths) >= at_least
    for w in paths:
        path, _, node = w.partition("::")
        assert (ROOT / path).is_file(), w
        assert not node or f"def {node}(" in (ROOT / path).read_text(), w


def test_results_are_written_after_every_case(monkeypatch, tmp_path):
    """A probe call stopped at its time limit (the process killed) keeps the cases it finished: the
    JSON is rewritten after each case, `complete` false until the last."""
    import json
    import cudal2.device
    import cudal2.versions
    from cudal2.device import DeviceInfo
    monkeypatch.setattr(cudal2.device, "current", lambda: DeviceInfo.target("sm_90a"))
    monkeypatch.setattr(cudal2.versions, "source_commit", lambda: "abc1234")
    monkeypatch.setattr(cudal2.versions, "collect", lambda: {})
    calls = []

    def run_case(shape, spec, defines, befores, repeat, dev):
        calls.append(shape)
        if len(calls) == 2:
            raise KeyboardInterrupt      # the call's time limit: the process dies here
        return {"shape": shape, "spec": spec, "defines": defines, "error": "stub: no GPU"}
    monkeypatch.setattr(ct, "run_case", run_case)
    with pytest.raises(KeyboardInterrupt):
        ct.main(["--case", "64x64x64:nt|" + SPECS[0], "--case", "128x128x64:nt|" + SPECS[0], "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "cta_timeline_abc1234.json").read_text())
    assert [r["shape"] for r in doc["results"]] == ["64x64x64:nt"] and doc["complete"] is False
    assert doc["device_info"]["name"] == "target sm_90a"


# LITE_CP (lite, nt: all of K by cp.async where it fits the ring, else the TMA ring): the full checker
# on both paths, and the same bits as the filed kernel (the same MMAs in the same order).
LITE_CP_CASES = [(LITE_ONE, (100, 1000, 120)),                                   # cp.async: 2 k-tiles
                 (LITE_ONE, (100, 1000, 3000)),                                  # TMA: K past the ring
                 ("backend=cuda family=wgmma bm=128 bn=64 bk=64 warps=8 stages=3 group_m=8 split_k=1 subtile=1 "
                  "warp_spec=0 cluster=1", (257, 104, 136)),                     # two warpgroups, ragged K
                 (VARIANT_SPECS[1], (100, 1000, 600))]                           # cluster split-K, 3 a slice


@pytest.mark.gpu
@pytest.mark.parametrize("text,shape", LITE_CP_CASES)
def test_lite_cp_passes_the_checker_and_matches_the_filed_kernel(gpu_device, text, shape):
    import torch
    from cudal2.check import check_kernel, make_inputs
    from cudal2.problems import Problem
    p = Problem(*shape, "nt")
    spec = KernelSpec.parse(text)
    kernel = ct.build_variant(spec, p, gpu_device, ct.prefix({"LITE_CP": 1}))
    assert kernel.lite_cp
    report = check_kernel(kernel, p, "cuda")
    assert report.passed, "\n".join(r.line() for r in report.results)
    filed = ct.build_variant(spec, p, gpu_device, "")
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(7))
    outs = []
    for k in (kernel, filed):
        c = torch.full((p.M, p.N), float("nan"), dtype=torch.float16, device="cuda")
        k(a, b, c)
        outs.append(c)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1])


def test_the_split_cases_compile_with_their_defines():
    """bench/timeline_cases_split.txt (bench/split_probe.sh's timeline): every case a valid spec that
    compiles with the stamps and its defines and no spills."""
    from cudal2.device import DeviceInfo
    from cudal2.nvrtc import compile_cubin
    from cudal2.problems import Problem
    from cudal2.spec import validate
    lines = [l for l in (ROOT / "bench" / "timeline_cases_split.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert len(lines) == 6
    for line in lines:
        shape, text, defines = ct.parse_case(line)
        prob = Problem.parse(shape)
        spec = validate(KernelSpec.parse(text), prob, DeviceInfo.target("sm_90a"))
        _, log = compile_cubin(ct.TIMELINE_DEFINE + ct.prefix(defines) + render(spec, prob.layout), "sm_90a",
                               ("-std=c++17", "--ptxas-options=-v"))
        assert re.search(r"0 bytes spill stores", log), (line, log)
