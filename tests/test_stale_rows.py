"""compare_rows.stale_rows: which compare rows no longer time what cudal2.matmul dispatches,
and bench/grid_baselines.py's use of it (--retime-stale: one row per shape, the last appended)."""
import pytest

from bench_import import load_bench
from cudal2.problems import Problem
from cudal2.registry.entry import Entry
from cudal2.compare_rows import dispatched_now, first_run_ts, resume_rows, row_dispatch, settle_torch, stale_rows

DEV = "h200-sm90"
WGMMA = "backend=cuda family=wgmma bm=128 bn=128 bk=64 warps=12 stages=5 group_m=8 split_k=1 subtile=1 warp_spec=1 cluster=1"
OTHER = WGMMA.replace("stages=5", "stages=4")


def kernel(p: Problem, spec=WGMMA, ts=100.0) -> Entry:
    return Entry(problem=p.text, device=DEV, backend="cuda", spec=spec, ts=ts)


def cublas(p: Problem, target: str, ts=100.0) -> Entry:
    # a dispatch record as evidence.cublas_choice writes it: the qualified calls in order, and the pick
    return Entry(problem=p.text, device=DEV, backend="cublas", ts=ts,
                 dispatch={"target": target, "qualified": [] if target == "torch" else [target], "why": "test"})


def row(p: Problem, via=None, spec=None, status="ok", ts=None) -> dict:
    r = {"shape": p.shape, "M": p.M, "N": p.N, "K": p.K, "layout": p.layout, "status_cudal2": status}
    if via:
        r["cudal2_via"] = via
    if spec:
        r["cudal2_spec"] = spec
    if ts is not None:
        r["ts"] = ts
    return r


P = [Problem(256 * (i + 1), 512, 1024, "nn") for i in range(9)]


def test_what_a_row_timed_and_what_dispatch_runs():
    assert row_dispatch(row(P[0], via="kernel")) == "kernel"
    assert row_dispatch(row(P[0], via="cublaslt-autotune")) == "cublaslt-autotune"
    assert row_dispatch(row(P[0], status="unavailable: cuBLAS won and dispatch calls torch.matmul (x)")) == "torch"
    assert row_dispatch(row(P[0], status="invalid: build failed (x)")) is None
    # rows of 2026-12-03's first compares: no cudal2_via; a kernel ran where the status is ok, and
    # torch.matmul where the registry had no kernel
    assert row_dispatch(row(P[0])) == "kernel"
    assert row_dispatch(row(P[0], status="unavailable: the registry has no cudal2 kernel for this shape")) == "torch"
    assert dispatched_now(kernel(P[0]), None) == "kernel"
    assert dispatched_now(cublas(P[0], "cublaslt-heuristic"), 130100) == "cublaslt-heuristic"
    # without cuBLASLt (no nvmath) dispatch falls back to torch.matmul
    assert dispatched_now(cublas(P[0], "cublaslt-heuristic"), None) == "torch"


def test_stale_rows_each_reason():
    entries = {e.problem: e for e in [
        kernel(P[0]),                                   # same kernel, row names it: current
        kernel(P[1]),                                   # row timed another spec: stale
        cublas(P[2], "torch"),                          # guard re-filed a kernel as cuBLAS: stale
        cublas(P[3], "torch"),                          # add-timings moved the call to torch: stale
        cublas(P[4], "cublaslt-heuristic"),             # same call: current
        kernel(P[5], ts=300.0),                         # old row without spec, entry filed after: stale
        kernel(P[6], ts=150.0),                         # old row with its own ts after the filing: current
        kernel(P[7], ts=300.0),                         # the kernel failed then, entry filed since: stale
    ]}
    rows = [row(P[0], "kernel", WGMMA), row(P[1], "kernel", OTHER), row(P[2], "kernel", WGMMA),
            row(P[3], "cublaslt-autotune"), row(P[4], "cublaslt-heuristic"), row(P[5], "kernel"),
            row(P[6], "kernel", ts=200.0), row(P[7], status="invalid: random: 1.0"),
            row(P[8], "kernel")]                       # no entry now: not stale
    st = stale_rows(rows, entries, 130100, timed_by=200.0)
    assert set(st) == {P[1].text, P[2].text, P[3].text, P[5].text, P[7].text}
    assert st[P[2].text] == "timed kernel, dispatch runs torch now"
    assert st[P[3].text] == "timed cublaslt-autotune, dispatch runs torch now"
    assert "another kernel" in st[P[1].text] and "filed after" in st[P[5].text]
    # an unknown compare time keeps the rows that cannot tell what they ran
    assert set(stale_rows(rows, entries, 130100, timed_by=None)) == {P[1].text, P[2].text, P[3].text}


