"""bench/search_order.py: the prior of each shape (the other layout's searched entry, else the cost
model's score), the order it gives, and the committed order files the device's grid search reads."""
from pathlib import Path

import pytest

from cudal2.problems import Problem, grid, read_shape_file
from bench_import import load_bench

ROOT = Path(__file__).resolve().parents[1]


def _module():
    return load_bench("search_order")


so = _module()


def test_best_kernel_reads_the_best_kernel_the_entry_found():
    assert so.best_kernel({"backend": "cuda", "time_us": 8.0, "best_cublas_us": 10.0, "spec": "s1"}) == \
        (pytest.approx(1.25), "s1")
    # a cuBLAS entry: its search's best kernel lost, by this much
    assert so.best_kernel({"backend": "cublas", "time_us": 10.0, "best_cublas_us": 10.0,
                           "times": {"best_kernel_us": 12.5, "best_kernel_spec": "s2"}}) == (pytest.approx(0.8), "s2")
    # nothing to go by: an entry without its search's best, or none
    assert so.best_kernel({"backend": "cublas", "time_us": 10.0, "best_cublas_us": 10.0, "times": {}}) is None
    assert so.best_kernel(None) is None


def test_order_prefers_the_other_layouts_result_and_falls_back_to_the_model():
    ps = [Problem(64, 64, 64), Problem(128, 128, 128), Problem(256, 256, 256), Problem(512, 512, 512)]
    entries = {"64x64x64:nt": {"backend": "cuda", "time_us": 5.0, "best_cublas_us": 5.5},          # 1.1
               "128x128x128:nt": {"backend": "cublas", "time_us": 6.0, "best_cublas_us": 6.0,
                                  "times": {"best_kernel_us": 7.5}},                                  # 0.8
               "512x512x512:nn": {"backend": "cuda", "time_us": 1.0, "best_cublas_us": 9.0}}        # same layout: ignored
    model = {"256x256x256:nn": 1.05, "512x512x512:nn": 0.9, "64x64x64:nn": 2.0, "128x128x128:nn": 2.0}
    rows = so.order(ps, entries, True, lambda p: model[p.text])
    assert [(p.text, src) for _, src, p in rows] == [("64x64x64:nn", "other"), ("256x256x256:nn", "model"),
                                                     ("512x512x512:nn", "model"), ("128x128x128:nn", "other")]
    assert [round(x, 3) for x, _, _ in rows] == [1.1, 1.05, 0.9, 0.8]
    # Without the other layout's prior every shape is the model's; ties keep the given order.
    rows = so.order(ps, entries, False, lambda p: 1.0)
    assert [p for _, _, p in rows] == ps and {src for _, src, _ in rows} == {"model"}


@pytest.mark.parametrize("name,layout", [("grid_nn2_order.txt", "nn"), ("grid_nt_order.txt", "nt")])
def test_committed_order_files_hold_each_grid_shape_once(name, layout):
    """bench/grid_search.sh hands these to `cudal2 generate --shapes FILE --stride 1` on the card: a
    lost or doubled shape there would cost a device call to find."""
    got = read_shape_file(ROOT / "bench" / name, layout)
    assert len(got) == 1000 and set(got) == set(grid(layout))
    head = (ROOT / "bench" / name).read_text().splitlines()[:4]
    assert head[0].startswith("# python3 bench/search_order.py --layout " + layout)
    priors = [float(l.split()[-1]) for l in (ROOT / "bench" / name).read_text().splitlines() if not l.startswith("#")]
    # One sort over both kinds of prior, highest first.
    assert priors == sorted(priors, reverse=True)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        so.main(["--layout", "tn", "--out", str(tmp_path / "o.txt")])
    with pytest.raises(SystemExit):
        so.main(["--layout", "nn", "--device", "a100-sm80", "--out", str(tmp_path / "o.txt")])
    assert not (tmp_path / "o.txt").exists()


def test_committed_nn2_leads_are_valid_for_their_nn_shapes():
    """bench/grid_nn2_leads.txt (generate --lead-specs of SET=grid-nn2): one spec per nn grid shape, each
    valid there by the one rule, so no lead is dropped on the card."""
    from cudal2.registry import target_for_key
    from cudal2.rl.leads import read_leads, valid_leads
    leads = read_leads(ROOT / "bench" / "grid_nn2_leads.txt")
    nn = {p.text for p in grid("nn")}
    assert len(leads) >= 700 and set(leads) <= nn and all(len(v) == 1 for v in leads.values())
    dev = target_for_key("h200-sm90")
    assert all(valid_leads(leads, Problem.parse(k), dev, ("cuda", "triton")) == (v, 0) for k, v in leads.items())
