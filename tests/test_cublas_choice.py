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
    # A legacy entry when this was written; `registry add-timings` (db6ec9d) gave it a record of two
    # timings since: torch.matmul either way.
    assert legacy_choice(big.baselines_us)["target"] == "torch"
    assert big.dispatch is None or big.dispatch["target"] == "torch"
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


def _compare_file(path, rows):
    """A `cudal2 compare --json` file with the fields add-timings reads: versions.device_key,
    config.baselines and per row M, N, K, layout and the offline medians."""
    import json
    path.write_text(json.dumps({"versions": {"device_key": "h200-sm90"}, "config": {"baselines": ["torch", AT, HE]},
                                "rows": [{"M": p.M, "N": p.N, "K": p.K, "layout": p.layout,
                                          **{f"offline_{n}_median_us": t for n, t in times.items()}}
                                         for p, times in rows]}))
    return path


def test_a_later_timing_that_lost_sends_the_entry_to_torch(tmp_path):
    """16x3584x18944 nt on the H200 (2026-12-04): autotune won the three filing timings by 1.2-1.7%,
    then ran 0.954x of torch.matmul in the compare. With that timing added, it is torch.matmul;
    a call that still wins every timing stays; a kernel entry and a shape not compared are left."""
    from cudal2.registry import add_timings
    reg = Registry.load(tmp_path, create=True)
    lost, held = Problem(16, 3584, 18944, "nt"), Problem(512, 512, 4096)
    reg.add(Entry(problem=lost.text, device="h200-sm90", backend="cublas", time_us=40.0, best_cublas_us=40.0,
                  baselines_us=rep(41.0, 40.5), dispatch=cublas_choice([rep(41.0, 40.5), rep(40.4, 39.8)])), None)
    reg.add(entry_with(cublas_choice([rep(10.0, 9.5), rep(10.0, 9.6)]), torch=10.0, **{AT: 9.5}), None)
    untouched = reg.lookup(Problem(512, 512, 4096), "h200-sm90").to_dict()
    assert reg.lookup(lost, "h200-sm90").dispatch["target"] == AT
    moved = add_timings(tmp_path, "h200-sm90", {lost.text: rep(39.9, 41.8), held.text: rep(10.1, 9.7),
                                                "64x64x64:nn": rep(5.0, 4.0)})
    assert sorted((e.problem, old, new) for e, old, new in moved) == [(lost.text, AT, "torch"), (held.text, AT, AT)]
    back = Registry.load(tmp_path)
    e = back.lookup(lost, "h200-sm90")
    assert e.dispatch["target"] == "torch" and len(e.dispatch["repeats"]) == 3
    assert e.dispatch["ratios"][AT][-1] == round(39.9 / 41.8, 5)
    assert lt_dispatch.choose(e, V)[0] == "torch"
    kept = back.lookup(held, "h200-sm90").dispatch
    assert kept["target"] == AT and len(kept["repeats"]) == 3 and untouched["dispatch"]["repeats"] != kept["repeats"]
    # The same timing again is not a second run: nothing changes.
    assert add_timings(tmp_path, "h200-sm90", {lost.text: rep(39.9, 41.8)}) == []


def test_a_legacy_entry_counts_its_one_timing_first(tmp_path):
    """An entry filed before dispatch records (the shipped grid nn) has one timing; a compare's
    timing makes two, and the rule over both applies (a win in both by the margin, else torch)."""
    from cudal2.registry import add_timings
    Registry.load(tmp_path, create=True).add(entry_with(None, torch=10.0, **{AT: 9.0}), None)
    e = Registry.load(tmp_path).lookup(Problem(512, 512, 4096), "h200-sm90")
    assert lt_dispatch.choose(e, V)[0] == AT                     # legacy rule: one timing, 1.11x
    [(e, old, new)] = add_timings(tmp_path, "h200-sm90", {"512x512x4096:nn": rep(10.0, 10.05)})
    assert (old, new) == (AT, "torch") and e.dispatch["repeats"] == [rep(10.0, 9.0), rep(10.0, 10.05)]
    with pytest.raises(Exception, match="margin"):
        add_timings(tmp_path, "h200-sm90", {}, margin=0.9)


