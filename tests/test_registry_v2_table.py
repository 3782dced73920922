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


def test_mean_and_vs_torch_per_class():
    t = _module()
    off = t.set_figures(ROWS)["all"]["offline"]
    want = [5 / 4, 20 / 25, 190 / 200]
    assert off["mean"] == pytest.approx(sum(want) / 3) and off["worst_shape"] == K.shape
    vs_torch = [6 / 4, 20 / 25, 1.0]          # the cuBLAS entry runs torch.matmul itself
    assert off["geomean_vs_torch"] == pytest.approx((vs_torch[0] * vs_torch[1]) ** (1 / 3))
    assert off["mean_vs_torch"] == pytest.approx(sum(vs_torch) / 3)
    assert off["kernel_served"] == 2


WGMMA = "backend=cuda family=wgmma bm=128 bn=128"
TILED = "backend=triton family=tiled bm=64 bn=64"


def _entry(backend: str, spec: str = "", ts: float = 100.0, **times) -> dict:
    return {"backend": backend, "spec": spec, "ts": ts, "times": times}


def test_attribution_from_the_row_the_index_and_the_guard():
    t = _module()
    s2, s3 = Problem(64, 64, 128, "nt"), Problem(128, 64, 64, "nt")
    rows = [dict(_row(S, 6.0, 5.0, 4.0), cudal2_spec=TILED),      # the row names its kernel
            _row(K, 20.0, 20.0, 25.0),                             # a kernel entry in the index
            _row(s2, 6.0, 5.0, 4.5),                               # re-filed by the server guard since
            _row(s3, 6.0, 5.0, 4.5),                               # filed after the compare: unknown
            _row(L, 200.0, 190.0, None, via="cublas")]             # cuBLAS: not a kernel row
    index = {f"{K.shape}:nt": _entry("cuda", WGMMA),
             f"{S.shape}:nt": _entry("cuda", WGMMA),               # the row's own spec wins over it
             f"{s2.shape}:nt": _entry("cublas", refiled="server 0.93x", best_kernel_spec=WGMMA),
             f"{s3.shape}:nt": _entry("cuda", WGMMA, ts=300.0)}
    kinds = t.attribute(rows, index, last_run=200.0)
    assert kinds == {f"{S.shape}:nt": "triton/tiled", f"{K.shape}:nt": "cuda/wgmma",
                     f"{s2.shape}:nt": "cuda/wgmma", f"{s3.shape}:nt": "unattributed"}
    # without run stamps the index is read as it is
    assert t.attribute(rows, index, last_run=None)[f"{s3.shape}:nt"] == "cuda/wgmma"
    # the offline guard's re-file names its kernel the same way (2026-12-06)
    offline = {**index, f"{s2.shape}:nt": _entry("cublas", refiled="offline 0.8583x", best_kernel_spec=WGMMA)}
    assert t.attribute(rows, offline, last_run=200.0)[f"{s2.shape}:nt"] == "cuda/wgmma"
    off = t.set_figures(rows, kinds)["all"]["offline"]
    # won: 64^3 (1.25x, tiled), s2 and s3 (5/4.5); K lost (0.8x)
    assert off["wins_by_kind"] == {"cuda/wgmma": 1, "triton/tiled": 1, "unattributed": 1}
    assert off["served_by_kind"] == {"cuda/wgmma": 2, "triton/tiled": 1, "unattributed": 1}


def test_index_is_read_for_the_compare_device(tmp_path):
    t = _module()
    p = tmp_path / "index.json"
    p.write_text(json.dumps({"format": "cudal2-registry", "version": 1,
                             "devices": {"h200-sm90": {"entries": {"64x64x64:nt": _entry("cuda", WGMMA)}}}}))
    assert set(t.read_index(str(p), "h200-sm90")) == {"64x64x64:nt"}
    assert t.read_index(str(p), "h100-sm90") == {} and t.read_index(None, "h200-sm90") == {}
    (tmp_path / "bad.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match="not a cudal2 registry index"):
        t.read_index(str(tmp_path / "bad.json"), "h200-sm90")
    with pytest.raises(SystemExit, match="no such registry index"):
        t.read_index(str(tmp_path / "none.json"), "h200-sm90")


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
    # the by-kind table: no spec in these rows and no index, so the kernels are not attributed
    assert "| grid-nt | all | 1: unattributed 1 | 2: unattributed 2 |" in md
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
