"""bench/class_ceiling.py: per-shape floors and ceilings from a card's measured rates, exact on
hand-made measurements (the numbers below are the test's, not a card's)."""
import gzip
import json

import pytest

from bench_import import load_bench

MIB = 1 << 20


def _module():
    return load_bench("class_ceiling")


# Reads: 8 MiB in 5.5 µs, 32 MiB in 8.5; writes: 6.5 and 14.0; server reads slower (cold L2).
CEILING = {"card": "NVIDIA H200", "empty_us": 3.5, "rows": [
    {"mode": "offline", "bytes": 8 * MIB, "read_us": 5.5, "write_us": 6.5},
    {"mode": "offline", "bytes": 32 * MIB, "read_us": 8.5, "write_us": 14.0},
    {"mode": "server", "bytes": 8 * MIB, "read_us": 8.0, "write_us": 6.7},
    {"mode": "server", "bytes": 32 * MIB, "read_us": 15.0, "write_us": 14.2}]}
# The empty kernel over 132 CTAs, and three first loads over it: the cheapest one counts.
LAUNCH = {"card": "NVIDIA H200", "rows": [
    {"case": "empty 132x128", "offline_us": 3.6, "server_us": 3.7},
    {"case": "load: TMA", "offline_minus_empty_us": 0.7, "server_minus_empty_us": 1.2},
    {"case": "load: cp.async", "offline_minus_empty_us": 0.6, "server_minus_empty_us": 1.0},
    {"case": "load: ld.global", "offline_minus_empty_us": 0.5, "server_minus_empty_us": 0.9}]}


def _row(m, n, k, best, cudal2, via="kernel"):
    r = {"shape": f"{m}x{n}x{k}", "M": m, "N": n, "K": k, "layout": "nt", "cudal2_via": via,
         "status_cudal2": "ok"}
    for mode, key in (("offline", "median_us"), ("server", "mean_us")):
        r[f"{mode}_best_cublas_us"] = best
        r[f"{mode}_torch_{key}"] = best
        r[f"{mode}_cudal2_{key}"] = cudal2
    return r


# small (launch-bound), skinny (16 MiB of B: between the measured sizes), large (compute-bound)
SMALL, SKINNY, LARGE = _row(64, 64, 64, 5.0, 4.6), _row(64, 2048, 4096, 10.0, 9.0), _row(4096, 4096, 4096, 200.0, 205.0)
PEAK = 1.0e15      # FLOP/s the compare measured; LARGE's 2*4096^3 / 200 µs = 687 TFLOP/s is under it


def _doc(rows, peak=PEAK, card="NVIDIA H200"):
    return {"schema": "cudal2.compare/1", "versions": {"card": card, "commit": "abc1234"},
            "peak": {"flops": peak}, "rows": rows}


