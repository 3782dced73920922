"""Baselines, clock and compare on a real GPU (skipped without one; needs nvmath-python there)."""
import json
import math
from importlib import metadata

import pytest
import torch

from cudal2.baselines import unbuildable

pytestmark = pytest.mark.gpu
# The cuBLAS and cuBLASLt baselines need nvmath-python: without it these tests skip with that reason
# (and `cudal2 compare` refuses to run on a bar without them).
NVMATH_MISSING = unbuildable(["cublaslt-heuristic"]).get("cublaslt-heuristic")
needs_nvmath = pytest.mark.skipif(NVMATH_MISSING is not None, reason=f"needs nvmath-python: {NVMATH_MISSING}")

SHAPES = [(256, 512, 128), (7, 24, 40), (1000, 1000, 3000)]


def _inputs(p, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(p.M, p.K, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(*p.b_shape(), device="cuda", dtype=torch.float16, generator=g)
    return a, b


@needs_nvmath
@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("shape", SHAPES)
def test_each_baseline_matches_reference(layout, shape, tmp_path):
    from cudal2 import baselines
    from cudal2.check import REL_TOL, reference, rel_error
    from cudal2.problems import Problem
    p = Problem(*shape, layout)
    a, b = _inputs(p)
    c = torch.empty(p.M, p.N, device="cuda", dtype=torch.float16)
    reasons = {}
    fns = baselines.prepare(baselines.NAMES, p, a, b, c, reasons=reasons, cache_dir=tmp_path)
    expected = {n for n in baselines.NAMES if baselines.serves(n, layout) is None}
    assert set(fns) == expected, reasons
    # New values in the same buffers: a baseline bound to pointers must recompute, not replay.
    for seed in (1, 2):
        a2, b2 = _inputs(p, seed)
        a.copy_(a2)
        b.copy_(b2)
        ref = reference(a, b, layout)
        for name, fn in fns.items():
            c.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            assert torch.isfinite(c).all(), name
            # PROTOCOL's bound; a correct fp16-output GEMM sits near 2e-4 at these K.
            assert rel_error(c, ref) <= REL_TOL, name


@needs_nvmath
def test_autotune_choice_is_cached(tmp_path, monkeypatch):
    from cudal2 import baselines
    from cudal2.check import reference, rel_error
    from cudal2.device import current
    from cudal2.problems import Problem
    p = Problem(512, 1024, 768)
    a, b = _inputs(p)
    c = torch.empty(p.M, p.N, device="cuda", dtype=torch.float16)
    tuned = baselines.prepare(["cublaslt-autotune"], p, a, b, c, cache_dir=tmp_path)
    cache = json.loads((tmp_path / f"lt-autotune-{current().key}.json").read_text())
    (key, entry), = cache.items()
    assert key.startswith(p.text) and 1 <= entry["candidates"] <= baselines.MAX_CANDIDATES
    # the column names the algorithm it times (a compare row records it: registry/fill.py's evidence)
    assert tuned["cublaslt-autotune"].lt_algo == entry["algo"]
    monkeypatch.setattr(baselines.LtPlan, "candidates", lambda *a, **k: pytest.fail("retuned despite the cache"))
    fns = baselines.prepare(["cublaslt-autotune"], p, a, b, c, cache_dir=tmp_path)
    assert fns["cublaslt-autotune"].lt_algo == entry["algo"]
    c.zero_()
    fns["cublaslt-autotune"]()
    assert rel_error(c, reference(a, b, "nn")) <= 5e-3


def test_offline_timing_is_stable_and_fair():
    from cudal2 import timing
    s = 2048
    a = torch.randn(s, s, device="cuda", dtype=torch.float16)
    b = torch.randn(s, s, device="cuda", dtype=torch.float16)
    c = torch.empty(s, s, device="cuda", dtype=torch.float16)
    mm = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    r1 = timing.offline({"mm": mm})["mm"]
    r2 = timing.offline({"mm": mm})["mm"]
    # Two runs of one kernel agree within their spread (IQR/median); 2% floors it, because a spread
    # of 0.3% is common here while the boost clock moves medians by ~1% between runs.
    tol = max(2 * max(r1.spread, r2.spread), 0.02)
    assert abs(r1.median_us - r2.median_us) / r1.median_us <= tol
    assert r1.n >= 30 and r1.n * r1.median_us >= 100_000 * 0.9
    # Interleaving is fair: the same kernel twice in one run gets the same time.
    both = timing.offline({"x": mm, "y": mm})
    assert abs(both["x"].median_us / both["y"].median_us - 1) <= tol
    # Cold L2 cannot be faster than warm, beyond noise (24 MiB of operands fit the L2 when warm).
    srv = timing.server({"mm": mm}, calls=30)["mm"]
    assert srv.mean_us >= r1.median_us * (1 - tol)
    assert timing.default_clock()._wipe.numel() * 4 >= 2 * timing.default_clock()._l2


def test_roofline_measured_and_cached(tmp_path):
    from cudal2 import timing
    from cudal2.problems import Problem
    p1 = timing.get_peak(cache_dir=tmp_path)
    assert list(tmp_path.glob("roofline-*.json"))
    assert timing.get_peak(cache_dir=tmp_path) == p1          # read back, not re-measured
    s = 8192
    a = torch.randn(s, s, device="cuda", dtype=torch.float16)
    b = torch.randn(s, s, device="cuda", dtype=torch.float16)
    c = torch.empty(s, s, device="cuda", dtype=torch.float16)
    t = timing.offline({"mm": lambda: torch.matmul(a, b, out=c)})["mm"].median_us
    frac = timing.roofline_us(Problem(s, s, s), p1) / t
    # P was measured from this very kind of call, so the floor is met to within noise, not beaten.
    assert 0.8 <= frac <= 1.05
    assert 0 < p1.launch_us < 20        # an empty kernel costs a few µs of GPU time
    assert p1.bw > 0 and p1.flops > 0


@needs_nvmath
def test_compare_cli_end_to_end(tmp_path):
    from typer.testing import CliRunner
    from cudal2.cli import app
    from cudal2.device import current
    from cudal2.problems import Problem
    from cudal2.spec import default_spec
    # The default for the smaller shape: it is valid for the larger one too (tiles fit both).
    spec = default_spec("tiled", Problem(256, 256, 256), current()).text
    args = ["compare", "--shapes", "256x256x256,1024x512x2048", "--mode", "both", "--min-ms", "5",
            "--server-calls", "10", "--spec", spec, "--json", str(tmp_path / "c.json"),
            "--csv", str(tmp_path / "c.csv"), "--plot", str(tmp_path / "c.png")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "c.json").read_text())
    # versions come from the installed distribution's metadata, which may omit the local build tag
    # that torch.__version__ carries (the H200 image: "2.11.0" vs "2.11.0+cu130").
    assert doc["versions"]["torch"] == metadata.version("torch") and len(doc["rows"]) == 2
    for r in doc["rows"]:
        assert r["status_cublas-tn"].startswith("unavailable")
        assert r["status_cudal2"] == "ok", r["status_cudal2"]
        for mode in ("offline", "server"):
            key = "median_us" if mode == "offline" else "mean_us"
            ok = [n for n in ("torch", "cublas-nn", "cublaslt-heuristic", "cublaslt-autotune")
                  if r.get(f"status_{n}") == "ok"]
            assert r[f"{mode}_best_cublas_us"] == min(r[f"{mode}_{n}_{key}"] for n in ok)
            assert all(r[f"{mode}_{n}_vs_best"] <= 1.0 for n in ok)
            assert math.isclose(r[f"{mode}_cudal2_vs_best"] * r[f"{mode}_cudal2_{key}"],
                                r[f"{mode}_best_cublas_us"], rel_tol=1e-9)
        assert r["eager_torch_us"] > 0
        if r.get("status_cublaslt-autotune") == "ok":
            assert len(r["cublaslt-autotune_algo"]) == 8     # which algorithm the column timed
    assert (tmp_path / "c_dist.png").stat().st_size > 0 and (tmp_path / "c_server.png").exists()
