"""The learned cost model (rl/costmodel.py, costtrain.py, costrank.py): offline training on a stored
table improves the ranking of shapes it never saw, on a planted stub clock and on committed H200
measurements; the candidate pool and the seeds it gives."""
import dataclasses
import math
from collections import Counter
from pathlib import Path

import pytest

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.rl.costmodel import NAMES, CostModel, features
from cudal2.rl.costrank import pick, pool, random_valid
from cudal2.rl.costtrain import Row, figures, fit, merge, rows_from, split, wave_scorer
from cudal2.rl.staged import seed_specs
from cudal2.spec import KernelSpec, is_valid
from cudal2.testing.fake_evaluator import FakeEvaluator
from cudal2.testing.stub_clocks import StubClock

HOPPER = DeviceInfo.target("sm_90a")
ROOT = Path(__file__).resolve().parents[1]
HOPPER_CSVS = [ROOT / "bench/results/h200-sm90/hopper" / n for n in
               ("run27_hopper_classes_5768fe9.csv", "run30_hopper_final_9c757d6.csv")]
TRAIN = [Problem(*a) for a in [(64, 128, 512), (128, 64, 1024), (256, 256, 64), (64, 1024, 256, "nt"),
                               (2048, 2048, 2048), (4096, 1024, 512), (1024, 4096, 2048, "nt"), (8192, 8192, 64),
                               (300, 200, 1000), (512, 512, 512, "nt"), (1024, 1024, 1024), (96, 4096, 4096)]]
HELD = [Problem(*a) for a in [(128, 128, 2048), (4096, 4096, 256, "nt"), (200, 300, 700), (2048, 8192, 1024),
                              (512, 64, 4096, "nt"), (1536, 1536, 1536)]]


def stub_table(problems, n=48):
    """Measurements of n valid specs per shape on the planted StubClock (small shapes favour small
    mma tiles, large ones wgmma / persistent large tiles; ragged tiles and stages far from 4 cost)."""
    ev = FakeEvaluator(StubClock(), HOPPER, early_stop=None)
    return [m for p in problems for m in ev.evaluate(p, random_valid(p, HOPPER, n))]


@pytest.fixture(scope="module")
def stub_rows():
    return rows_from([dataclasses.asdict(m) for m in stub_table(TRAIN + HELD)], Counter())


def test_training_on_a_stub_table_ranks_held_out_shapes(stub_rows):
    train, held = split(stub_rows, shapes={p.text for p in HELD})
    assert {r.problem for r in held} == set(HELD) and not {r.problem for r in train} & set(HELD)
    model, untrained = CostModel(hidden=32, members=2), CostModel(hidden=32, members=2)
    fit(model, train, epochs=200)
    untrained.load_state_dict({**untrained.state_dict(), "mean": model.mean, "std": model.std})
    got, before, rand = figures(held, model.score), figures(held, untrained.score), figures(held, None)
    assert got["shapes"] == before["shapes"] == 6
    # Measured (2026-12-03, CPU): trained rho 0.93, top1 0.94; untrained rho -0.04, top1 0.44;
    # random order top1 0.58. The stub's speed is a function of the features (family x size, tile
    # waste, stages), so a model that learnt it ranks nearly right; one that learnt nothing sits at
    # rho ~0 and random's top1. Thresholds leave ~0.1 for torch versions' numerics.
    assert got["rho"] >= 0.8 and got["top1"] >= 0.85
    assert got["rho"] - before["rho"] >= 0.5
    assert got["top1"] - rand["top1"] >= 0.2


def _csv_rows(path):
    import csv
    with open(path) as f:
        return rows_from([{"problem": f"{r['shape']}:{r['layout']}", "spec": r["spec"], "status": r["status"],
                           "time_us": float(r["us"]) if r["us"] else None,
                           "best_cublas_us": float(r["best_cublas_us"]) if r["best_cublas_us"] else None}
                          for r in csv.DictReader(f)], Counter())


def test_training_on_committed_h200_sweeps_beats_the_wave_model_on_held_out_shapes():
    """Real data: the wgmma sweeps of runs 27 and 30 (3255 rows, 274 shapes and layouts), a fifth of
    the shapes held out by hash. Every spec there came from the wave model (cudal2.tiles), which
    therefore ranks them well already (top1 0.973); the learned model must order them better."""
    rows = merge([_csv_rows(p) for p in HOPPER_CSVS])
    train, held = split(rows, 0.2, seed=0)
    assert len({r.problem for r in held}) == 54
    model = CostModel(hidden=32, members=2)
    fit(model, train, epochs=300)
    got, wave, rand = figures(held, model.score), figures(held, wave_scorer(132)), figures(held, None)
    # Measured (2026-12-03, CPU): model rho 0.844, top1 0.985; wave model rho 0.507, top1 0.973;
    # random top1 0.866. Thresholds: half the measured rho gain, and top1 at least the wave model's.
    assert got["rho"] >= wave["rho"] + 0.17
    assert got["top1"] >= max(wave["top1"], 0.97) and got["top1"] - rand["top1"] >= 0.08