def test_floors_interpolate_the_measured_rates():
    c = _module()
    card = c.Card(CEILING, LAUNCH, "offline")
    assert card.latency == pytest.approx(3.6 + 0.5)                 # ld.global is the cheapest load
    assert card.load_case == "load: ld.global"
    f = card.floors(64, 2048, 4096, PEAK)
    # A + B = 2 * (64 + 2048) * 4096 B = 16.5 MiB: 5.5 + (8.5 - 5.5) * (16.5 - 8) / 24
    assert f["read"] == pytest.approx(5.5 + 3.0 * (16.5 - 8) / 24)
    # C = 256 KiB, under the smallest size: from the empty kernel at 0 B (over 132 CTAs, the launch
    # file's 3.6 µs, not the stream file's 3.5) to 6.5 µs at 8 MiB
    assert f["write"] == pytest.approx(3.6 + 2.9 * (0.25 / 8))
    assert c.Card(CEILING, None, "offline").floors(64, 2048, 4096, PEAK)["write"] == pytest.approx(3.5 + 3.0 * (0.25 / 8))
    assert f["compute"] == pytest.approx(2 * 64 * 2048 * 4096 / PEAK * 1e6)
    # past the largest size: at its rate (32 MiB in 8.5 µs)
    assert card.floors(64, 64 * MIB // 2, 1, PEAK)["read"] == pytest.approx(8.5 * (2 * (64 + 32 * MIB)) / (32 * MIB))
    server = c.Card(CEILING, LAUNCH, "server")
    assert server.latency == pytest.approx(3.7 + 0.9)
    assert server.floors(64, 2048, 4096, PEAK)["read"] == pytest.approx(8.0 + 7.0 * (16.5 - 8) / 24)


def test_ceiling_is_best_cublas_over_the_binding_floor():
    c = _module()
    rows = c.shape_rows(_doc([SMALL, SKINNY, LARGE]), c.Card(CEILING, LAUNCH, "offline"), "offline")
    by = {r["shape"]: r for r in rows}
    assert by["64x64x64"]["binding"] == "latency"
    assert by["64x64x64"]["ceiling"] == pytest.approx(5.0 / 4.1)
    assert by["64x64x64"]["cudal2"] == pytest.approx(5.0 / 4.6)
    assert by["64x2048x4096"]["binding"] == "read"
    assert by["64x2048x4096"]["ceiling"] == pytest.approx(10.0 / (5.5 + 3.0 * 8.5 / 24))
    assert by["4096x4096x4096"]["binding"] == "compute"
    assert by["4096x4096x4096"]["ceiling"] == pytest.approx(200.0 / (2 * 4096 ** 3 / PEAK * 1e6))
    table = {t["class"]: t for t in c.class_table(rows, c.TARGETS)}
    assert table["skinny"]["target"] == 1.25 and table["skinny"]["shapes"] == 1
    # the target's share of the possible gain (log scale): above 1, past the ceiling
    ceil = by["64x2048x4096"]["ceiling"]
    assert table["skinny"]["target_share"] == pytest.approx(0.2231435513 / __import__("math").log(ceil))
    assert table["all"]["ceiling"] == pytest.approx((by["64x64x64"]["ceiling"] * ceil
                                                     * by["4096x4096x4096"]["ceiling"]) ** (1 / 3))


def test_a_peak_measured_low_gives_way_to_a_rate_the_card_ran():
    c = _module()
    # the compare's peak says 500 TFLOP/s, but LARGE's best-cublas ran 687: that rate is the peak
    doc = _doc([LARGE], peak=5.0e14)
    assert c.peak_flops(doc) == pytest.approx(2 * 4096 ** 3 / 200e-6)
    rows = c.shape_rows(doc, c.Card(CEILING, LAUNCH, "offline"), "offline")
    assert rows[0]["ceiling"] == pytest.approx(1.0)


def test_cli_writes_the_tables_and_refuses_another_cards_compare(tmp_path, capsys):
    c = _module()
    (tmp_path / "ceil.json").write_text(json.dumps(CEILING))
    (tmp_path / "launch.json").write_text(json.dumps(LAUNCH))
    (tmp_path / "cmp.json").write_text(json.dumps(_doc([SMALL, SKINNY, LARGE])))
    out = tmp_path / "out"
    args = ["--ceiling", str(tmp_path / "ceil.json"), "--launch", str(tmp_path / "launch.json"),
            "--set", f"grid-nt={tmp_path / 'cmp.json'}", "--out", str(out)]
    assert c.main(args) == 0
    res = json.loads(gzip.decompress((out / "class_ceiling.json.gz").read_bytes()))
    assert set(res["sets"]["grid-nt"]["modes"]) == {"offline", "server"}
    assert len(res["shapes"]["grid-nt:offline"]) == 3
    md = (out / "class_ceiling.md").read_text()
    assert "| skinny | 1 | 1.25 |" in md and "load: ld.global" in md
    (tmp_path / "h100.json").write_text(json.dumps(_doc([SMALL], card="NVIDIA H100 80GB HBM3")))
    with pytest.raises(SystemExit, match="the floors on NVIDIA H200"):
        c.main(args[:4] + ["--set", f"x={tmp_path / 'h100.json'}", "--out", str(out)])
    with pytest.raises(SystemExit, match="CLASS=X"):
        c.main(args + ["--target", "tiny=1.5"])
    with pytest.raises(SystemExit, match="--modes"):
        c.main(args + ["--modes", "offline,cold"])


def test_only_restricts_a_set_to_a_shapes_file_with_its_own_target(tmp_path):
    c = _module()
    (tmp_path / "ceil.json").write_text(json.dumps(CEILING))
    (tmp_path / "cmp.json").write_text(json.dumps(_doc([SMALL, SKINNY, LARGE])))
    (tmp_path / "decode.txt").write_text("# two of the three\n64x2048x4096:nt\n64x64x64:nt  # small\n4096x4096x4096:nn\n")
    out = tmp_path / "out"
    base = ["--ceiling", str(tmp_path / "ceil.json"), "--set", f"d={tmp_path / 'cmp.json'}", "--out", str(out)]
    assert c.main(base + ["--only", f"d={tmp_path / 'decode.txt'}", "--set-target", "d=1.2"]) == 0
    res = json.loads(gzip.decompress((out / "class_ceiling.json.gz").read_bytes()))
    assert sorted(r["shape"] for r in res["shapes"]["d:offline"]) == ["64x2048x4096", "64x64x64"]   # 4096^3 is nn there
    assert res["sets"]["d"]["missing"] == 1
    allrow = res["sets"]["d"]["modes"]["offline"][0]
    assert allrow["class"] == "all" and allrow["target"] == 1.2 and allrow["shapes"] == 2
    assert "1 of them not in the compare" in (out / "class_ceiling.md").read_text()
    with pytest.raises(SystemExit, match="is not a --set"):
        c.main(base + ["--only", f"x={tmp_path / 'decode.txt'}"])
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        c.main(base + ["--set-target", "d"])
    (tmp_path / "none.txt").write_text("128x128x128:nt\n")
    with pytest.raises(SystemExit, match="none of the 1 shapes"):
        c.main(base + ["--only", f"d={tmp_path / 'none.txt'}"])


def test_the_chain_floor_binds_where_measured(tmp_path):
    """--chain (bench/chain_floor.py's rows): a fifth floor for the shapes it measured, in its mode;
    it binds where it is the largest, and a shape it did not measure keeps the four."""
    c = _module()
    chain = {"card": "NVIDIA H200", "rows": [
        {"M": 64, "N": 64, "K": 64, "mode": "offline", "chain_us": 4.5},        # over latency's 4.1
        {"M": 64, "N": 2048, "K": 4096, "mode": "offline", "chain_us": 6.0},    # under the read's 6.56
        {"M": 64, "N": 64, "K": 64, "mode": "server", "chain_us": 4.0}]}        # under server's 4.6
    rows = c.shape_rows(_doc([SMALL, SKINNY, LARGE]), c.Card(CEILING, LAUNCH, "offline", chain), "offline")
    by = {r["shape"]: r for r in rows}
    assert by["64x64x64"]["binding"] == "chain" and by["64x64x64"]["ceiling"] == pytest.approx(5.0 / 4.5)
    # under the read floor of the slower reader: the chain moved A and B in 6.0, so the read floor is 6.0
    assert by["64x2048x4096"]["binding"] == "chain" and by["64x2048x4096"]["floors_us"]["read"] == 6.0
    assert by["64x2048x4096"]["ceiling"] == pytest.approx(10.0 / 6.0)
    assert "chain" not in by["4096x4096x4096"]["floors_us"]
    server = c.shape_rows(_doc([SMALL]), c.Card(CEILING, LAUNCH, "server", chain), "server")
    assert server[0]["binding"] == "latency"
    (tmp_path / "ceil.json").write_text(json.dumps(CEILING))
    (tmp_path / "cmp.json").write_text(json.dumps(_doc([SMALL, SKINNY, LARGE])))
    (tmp_path / "chain.json").write_text(json.dumps({**chain, "card": "NVIDIA H100 80GB HBM3"}))
    with pytest.raises(SystemExit, match="the floors on NVIDIA H100 80GB HBM3, NVIDIA H200"):
        c.main(["--ceiling", str(tmp_path / "ceil.json"), "--chain", str(tmp_path / "chain.json"),
                "--set", f"g={tmp_path / 'cmp.json'}", "--out", str(tmp_path / "out")])


def test_chain_files_of_one_card_add_up(tmp_path):
    """Two chain_floor.py runs (one cut by its time limit, one over the shapes it left): both files'
    rows are floors; runs of two cards are refused."""
    c = _module()
    (tmp_path / "ceil.json").write_text(json.dumps(CEILING))
    (tmp_path / "cmp.json").write_text(json.dumps(_doc([SMALL, SKINNY])))
    one = {"card": "NVIDIA H200", "rows": [{"M": 64, "N": 64, "K": 64, "mode": "offline", "chain_us": 4.5}]}
    two = {"card": "NVIDIA H200", "rows": [{"M": 64, "N": 2048, "K": 4096, "mode": "offline", "chain_us": 9.0}]}
    (tmp_path / "one.json").write_text(json.dumps(one))
    (tmp_path / "two.json").write_text(json.dumps(two))
    out = tmp_path / "out"
    args = ["--ceiling", str(tmp_path / "ceil.json"), "--chain", str(tmp_path / "one.json"), "--chain",
            str(tmp_path / "two.json"), "--set", f"g={tmp_path / 'cmp.json'}", "--modes", "offline", "--out", str(out)]
    assert c.main(args) == 0
    res = json.loads(gzip.decompress((out / "class_ceiling.json.gz").read_bytes()))
    assert {r["shape"]: r["binding"] for r in res["shapes"]["g:offline"]} == {"64x64x64": "chain", "64x2048x4096": "chain"}
    assert "one.json` and `" in (out / "class_ceiling.md").read_text()
    (tmp_path / "two.json").write_text(json.dumps({**two, "card": "NVIDIA H100 80GB HBM3"}))
    with pytest.raises(SystemExit, match="was run on NVIDIA H100 80GB HBM3"):
        c.main(args)


def test_the_tiled_chain_is_a_floor_only_when_asked():
    """chain_floor.py --panels's tiled chain (panel_us): counted with --tiled (Card(tiled=True)),
    where it binds above the chain; without it the shape keeps the chain."""
    c = _module()
    chain = {"card": "NVIDIA H200", "rows": [
        {"M": 64, "N": 64, "K": 64, "mode": "offline", "chain_us": 4.5, "panel_us": 4.55}]}
    plain = c.shape_rows(_doc([SMALL]), c.Card(CEILING, LAUNCH, "offline", chain), "offline")[0]
    assert plain["binding"] == "chain" and "tiled" not in plain["floors_us"]
    tiled = c.shape_rows(_doc([SMALL]), c.Card(CEILING, LAUNCH, "offline", chain, tiled=True), "offline")[0]
    assert tiled["binding"] == "tiled" and tiled["ceiling"] == pytest.approx(5.0 / 4.55) and tiled["beaten"] == []


def test_a_floor_a_kernel_beat_is_dropped_for_that_shape():
    """A chain or tiled time above what cuBLAS or cudal2 ran the shape in bounds nothing there
    (H100 run 174: the tiled chain lost to a kernel on 12 of 22 shapes offline): it is dropped for the shape,
    the next floor binds, and the class table counts it."""
    c = _module()
    chain = {"card": "NVIDIA H200", "rows": [
        # SMALL: cuBLAS 5.0, cudal2 4.6 -> the tiled 4.8 is beaten by cudal2, the chain 4.5 stands
        {"M": 64, "N": 64, "K": 64, "mode": "offline", "chain_us": 4.5, "panel_us": 4.8},
        # SKINNY: cuBLAS 10.0, cudal2 9.0 -> both beaten by cudal2; the read floor (capped by the
        # chain's 9.5: its kernel moved A and B in that time) binds
        {"M": 64, "N": 2048, "K": 4096, "mode": "offline", "chain_us": 9.5, "panel_us": 12.0}]}
    rows = c.shape_rows(_doc([SMALL, SKINNY]), c.Card(CEILING, LAUNCH, "offline", chain, tiled=True), "offline")
    by = {r["shape"]: r for r in rows}
    assert by["64x64x64"]["beaten"] == ["tiled"] and by["64x64x64"]["binding"] == "chain"
    assert by["64x64x64"]["ceiling"] == pytest.approx(5.0 / 4.5) and "tiled" not in by["64x64x64"]["floors_us"]
    assert by["64x2048x4096"]["beaten"] == ["chain", "tiled"] and by["64x2048x4096"]["binding"] == "read"
    assert by["64x2048x4096"]["ceiling"] == pytest.approx(10.0 / (5.5 + 3.0 * (16.5 - 8) / 24))
    all_ = c.class_table(rows, dict(c.TARGETS))[0]
    assert all_["class"] == "all" and all_["beaten"] == {"tiled": 2, "chain": 1}
    md = c.markdown({"card": "NVIDIA H200", "command": "x", "ceiling": "c.json", "launch": None, "chain": [],
                     "latency": {}, "sets": {"g": {"compare": "g.json", "card": "NVIDIA H200", "commit": "abc",
                                                   "only": None, "modes": {"offline": [all_]}}}})
    assert md.splitlines()[-1].endswith("| tiled 2, chain 1 |")
