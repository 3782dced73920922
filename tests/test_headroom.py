"""bench/headroom.py: the ceiling arithmetic by hand, the grouping by class and K band, the grid filter
and its argument errors, on a hand-made registry."""
import json
import math

import pytest
from bench_import import load_bench


def _module():
    return load_bench("headroom")


hr = _module()


def _registry(tmp_path, entries):
    p = tmp_path / "index.json"
    p.write_text(json.dumps({"format": "cudal2-registry", "version": 2, "devices": {"h200-sm90": {"entries": entries}}}))
    return p


ENTRIES = {
    # small, K <= 256, grid: a kernel at 5.5 µs where cuBLAS takes 6.0; floor 5.0 binds.
    "64x64x64:nt": {"backend": "cuda", "best_cublas_us": 6.0, "time_us": 5.5},
    # small, K > 4096, off the grid (M = 3): a cuBLAS entry; floor binds (FLOPs and bytes are tiny).
    "3x64x8192:nt": {"backend": "cublas", "best_cublas_us": 9.0, "time_us": 9.0},
    # large, grid: compute binds: 2 * 8192^3 / 744e12 s = 1477.9 µs.
    "8192x8192x8192:nt": {"backend": "cublas", "best_cublas_us": 1500.0, "time_us": 1500.0},
    # a kernel filed below the floor: the ceiling is its own filed ratio, never less.
    "64x64x128:nt": {"backend": "cuda", "best_cublas_us": 5.2, "time_us": 4.8},
}


def test_t_min_takes_the_binding_limit():
    assert hr.t_min_us(64, 64, 64, 5.0, 744, 4.22) == 5.0
    assert hr.t_min_us(8192, 8192, 8192, 5.0, 744, 4.22) == pytest.approx(2 * 8192 ** 3 / 744e12 * 1e6)
    # bytes bind a long thin copy-like shape: 2 * (1*K + K*N + N) bytes at 4.22 TB/s
    t = hr.t_min_us(1, 28672, 8192, 5.0, 744, 4.22)
    assert t == pytest.approx(2 * (8192 + 8192 * 28672 + 28672) / 4.22e12 * 1e6)


def test_rows_and_table_by_hand(tmp_path):
    rs = {r["problem"]: r for r in hr.rows(ENTRIES, 5.0, 744, 4.22)}
    assert rs["64x64x64:nt"]["ceiling"] == pytest.approx(6.0 / 5.0) and rs["64x64x64:nt"]["filed"] == pytest.approx(6 / 5.5)
    assert rs["3x64x8192:nt"]["band"] == "K > 4096" and rs["3x64x8192:nt"]["ceiling"] == pytest.approx(9.0 / 5.0)
    assert rs["8192x8192x8192:nt"]["class"] == "large"
    assert rs["8192x8192x8192:nt"]["ceiling"] == pytest.approx(1500.0 / (2 * 8192 ** 3 / 744e12 * 1e6))
    assert rs["64x64x128:nt"]["ceiling"] == pytest.approx(5.2 / 4.8)
    t = {(r["class"], r["band"]): r for r in hr.table(list(rs.values()))}
    small = t[("small", "all")]
    assert small["shapes"] == 3 and small["kernels"] == 2
    assert small["ceiling"] == pytest.approx(math.exp((math.log(1.2) + math.log(1.8) + math.log(5.2 / 4.8)) / 3))
    assert t[("small", "K <= 256")]["shapes"] == 2 and t[("small", "K > 4096")]["shapes"] == 1


def test_main_writes_the_report_and_filters_the_grid(tmp_path, capsys):
    reg = _registry(tmp_path, ENTRIES)
    assert hr.main(["--registry", str(reg), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "| nt | small | all | 3 | 2 |" in out and "every entry" in out
    md = next((tmp_path / "o").glob("headroom_*.md")).read_text()
    assert "--registry" in md and "| nt | large | all | 1 | 0 |" in md
    js = json.loads(next((tmp_path / "o").glob("headroom_*.json")).read_text())
    assert js["limits"] == {"floor_us": 5.0, "peak_tflops": 744.0, "bw_tbs": 4.22} and len(js["rows"]) == 4
    assert hr.main(["--registry", str(reg), "--grid"]) == 0
    out = capsys.readouterr().out
    assert "| nt | small | all | 2 | 2 |" in out and "grid entries" in out     # 3x64x8192 is off the grid


@pytest.mark.parametrize("args", [["--floor-us", "0"], ["--device", "a100-sm80"]])
def test_bad_arguments_are_refused(tmp_path, args):
    with pytest.raises(SystemExit):
        hr.main(["--registry", str(_registry(tmp_path, ENTRIES)), *args])
