"""bench/issue20_table.py on made-up compares (the numbers are the test's): the dispatched ratio per
clock over a set of disjoint compares, a disturbed row counted and set beside, the time past the
chain per band, the decode bandwidth; a shape in two compares of a set is refused."""
import gzip
import json

import pytest

from bench_import import load_bench


def _row(m, n, k, best, ours, spread=0.01, graph=None):
    r = {"shape": f"{m}x{n}x{k}", "M": m, "N": n, "K": k, "layout": "nt", "cudal2_via": "kernel",
         "offline_best_cublas_us": best, "offline_cudal2_median_us": ours, "offline_torch_median_us": best,
         "offline_cudal2_spread": spread, "offline_torch_spread": spread}
    if graph:
        r.update({"graph_best_cublas_us": graph[0], "graph_cudal2_median_us": graph[1], "graph_torch_median_us": graph[0],
                  "graph_cudal2_spread": graph[2], "graph_torch_spread": graph[2]})
    return r


def _write(path, rows, bw=3.0e12):
    doc = {"schema": "cudal2.compare/1", "versions": {"card": "NVIDIA H100 80GB HBM3"}, "peak": {"bw": bw}, "rows": rows}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return str(path)


def test_the_table_from_two_halves_a_chain_and_the_decode_bandwidth(tmp_path):
    t = load_bench("issue20_table")
    a = _write(tmp_path / "a.json.gz", [_row(512, 256, 512, 6.0, 5.0, graph=(3.0, 2.5, 0.002)),
                                         _row(64, 64, 64, 5.0, 5.0, graph=(2.0, 4.0, 0.3))])      # disturbed on graph
    b = _write(tmp_path / "b.json.gz", [_row(1024, 512, 1024, 10.0, 8.0)])
    d = _write(tmp_path / "d.json.gz", [_row(1, 14336, 4096, 33.0, 30.0), _row(16, 4096, 4096, 11.0, 10.0)])
    chain = tmp_path / "chain.json"
    chain.write_text(json.dumps({"rows": [{"M": 512, "N": 256, "K": 512, "mode": "offline", "chain_us": 4.5},
                                          {"M": 64, "N": 64, "K": 64, "mode": "offline", "chain_us": 4.2},
                                          {"M": 1024, "N": 512, "K": 1024, "mode": "offline", "chain_us": 6.0},
                                          {"M": 64, "N": 64, "K": 64, "mode": "server", "chain_us": 9.9}]}))
    out = tmp_path / "out"
    assert t.main(["--set", f"small={a},{b}", "--set", f"decode={d}", "--chain", str(chain), "--out", str(out)]) == 0
    res = json.loads((out / "issue20_table.json").read_text())
    clocks = {c["mode"]: c for c in res["sets"]["small"]["clocks"]}
    assert clocks["offline"]["shapes"] == 3 and clocks["offline"]["geomean"] == pytest.approx((1.2 * 1.0 * 1.25) ** (1 / 3))
    assert clocks["offline"]["over_1"] == 2 and clocks["offline"]["disturbed"] == []
    g = clocks["graph"]
    assert g["shapes"] == 2 and g["worst"] == pytest.approx(0.5) and g["disturbed"] == ["64x64x64"]
    assert g["geomean_undisturbed"] == pytest.approx(1.2) and g["worst_undisturbed"] == pytest.approx(1.2)
    bands = {b["band"]: b for b in res["sets"]["small"]["past_chain"]}
    assert bands["< 5.5 µs"]["shapes"] == 1 and set(bands) == {"< 5.5 µs", "5.5-8 µs", ">= 8 µs"}
    assert bands["5.5-8 µs"]["shapes"] == 1 and bands["5.5-8 µs"]["ours_past_chain_us"] == pytest.approx(0.5)
    assert bands["5.5-8 µs"]["cublas_past_chain_us"] == pytest.approx(1.5)
    assert bands["< 5.5 µs"]["ceiling"] == pytest.approx(5.0 / 4.2)            # 64x64x64: best 5.0
    assert bands[">= 8 µs"]["ceiling"] == pytest.approx(10.0 / 6.0)
    bw = res["sets"]["decode"]["bandwidth"]
    nbytes = 2 * (4096 + 4096 * 14336 + 14336)
    assert bw["shapes"] == 1 and bw["tbs"][0] == pytest.approx(nbytes / 30.0 / 1e6)   # 16x4096x4096: 33 MB, L2
    assert bw["of_copy"][0] == pytest.approx(nbytes / 30.0 / 1e6 / 3.0) and bw["at_85"] == 1
    md = (out / "issue20_table.md").read_text()
    assert "| graph | 2 | " in md and "64x64x64 (1.200, 1.200)" in md
    with pytest.raises(SystemExit, match="is in .*a.json.gz and .*a.json.gz"):
        t.main(["--set", f"x={a},{a}", "--out", str(out)])
    with pytest.raises(SystemExit, match="NAME=COMPARE"):
        t.main(["--set", "x", "--out", str(out)])


def test_the_split_by_dispatch_says_what_the_cublas_served_shapes_would_need(tmp_path):
    """Two kernel-served shapes at 1.25 and 1.44 and one torch.matmul-served at 0.98 (no cudal2
    column: dispatch calls torch.matmul, timed as its own column): for 1.20 over the three the
    torch-served shape would need 1.2^3 / (1.25 * 1.44) = 0.96, so the target is made as it is."""
    t = load_bench("issue20_table")
    torch_row = _row(256, 256, 512, 4.9, None)
    del torch_row["cudal2_via"], torch_row["offline_cudal2_median_us"]
    torch_row["offline_torch_median_us"] = 5.0
    a = _write(tmp_path / "a.json.gz", [_row(64, 64, 128, 5.0, 4.0), _row(128, 64, 128, 7.2, 5.0), torch_row])
    out = tmp_path / "out"
    assert t.main(["--set", f"small={a}", "--target", "small=1.2", "--out", str(out)]) == 0
    s = json.loads((out / "issue20_table.json").read_text())["sets"]["small"]
    (b,) = s["by_dispatch"]
    assert b["mode"] == "offline" and b["kernel_shapes"] == 2 and b["cublas_shapes"] == 1
    assert b["kernel"] == pytest.approx((1.25 * 1.44) ** 0.5) and b["cublas"] == pytest.approx(0.98)
    assert b["needed"] == pytest.approx(1.2 ** 3 / (1.25 * 1.44))
    assert "| offline | 2 | 1.342 | 1 | 0.980 | 0.960 |" in (out / "issue20_table.md").read_text()
    with pytest.raises(SystemExit, match="NAME=X"):
        t.main(["--set", f"small={a}", "--target", "small=fast", "--out", str(out)])