def test_rows_average_within_a_source_and_the_later_source_wins():
    p, s = "256x256x256:nn", "backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=4"
    rec = lambda t, st="ok": {"problem": p, "spec": s, "status": st, "time_us": t, "best_cublas_us": 10.0}  # noqa: E731
    skipped = Counter()
    a = rows_from([rec(10.0), rec(40.0), rec(None, "compile_error"), {**rec(5.0), "spec": "bm=7"}], skipped)
    assert len(a) == 1 and a[0].y == pytest.approx((0.0 + math.log(0.25)) / 2)
    assert skipped == {"status compile_error": 1, "unparseable problem or spec": 1}
    slow = rows_from([{**rec(None, "slow"), "ratio": 5.0}], Counter())
    assert slow[0].y == pytest.approx(-math.log(5.0))
    b = rows_from([rec(5.0)], Counter())
    assert [r.y for r in merge([a, b])] == [pytest.approx(math.log(2.0))]


def test_features_and_figures_by_hand():
    p = Problem(1000, 300, 4096)
    s = KernelSpec.parse("backend=cuda family=wgmma bm=128 bn=128 bk=64 warps=12 stages=4 split_k=2 warp_spec=1")
    f = dict(zip(NAMES, features(p, s, 132)))
    assert len(f) == len(NAMES)
    # ceil(1000/128) * ceil(300/128) * 2 = 8 * 3 * 2 = 48 CTAs: one wave at 48/132 of the SMs.
    assert f["log2_ctas"] == pytest.approx(math.log2(48)) and f["last_wave"] == pytest.approx(48 / 132)
    assert f["log2_pad"] == pytest.approx(math.log2(1024 * 384 / 300000))
    assert f["log2_kiter"] == pytest.approx(5.0) and f["fam_wgmma"] == 1.0 and f["ws1"] == 1.0
    a, b, c = (KernelSpec.parse(f"backend=triton family=tiled bm={m} bn=64 bk=64 warps=4 stages=4") for m in (16, 32, 64))
    rows = [Row(p, a, 0.0), Row(p, b, -0.5), Row(p, c, -1.0)]
    perfect = figures(rows, lambda q, specs: [-x.bm for x in specs])
    worst = figures(rows, lambda q, specs: [x.bm for x in specs])
    assert perfect == {"shapes": 1, "rho": pytest.approx(1.0), "top1": pytest.approx(1.0)}
    assert worst["rho"] == pytest.approx(-1.0) and worst["top1"] == pytest.approx(math.exp(-1.0))
    assert figures(rows, None)["top1"] == pytest.approx((1 + math.exp(-0.5) + math.exp(-1)) / 3)


def test_pool_is_valid_deterministic_and_pick_spreads_tiles():
    p = Problem(4096, 4096, 4096)
    a, b = pool(p, HOPPER), pool(p, HOPPER)
    assert [s.text for s in a] == [s.text for s in b] and len(a) >= 500
    assert all(is_valid(s, p, HOPPER) for s in a)
    assert {s.family for s in a} == {"tiled", "persistent", "mma", "wgmma"}
    assert {s.backend for s in pool(p, HOPPER, ("cuda",))} == {"cuda"}
    t = lambda bm, st: KernelSpec.parse(f"backend=triton family=tiled bm={bm} bn=64 bk=64 warps=4 stages={st}")  # noqa: E731
    ranked = [t(64, 4), t(64, 3), t(32, 4), t(64, 2)]
    assert pick(ranked, 2) == [t(64, 4), t(32, 4)]
    assert pick(ranked, 3) == [t(64, 4), t(32, 4), t(64, 3)]


