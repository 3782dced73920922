"""bench/variant_sweep.py without a GPU: the variants it parses, the filed entries it picks, the
summary arithmetic, and its refusals; the timing needs a card."""
import pytest
from bench_import import load_bench

from cudal2.registry import Registry
from cudal2.stats import shape_class

vs = load_bench("variant_sweep")


def test_variants_parse_or_are_refused():
    assert vs.parse_variant("RED_CHUNK=64 EXIT_RELAXED=1") == {"RED_CHUNK": 64, "EXIT_RELAXED": 1}
    assert vs.variant_name({"A_TRIM": 1}) == "A_TRIM=1"
    for bad in ("RED_CHUNK", "RED_CHUNK=x", "1X=2", "TIMELINE=1", ""):
        with pytest.raises(ValueError):
            vs.parse_variant(bad)


def test_entries_are_the_filed_wgmma_kernels_of_the_classes_asked_for():
    reg = Registry.load()                     # the shipped registry
    key = "h200-sm90"                         # the card the shipped registry was filed on
    got = vs.entries(reg, key, ["nt"], ["skinny", "small"], 1)
    assert got and all(e.backend == "cuda" and "family=wgmma" in e.spec and e.prob.layout == "nt" for e in got)
    assert all(shape_class(e.prob.M, e.prob.N, e.prob.K) in ("skinny", "small") for e in got)
    every = vs.entries(reg, key, ["nn", "nt"], [], 1)
    assert len(every) == sum(1 for e in reg.all(key) if e.backend == "cuda" and "family=wgmma" in e.spec)
    assert vs.entries(reg, key, ["nn", "nt"], [], 3) == every[::3]
    other = vs.entries(reg, key, ["nn", "nt"], [], 1, ("mma", "stream"))
    assert other and all(" family=mma " in f" {e.spec} " or " family=stream " in f" {e.spec} " for e in other)


def test_summary_geomean_wins_and_losses():
    rows = [{"class": "skinny", "layout": "nt", "V ratio": 1.2}, {"class": "skinny", "layout": "nt", "V ratio": 0.8},
            {"class": "small", "layout": "nt", "V ratio": 1.005}, {"class": "small", "layout": "nt"}]
    s = vs.summarize(rows, ["V"])
    assert s["all"]["V"]["n"] == 3 and s["all"]["V"]["wins"] == 1 and s["all"]["V"]["losses"] == 1
    assert s["skinny:nt"]["V"]["geomean"] == pytest.approx((1.2 * 0.8) ** 0.5)
    assert s["small:nt"]["V"] == {"n": 1, "geomean": pytest.approx(1.005), "wins": 0, "losses": 0}


def test_bad_arguments_are_refused(tmp_path):
    for bad in (["--variant", "X"], ["--variant", "A=1", "--classes", "tiny"], ["--variant", "A=1", "--layouts", "tn"],
                ["--variant", "A=1", "--stride", "0"]):
        with pytest.raises(SystemExit):
            vs.main(["--out", str(tmp_path / "o"), *bad])
    assert not (tmp_path / "o").exists()


def test_pairs_with_the_filed_machine_code_are_found_before_any_timing():
    """RED_CHUNK only reaches the cluster split-K's reduction when a slice sums more than one group:
    at 128x64 split 8 (8 groups over 8 slices) the old code (RED_CHUNK=1; 64 is the default since
    2026-12-05) compiles to the filed SASS, at 64x96 split 4 (12 over 4) it does not; A_TRIM on a
    2-CTA cluster is refused by its #error."""
    from cudal2.backends.sass import cuobjdump
    if cuobjdump() is None:
        pytest.skip("no cuobjdump (CUDA toolkit or the triton wheel's copy) to compare SASS with")
    base = "backend=cuda family=wgmma bk=64 group_m=8 subtile=1 warp_spec=1"
    same = vs._compile_pair(("1024x64x16384:nt", f"{base} bm=128 bn=64 warps=12 stages=8 split_k=8 cluster=1",
                             "RED_CHUNK=1", {"RED_CHUNK": 1}))
    assert same[2:] == (True, None)
    diff = vs._compile_pair(("64x2048x4096:nt", f"{base} bm=64 bn=96 warps=8 stages=10 split_k=4 cluster=1",
                             "RED_CHUNK=1", {"RED_CHUNK": 1}))
    assert diff[2:] == (False, None)
    bad = vs._compile_pair(("4096x4096x4096:nt", f"{base} bm=128 bn=128 warps=12 stages=5 split_k=1 cluster=2",
                            "A_TRIM=1", {"A_TRIM": 1}))
    assert bad[2] is None and "A_TRIM" in bad[3]


