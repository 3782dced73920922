"""Robust cuBLAS entries (cudal2.registry.evidence, rule 1): a cuBLASLt call is dispatched only where
it beat torch.matmul by the margin in every timing of the shape, else torch.matmul; the record the
filing path writes (`cudal2 generate` on stub clocks), the legacy rule over the shipped entries, and
the M buckets `generate --m-buckets` files."""
import itertools

import pytest

from cudal2 import lt_dispatch
from cudal2.problems import Problem
from cudal2.registry import CUBLAS_MARGIN, Entry, Registry, cublas_choice, legacy_choice
from cudal2.rl.search import FixedListPolicy
from cudal2.testing.standin import HashClock

from test_generate_staged import HOPPER, _invoke, fake_gpu  # noqa: F401  (the fixture)

AT, HE = "cublaslt-autotune", "cublaslt-heuristic"
V = 130100
WORDS = list(range(8))


def rep(torch, at=None, he=None):
    return {"torch": torch, **({AT: at} if at else {}), **({HE: he} if he else {})}


def test_a_call_that_won_every_timing_by_the_margin_is_chosen():
    r = cublas_choice([rep(10.0, 9.5, 9.8), rep(10.2, 9.6, 10.3), rep(9.9, 9.4, 9.7)])
    assert r["target"] == AT and r["qualified"] == [AT, "torch"]     # heuristic lost the 2nd timing
    assert r["ratios"][AT] == [round(10.0 / 9.5, 5), round(10.2 / 9.6, 5), round(9.9 / 9.4, 5)]
    # The spread of each baseline over the repeats ((max - min) / median) is kept with the choice.
    assert r["spread"]["torch"] == round((10.2 - 9.9) / 10.0, 5) and r["spread"][HE] == round(0.6 / 9.8, 5)
    assert len(r["repeats"]) == 3 and r["margin"] == CUBLAS_MARGIN == 1.01


@pytest.mark.parametrize("repeats, why", [
    ([rep(10.0, 9.0), rep(10.0, 10.5)], "won the first timing, lost the second: noise, not a win"),
    ([rep(10.0, 9.95), rep(10.0, 9.94)], "0.5% in both: under the 1% margin (8192x4096x8192 won by 0.1%)"),
    ([rep(10.0, 8.0)], "one timing is not a repeat"),
    ([{AT: 8.0}, {AT: 8.0}], "torch.matmul never timed: nothing to beat"),
    ([], "nothing measured"),
])
def test_otherwise_torch_matmul(repeats, why):
    assert cublas_choice(repeats)["target"] == "torch", why


def test_among_calls_that_won_every_timing_the_larger_win():
    r = cublas_choice([rep(10.0, 9.0, 8.0), rep(10.0, 9.0, 8.5)])
    assert r["qualified"] == [HE, AT, "torch"]      # heuristic 1.22x geomean against autotune 1.11x


def entry_with(record=None, algo=True, **times):
    return Entry(problem="512x512x4096:nn", device="h200-sm90", backend="cublas", time_us=min(times.values()),
                 best_cublas_us=min(times.values()), baselines_us=times,
                 lt_algo={"data": WORDS, "cublasLt": V} if algo else None, dispatch=record)


def test_dispatch_follows_the_record_and_skips_what_cannot_run():
    rec = cublas_choice([rep(10.0, 8.0, 9.0), rep(10.0, 8.2, 9.1)])
    e = entry_with(rec, torch=10.0, **{AT: 8.0, HE: 9.0})
    assert lt_dispatch.choose(e, V)[:2] == (AT, WORDS)
    target, _, why = lt_dispatch.choose(e, V + 1)         # the stored words are another version's
    assert target == HE and f"for cuBLASLt {V}, not {V + 1}" in why
    assert lt_dispatch.choose(e, None)[0] == "torch"     # no cuBLASLt here at all
    # A record that says torch is followed even where the one filing timing alone looked like a win.
    e = entry_with(cublas_choice([rep(10.0, 8.0), rep(10.0, 10.4)]), torch=10.0, **{AT: 8.0})
    assert lt_dispatch.choose(e, V)[0] == "torch"


def test_legacy_entries_get_the_margin_over_their_one_timing():
    """The shipped entries predate the record. 8192x4096x8192 (autotune 826.14 vs torch 827.14 us at
    filing, 0.1%) ran at 0.93x of torch.matmul as dispatched (issue 22): torch.matmul now. A short-K
    wide shape where autotune won by 32% keeps its algorithm."""
    reg = Registry.load()
    big = reg.lookup(Problem(8192, 4096, 8192), "h200-sm90")
    assert big.dispatch is None and legacy_choice(big.baselines_us)["target"] == "torch"
    assert lt_dispatch.choose(big, V)[0] == "torch"
    wide = reg.lookup(Problem(12288, 16384, 256), "h200-sm90")
    assert wide.baselines_us["torch"] / wide.baselines_us[AT] > 1.3
    assert lt_dispatch.choose(wide, V)[:2] == (AT, wide.lt_algo["data"])