def test_cli_add_timings(tmp_path):
    """`cudal2 registry add-timings COMPARE.json --registry DIR` names each entry whose call changed;
    the shipped registry is refused (export, add, ship the copy); a file that is no compare, exit 1."""
    from typer.testing import CliRunner

    from cudal2.cli import app
    Registry.load(tmp_path / "reg", create=True).add(entry_with(None, torch=10.0, **{AT: 9.0}), None)
    cmp = _compare_file(tmp_path / "cmp.json", [(Problem(512, 512, 4096), rep(10.0, 10.3, 10.2))])
    run = CliRunner().invoke
    r = run(app, ["registry", "add-timings", str(cmp), "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 0, r.output
    assert "h200-sm90/512x512x4096:nn: cublaslt-autotune -> torch" in r.output
    assert "1 cuBLAS entries got a timing; 1 now dispatch to another call" in r.output
    r = run(app, ["registry", "add-timings", str(cmp)])
    assert r.exit_code == 1 and "shipped registry is read-only" in r.output
    import gzip                 # a committed compare is gzipped: read as it is, same evidence (none new)
    (tmp_path / "cmp.json.gz").write_bytes(gzip.compress(cmp.read_bytes()))
    r = run(app, ["registry", "add-timings", str(tmp_path / "cmp.json.gz"), "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 0 and "0 cuBLAS entries got a timing" in r.output, r.output
    (tmp_path / "bad.json").write_text("{}")
    r = run(app, ["registry", "add-timings", str(tmp_path / "bad.json"), "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 1 and "not a cudal2 compare JSON" in r.output


def test_cli_add_timings_takes_every_timing_at_once(tmp_path):
    """Several compares in one call: each is one more timing of the entry, in the order given (the
    entry's record holds both, and the choice is over all of them); a bad file among them changes
    nothing, not even the good files read before it."""
    from typer.testing import CliRunner

    from cudal2.cli import app
    from cudal2.registry import Registry as Reg
    reg = tmp_path / "reg"
    Registry.load(reg, create=True).add(entry_with(None, torch=10.0, **{AT: 9.0}), None)
    a = _compare_file(tmp_path / "a.json", [(Problem(512, 512, 4096), rep(10.0, 9.8, 10.2))])     # autotune 1.020x
    b = _compare_file(tmp_path / "b.json", [(Problem(512, 512, 4096), rep(10.0, 10.05, 10.3))])   # autotune 0.995x
    (tmp_path / "bad.json").write_text("{}")
    before = (reg / "index.json").read_text()
    r = CliRunner().invoke(app, ["registry", "add-timings", str(a), str(tmp_path / "bad.json"), "--registry", str(reg)])
    assert r.exit_code == 1 and "bad.json: not a cudal2 compare JSON" in r.output, r.output
    assert (reg / "index.json").read_text() == before
    r = CliRunner().invoke(app, ["registry", "add-timings", str(a), str(b), "--registry", str(reg)])
    assert r.exit_code == 0, r.output
    assert r.output.index("== " + str(a)) < r.output.index("== " + str(b))
    [e] = Reg.load(reg).all("h200-sm90")
    # the filing timing (torch 10.0, autotune 9.0) and the two added: autotune lost b by 0.5%
    assert e.dispatch["repeats"] == [rep(10.0, 9.0), rep(10.0, 9.8, 10.2), rep(10.0, 10.05, 10.3)]
    assert e.dispatch["target"] == "torch"
    assert "h200-sm90/512x512x4096:nn: cublaslt-autotune -> torch" in r.output


def test_the_dispatched_calls_timing_stands_in_for_its_baseline():
    """A compare row that cudal2 served through a cuBLASLt call (cudal2_via) timed that call, with
    the entry's stored algorithm, as cudal2's column: that is the evidence for the entry, not the
    baseline's fresh autotune pick (H200 run 67: 256x16384x1024 nt's stored algorithm 20.06 us where
    the compare's own autotune found 17.34 us; torch.matmul 19.14 us). A kernel row keeps its columns."""
    from cudal2.registry import compare_timings
    rows = [{"M": 256, "N": 16384, "K": 1024, "layout": "nt", "cudal2_via": AT, "offline_torch_median_us": 19.14,
             f"offline_{AT}_median_us": 17.34, f"offline_{HE}_median_us": 18.08, "offline_cudal2_median_us": 20.06},
            {"M": 64, "N": 64, "K": 64, "layout": "nt", "cudal2_via": "kernel", "offline_torch_median_us": 5.0,
             f"offline_{AT}_median_us": 5.1, "offline_cudal2_median_us": 4.6}]
    got = compare_timings({"config": {"baselines": ["torch", AT, HE]}, "rows": rows})
    assert got["256x16384x1024:nt"] == {"torch": 19.14, AT: 20.06, HE: 18.08}
    assert got["64x64x64:nt"] == {"torch": 5.0, AT: 5.1}
    # With it the entry that had won its filing timings by >= 1.01 goes to torch.matmul.
    rec = cublas_choice([rep(19.6, 18.9), rep(19.5, 18.8), got["256x16384x1024:nt"]])
    assert rec["target"] == "torch"


def test_server_guard_stops_a_cublaslt_call_that_lost_cold(tmp_path):
    """H200 run 67: 256x2048x4096 nt's stored autotune call beat torch.matmul offline in all four
    timings (>= 1.026x) and ran 0.905x of it in server mode (L2 wiped). Under --server-guard 0.97
    the entry dispatches torch.matmul, the reason kept; a later compare's offline timing (where
    the call wins again) does not bring it back. A call at 0.98x cold stays; where the entry's
    call was not the one dispatched in the compare, its baseline column is the evidence; the next
    qualified call is held to the same compare's columns."""
    import json

    from typer.testing import CliRunner

    from cudal2.cli import app
    from cudal2.registry import add_timings
    cold, warm, other = Problem(256, 2048, 4096, "nt"), Problem(128, 512, 16384, "nt"), Problem(64, 64, 4096, "nt")
    both = Problem(2048, 512, 4096, "nt")
    reg = Registry.load(tmp_path / "reg", create=True)
    for p in (cold, warm, other, both):
        reps = [rep(10.6, 10.0, 10.3), rep(10.5, 10.1, 10.3), rep(10.7, 10.2, 10.4)]
        reg.add(Entry(problem=p.text, device="h200-sm90", backend="cublas", time_us=10.0, best_cublas_us=10.0,
                      baselines_us=reps[0], lt_algo={"data": WORDS, "cublasLt": V}, dispatch=cublas_choice(reps)), None)
    assert all(reg.lookup(p, "h200-sm90").dispatch["target"] == AT for p in (cold, warm, other))

    def row(p, via, server_cudal2, server_torch, **server):
        return {"M": p.M, "N": p.N, "K": p.K, "layout": "nt", "cudal2_via": via, "offline_torch_median_us": 10.6,
                f"offline_{AT}_median_us": 10.1, f"offline_{HE}_median_us": 10.3, "offline_cudal2_median_us": 10.1,
                "server_cudal2_mean_us": server_cudal2, "server_torch_mean_us": server_torch,
                **{f"server_{k}_mean_us": v for k, v in server.items()}}
    cmp = tmp_path / "cmp.json"
    cmp.write_text(json.dumps({"versions": {"device_key": "h200-sm90"},
                               "config": {"baselines": ["torch", AT, HE], "modes": ["offline", "server"]},
                               "rows": [row(cold, AT, 20.0, 18.1, **{HE: 19.0}), row(warm, AT, 20.0, 19.6),
                                        row(other, HE, 15.0, 15.3, **{AT: 15.0}),
                                        row(both, HE, 20.0, 18.0, **{AT: 19.0})]}))
    r = CliRunner().invoke(app, ["registry", "add-timings", str(cmp), "--registry", str(tmp_path / "reg"),
                                 "--server-guard", "0.97"])
    assert r.exit_code == 0, r.output
    assert (f"h200-sm90/{cold.text}: {AT} kept out (server mode 0.905x of torch.matmul, guard 0.97); "
            "dispatches torch") in r.output
    assert "--server-guard 0.97: 4 cuBLASLt calls no longer dispatched" in r.output
    back = Registry.load(tmp_path / "reg")
    e = back.lookup(cold, "h200-sm90")
    assert e.dispatch["target"] == "torch" and "server 0.9050x" in e.dispatch["cold"][AT]
    assert "server 0.9526x" in e.dispatch["cold"][HE]          # the next call, 18.1 / 19.0 in its column
    assert "won but not runnable" in e.dispatch["why"] and lt_dispatch.choose(e, V)[0] == "torch"
    assert back.lookup(warm, "h200-sm90").dispatch["target"] == AT          # 19.6 / 20.0 = 0.98x
    assert back.lookup(other, "h200-sm90").dispatch["target"] == AT         # its own column: 1.02x
    # autotune's own column 0.947x: out; the heuristic next, as dispatched 0.90x: out too; torch.
    b = back.lookup(both, "h200-sm90").dispatch
    assert b["target"] == "torch" and set(b["cold"]) == {AT, HE}
    add_timings(tmp_path / "reg", "h200-sm90", {cold.text: rep(10.8, 9.9)})
    e = Registry.load(tmp_path / "reg").lookup(cold, "h200-sm90")
    assert e.dispatch["target"] == "torch" and AT in e.dispatch["cold"] and len(e.dispatch["repeats"]) == 5


def test_an_autotune_column_of_another_algorithm_is_no_evidence(tmp_path):
    """H100 (2026-12-06): 12288x64x1024:nt stores the autotune algorithm that beat torch.matmul by
    1.058-1.064x in five offline timings; run 132's compare tuned afresh, picked another algorithm and
    timed it at 0.903x, and that timing, added as the stored call's, kept the entry on torch.matmul.
    A compare's autotune column counts only where it timed the stored algorithm (the row's
    cublaslt-autotune_algo, or cudal2's own column where it dispatched the call); adding the compare
    again repairs the timing already held; the other calls' columns of that run still count."""
    import json

    from typer.testing import CliRunner

    from cudal2.cli import app
    from cudal2.registry import add_timings, autotune_algos
    p = Problem(12288, 64, 1024, "nt")
    good = [rep(10.56, 9.95, 10.59), rep(10.59, 10.02, 10.56), rep(10.11, 9.50, 10.14)]
    other = rep(10.43, 11.55, 10.43)                  # the fresh pick of run 132, another algorithm
    reg = Registry.load(tmp_path / "reg", create=True)
    reg.add(Entry(problem=p.text, device="h200-sm90", backend="cublas", time_us=9.95, best_cublas_us=9.95,
                  baselines_us=good[0], lt_algo={"data": WORDS, "cublasLt": V},
                  dispatch=cublas_choice(good[:2] + [other] + good[2:])), None)
    assert reg.lookup(p, "h200-sm90").dispatch["target"] == "torch"        # 0.903x in one of four

    row = {"M": p.M, "N": p.N, "K": p.K, "layout": "nt", "cudal2_via": "torch",
           f"{AT}_algo": [w + 1 for w in WORDS], **{f"offline_{n}_median_us": t for n, t in other.items()}}
    doc = {"versions": {"device_key": "h200-sm90", "cublasLt": V}, "config": {"baselines": ["torch", AT, HE]},
           "rows": [row]}
    assert autotune_algos(doc) == {p.text: {"data": [w + 1 for w in WORDS], "cublasLt": V}}
    (tmp_path / "cmp.json").write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["registry", "add-timings", str(tmp_path / "cmp.json"), "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 0 and f"h200-sm90/{p.text}: torch -> {AT}" in r.output, r.output
    d = Registry.load(tmp_path / "reg").lookup(p, "h200-sm90").dispatch
    assert len(d["repeats"]) == 4 and d["repeats"][2] == {"torch": 10.43, HE: 10.43}    # repaired in place
    assert d["ratios"][AT] == [round(10.56 / 9.95, 5), round(10.59 / 10.02, 5), round(10.11 / 9.50, 5)]
    # The same compare again: one run, already held; nothing changes.
    r = CliRunner().invoke(app, ["registry", "add-timings", str(tmp_path / "cmp.json"), "--registry", str(tmp_path / "reg")])
    assert "0 now dispatch to another call" in r.output and \
        len(Registry.load(tmp_path / "reg").lookup(p, "h200-sm90").dispatch["repeats"]) == 4

    # A new timing whose column is the stored algorithm (same words) counts, losses included.
    same = {p.text: {"data": WORDS, "cublasLt": V}}
    [(e, old, new)] = add_timings(tmp_path / "reg", "h200-sm90", {p.text: rep(10.0, 10.2)}, algos=same)
    assert (old, new) == (AT, "torch") and e.dispatch["ratios"][AT][-1] == round(10.0 / 10.2, 5)
    # Another cuBLASLt version's pick, or an unknown one, as before: the version differs -> dropped;
    # no algorithm recorded (compares before 2026-12-05) -> counted.
    q = Problem(4096, 64, 2048, "nt")
    Registry.load(tmp_path / "reg").add(Entry(problem=q.text, device="h200-sm90", backend="cublas", time_us=9.0,
                                              best_cublas_us=9.0, baselines_us=rep(10.0, 9.0),
                                              lt_algo={"data": WORDS, "cublasLt": V},
                                              dispatch=cublas_choice([rep(10.0, 9.0), rep(10.1, 9.1)])), None)
    add_timings(tmp_path / "reg", "h200-sm90", {q.text: rep(10.05, 12.0)}, algos={q.text: {"data": WORDS, "cublasLt": V + 1}})
    d = Registry.load(tmp_path / "reg").lookup(q, "h200-sm90").dispatch
    assert d["target"] == AT and d["repeats"][-1] == {"torch": 10.05}
    add_timings(tmp_path / "reg", "h200-sm90", {q.text: rep(10.2, 12.0)})
    assert Registry.load(tmp_path / "reg").lookup(q, "h200-sm90").dispatch["target"] == "torch"


def test_the_server_guard_ignores_another_algorithms_cold_column(tmp_path):
    """call_guard with the compare's algorithms: autotune's fresh pick of another algorithm that ran
    cold under the guard does not keep the stored call out; the stored one's own column does."""
    from cudal2.registry import call_guard
    p = Problem(4096, 64, 2048, "nt")
    Registry.load(tmp_path, create=True).add(Entry(
        problem=p.text, device="h200-sm90", backend="cublas", time_us=9.0, best_cublas_us=9.0,
        baselines_us=rep(10.0, 9.0), lt_algo={"data": WORDS, "cublasLt": V},
        dispatch=cublas_choice([rep(10.0, 9.0), rep(10.1, 9.1)])), None)
    cold = {p.text: {"torch": 10.0, AT: 11.0}}
    assert call_guard(tmp_path, "h200-sm90", cold, 0.97, algos={p.text: {"data": [9] * 8, "cublasLt": V}}) == []
    assert Registry.load(tmp_path).lookup(p, "h200-sm90").dispatch["target"] == AT
    [(e, call, ratio)] = call_guard(tmp_path, "h200-sm90", cold, 0.97, algos={p.text: "stored"})
    assert call == AT and round(ratio, 4) == round(10.0 / 11.0, 4) and e.dispatch["target"] == "torch"


def test_an_entry_without_a_stored_algorithm_takes_no_autotune_evidence(tmp_path):
    """H100 (2026-12-06): 128x16384x128:nt was filed on torch.matmul with no algorithm (its compares'
    fresh picks differed); later compares' autotune columns, each recording what it timed, moved it
    to autotune, which dispatch cannot run without the algorithm (torch.matmul ran). A column that
    says what it timed is no evidence for such an entry; one that does not counts as before."""
    from cudal2.registry import add_timings
    p = Problem(128, 16384, 128, "nt")
    e0 = entry_with(cublas_choice([rep(7.52, 7.26, 7.60)]), algo=False, torch=7.52, **{AT: 7.26})
    Registry.load(tmp_path, create=True).add(Entry.from_dict({**e0.to_dict(), "problem": p.text}), None)
    known = {p.text: {"data": WORDS, "cublasLt": V}}
    [(e, old, new)] = add_timings(tmp_path, "h200-sm90", {p.text: rep(7.62, 7.30, 7.70)}, algos=known)
    assert (old, new) == ("torch", "torch") and e.dispatch["repeats"][-1] == {"torch": 7.62, HE: 7.70}
    assert lt_dispatch.choose(e, V)[0] == "torch"
    [(e, old, new)] = add_timings(tmp_path, "h200-sm90", {p.text: rep(7.46, 7.20, 7.50)})
    assert len(e.dispatch["ratios"][AT]) == 2                    # no algorithm recorded: counted,
    assert new == "torch" and "won but not runnable" in e.dispatch["why"]    # and still not runnable


def test_a_rechosen_record_names_the_call_dispatch_can_run(tmp_path):
    """add-timings chooses again with autotune kept out where the entry stores no algorithm: the
    record says the call that runs (H200 2026-12-06: 256x512x256:nn and 64x1024x256:nn said autotune
    with none stored, and dispatch ran torch.matmul)."""
    from cudal2.registry import add_timings
    Registry.load(tmp_path, create=True).add(
        entry_with(cublas_choice([rep(10.0, 9.0, 9.8), rep(10.1, 9.1, 9.9)]), algo=False, torch=10.0, **{AT: 9.0}), None)
    [(e, old, new)] = add_timings(tmp_path, "h200-sm90", {"512x512x4096:nn": rep(10.2, 9.2, 10.0)})
    assert (old, new) == (AT, HE) and "won but not runnable: cublaslt-autotune (no algorithm stored)" in e.dispatch["why"]
    assert lt_dispatch.choose(e, V)[0] == HE


def test_rechoose_repairs_a_record_that_names_a_call_dispatch_cannot_run(tmp_path):
    """`cudal2 registry rechoose` chooses again over the timings an entry holds, by today's rule:
    a record filed before the rule (autotune chosen, no algorithm stored; H200 256x512x256:nn and
    64x1024x256:nn, 2026-12-06) names the call dispatch runs afterwards, with no new timing; `verify`
    names such a record bad until then; a record already right is left alone (not rewritten)."""
    from typer.testing import CliRunner

    from cudal2.cli import app
    from cudal2.registry import rechoose
    reg = tmp_path / "reg"
    stale = cublas_choice([rep(10.0, 9.0, 9.8), rep(10.1, 9.1, 9.9)])          # autotune, no block
    Registry.load(reg, create=True).add(entry_with(stale, algo=False, torch=10.0, **{AT: 9.0}), None)
    right = cublas_choice([rep(10.0, 9.0), rep(10.1, 9.1)])
    Registry.load(reg).add(Entry.from_dict({**entry_with(right, torch=10.0, **{AT: 9.0}).to_dict(),
                                            "problem": "256x256x4096:nn"}), None)
    bad = [r for r in Registry.load(reg).verify(gpu=False) if not r.ok]
    assert [r.entry for r in bad] == ["h200-sm90/512x512x4096:nn"] and "stores no algorithm" in bad[0].reason
    assert lt_dispatch.choose(Registry.load(reg).lookup(Problem(512, 512, 4096), "h200-sm90"), V)[0] == HE
    r = CliRunner().invoke(app, ["registry", "rechoose", "--registry", str(reg)])
    assert r.exit_code == 0, r.output
    assert "h200-sm90/512x512x4096:nn: cublaslt-autotune -> cublaslt-heuristic" in r.output
    assert "h200-sm90: 1 cuBLAS entries chosen otherwise" in r.output
    e = Registry.load(reg).lookup(Problem(512, 512, 4096), "h200-sm90")
    assert e.dispatch["target"] == HE == lt_dispatch.choose(e, V)[0]          # record = what runs
    assert e.dispatch["repeats"] == stale["repeats"]                             # no timing added
    assert "won but not runnable: cublaslt-autotune (no algorithm stored)" in e.dispatch["why"]
    assert all(r.ok for r in Registry.load(reg).verify(gpu=False))
    assert rechoose(reg, "h200-sm90") == []                                      # nothing left to move
    r = CliRunner().invoke(app, ["registry", "rechoose", "--registry", str(reg), "--device", "h100-sm90"])
    assert r.exit_code == 1 and "no entries for device 'h100-sm90'" in r.output
    r = CliRunner().invoke(app, ["registry", "rechoose"])
    assert r.exit_code == 1 and "shipped registry is read-only" in r.output
