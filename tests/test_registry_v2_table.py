"""bench/registry_v2_table.py: issue 22's table from compare files, its figures exact on hand-made rows."""
import gzip
import json

import pytest

from cudal2.problems import Problem
from bench_import import load_bench


def _module():
    return load_bench("registry_v2_table")


def _row(p: Problem, torch: float, best: float, cudal2: float | None, via: str = "kernel") -> dict:
    """A compare row with the columns the table reads: offline medians = server means."""
    r = {"shape": p.shape, "M": p.M, "N": p.N, "K": p.K, "layout": p.layout, "cudal2_via": via,
         "status_cudal2": "ok" if cudal2 is not None else "n/a"}
    for mode, key in (("offline", "median_us"), ("server", "mean_us")):
        r[f"{mode}_best_cublas_us"] = best
        r[f"{mode}_torch_{key}"] = torch
        if cudal2 is not None:
            r[f"{mode}_cudal2_{key}"] = cudal2
    return r


# small (64^3), skinny (64x4096x4096), large (4096^3): three classes, nt.
S, K, L = Problem(64, 64, 64, "nt"), Problem(64, 4096, 4096, "nt"), Problem(4096, 4096, 4096, "nt")
ROWS = [_row(S, torch=6.0, best=5.0, cudal2=4.0),                          # a kernel, 1.25x
        _row(K, torch=20.0, best=20.0, cudal2=25.0),                       # a kernel that lost: 0.8x
        _row(L, torch=200.0, best=190.0, cudal2=None, via="cublas")]      # a cuBLAS entry: torch's time


def test_figures_are_the_dispatched_ratios():
    t = _module()
    f = t.set_figures(ROWS)
    off = f["all"]["offline"]
    want = [5 / 4, 20 / 25, 190 / 200]
    assert off["geomean"] == pytest.approx((want[0] * want[1] * want[2]) ** (1 / 3))
    assert off["worst"] == pytest.approx(0.8)
    # vs torch.matmul: 6/4, 20/25, and the cuBLAS entry dispatched to torch.matmul itself (1.0)
    assert off["worst_vs_torch"] == pytest.approx(0.8) and off["worst_vs_torch_shape"] == K.shape
    assert off["kernel_wins"] == 1 and f["all"]["shapes"] == 3
    assert set(f["classes"]) == {"small:nt", "skinny:nt", "large:nt"}
    assert f["classes"]["large:nt"]["offline"]["geomean"] == pytest.approx(0.95)


def test_end_to_end_reads_gzip_and_writes_the_table(tmp_path):
    t = _module()
    cmp = {"schema": "cudal2.compare/1", "versions": {"commit": "abc1234", "card": "NVIDIA H200"},
           "complete": True, "rows": ROWS}
    path = tmp_path / "c.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(cmp, f)
    verify = tmp_path / "verify.txt"
    verify.write_text("table...\n3 ok, 0 bad\n")
    assert t.main(["--set", f"grid-nt={path}", "--verify", str(verify), "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "registry_v2_table.md").read_text()
    assert "| grid-nt | 1.10 |" in md and "1 of 3 (33%)" in md and "3 ok, 0 bad" in md
    data = json.loads((tmp_path / "o" / "registry_v2_table.json").read_text())
    assert data["sets"]["grid-nt"]["figures"]["all"]["offline"]["kernel_wins"] == 1


def test_bad_input_is_refused(tmp_path):
    t = _module()
    with pytest.raises(SystemExit):
        t.main(["--set", "grid-nt", "--out", str(tmp_path)])                      # no path
    with pytest.raises(SystemExit, match="no such compare"):
        t.main(["--set", f"grid-nt={tmp_path / 'none.json'}", "--out", str(tmp_path)])
    (tmp_path / "x.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match="not a cudal2 compare"):
        t.main(["--set", f"grid-nt={tmp_path / 'x.json'}", "--out", str(tmp_path)])