def test_a_log_without_the_entry_gets_its_resources_from_a_probe_compile(monkeypatch, tmp_path):
    """On the card NVRTC answers a PTX it has built before from the driver's compute cache, without
    ptxas, so the log names no entry (runs 30 / 62 / 64; a redundant #define on 2026-12-05, H100).
    The backend keeps that cubin and reads the resources from the same source compiled again with a
    fresh unused global; a probe whose log has no entry either fails naming both logs' cause."""
    from cudal2.backends import cuda
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    spec = KernelSpec.parse("backend=cuda family=wgmma bm=64 bn=64 bk=64 warps=8 stages=4 group_m=8 split_k=1 "
                            "subtile=1 warp_spec=1 cluster=1")
    p = Problem.parse("64x64x64:nt")
    source = cuda.BACKEND.render(spec, p)
    real, calls = cuda._nvrtc_compile, []
    ref = cuda.CudaBackend(cache_dir=tmp_path / "ref").compile_source(spec, source, "sm_90a", "nt")
    assert ref.meta["resources_probed"] is False

    def cache_hit(src, arch, options):       # what the card's NVRTC does for a PTX it has seen
        calls.append(src)
        cubin, log = real(src, arch, options)
        return cubin, (log if src != source else "cudal2.cu(571): warning #177-D: unused\n")
    monkeypatch.setattr(cuda, "_nvrtc_compile", cache_hit)
    art = cuda.CudaBackend(cache_dir=tmp_path / "a").compile_source(spec, source, "sm_90a", "nt")
    probe = calls[1]
    assert len(calls) == 2 and probe.startswith(source) and "cudal2_resource_probe_" in probe[len(source):]
    assert art.binary == ref.binary                                  # the kernel is the first compile's
    for k in ("registers", "spills_bytes", "stack_bytes", "smem_static"):
        assert art.meta[k] == ref.meta[k], k                         # the probe's ptxas, same kernel
    assert art.meta["resources_probed"] is True
    cuda.CudaBackend(cache_dir=tmp_path / "a2").compile_source(spec, source, "sm_90a", "nt")
    assert calls[3] != probe                                         # a fresh name every time
    monkeypatch.setattr(cuda, "_nvrtc_compile", lambda *a: (b"", "ptxas info    : 0 bytes gmem\n"))
    with pytest.raises(cuda.CompileError, match=r"names no entry 'cudal2_wgmma', nor the resource probe's "
                                                r"\(log 29 chars, last line 'ptxas info    : 0 bytes gmem'\)"):
        cuda.CudaBackend(cache_dir=tmp_path / "b").compile_source(spec, source, "sm_90a", "nt")
    monkeypatch.setattr(cuda, "BACKEND", cuda.CudaBackend(cache_dir=tmp_path / "c"))
    _, _, same, err = vs._compile_pair((p.text, spec.text, "EXIT_RELAXED=0", {"EXIT_RELAXED": 0}))
    assert same is None and err.startswith("ptxas log names no entry 'cudal2_wgmma', nor the resource probe's")


