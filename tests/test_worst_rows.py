"""bench/worst_rows.py: the kernel rows a compare saw lose to torch.matmul, worst first, one layout."""
import gzip
import json

from bench_import import load_bench

wr = load_bench("worst_rows")


def _row(m, n, k, via, off, srv, layout="nn"):
    """A compare row whose cudal2 ran `off` / `srv` of torch.matmul (torch 10 us offline, 20 server)."""
    return {"M": m, "N": n, "K": k, "layout": layout, "cudal2_via": via,
            "offline_torch_median_us": 10.0, "offline_cudal2_median_us": 10.0 / off,
            "server_torch_mean_us": 20.0, "server_cudal2_mean_us": 20.0 / srv}


def test_lists_kernel_rows_under_either_bar_worst_first(tmp_path, capsys):
    rows = [_row(2048, 256, 16384, "kernel", 0.858, 0.987),   # offline loss
            _row(256, 4096, 1024, "kernel", 1.02, 0.970),      # server loss
            _row(64, 64, 64, "kernel", 1.10, 1.00),            # wins both: not listed
            _row(128, 128, 128, "torch", 0.80, 0.80),          # cuBLAS dispatch: not the kernel's
            _row(512, 512, 512, "kernel", 0.999, 0.995)]       # under 1.0 offline by a hair: listed
    got = wr.worst({"rows": rows}, 1.0, 0.99)
    assert [s for s, *_ in got] == ["2048x256x16384:nn", "256x4096x1024:nn", "512x512x512:nn"]
    assert abs(got[0][1] - 0.858) < 1e-9 and abs(got[1][2] - 0.970) < 1e-9
    p = tmp_path / "c.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"config": {"layout": "nn"}, "rows": rows}, f)
    assert wr.main([str(p), "--out", str(tmp_path / "s.txt")]) == 0
    assert (tmp_path / "s.txt").read_text().split() == ["2048x256x16384", "256x4096x1024", "512x512x512"]
    assert "3 shapes (nn)" in capsys.readouterr().out


def test_refuses_two_layouts(tmp_path):
    """`cudal2 compare --layout` times one layout: a list that mixed them would time nt rows as nn.
    A compare whose config lacks the layout (the model set's, before 2026-12-05) is read by its rows."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"config": {"layout": "nn"}, "rows": [_row(64, 64, 64, "kernel", 0.9, 0.9)]}))
    b.write_text(json.dumps({"config": {}, "rows": [_row(2, 8192, 2048, "kernel", 0.9, 0.9, "nt")]}))
    assert wr.main([str(a), str(b), "--out", str(tmp_path / "s.txt")]) == 2
    assert not (tmp_path / "s.txt").exists()
    assert wr.main([str(b), "--out", str(tmp_path / "s.txt")]) == 0
    assert (tmp_path / "s.txt").read_text() == "2x8192x2048\n"