def test_cost_seeds_follow_the_model(stub_rows, tmp_path):
    model = CostModel(hidden=32, members=2)
    fit(model, split(stub_rows, shapes={p.text for p in HELD})[0], epochs=200)
    model.save(tmp_path / "m.pt")
    loaded = CostModel.load(tmp_path / "m.pt")
    p = HELD[3]
    seeds = seed_specs(4, p, HOPPER, kind="cost", ranker=loaded)
    assert len(seeds) == 4 and len({(s.family, s.bm, s.bn, s.split_k) for s in seeds}) == 4
    everything = pool(p, HOPPER)
    scores = dict(zip((s.text for s in everything), loaded.score(p, everything)))
    assert scores[seeds[0].text] == max(scores.values())
    # On the stub clock the model's first four beat the fixed list's first four on the held-out
    # shapes: measured (2026-12-03, CPU) geomean 0.72 of the fixed seeds' best time (0.32-0.64 on
    # the small shapes, where the list starts with large tiles; 1.00-1.06 on the large ones, where
    # it starts with the stub's best tile). 0.85 leaves room for numerics, not for no learning.
    clock = StubClock()

    def best(q, specs):
        ts = []
        for s in specs:
            try:
                ts.append(clock(s, q))
            except Exception:       # the stub's planted failures
                pass
        return min(ts, default=None)
    pairs = [(best(q, seed_specs(4, q, HOPPER, kind="cost", ranker=loaded)), best(q, seed_specs(4, q, HOPPER, kind="fixed")))
             for q in HELD]
    ratios = [c / f for c, f in pairs if c is not None and f is not None]
    assert math.exp(sum(map(math.log, ratios)) / len(ratios)) <= 0.85
    # The model ranks speed and never trains on failures (the checker judges correctness; on the
    # card 91 of 42,917 stored rows failed, 2026-12-04), so the stub's planted race (every mma
    # split_k=8 spec computes wrong results) can take all four of a small shape's seeds: it does on
    # 128x128x2048 since wgmma nn took any BN (the pool's random draws moved). One such shape at most.
    assert sum(c is None for c, _ in pairs) <= 1 and all(f is not None for _, f in pairs)
    with pytest.raises(ValueError, match="cost model"):
        seed_specs(4, p, HOPPER, kind="cost")



# random_valid's lists as the code before its fast form drew them (fc2314b: a KernelSpec per draw,
# every rule listed by violations): (shape, arch, backends, n) -> (specs, sha256 of their texts, one
# a line, first 16 hex digits). Shapes where most draws are invalid (a family runs out of its tries)
# included, so the rejection path and the rng's sequence past it are held too.
DRAWN_BEFORE = [
    # Nine moved when group_m took the orders grouped along N (2026-12-07: -1 / -4 / -8 / -16, drawn
    # by the CUDA families only, so the Triton-only list stayed): recomputed with the slow form (a
    # KernelSpec per draw, `violations` listing every rule), which drew the same lists for all ten.
    # Five moved when the cluster split-K took 128 accumulators a thread (2026-12-06: 128x256 /
    # 256x128 with split_k > 1, cooperative or lite, no 2-CTA cluster) and subtile 2 where the ring
    # holds the partial beside half a staging: recomputed, and a slow form
    # (a KernelSpec per draw, `violations` listing every rule) drew the same lists for all ten.
    # Seven moved when wgmma's bk took 32 and 128 (2026-12-05 night: a wgmma draw takes one of three
    # bk, so the rng's sequence moved for every arch; the cuda-only small shape now fills its 160):
    # recomputed with fc2314b's slow form on the new grammar, which drew the same lists as the fast
    # form for all ten. All ten moved when split_k took 3, 6 and 12 (2026-12-05): recomputed with fc2314b's slow form
    # (a KernelSpec per draw, `violations` listing every rule) on the new grammar, which drew the
    # same lists as the fast form for all ten. (Before that, nn on sm_90a moved when wgmma nn took
    # any BN multiple of 16, 2026-12-04 night.)
    ((4096, 4096, 4096), "sm_90a", None, 512, 409, "4108a4090f9a0b6d"),
    ((4096, 4096, 4096), "sm_80", ("cuda",), 160, 53, "b88c6670de5c5be1"),
    ((64, 12288, 12288, "nt"), "sm_90a", None, 512, 512, "35851b8822b774dd"),
    ((64, 12288, 12288, "nt"), "sm_90a", ("triton",), 96, 96, "fa2cbc33a3a26a8c"),
    ((128, 64, 256, "nt"), "sm_90a", ("cuda",), 160, 160, "2265333a2e976e8a"),
    ((128, 64, 256, "nt"), "sm_80", None, 512, 308, "5688d2fd4eb1553b"),
    ((100, 17, 1000), "sm_90a", None, 512, 308, "1d07485ba67e2c30"),
    ((1, 4096, 4096, "nt"), "sm_90a", None, 512, 512, "c67cd6b2834155ce"),
    ((3000, 1000, 17), "sm_90a", None, 512, 205, "4e155d74c4c619fa"),
    ((8192, 128, 16384), "sm_90a", ("cuda",), 160, 106, "5c82c63bfd311361"),
]


@pytest.mark.parametrize("shape,arch,backends,n,count,digest", DRAWN_BEFORE)
def test_random_valid_draws_what_it_drew_before_its_fast_form(shape, arch, backends, n, count, digest):
    """The same specs in the same order as before the dict draws and the early-exit is_valid: every
    cost seed of every shape depends on this list. A grammar change (CHOICES, PINNED, a rule) moves
    it legitimately: then recompute the table, and expect the cost seeds to change with it."""
    import hashlib
    got = [s.text for s in random_valid(Problem(*shape), DeviceInfo.target(arch), n, backends)]
    assert len(set(got)) == len(got) == count
    assert hashlib.sha256("\n".join(got).encode()).hexdigest()[:16] == digest
