"""bench/seed_replay.py on a made-up sweep: which shapes count, and the figures from known times."""
import csv
import gzip
import json
import math

import pytest

from bench_import import load_bench

sr = load_bench("seed_replay")
FIELDS = ["shape", "layout", "class", "spec", "status", "best_cublas", "best_cublas_us", "us", "spread",
          "vs_best_cublas", "tflops", "cluster_ctas", "from", "baselines_missing"]
H100_CLUSTERS = [[2, 132], [3, 117], [4, 120], [5, 110], [6, 102], [7, 105], [8, 120], [9, 81], [10, 70],
                 [11, 77], [12, 84], [13, 91], [14, 98], [15, 105], [16, 112]]     # run 163's JSON


def write_sweep(tmp_path, name, rows, gz=True):
    path = tmp_path / (name + (".csv.gz" if gz else ".csv"))
    with (gzip.open(path, "wt", newline="") if gz else open(path, "w", newline="")) as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})
    (tmp_path / f"{name}.json").write_text(json.dumps({"command": f"sweep {name}", "cluster_ctas": H100_CLUSTERS}))
    return path


def row(shape, layout, cls, spec, us, status="ok", bc=10.0):
    return {"shape": shape, "layout": layout, "class": cls, "spec": spec, "status": status, "us": us,
            "best_cublas_us": bc, "from": "wave"}


def test_a_shape_counts_where_one_sweep_timed_both_lists(tmp_path):
    from cudal2.problems import Problem
    dev = sr.sweep_device({"cluster_ctas": H100_CLUSTERS}, 132)
    big, deep = Problem.parse("4096x4096x512:nt"), Problem.parse("512x512x16384:nt")
    old_b, new_b = sr.rules(big, dev, 4)
    old_d, new_d = sr.rules(deep, dev, 4)
    assert old_b[:3] == new_b[:3] and new_b[3] not in old_b      # one ping-pong spec in place of the 4th
    # big: the old list's best 8 µs, the new list's extra 6.4 µs -> 1.25x; deep: the extra failed
    # (inf), so both bests are the shared 5 µs -> 1.0x; a third shape misses a spec and is left out.
    rows = [row("4096x4096x512", "nt", "large", t, 8.0 if t == old_b[0] else 9.0) for t in old_b]
    rows.append(row("4096x4096x512", "nt", "large", new_b[3], 6.4))
    rows += [row("512x512x16384", "nt", "starved", t, 5.0 if t == old_d[1] else 7.0) for t in old_d]
    rows.append(row("512x512x16384", "nt", "starved", new_d[3], "", status="wrong"))
    rows += [row("2048x2048x2048", "nt", "large", t, 3.0) for t in sr.rules(Problem.parse("2048x2048x2048:nt"), dev, 4)[0]]
    # A later sweep timing `big` again is not mixed in: its times are from another run.
    later = [row("4096x4096x512", "nt", "large", t, 1.0) for t in old_b + new_b]
    res = sr.replay([sr.read_sweep(write_sweep(tmp_path, "a", rows)),
                     sr.read_sweep(write_sweep(tmp_path, "b", later, gz=False))], 4, 132)
    assert res["left_out"] == {"same list": 0, "a spec of either list not timed": 1}
    got = {s["shape"]: s for s in res["shapes"]}
    assert (got["4096x4096x512"]["old_us"], got["4096x4096x512"]["new_us"]) == (8.0, 6.4)
    assert got["4096x4096x512"]["new_spec"] == new_b[3] and got["4096x4096x512"]["sweep"] == "sweep a"
    assert (got["512x512x16384"]["old_us"], got["512x512x16384"]["new_us"]) == (5.0, 5.0)
    summ = sr.summary(res["shapes"])
    assert summ["large/nt"] == {"shapes": 1, "new_vs_old": 1.25, "worst": 1.25, "old_vs_best_cublas": 1.25,
                                "new_vs_best_cublas": round(10 / 6.4, 4), "faster": 1, "slower": 0}
    assert summ["all"]["new_vs_old"] == round(math.sqrt(1.25), 4) and summ["all"]["faster"] == 1
    assert summ["starved/nt"]["slower"] == 0 and summ["starved/nt"]["worst"] == 1.0
    out = tmp_path / "replay.json"
    assert sr.main([str(tmp_path / "a.csv.gz"), str(tmp_path / "b.csv"), "--n", "4", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["summary"] == json.loads(json.dumps(summ)) and doc["command"].startswith("python3 bench/seed_replay.py")


def test_under_one_gflop_the_lists_are_the_same_and_bad_input_is_named(tmp_path):
    from cudal2.problems import Problem
    dev = sr.sweep_device({"cluster_ctas": None}, 132)
    old, new = sr.rules(Problem.parse("256x256x256:nt"), dev, 4)
    assert old == new and "warp_spec=0" in new[-1]         # lite seeds after the cooperative best, no extras
    assert all("warp_spec=2" not in t for t in new)
    path = tmp_path / "x.csv"
    path.write_text(",".join(FIELDS) + "\n")
    with pytest.raises(SystemExit, match="no x.json beside it"):
        sr.read_sweep(path)
    with pytest.raises(SystemExit, match="--n must be >= 1"):
        sr.main([str(path), "--n", "0"])
