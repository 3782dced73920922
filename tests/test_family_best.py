"""bench/family_best.py: the best ratio per shape of a family and of any family, from search stores."""
import gzip
import shutil
import sqlite3

import pytest

from bench_import import load_bench

fb = load_bench("family_best")


def _store(path, rows):
    con = sqlite3.connect(path)
    con.execute("create table measurements (spec text, problem text, device text, status text, "
                "time_us real, best_cublas_us real)")
    con.executemany("insert into measurements values (?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()


def test_best_ratios_take_ok_rows_of_the_device_and_the_best_per_family(tmp_path):
    W, T = "backend=cuda family=wgmma bm=64", "backend=triton family=tiled bm=64"
    _store(tmp_path / "a.db", [
        (W, "64x64x64:nt", "h200-sm90", "ok", 10.0, 9.0),      # 0.9
        (W, "64x64x64:nt", "h200-sm90", "ok", 8.0, 9.0),       # 1.125: the family's best
        (T, "64x64x64:nt", "h200-sm90", "ok", 6.0, 9.0),       # 1.5: any family's best
        (W, "64x64x64:nt", "h200-sm90", "wrong", 1.0, 9.0),    # failed the checker: never counted
        (W, "64x64x64:nt", "h100-sm90", "ok", 1.0, 9.0),       # another card
        (T, "4096x4096x4096:nt", "h200-sm90", "ok", 200.0, 180.0),
    ])
    plain = tmp_path / "b.db"
    _store(plain, [(W, "4096x4096x4096:nt", "h200-sm90", "ok", 190.0, 180.0)])
    with open(plain, "rb") as f, gzip.open(tmp_path / "b.db.gz", "wb") as g:    # .gz stores too
        shutil.copyfileobj(f, g)
    fam, anyf = fb.best_ratios([str(tmp_path / "a.db"), str(tmp_path / "b.db.gz")], "h200-sm90", "wgmma")
    assert fam == pytest.approx({"64x64x64:nt": 9 / 8, "4096x4096x4096:nt": 180 / 190})
    assert anyf == pytest.approx({"64x64x64:nt": 1.5, "4096x4096x4096:nt": 180 / 190})


def test_table_is_per_class_and_layout_over_the_grid():
    grid = [(64, 64, 64), (128, 128, 128), (4096, 4096, 4096)]          # small, small, large
    fam = {"64x64x64:nt": 1.2, "128x128x128:nt": 0.8, "4096x4096x4096:nn": 0.9}
    t = fb.table(grid, fam, fam)
    small = t["small:nt"]["family"]
    assert t["small:nt"]["grid"] == 2 and small["n"] == 2 and small["won"] == 1
    assert small["geomean"] == pytest.approx((1.2 * 0.8) ** 0.5, abs=1e-4) and small["worst"] == 0.8
    assert t["large:nn"]["family"]["geomean"] == 0.9 and t["large:nt"]["family"] == {"n": 0}


def test_sweeps_fold_in_a_cards_checked_rows(tmp_path):
    import csv
    import json
    W, T = "backend=cuda family=wgmma bm=64", "backend=triton family=tiled bm=64"
    path = tmp_path / "pairs_abc.csv"
    rows = [{"shape": "64x64x64", "layout": "nn", "spec": W, "status": "ok", "vs_best_cublas": "1.3"},
            {"shape": "64x64x64", "layout": "nn", "spec": W, "status": "check failed: x", "vs_best_cublas": ""},
            {"shape": "128x128x128", "layout": "nn", "spec": T, "status": "ok", "vs_best_cublas": "0.9"}]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (tmp_path / "pairs_abc.json").write_text(json.dumps({"device": "h200-sm90"}))
    fam, anyf = {"64x64x64:nn": 0.5}, {"64x64x64:nn": 0.5}
    fb.add_sweeps([str(path)], "h200-sm90", "wgmma", fam, anyf)
    assert fam == {"64x64x64:nn": 1.3} and anyf == {"64x64x64:nn": 1.3, "128x128x128:nn": 0.9}
    with pytest.raises(SystemExit, match="not 'h100-sm90'"):
        fb.add_sweeps([str(path)], "h100-sm90", "wgmma", fam, anyf)


def test_main_names_a_missing_store_and_a_device_the_stores_lack(tmp_path):
    with pytest.raises(SystemExit, match=r"--stores .*nope\.db\.gz: no such file"):
        fb.main(["--stores", str(tmp_path / "nope.db.gz"), "--out", str(tmp_path / "o")])
    _store(tmp_path / "a.db", [("backend=cuda family=wgmma bm=64", "64x64x64:nt", "h200-sm90", "ok", 8.0, 9.0)])
    with pytest.raises(SystemExit, match="no ok measurement of --device NVIDIA H200"):
        fb.main(["--stores", str(tmp_path / "a.db"), "--device", "NVIDIA H200", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()        # nothing written for a run that found nothing