class Drift(HashClock):
    """HashClock whose baselines change from one evaluator call to the next (`seq`, cycled): what
    repeated timings of cuBLAS look like. Every seed runs 10x slow (passes the checks, loses to
    cuBLAS by far), so the shape is filed as cuBLAS after a screen call and a full re-check call."""

    def __init__(self, faults, seq):
        super().__init__(faults=faults)
        self.seq = itertools.cycle(seq)

    def baselines(self, problem):
        return dict(next(self.seq))


@pytest.mark.parametrize("seq, target", [
    ([rep(10.0, 9.5), rep(10.0, 9.7)], AT),           # 5% and 3%: autotune in every call
    ([rep(10.0, 9.5), rep(10.0, 10.3)], "torch"),     # won the screen's call, lost the re-check's
])
def test_generate_files_the_call_that_won_every_timing(fake_gpu, tmp_path, seq, target):  # noqa: F811
    p = Problem(64, 128, 512)
    fake_gpu(Drift({s.text: "slow" for s in FixedListPolicy.candidates(p, HOPPER)[:8]}, seq))
    reg = tmp_path / "reg"
    r = _invoke("--shapes", p.shape, "--budget", 4, "--group", 4, "--seed-list", "fixed:4", "--recheck", 1,
                "--store", tmp_path / "run.db", "--registry", reg)
    assert r.exit_code == 0, r.output
    e = Registry.load(reg).lookup(p, HOPPER.key)
    assert e.backend == "cublas" and e.dispatch["target"] == target
    # The screen's call and the re-check's each timed the baselines: both recorded, in order.
    assert e.dispatch["repeats"] == seq and e.times["best_kernel_us"] > 100 * 10.0


def _h(text):
    import hashlib
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


class SpecOnly(HashClock):
    """A kernel's time is its spec's hash x the work (not the shape's): the fastest spec at M=16 is the
    fastest at M=9 too, at 0.25-1x of baselines timed at 1.8-1.9x the floor: it wins at both edges."""

    def __call__(self, spec, problem):
        p = Problem.parse(str(problem))
        return self.scale_us * (1.0 + p.flops / 2**30) * (1.0 + 3.0 * (_h(str(spec)) % 1000) / 1000) / 4


def test_generate_m_buckets_scopes_a_filed_kernel(fake_gpu, tmp_path, hopper):  # noqa: F811
    fake_gpu(SpecOnly())
    reg = tmp_path / "reg"
    r = _invoke("--shapes", "4x256x256,16x256x256", "--budget", 4, "--group", 4, "--seed-list", "fixed:4",
                "--recheck", 1, "--store", tmp_path / "run.db", "--registry", reg, "--m-buckets")
    assert r.exit_code == 0, r.output
    got = Registry.load(reg)
    e16, e4 = got.lookup(Problem(16, 256, 256), HOPPER.key), got.lookup(Problem(4, 256, 256), HOPPER.key)
    assert e16.backend == "triton" or e16.backend == "cuda"
    # The bucket of 16 is (4, 16]: measured at 5 and at 16; 4 is the smallest M, so no bucket.
    assert e16.scope["M"] == [5, 16] and [x["problem"] for x in e16.scope["points"]] == [
        "16x256x256:nn", "5x256x256:nn"] and e4.scope is None
    serve = {m: [x.problem for x in got.serving(Problem(m, 256, 256), HOPPER.key, hopper)][:1] for m in (3, 4, 5, 11, 17)}
    assert serve == {3: [], 4: ["4x256x256:nn"], 5: ["16x256x256:nn"], 11: ["16x256x256:nn"], 17: []}


def test_a_v1_cublas_entry_gives_way_to_one_with_a_record(tmp_path):
    """Re-searching a shape of an exported v1 registry (the shipped one) must leave the repeated
    timings in it: a record-less cuBLAS entry is replaced; an entry with a record is kept."""
    from cudal2.registry import record_cublas
    p = Problem(512, 512, 4096)
    Registry.load(tmp_path).add(entry_with(None, torch=10.0, **{AT: 9.0}), None)
    e = record_cublas(tmp_path, p, "h200-sm90", rep(10.0, 9.0), repeats=[rep(10.1, 9.1)])
    assert e is not None and e.dispatch["target"] == AT and len(e.dispatch["repeats"]) == 2
    assert record_cublas(tmp_path, p, "h200-sm90", rep(10.0, 9.9), repeats=[rep(10.0, 9.9)]) is None
    assert Registry.load(tmp_path).lookup(p, "h200-sm90").dispatch["target"] == AT
