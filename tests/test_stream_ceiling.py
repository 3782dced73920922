"""bench/stream_ceiling.py: its read kernel returns each program's XOR (under the Triton
interpreter, odd sizes), compiles for sm_90 without a GPU, and its rates and table are exact on
made-up times. The card run is bench's; here nothing needs a GPU."""
import os
import subprocess
import sys

import pytest

from bench_import import BENCH, load_bench

# Under the interpreter: sizes that are not multiples of a program's chunk (the mask's tail), one
# smaller than a single chunk, and words with the sign bit set (int32 XOR keeps them).
_INTERP = r'''
import sys, numpy as np, torch
sys.path.insert(0, sys.argv[1])
import stream_ceiling as sc
rng = np.random.default_rng(0)
for n, block, iters in ((10007, 256, 3), (100, 256, 2), (4096, 128, 8)):
    words = torch.from_numpy(rng.integers(-2**31, 2**31 - 1, size=n, dtype=np.int64).astype(np.int32))
    out = torch.full((n,), 7, dtype=torch.int32)
    sc.read_fn(words, out, block, iters, 4)()
    progs = -(-n // (block * iters))
    want = sc.xor_reference(words.numpy(), block, iters)
    assert len(want) == progs and np.array_equal(out[:progs].numpy(), want), (n, block, iters)
    assert int(out[progs]) == 7                              # nothing past the grid is written
    # the reference itself, by hand for the first program
    assert want[0] == np.bitwise_xor.reduce(words.numpy()[: block * iters])
print("OK")
'''


def test_read_kernel_xor_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", _INTERP, str(BENCH)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stdout + r.stderr[-3000:]


_COMPILE = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
import stream_ceiling as sc
from cudal2.backends.triton import _Ptr, _aot, _jit_kwargs
fn = sc.read_kernel()
for block, iters, warps in sc.READ_CONFIGS:
    k = _aot(fn, [_Ptr(torch.int32), _Ptr(torch.int32), 1 << 28],
             _jit_kwargs(fn, {"BLOCK": block, "ITERS": iters}, {"num_warps": warps}), 90)
    ptx = k.asm["ptx"]
    # 16-byte loads: the read path streams the way the decode kernels' TMA / cp.async do
    assert "ld.global" in ptx and ".v4" in ptx, (block, iters)
print("OK")
'''


def test_read_kernel_compiles_for_sm90_without_a_gpu():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", _COMPILE, str(BENCH)], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stdout + r.stderr[-3000:]


def test_rates_and_table():
    sc = load_bench("stream_ceiling")
    nbytes = 117 * (1 << 20)
    r = sc.rates({"copy": 60.0, "read": 28.0, "sum": 31.0, "write": 30.0, "empty": 3.4}, nbytes)
    assert set(r) == {"copy", "read", "sum", "write"}            # "empty" moves no bytes
    assert r["copy"] == pytest.approx(2 * nbytes / 60e-6 / 1e12)  # copy counts read + write
    assert r["read"] == pytest.approx(nbytes / 28e-6 / 1e12)
    row = {"mb": 117, "bytes": nbytes, "mode": "offline", "read_config": "bulk 16K x8", "copy_tbs": 4.2,
           "read_tbs": 4.4, "sum_tbs": 4.0, "write_tbs": 4.1, "read_over_copy": 1.048,
           "read_triton_us": nbytes / 4.0e6, "read_bulk_us": nbytes / 4.4e6, "read_ldg_us": nbytes / 4.3e6,
           "write_config": "bulk 32K x4", "write_torch_us": nbytes / 3.0e6, "write_bulk_us": nbytes / 4.1e6,
           "write_stg_us": nbytes / 3.5e6}
    old = {k: v for k, v in row.items() if not k.startswith(("read_", "write_"))
           or k in ("read_config", "read_tbs", "read_over_copy", "write_tbs")}
    md = sc.markdown([row, old], 3.42, "NVIDIA H200", "abc1234", "python3 bench/stream_ceiling.py --out x")
    assert ("| 117 | offline | 4.20 | 4.40 (bulk 16K x8) | 4.00 / 4.40 / 4.30 | 4.00 | 4.10 (bulk 32K x4) | "
            "3.00 / 4.10 / 3.50 | 1.05 |") in md
    assert "| 117 | offline | 4.20 | 4.40 (bulk 16K x8) | - / - / - | 4.00 | 4.10 | - / - / - | 1.05 |" in md   # a row of before
    assert "3.42 µs" in md
    assert [sc.read_kind(n) for n in ("read 4096x4 w8", "read bulk 32K x6", "read ldg x8 t256")] == ["triton", "bulk", "ldg"]
    assert [sc.write_kind(n) for n in ("write", "write bulk 16K x4", "write stg x4 t512")] == ["torch", "bulk", "stg"]


def test_cli_refuses_bad_sizes_and_needs_a_gpu(tmp_path, capsys):
    sc = load_bench("stream_ceiling")
    with pytest.raises(SystemExit):
        sc.main(["--out", str(tmp_path), "--mb", "8,x"])
    with pytest.raises(SystemExit):
        sc.main(["--out", str(tmp_path), "--mb", "0"])
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the no-GPU path is not taken")
    assert sc.main(["--out", str(tmp_path), "--mb", "8"]) == 3
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