def test_grid_baselines_keeps_the_last_row_and_the_first_run_counts():
    gb = load_bench("grid_baselines")
    rows = [{"shape": "1x2x3", "layout": "nn", "v": 1}, {"shape": "1x2x3", "layout": "nt", "v": 2},
            {"shape": "1x2x3", "layout": "nn", "v": 3}]
    assert [r["v"] for r in gb.latest_rows(rows)] == [2, 3]
    runs = [{"ts": "2026-12-03T15:18:46Z"}, {"ts": "2026-12-03T10:00:00Z"}, {"shapes": 3}]
    assert first_run_ts(runs) == 1796292000.0      # 2026-12-03 10:00:00 UTC, the earlier run
    assert first_run_ts([]) is None and first_run_ts(None) is None


def test_first_then_rest_puts_the_named_grid_shapes_in_front(tmp_path):
    gb = load_bench("grid_baselines")
    problems = [Problem.parse(t, None) for t in ("64x64x64:nn", "128x64x64:nn", "64x128x64:nn", "64x64x128:nn")]
    first = tmp_path / "first.txt"
    # comments, a repeat, an nt shape and an off-grid shape: only this list's shapes count, once each
    first.write_text("# searched\n64x64x128\n64x128x64:nn\n64x64x128\n64x64x64:nt\n17x17x17\n")
    assert [p.text for p in gb.first_then_rest(problems, str(first))] == [
        "64x64x128:nn", "64x128x64:nn", "64x64x64:nn", "128x64x64:nn"]


def test_retime_stale_needs_a_registry(capsys):
    gb = load_bench("grid_baselines")
    with pytest.raises(SystemExit):
        gb.main(["--retime-stale"])
    assert "--retime-stale needs --registry" in capsys.readouterr().err


CONFIG = {"min_calls": 30, "min_ms": 20.0, "server_calls": 30, "gap_ms": 2.0, "tune_calls": 3, "eager_calls": 200,
          "eager_ms": 10.0, "seed": 0, "retune": False, "modes": ["offline", "server"],
          "baselines": ["torch", "cublas-tn"], "kernel_source": "registry"}


def test_resume_keeps_current_rows_and_times_the_rest():
    entries = {e.problem: e for e in [kernel(P[0]), cublas(P[1], "torch"), kernel(P[2])]}
    doc = {"config": dict(CONFIG), "runs": [{"ts": "2026-12-05T05:00:00Z"}],
           "rows": [row(P[0], "kernel", WGMMA, ts=200.0),          # current
                    row(P[1], "cublaslt-autotune", ts=200.0),       # the call changed since: stale
                    row(P[2], "kernel", OTHER, ts=200.0),           # another kernel now: stale
                    row(P[5], "kernel", WGMMA, ts=200.0)]}          # not asked this time: dropped
    problems = [P[0], P[1], P[2], P[3]]                             # P[3]: never timed
    kept, todo, stale = resume_rows(doc, problems, CONFIG, entries, 130100)
    assert [r["shape"] for r in kept] == [P[0].shape]
    assert [p.text for p in todo] == [P[1].text, P[2].text, P[3].text]
    assert set(stale) == {P[1].text, P[2].text}
    # a --spec compare re-times the rows of another spec, or of none named
    kept, todo, stale = resume_rows(doc, problems, CONFIG, None, None, spec_text=OTHER)
    assert [r["shape"] for r in kept] == [P[2].shape] and len(todo) == 3
    # a baselines-only compare keeps every row it asks for
    kept, todo, _ = resume_rows(doc, problems, CONFIG, None, None)
    assert len(kept) == 3 and [p.text for p in todo] == [P[3].text]


