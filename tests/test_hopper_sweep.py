"""bench/hopper_sweep.py (issue 19's measurement) on the CPU: its shape pick and per-class summary."""
import importlib.util
from pathlib import Path

from cudal2.problems import Problem
from cudal2.stats import shape_class

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("hopper_sweep", ROOT / "bench" / "hopper_sweep.py")
hs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hs)


def test_pick_spreads_over_each_class_and_keeps_the_cubes():
    got = hs.pick_shapes(["starved", "large"], 5, ["nn", "nt"])
    nn = [p for p in got if p.layout == "nn"]
    assert {p.layout for p in got} == {"nn", "nt"} and len(got) == 2 * len(nn)
    starved = [p for p in nn if shape_class(p.M, p.N, p.K) == "starved"]
    large = [p for p in nn if shape_class(p.M, p.N, p.K) == "large"]
    assert len(starved) == 5 and len(large) == 7            # 5 spread + 4096^3 and 8192^3
    assert Problem(4096, 4096, 4096) in large and Problem(8192, 8192, 8192) in large
    flops = [p.flops for p in starved]
    assert flops == sorted(flops)                            # both ends of the class, in order
    assert len(hs.pick_shapes(["mid"], 0, ["nn"])) == 82      # 0: the whole class


def test_summary_takes_the_best_spec_per_shape():
    rows = [
        {"class": "shortK", "layout": "nn", "shape": "a", "vs_best_cublas": 0.9},
        {"class": "shortK", "layout": "nn", "shape": "a", "vs_best_cublas": 1.1},
        {"class": "shortK", "layout": "nn", "shape": "b", "vs_best_cublas": 0.8},
        {"class": "shortK", "layout": "nn", "shape": "c", "vs_best_cublas": None},   # nothing ran
        {"class": "shortK", "layout": "nt", "shape": "a", "vs_best_cublas": 1.2},
    ]
    s = hs.summarize(rows)
    assert s["shortK/nn"] == {"shapes": 2, "geomean": round((1.1 * 0.8) ** 0.5, 4), "worst": 0.8,
                              "best": 1.1, "wins": 1}
    assert s["shortK/nt"]["shapes"] == 1 and s["shortK/nt"]["wins"] == 1
