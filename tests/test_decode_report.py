"""bench/decode_report.py on a made-up compare JSON: dispatched time (the kernel's, else
torch.matmul's), ratios, TB/s and the copy fraction computed from the PROTOCOL bytes."""
from __future__ import annotations

import json
import math

import pytest
from bench_import import load_bench


def _mod():
    return load_bench("decode_report")


def _row(m, n, k, kernel_us, torch_us, best_us, server=(None, None, None)):
    r = {"M": m, "N": n, "K": k, "layout": "nt", "cudal2_via": "kernel" if kernel_us else "",
         "offline_torch_median_us": torch_us, "offline_best_cublas_us": best_us,
         "server_torch_mean_us": server[1], "server_best_cublas_us": server[2]}
    if kernel_us:
        r["offline_cudal2_median_us"] = kernel_us
        r["server_cudal2_mean_us"] = server[0]
    return r


def test_decode_table(tmp_path):
    mod = _mod()
    bw = 4.0e12
    rows = [_row(1, 4096, 4096, 10.0, 12.5, 12.0, (20.0, 19.0, 19.0)),     # a kernel entry
            _row(16, 4096, 4096, None, 12.0, 11.0, (None, 20.0, 18.0)),     # dispatched to torch
            _row(512, 4096, 4096, 50.0, 51.0, 50.0)]                        # not a decode shape
    cmp_path = tmp_path / "cmp.json"
    cmp_path.write_text(json.dumps({"schema": "cudal2.compare/1", "peak": {"bw": bw}, "rows": rows}))
    assert mod.main([str(cmp_path), "--configs", "bench/configs/llama-3-8b.json", "--tokens", "1,16",
                     "--out", str(tmp_path)]) == 0
    import csv
    got = {r["shape"]: r for r in csv.DictReader(l for l in open(tmp_path / "decode_set.csv") if not l.startswith("#"))}
    assert set(got) == {"1x4096x4096", "16x4096x4096"}      # only decode shapes present in the compare
    one, sixteen = got["1x4096x4096"], got["16x4096x4096"]
    assert float(one["offline_vs_best"]) == pytest.approx(1.2)
    nbytes = 2 * (1 * 4096 + 4096 * 4096 + 1 * 4096)
    assert float(one["offline_tbs"]) == pytest.approx(nbytes / 10.0 / 1e6, rel=1e-3)
    assert float(one["offline_of_copy"]) == pytest.approx(nbytes / 10.0 / 1e6 / 4.0, rel=1e-3)
    assert float(one["server_vs_best"]) == pytest.approx(0.95)
    assert sixteen["via"] == "torch" and float(sixteen["offline_vs_best"]) == pytest.approx(11 / 12, rel=1e-3)
    assert float(sixteen["server_vs_best"]) == pytest.approx(0.9)
    md = (tmp_path / "decode_set.md").read_text()
    assert f"| all | 2 | {math.sqrt(1.2 * 11 / 12):.3f} / {11 / 12:.3f} |" in md


def test_no_decode_shapes_is_an_error(tmp_path, capsys):
    cmp_path = tmp_path / "cmp.json"
    cmp_path.write_text(json.dumps({"schema": "cudal2.compare/1", "peak": {"bw": 4e12}, "rows": [_row(512, 64, 64, 5.0, 5.0, 5.0)]}))
    assert _mod().main([str(cmp_path), "--out", str(tmp_path)]) == 2
    assert "none of the" in capsys.readouterr().err


def test_graph_column_and_gzipped_compares(tmp_path, capsys):
    """A compare with CUDA-graph replays gets their column; a gzipped compare (as committed) reads;
    a file that is not a compare is a one-line error."""
    import gzip
    mod = _mod()
    r = _row(1, 4096, 4096, 10.0, 12.5, 12.0, (20.0, 19.0, 19.0))
    r.update({"graph_cudal2_median_us": 8.0, "graph_torch_median_us": 10.5, "graph_best_cublas_us": 10.0})
    doc = {"schema": "cudal2.compare/1", "peak": {"bw": 4.0e12}, "rows": [r]}
    (tmp_path / "cmp.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert mod.main([str(tmp_path / "cmp.json.gz"), "--tokens", "1", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "decode_set.md").read_text()
    assert "graph vs best-cublas" in md and "| 1 | 1 | 1.200 / 1.200 | 1.250 / 1.250 | 0.950 / 0.950 |" in md
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    assert mod.main([str(tmp_path / "other.json"), "--out", str(tmp_path)]) == 2
    assert "schema" in capsys.readouterr().err