def test_the_resource_probe_reaches_the_cubin_and_not_the_kernel():
    """The probe global must change the PTX (else the cache answers the probe too) and leave the
    kernel's machine code alone (else its resources are another kernel's)."""
    from cudal2.backends import cuda
    from cudal2.backends.sass import cuobjdump, sass_lines
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    spec = KernelSpec.parse("backend=cuda family=wgmma bm=128 bn=128 bk=64 warps=12 stages=5 group_m=8 split_k=2 "
                            "subtile=1 warp_spec=1 cluster=1")
    source = cuda.BACKEND.render(spec, Problem.parse("100x1000x3000:nn"))
    tag = cuda._resource_probe()
    plain, _ = cuda._nvrtc_compile(source, "sm_90a", cuda.OPTIONS)
    probed, _ = cuda._nvrtc_compile(source + tag, "sm_90a", cuda.OPTIONS)
    name = tag.split()[-1].rstrip(";").encode()
    assert name in probed and name not in plain
    tool = cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (CUDA toolkit or the triton wheel's) to read the SASS with")
    assert sass_lines(plain, tool) == sass_lines(probed, tool)


def test_shapes_file_and_lost_kernels_pick_the_decode_sets_entries(tmp_path):
    """--shapes keeps the entries of the listed problems (a line with no layout takes both); --lost
    adds the cuBLAS entries' best lost wgmma kernels, each carrying its search's spec and time."""
    lost_entries = load_bench("graph_clock").lost_entries
    reg = Registry.load()
    key = "h200-sm90"
    f = tmp_path / "shapes.txt"
    f.write_text("# decode\n1x14336x4096:nt\n64x4096x1024\n")
    todo = vs.entries(reg, key, ["nn", "nt"], [], 1) + lost_entries(reg, key, ["nn", "nt"], [], ("wgmma",))
    got = vs.shape_filter(todo, str(f))
    assert {e.problem for e in got} <= {"1x14336x4096:nt", "64x4096x1024:nt", "64x4096x1024:nn"}
    lost = [e for e in got if e.problem == "1x14336x4096:nt"]
    assert len(lost) == 1 and lost[0].entry.backend == "cublas" and "family=wgmma" in lost[0].spec
    assert lost[0].time_us == lost[0].entry.times["best_kernel_us"]
    assert vs.shape_filter(todo, None) == todo
    decode = vs.shape_filter(todo, "bench/decode_set.txt")
    assert decode and all(e.prob.layout == "nt" and e.prob.M <= 64 for e in decode)


def test_summary_against_torch():
    rows = [{"class": "skinny", "layout": "nt", "filed vs torch": 0.9, "K_ROT=1 vs torch": 1.05},
            {"class": "skinny", "layout": "nt", "filed vs torch": 1.0}]
    s = vs.summarize(rows, ["filed", "K_ROT=1"], " vs torch")
    assert s["all"]["filed"]["geomean"] == pytest.approx((0.9 * 1.0) ** 0.5) and s["all"]["filed"]["losses"] == 1
    assert s["skinny:nt"]["K_ROT=1"] == {"n": 1, "geomean": pytest.approx(1.05), "wins": 1, "losses": 0}


def test_k_rot_builds_as_a_variant_and_refuses_early_loads():
    """K_ROT=1 is other machine code than the filed kernel (the loads' k-tiles rotate), K_ROT=0 the
    filed one's (the template's neutral value), and with EARLY_LOAD its #error refuses to build."""
    from cudal2.backends.sass import cuobjdump
    if cuobjdump() is None:
        pytest.skip("no cuobjdump (CUDA toolkit or the triton wheel's copy) to compare SASS with")
    base = "backend=cuda family=wgmma bk=64 group_m=8 subtile=1 cluster=1"
    spec = f"{base} bm=64 bn=112 warps=8 stages=9 split_k=1 warp_spec=1"
    assert vs._compile_pair(("1x14336x4096:nt", spec, "K_ROT=1", {"K_ROT": 1}))[2:] == (False, None)
    assert vs._compile_pair(("1x14336x4096:nt", spec, "K_ROT=0", {"K_ROT": 0}))[2:] == (True, None)
    lite = f"{base} bm=64 bn=64 warps=4 stages=4 split_k=1 warp_spec=0"
    assert vs._compile_pair(("100x200x3000:nt", lite, "K_ROT=5", {"K_ROT": 5}))[2:] == (False, None)
    bad = vs._compile_pair(("64x64x256:nt", lite, "K_ROT=1 EARLY_LOAD=1", {"K_ROT": 1, "EARLY_LOAD": 1}))
    assert bad[2] is None and "K_ROT" in bad[3]


@pytest.mark.gpu
@pytest.mark.parametrize("spec,shape", [
    ("bm=64 bn=112 warps=8 stages=9 split_k=1 warp_spec=1 cluster=1", "3x1000x3000:nt"),
    ("bm=64 bn=128 warps=8 stages=8 split_k=2 warp_spec=1 cluster=1", "17x712x4104:nt"),
    ("bm=64 bn=64 warps=4 stages=4 split_k=1 warp_spec=0 cluster=1", "100x200x1000:nn"),
    ("bm=128 bn=128 warps=12 stages=5 split_k=2 warp_spec=1 cluster=2", "300x504x2008:nt"),
])
def test_k_rot_passes_the_checker(spec, shape):
    """Every k-tile loaded once whatever the rotation (each unit's range, split-K slices, a ragged
    last k-tile, lite and cluster): the full checker on the variant at sizes off the tile grid."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from cta_timeline import build_variant
    from cudal2.check import check_kernel
    from cudal2.device import current
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    s = KernelSpec.parse(f"backend=cuda family=wgmma bk=64 group_m=8 subtile=1 {spec}")
    p = Problem.parse(shape)
    for rot in (1, 13):
        rep = check_kernel(build_variant(s, p, current(), f"#define K_ROT {rot}\n"), p, "cuda")
        assert rep.passed, (rot, rep.reason)
