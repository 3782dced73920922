"""kernels_triton/splitk_serial.py: one-launch split-K, exact where the math is exact, deterministic,
counters left at zero; its sm_90 machine code keeps the ordering the design relies on; and
bench/splitk_serial.py's rows on CPU tensors (Triton interpreter, host clock).

Interpreter cases run in a child process (TRITON_INTERPRET=1; see test_triton_kernels.py for why);
the sm_90 compile in another child without it.

Tolerances: integer operands in [-2, 2] with K <= 1000 keep every partial and total below 2**11,
so the fp32 sums and the fp16 output are exact: equality, not a tolerance. randn operands: the
checker's 5e-3, and the tighter 1e-3 of test_triton_kernels.py (fp16 output rounding alone is
~2e-4; the interpreter accumulates in fp32).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
TIGHT = 1e-3
# (M, N, K, split, layout): no dimension a tile multiple; the last case has more splits than the
# 4 K-tiles of K=64 with bk=16, so some programs own no K-tile and still count.
CASES = [(17, 100, 300, 2, "nn"), (1, 33, 1000, 4, "nt"), (100, 17, 64, 8, "nn"), (40, 70, 250, 16, "nt")]
KNOBS = {"BM": 16, "BN": 32, "BK": 16, "GROUP_M": 4}
OPTS = {"num_warps": 2, "num_stages": 2}


def _interp_worker() -> None:
    import torch

    from cudal2.check import REL_TOL, rel_error
    from cudal2.kernels_triton import splitk_serial as ss

    g = torch.Generator().manual_seed(0)
    for M, N, K, split, layout in CASES:
        bshape = (K, N) if layout == "nn" else (N, K)
        cex = {**KNOBS, "SPLIT_K": split}
        ai = torch.randint(-2, 3, (M, K), generator=g).half()
        bi = torch.randint(-2, 3, bshape, generator=g).half()
        c1 = torch.full((M, N), float("nan")).half()
        ss.launch(ai, bi, c1, layout, cex, OPTS)
        exact = torch.equal(c1.float(), ss.reference(ai, bi, layout))
        ar = torch.randn(M, K, generator=g).half()
        br = torch.randn(*bshape, generator=g).half()
        c2 = torch.full((M, N), float("nan")).half()
        ss.launch(ar, br, c2, layout, cex, OPTS)
        err = rel_error(c2, ss.reference(ar, br, layout))
        c3 = torch.empty(M, N).half()
        ss.launch(ar, br, c3, layout, cex, OPTS)
        cnt = ss._COUNTERS[(torch.device("cpu"), None)]
        print(json.dumps({"case": f"{M}x{N}x{K}:{layout} split {split}", "exact": exact, "err": err,
                          "rel_tol": REL_TOL, "repeat_identical": torch.equal(c2, c3),
                          "counters_zero": int(cnt.abs().sum()) == 0}), flush=True)
    try:
        ss.launch(ai, bi, c1, "nn", {**KNOBS, "SPLIT_K": 1}, OPTS)
        print(json.dumps({"case": "split1", "error": None}), flush=True)
    except ValueError as e:
        print(json.dumps({"case": "split1", "error": str(e)}), flush=True)


def _bench_worker() -> None:
    """bench_shape on CPU tensors: both ways built, checked and timed; the row agrees with its timings."""
    from conftest import HostClock      # this file runs as a script from tests/: conftest is importable
    from cudal2.device import DeviceInfo
    from cudal2.problems import Problem

    from bench_import import load_bench
    bench = load_bench("splitk_serial")

    row = bench.bench_shape(Problem.parse("40x48x200"), DeviceInfo.target("sm_90a"), lambda m: print(m),
                            0.0, tiles=("bm=16 bn=32 bk=16 warps=2 stages=2",), splits=(2, 4), where="cpu",
                            clock=HostClock(), serial_checks=("random", "exact", "poison", "guard", "fresh"),
                            min_calls=3)
    print(json.dumps(row), flush=True)


def _compile_worker() -> None:
    """sm_90 PTX of the kernel (no GPU, interpreter off), nn and nt."""
    import torch

    from cudal2.backends.triton import _aot, _jit_kwargs, _Ptr
    from cudal2.kernels_triton import splitk_serial as ss

    h = torch.float16
    fn = ss.splitk_serial_kernel
    M, N, K = 64, 64, 16384
    for layout, (sbk, sbn) in (("nn", (N, 1)), ("nt", (1, K))):
        args = [_Ptr(h), _Ptr(h), _Ptr(h), _Ptr(torch.float32), _Ptr(torch.int32), M, N, K, K, 1, sbk, sbn, N, 1]
        cex = {"BM": 64, "BN": 64, "BK": 64, "GROUP_M": 4, "SPLIT_K": 8}
        opts = {"num_warps": 4, "num_stages": 4, "enable_fp_fusion": True}
        art = _aot(fn, args, _jit_kwargs(fn, cex, opts), 90)
        print(json.dumps({"layout": layout, "ptx": art.asm["ptx"]}), flush=True)


def _child(flag: str, interpret: bool) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, str(HERE), flag], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def interp() -> dict:
    return {r["case"]: r for r in _child("--interp", True)}


@pytest.mark.parametrize("case", [f"{M}x{N}x{K}:{lay} split {s}" for M, N, K, s, lay in CASES])
def test_values_exact_and_close(interp, case):
    r = interp[case]
    assert r["exact"], "integer operands: the product is exact, so must C be"
    assert r["err"] <= TIGHT <= r["rel_tol"]


@pytest.mark.parametrize("case", [f"{M}x{N}x{K}:{lay} split {s}" for M, N, K, s, lay in CASES])
def test_deterministic_and_counters_reset(interp, case):
    r = interp[case]
    assert r["repeat_identical"]        # the slices are added in a fixed order
    assert r["counters_zero"]           # the last program resets its tile: no memset between launches


def test_split_one_is_refused(interp):
    assert "SPLIT_K >= 2" in interp["split1"]["error"]


def test_sm90_code_orders_partials_before_the_count():
    for r in _child("--compile", False):
        ptx = r["ptx"]
        add = re.search(r"atom\.global\.gpu\.acq_rel\.add", ptx)
        assert add, f"{r['layout']}: no GPU-scope acq_rel atomic add (the count)"
        assert re.search(r"atom\.global\.gpu\.acq_rel\.exch", ptx), "no counter reset"
        assert "ld.global.cg" in ptx, "partials must be read through L2 (.cg), not a stale L1"
        before = ptx[:add.start()]
        last_store = before.rfind("st.global")
        assert last_store >= 0 and "bar.sync" in before[last_store:], \
            "a CTA barrier must sit between the partial stores and the count"


def test_bench_row_on_cpu():
    rows = _child("--bench", True)
    assert len(rows) == 1
    r = rows[0]
    assert r["checks_failed"] == 0
    t = r["timings"]
    serial = [n for n in t if n.startswith("serial ")]
    two = [n for n in t if n.startswith("twolaunch ")]
    assert len(serial) == len(two) == 2 and "torch" in t      # both splits, both ways, the baseline
    best_serial = min(serial, key=lambda n: t[n]["median_us"])
    assert r["serial_us"] == round(t[best_serial]["median_us"], 3)
    assert r["serial_spec"] == best_serial.split(" ", 1)[1]
    # The row's ratios are rounded to 4 places: abs=6e-5 beside rel.
    assert r["serial_vs_best_cublas"] == pytest.approx(r["best_cublas_us"] / r["serial_us"], rel=1e-3, abs=6e-5)
    pairs = [t["twolaunch " + n[7:]]["median_us"] / t[n]["median_us"] for n in serial]
    assert r["serial_over_twolaunch_same_knobs"] == pytest.approx((pairs[0] * pairs[1]) ** 0.5, rel=1e-3, abs=6e-5)


if __name__ == "__main__":
    {"--interp": _interp_worker, "--compile": _compile_worker, "--bench": _bench_worker}[sys.argv[1]]()
