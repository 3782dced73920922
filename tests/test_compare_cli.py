"""compare's rows, summaries, files and argument errors, on synthetic timings (no GPU)."""
import json
import math
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from cudal2 import baselines, report
from cudal2.cli import app
from cudal2.cli.compare_measure import STATS, _ratios, summaries, summary_lines
from cudal2.problems import Problem
from cudal2.spec import KernelSpec
from cudal2.stats import Stats

from conftest import HAS_GPU, HostClock

NAMES = ("torch", "cublas-nn", "cublaslt-heuristic")


def synthetic_rows(ms=(64, 256, 1024), ns=(64, 512), ks=(128, 4096), kernel=True):
    """Rows as measure_shape builds them, from made-up times with known ratios."""
    rows = []
    for m in ms:
        for n in ns:
            for k in ks:
                p = Problem(m, n, k)
                t = 1.0 + p.flops / 5e8          # µs, some made-up function of the work
                times = {"torch": t * 1.10, "cublas-nn": t * 1.00, "cublaslt-heuristic": t * 1.25}
                if kernel:
                    times["cudal2"] = t * (0.8 if m == 64 else 1.25)
                row = {"shape": p.shape, "M": m, "N": n, "K": k, "layout": "nn", "gflop": p.flops / 1e9,
                       "class": "x", "floor_us": t * 0.5}
                for mode in report.MODES:
                    for name, us in times.items():
                        s = Stats.from_samples([us * 0.99, us, us * 1.01])
                        for key in STATS:
                            row[f"{mode}_{name}_{key}"] = getattr(s, key)
                    _ratios(row, mode, list(times), NAMES)
                for name, us in times.items():
                    row[f"eager_{name}_us"] = us + 8.0
                    row[f"status_{name}"] = "ok"
                row["status_cublas-tn"] = baselines.serves("cublas-tn", "nn")
                rows.append(row)
    return rows


def test_ratios_and_summaries():
    rows = synthetic_rows()
    r = rows[0]
    assert r["offline_best_cublas"] == "cublas-nn"
    assert r["offline_torch_vs_best"] == pytest.approx(1 / 1.10)
    assert r["offline_cudal2_vs_best"] == pytest.approx(1 / 0.8)
    assert r["offline_cudal2_speedup_cublaslt-heuristic"] == pytest.approx(1.25 / 0.8)
    assert r["offline_cublas-nn_roofline"] == pytest.approx(0.5)
    summ = summaries(rows, report.MODES, NAMES)
    allv = summ["offline"]["cudal2 vs best-cublas"]["all"]
    # 4 of the 12 shapes (M=64) at 1/0.8 = 1.25x, the other 8 at 1/1.25 = 0.8x.
    assert allv["geomean"] == pytest.approx(math.exp((4 * math.log(1.25) + 8 * math.log(0.8)) / 12))
    assert allv["share_faster"] == pytest.approx(1 / 3)
    assert allv["worst"] == pytest.approx(0.8) and not allv["worst_shape"].startswith("64x")
    assert allv["best_shape"].startswith("64x")
    assert summ["server"]["torch vs best-cublas"]["all"]["geomean"] == pytest.approx(1 / 1.10)
    lines = summary_lines(summ)
    assert any(l.startswith("[offline] cudal2 vs best-cublas: geomean") for l in lines)


def test_csv_json_round_trip(tmp_path):
    rows = synthetic_rows()
    meta = {"versions": report.versions(), "config": {"min_ms": 100.0}, "peak": {"flops": 8e14}}
    report.write_csv(tmp_path / "r.csv", rows, meta)
    back, bmeta = report.read_csv(tmp_path / "r.csv")
    assert bmeta["schema"] == report.SCHEMA and bmeta["config"] == meta["config"]
    assert "torch" in bmeta["versions"] and "python" in bmeta["versions"]
    assert len(back) == len(rows)
    for a, b in zip(rows, back):
        assert a == b            # floats written by repr come back bit-identical; ints stay ints
    report.write_json(tmp_path / "r.json", rows, meta, summaries(rows, report.MODES, NAMES))
    doc = report.read_json(tmp_path / "r.json")
    assert doc["rows"] == rows and doc["peak"] == meta["peak"]
    assert doc["summary"]["offline"]["cudal2 vs torch"]["all"]["n"] == len(rows)
    (tmp_path / "bad.json").write_text('{"schema": "other"}')
    with pytest.raises(ValueError):
        report.read_json(tmp_path / "bad.json")