def test_resume_refuses_other_settings():
    doc = {"config": {**CONFIG, "min_ms": 100.0}, "rows": []}
    with pytest.raises(ValueError, match="min_ms=100.0 and this run asks 20.0"):
        resume_rows(doc, [P[0]], CONFIG, None, None)


def timed(r: dict, torch_us=10.0, cudal2_us=9.0) -> dict:
    """A row with both modes' torch.matmul and cudal2 columns, as a compare writes them."""
    return {**r, "offline_torch_median_us": torch_us, "server_torch_mean_us": torch_us * 1.2,
            "offline_best_cublas_us": 9.5, "server_best_cublas_us": 11.0,
            "offline_cudal2_median_us": cudal2_us, "offline_cudal2_vs_best": 9.5 / cudal2_us,
            "server_cudal2_mean_us": cudal2_us * 1.2, "eager_cudal2_us": 20.0}


def test_rows_now_dispatching_torch_settle_from_their_own_torch_column():
    """A guard or add-timings sent the shape to torch.matmul after the row was timed: the row's
    torch.matmul column (same interleaved run) is what a compare records there, so no re-time."""
    entries = {e.problem: e for e in [cublas(P[0], "torch"), cublas(P[1], "torch"), kernel(P[2]),
                                      cublas(P[3], "cublaslt-heuristic"), cublas(P[4], "torch")]}
    rows = [timed(row(P[0], "kernel", WGMMA, ts=200.0)),          # kernel -> torch: settled
            timed(row(P[1], "cublaslt-autotune", ts=200.0)),       # autotune -> torch: settled
            timed(row(P[2], "kernel", OTHER, ts=200.0)),           # another kernel: needs the card
            timed(row(P[3], "cublaslt-autotune", ts=200.0)),       # -> heuristic: needs the card
            row(P[4], "kernel", WGMMA, ts=200.0)]                  # no torch column: needs the card
    st = stale_rows(rows, entries, 130100, None)
    assert set(st) == {P[0].text, P[1].text, P[2].text, P[3].text, P[4].text}
    settled = settle_torch(rows, entries, 130100, st)
    assert [r["shape"] for r in settled] == [P[0].shape, P[1].shape]
    for new, old in zip(settled, rows):
        assert not any("cudal2" in k and k not in ("status_cudal2", "cudal2_settled") for k in new)
        assert new["offline_torch_median_us"] == old["offline_torch_median_us"] and new["ts"] == old["ts"]
        assert row_dispatch(new) == "torch" and new["cudal2_settled"]["was"] == old["cudal2_via"]
    # settled rows are current; the originals are untouched
    assert stale_rows(settled, entries, 130100, None) == {} and rows[0]["cudal2_via"] == "kernel"
    # without cuBLASLt here, P[3]'s heuristic entry dispatches torch.matmul too: settling follows dispatch
    assert P[3].shape in [r["shape"] for r in settle_torch(rows, entries, None, stale_rows(rows, entries, None, None))]
    # a resumed compare keeps the settled rows and times only the others
    doc = {"config": dict(CONFIG), "runs": [{"ts": "2026-12-05T05:00:00Z"}], "rows": rows}
    kept, todo, stale = resume_rows(doc, P[:5], CONFIG, entries, 130100)
    assert sorted(r["shape"] for r in kept) == sorted([P[0].shape, P[1].shape])
    assert all(r.get("cudal2_settled") for r in kept)
    assert [p.text for p in todo] == [P[2].text, P[3].text, P[4].text] and set(stale) == {P[2].text, P[3].text, P[4].text}


