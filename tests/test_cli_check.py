"""`cudal2 check` argument errors and the no-GPU path: one line, non-zero exit, no traceback."""
import subprocess
import sys

import pytest

from conftest import HAS_GPU


def cudal2(*args):
    return subprocess.run([sys.executable, "-m", "cudal2.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,needle", [
    (["check", "--shape", "12x"], "not of the form MxNxK"),
    (["check", "--shape", "64x64x64", "--spec", "bm=7"], "bm: 7 is not one of"),
    (["check", "--shape", "64x64x64", "--spec", "nonsense"], "is not key=value"),
    (["check", "--shape", "64x64x64", "--backend", "rocm"], "backend"),
    (["check", "--shape", "64x17x64", "--spec", "family=persistent"], "N % 8"),
    (["check", "--shape", "64x64x64", "--backend", "cuda", "--interpret"], "--interpret runs Triton"),
])
def test_bad_arguments_one_line(args, needle):
    r = cudal2(*args)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU message")
def test_no_gpu_says_so():
    r = cudal2("check", "--shape", "64x64x64")
    assert r.returncode == 3
    assert r.stderr.strip().splitlines() == [
        "error: no CUDA GPU here: use --interpret (Triton, small shapes on the CPU) or --compile-only"]