def test_plots_written(tmp_path):
    rows = synthetic_rows()
    paths = report.write_plots(rows, tmp_path / "p.png", report.MODES)
    assert [p.name for p in paths] == ["p.png", "p_dist.png", "p_server.png", "p_server_dist.png"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    base = report.plot_series(synthetic_rows(kernel=False), "offline")
    assert set(base) == {"torch vs best", "cublas-nn vs best", "cublaslt-heuristic vs best"}


def test_torch_baseline_and_validation_on_cpu():
    p = Problem(33, 40, 24, "nt")
    g = torch.Generator().manual_seed(0)
    a = torch.randn(p.M, p.K, generator=g).half()
    b = torch.randn(*p.b_shape(), generator=g).half()
    c = torch.empty(p.M, p.N, dtype=torch.float16)
    reasons = {}
    fns = baselines.prepare(["torch", "cublas-nn", "cublaslt-heuristic"], p, a, b, c, reasons=reasons)
    assert list(fns) == ["torch"]
    assert "transposed copy" in reasons["cublas-nn"] and "unavailable" in reasons["cublaslt-heuristic"]
    c.fill_(0)
    fns["torch"]()
    ref = a.float() @ b.float().t()
    assert torch.allclose(c.float(), ref, rtol=1e-2, atol=1e-2)   # fp16 output of O(5)-sized sums
    # A baseline that writes nothing, or the wrong thing, is caught by the check in prepare.
    with pytest.raises(baselines.BaselineInvalid, match="non-finite"):
        baselines._validate("noop", lambda: None, c, ref)
    with pytest.raises(baselines.BaselineInvalid, match="relative error"):
        baselines._validate("zeros", lambda: c.zero_(), c, ref)
    with pytest.raises(ValueError, match="unknown baseline"):
        baselines.prepare(["cublas"], p, a, b, c)


@pytest.mark.parametrize("args, needle", [
    (["--shapes", "12x"], "not of the form MxNxK"),
    (["--layout", "tn"], "--layout"),
    (["--mode", "fast"], "--mode"),
    (["--baselines", "torch,cublas"], "not a baseline"),
    (["--spec", "bm=64", "--registry", "x"], "not both"),
    (["--spec", "nonsense"], "key=value"),
    (["--shapes", "grid:0"], "grid:N"),
    (["--plot", "x.txt"], "--plot"),
    (["--time-limit", "0"], "--time-limit"),
])
def test_argument_errors_are_one_line(args, needle):
    res = CliRunner().invoke(app, ["compare", *args])
    assert res.exit_code == 2
    out = res.output.strip()
    assert out.startswith("error:") and needle in out and len(out.splitlines()) == 1


@pytest.mark.skipif(HAS_GPU, reason="the no-GPU path")
def test_no_gpu_is_one_line_and_nonzero():
    res = subprocess.run([sys.executable, "-m", "cudal2.cli", "compare", "--shapes", "64x64x64"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 3
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1
    assert "no CUDA GPU" in res.stderr and "Traceback" not in res.stderr


def test_measure_shape_pipeline_on_cpu(monkeypatch, tmp_path):
    """measure_shape -> rows -> summaries -> files, end to end, with torch on CPU tensors."""
    from cudal2 import timing
    from cudal2.cli.compare import save
    from cudal2.cli.compare_measure import Config, measure_shape
    monkeypatch.setattr(timing, "default_clock", lambda: HostClock())
    peak = timing.Peak(device="cpu", flops=1e12, bw=1e11, launch_us=1.0)
    cfg = Config(min_calls=5, min_ms=1.0, server_calls=5, gap_ms=0.1, eager_ms=1.0)
    p = Problem(64, 48, 32, "nt")
    spec = KernelSpec.parse("backend=triton family=tiled bm=64 bn=64 bk=32 warps=4 stages=2")

    class Kernel:       # a correct stand-in kernel, carrying its spec as the backends' kernels do
        def __init__(self):
            self.spec = spec

        def __call__(self, a, b, c):
            return torch.matmul(a, b.t(), out=c)

    row = measure_shape(p, baselines.NAMES, cfg, report.MODES, peak, lambda q: (Kernel(), "ok"), device="cpu")
    assert row["status_torch"] == "ok" and row["status_cudal2"] == "ok"
    # the row names the kernel it timed (the report counts wins by backend and family from it)
    assert row["cudal2_via"] == "kernel" and row["cudal2_spec"] == spec.text
    assert row["status_cublas-nn"].startswith("unavailable") and "CUDA" in row["status_cublaslt-heuristic"]
    assert row["floor_us"] == pytest.approx(1.0)        # launch-bound with this made-up peak
    for mode in report.MODES:
        key = report.primary(mode)
        assert row[f"{mode}_best_cublas"] == "torch" and row[f"{mode}_torch_vs_best"] == 1.0
        assert row[f"{mode}_cudal2_speedup_torch"] == pytest.approx(
            row[f"{mode}_torch_{key}"] / row[f"{mode}_cudal2_{key}"])
        assert row[f"{mode}_torch_n"] >= 5
    assert row["eager_cudal2_us"] > 0
    bad = measure_shape(p, ("torch",), cfg, ("offline",), peak, lambda q: (None, "invalid: random: 1.0"),
                        device="cpu")
    assert bad["status_cudal2"].startswith("invalid") and "offline_cudal2_median_us" not in bad
    summ = summaries([row], report.MODES, baselines.NAMES)
    assert summ["offline"]["cudal2 vs torch"]["all"]["n"] == 1
    save([row], summ, {"versions": {}}, tmp_path / "c.csv", tmp_path / "c.json", str(tmp_path / "c.png"),
         report.MODES)
    assert report.read_csv(tmp_path / "c.csv")[0] == [row]
    assert (tmp_path / "c_server_dist.png").stat().st_size > 0


def test_run_stops_at_the_deadline(monkeypatch):
    """compare's --time-limit: no shape starts after the deadline, each shape timed before it reaches
    on_row (what --json saves for --resume), and the shapes past it are left out of the rows. The
    clock is a stub: each shape "takes" 10 s."""
    from cudal2 import timing
    from cudal2.cli import compare
    now = [100.0]
    timed = []

    def fake_measure(p, *a, **k):
        timed.append(p)
        now[0] += 10.0
        return {"M": p.M, "N": p.N, "K": p.K, "layout": p.layout}

    monkeypatch.setattr(compare.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(compare, "measure_shape", fake_measure)
    monkeypatch.setattr(compare, "summaries", lambda rows, modes, names: {"n": len(rows)})
    monkeypatch.setattr(timing, "get_peak", lambda force=False: timing.Peak(device="cpu", flops=1e12, bw=1e11,
                                                                            launch_us=1.0))
    probs = [Problem(64 * i, 64, 64, "nn") for i in range(1, 6)]
    seen = []
    cfg = compare.Config()
    rows, summ, _ = compare.run(probs, ("torch",), ("offline",), cfg, progress=False, on_row=seen.append,
                                deadline=125.0)
    # shapes start at t = 100, 110, 120 (all before 125); the fourth would start at 130
    assert timed == probs[:3] and len(rows) == len(seen) == 3 and summ == {"n": 3}
    rows, _, _ = compare.run(probs, ("torch",), ("offline",), cfg, progress=False, deadline=None)
    assert len(rows) == 5


# ---- the cuBLAS / cuBLASLt argument mapping, against an emulation of their column-major contract ----
import ctypes
import types

import numpy as np

_HEUR = np.dtype([("algo", [("data_", "<u8", (8,))]), ("workspace_size", "<u8"), ("state", "<i4"),
                  ("waves_count", "<f4"), ("reserved", "<i4", (4,))])
_ALGO = np.dtype([("data_", "<u8", (8,))])


def _view(ptr, dtype, shape, strides):
    """A numpy view of host memory at `ptr` (the CPU tensors stand in for device buffers)."""
    dt = np.dtype(dtype)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    buf = (ctypes.c_byte * (span * dt.itemsize)).from_address(ptr)
    flat = np.frombuffer(buf, dtype=dt)
    return np.lib.stride_tricks.as_strided(flat, shape, [s * dt.itemsize for s in strides])


def _colmajor(ptr, rows, cols, ld):
    return _view(ptr, np.float16, (rows, cols), (1, ld))


def _gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
    """cuBLAS's definition: C(m x n) = alpha op(A) op(B) + beta C, all column-major."""
    opA = _colmajor(A, *((m, k) if ta == 0 else (k, m)), lda).astype(np.float32)
    opB = _colmajor(B, *((k, n) if tb == 0 else (n, k)), ldb).astype(np.float32)
    opA, opB = (opA if ta == 0 else opA.T), (opB if tb == 0 else opB.T)
    a, b = _view(alpha, np.float32, (1,), (1,))[0], _view(beta, np.float32, (1,), (1,))[0]
    Cv = _colmajor(C, m, n, ldc)
    assert b == 0.0
    Cv[...] = (a * (opA @ opB)).astype(np.float16)


def _fake_cublas():
    calls = []

    def gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp, algo):
        assert comp == 68 and at == bt == ct == 2          # CUBLAS_COMPUTE_32F, CUDA_R_16F
        calls.append((ta, tb))
        _gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
    ns = types.SimpleNamespace(Operation=types.SimpleNamespace(N=0, T=1), ComputeType=types.SimpleNamespace(COMPUTE_32F=68),
                               GemmAlgo=types.SimpleNamespace(DEFAULT=-1), set_stream=lambda h, s: None,
                               set_workspace=lambda h, p, n: None, gemm_ex=gemm_ex)
    return ns, calls


def _fake_lt(n_algos=3):
    objs = {}

    def new(v):
        objs[len(objs) + 1] = v
        return len(objs)

    def set_attr(obj, attr, ptr, size):
        objs[obj][attr] = int(_view(ptr, np.int32 if size == 4 else np.uint64, (1,), (1,))[0])

    def heuristic(h, desc, A, B, C, D, pref, count, res_ptr, cnt_ptr):
        assert objs[pref]["ws"] > 0                          # a real workspace was offered
        got = min(count, n_algos)
        res = _view(res_ptr, _HEUR, (count,), (1,))
        for i in range(got):
            res[i]["algo"]["data_"][0] = 100 + i
            res[i]["state"] = 0
        _view(cnt_ptr, np.int32, (1,), (1,))[0] = got

    def matmul(h, desc, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, wss, stream):
        d = objs[desc]
        (ar, ac, lda), (br, bc, ldb), (cr, cc, ldc) = objs[Ad]["dims"], objs[Bd]["dims"], objs[Dd]["dims"]
        ta, tb = d.get("TRANSA", 0), d.get("TRANSB", 0)
        m, k = (ar, ac) if ta == 0 else (ac, ar)
        # The layouts must agree with each other: op(A) m x k, op(B) k x n, D m x n (stored sizes).
        assert cr == m and (br, bc) == ((k, cc) if tb == 0 else (cc, k)), (objs[Ad], objs[Bd], objs[Dd])
        assert C == D and _view(algo, _ALGO, (1,), (1,))[0]["data_"][0] >= 100 and wss > 0
        _gemm(ta, tb, m, cc, k, alpha, A, lda, B, ldb, beta, D, ldc)

    E = types.SimpleNamespace
    lt = E(MatmulDescAttribute=E(TRANSA="TRANSA", TRANSB="TRANSB"),
           MatmulPreferenceAttribute=E(MAX_WORKSPACE_BYTES="ws", MIN_ALIGNMENT_A_BYTES="aa", MIN_ALIGNMENT_B_BYTES="ab",
                                       MIN_ALIGNMENT_C_BYTES="ac", MIN_ALIGNMENT_D_BYTES="ad"),
           get_matmul_desc_attribute_dtype=lambda a: np.int32,
           get_matmul_preference_attribute_dtype=lambda a: np.uint64 if a == "ws" else np.uint32,
           matmul_desc_create=lambda ct, st: new({"ct": ct}), matmul_desc_set_attribute=set_attr,
           matrix_layout_create=lambda t, r, c, ld: new({"dims": (r, c, ld)}),
           matmul_preference_create=lambda: new({}), matmul_preference_set_attribute=set_attr,
           matmul_heuristic_result_dtype=_HEUR, matmul_algo_dtype=_ALGO, matmul_algo_get_heuristic=heuristic,
           matmul=matmul, get_version=lambda: 130000, matmul_preference_destroy=lambda p: None,
           matrix_layout_destroy=lambda p: None, matmul_desc_destroy=lambda p: None)
    return lt


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_cublas_argument_mapping_emulated(layout, monkeypatch, tmp_path):
    """The row-major -> column-major mapping of every cuBLAS baseline, checked on the CPU against
    an emulation of cuBLAS's documented contract (the GPU test checks the real library)."""
    from cudal2 import timing
    cub, calls = _fake_cublas()
    nvm = types.SimpleNamespace(CudaDataType=types.SimpleNamespace(CUDA_R_16F=2, CUDA_R_32F=0), __version__="fake")
    monkeypatch.setattr(baselines, "_NVMATH", (nvm, cub, _fake_lt()))
    monkeypatch.setattr(baselines, "resources", lambda: {"cublas": 1, "lt": 2, "ws": torch.empty(16, dtype=torch.uint8)})
    monkeypatch.setattr(baselines, "_stream", lambda: 0)
    monkeypatch.setattr(baselines, "_on_gpu", lambda *t: True)
    monkeypatch.setattr(baselines, "_device_key", lambda: "fake-sm90")
    monkeypatch.setattr(timing, "default_clock", lambda: HostClock())
    p = Problem(24, 40, 16, layout)          # M, N, K all different: a swapped axis cannot pass
    g = torch.Generator().manual_seed(1)
    a = torch.randn(p.M, p.K, generator=g).half()
    b = torch.randn(*p.b_shape(), generator=g).half()
    c = torch.empty(p.M, p.N, dtype=torch.float16)
    reasons = {}
    fns = baselines.prepare(baselines.NAMES, p, a, b, c, reasons=reasons, cache_dir=tmp_path)
    native = "cublas-nn" if layout == "nn" else "cublas-tn"
    assert set(fns) == {"torch", native, "cublaslt-heuristic", "cublaslt-autotune"}, reasons
    assert calls[0] == ((0, 0) if layout == "nn" else (1, 0))   # (N,N) for B row-major, (T,N) column-major
    ref = a.float() @ (b.float() if layout == "nn" else b.float().t())
    for name, fn in fns.items():
        c.fill_(float("nan"))
        fn()
        # fp16 output of sums of 16 products of N(0,1): rounding is ~1e-3 relative per entry.
        assert torch.allclose(c.float(), ref, rtol=2e-3, atol=2e-3), name
    cache = json.loads((tmp_path / "lt-autotune-fake-sm90.json").read_text())
    assert cache[f"{p.text}|cublasLt130000"]["algo"][0] >= 100 and cache[f"{p.text}|cublasLt130000"]["candidates"] == 3


def test_write_rows_csv_keeps_comments_and_every_rows_keys(tmp_path):
    """The bench scripts' CSV (cudal2.report.write_rows_csv): comment lines first, then columns in
    first-seen order over all rows, a key missing from a row an empty cell."""
    from cudal2.report import write_rows_csv
    path = write_rows_csv(tmp_path / "t.csv", [{"shape": "1x8x8:nt", "us": 4.5}, {"shape": "2x8x8:nt", "note": "x"}],
                          ("python3 bench/x.py --out o", "device h200-sm90 commit abc"))
    assert path.read_text().splitlines() == ["# python3 bench/x.py --out o", "# device h200-sm90 commit abc",
                                             "shape,us,note", "1x8x8:nt,4.5,", "2x8x8:nt,,x"]
    assert write_rows_csv(tmp_path / "u.csv", [{"a": 1}]).read_text().splitlines() == ["a", "1"]


def test_read_rows_csv_reads_write_rows_csv_back_plain_or_gzipped(tmp_path):
    """report.read_rows_csv: the table write_rows_csv wrote, its comment lines skipped, cells as
    strings (an empty cell ""), from a .csv or the same bytes gzipped."""
    import gzip

    from cudal2.report import read_rows_csv, write_rows_csv
    rows = [{"shape": "1x8x8", "us": 4.5}, {"shape": "2x8x8", "note": "x"}]
    path = write_rows_csv(tmp_path / "t.csv", rows, ("python3 bench/hopper_sweep.py --out o",))
    want = [{"shape": "1x8x8", "us": "4.5", "note": ""}, {"shape": "2x8x8", "us": "", "note": "x"}]
    assert read_rows_csv(path) == want
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(path.read_bytes()))
    assert read_rows_csv(tmp_path / "t.csv.gz") == want