def test_grid_baselines_settles_on_a_cpu_by_the_card_the_compare_recorded(tmp_path, capsys):
    """--finish --retime-stale without a GPU: the compare JSON's device_key and cuBLASLt decide what
    dispatch runs; the settled rows are appended, the files rewritten, and a second run finds none."""
    import json
    from cudal2.problems import grid
    from cudal2.registry import Registry
    gb = load_bench("grid_baselines")
    shapes = grid("nn")[:3]
    reg = tmp_path / "reg"
    reg.mkdir()
    Registry.load(reg).add_many([(cublas(shapes[0], "torch"), None)])   # shapes[1], [2]: no entry
    rows = []
    for p in shapes:
        r = timed(row(p, "kernel", WGMMA, ts=50.0))
        r.update({"gflop": p.flops / 1e9, "class": "<1GF", "offline_torch_vs_best": 0.95})
        rows.append(r)
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare_grid.rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "compare_grid.json").write_text(json.dumps({"versions": {"device_key": DEV, "cublasLt": 130100},
                                                       "peak": {}, "rows": rows}))
    args = ["--layout", "nn", "--registry", str(reg), "--out", str(out), "--retime-stale", "--finish"]
    assert gb.main(args) == 0
    assert "1 of 1 stale rows settled" in capsys.readouterr().out
    doc = json.loads((out / "compare_grid.json").read_text())
    got = {r["shape"]: r for r in doc["rows"]}
    assert got[shapes[0].shape]["cudal2_settled"]["was"] == "kernel"
    assert "offline_cudal2_median_us" not in got[shapes[0].shape]
    assert got[shapes[1].shape]["offline_cudal2_median_us"] == 9.0       # no entry: not stale, kept
    assert gb.main(args) == 0
    assert "0 of 0 stale rows settled" in capsys.readouterr().out


def test_settle_compare_writes_a_new_settled_file_and_names_what_needs_the_card(tmp_path, capsys):
    import gzip
    import json
    from cudal2.registry import Registry
    sc = load_bench("settle_compare")
    reg = tmp_path / "reg"
    reg.mkdir()
    Registry.load(reg).add_many([(cublas(P[0], "torch"), None), (cublas(P[1], "cublaslt-heuristic"), None)])
    rows = []
    for p in P[:3]:
        r = timed(row(p, "kernel", WGMMA, ts=50.0))
        r.update({"gflop": p.flops / 1e9, "offline_torch_vs_best": 9.5 / 10.0})
        rows.append(r)
    src = tmp_path / "run9_compare.json.gz"
    doc = {"versions": {"device_key": DEV, "cublasLt": 130100}, "config": {"modes": ["offline"], "baselines": ["torch"]},
           "runs": [], "summary": {}, "rows": rows}
    with gzip.open(src, "wt") as f:
        json.dump(doc, f)
    out = tmp_path / "run9_compare_settled.json.gz"
    assert sc.main([str(src), "--out", str(out), "--registry", str(reg)]) == 0
    said = capsys.readouterr().out
    assert "1 of 2 stale rows settled" in said and f"needs the card: {P[1].text}" in said
    new = json.loads(gzip.open(out, "rt").read())
    got = {r["shape"]: r for r in new["rows"]}
    assert got[P[0].shape]["cudal2_settled"]["was"] == "kernel" and "offline_cudal2_median_us" not in got[P[0].shape]
    assert got[P[2].shape]["offline_cudal2_median_us"] == 9.0 and new["versions"] == doc["versions"]
    # the summary is recomputed over the rows that have a cudal2 column: P[1] and P[2]
    assert new["summary"]["offline"]["cudal2 vs best-cublas"]["all"]["n"] == 2
    assert json.loads(gzip.open(src, "rt").read()) == doc                     # the run's record untouched
    with pytest.raises(SystemExit):
        sc.main([str(src), "--out", str(src)])
