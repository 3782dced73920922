"""cudal2.registry.fill and `cudal2 registry file-cublas`: cuBLAS entries for a card's shapes without
an entry, their call chosen over the compares' repeated timings (compares are written here, no GPU)."""
import gzip
import json

import pytest
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.lt_dispatch import choose
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry, RegistryError
from cudal2.registry.fill import fill_cublas

NAMES = ["torch", "cublas-nn", "cublaslt-heuristic", "cublaslt-autotune"]
KEY = "h100-sm90"
LT = 130100
ALGO_A = [1, 2, 3, 4, 5, 6, 7, 8]
ALGO_B = [9, 9, 9, 9, 9, 9, 9, 9]


def _row(shape, layout="nn", algo=None, **us):
    m, n, k = map(int, shape.split("x"))
    r = {"shape": shape, "M": m, "N": n, "K": k, "layout": layout, "ts": 1.0e9}
    for name, t in us.items():
        r[f"offline_{name.replace('_', '-')}_median_us"] = t
    if algo is not None:
        r["cublaslt-autotune_algo"] = list(algo)
    return r


def _doc(rows, key=KEY, lt=LT):
    return {"versions": {"device_key": key, "cublasLt": lt, "card": "NVIDIA H100 80GB HBM3"},
            "config": {"baselines": NAMES}, "rows": rows}


def _registry(tmp_path, kernel_at=None):
    """An empty registry, or one holding a kernel entry at `kernel_at` (a copy of a shipped one)."""
    root = tmp_path / "reg"
    root.mkdir()
    if kernel_at:
        Registry.load().export(root)
        reg = Registry.load(root)
        src = next(e for e in reg.all("h200-sm90") if e.backend == "cuda")
        e = Entry.from_dict({**src.to_dict(), "device": KEY, "problem": kernel_at})
        reg.entries = {KEY: {kernel_at: e}}
        (root / "index.json").write_text(reg.to_json())
    return root


def test_a_call_is_dispatched_only_where_it_won_every_timing(tmp_path):
    # 1000x: heuristic 3% faster than torch.matmul in both runs; 2000x: 3% in one, 0.5% in the other
    # (a thin win is no evidence); 3000x: autotune, the same algorithm in both runs, 5% and 4%
    one = _doc([_row("1000x512x256", torch=10.3, cublas_nn=10.4, cublaslt_heuristic=10.0, cublaslt_autotune=10.2, algo=ALGO_B),
                _row("2000x512x256", torch=10.3, cublas_nn=10.4, cublaslt_heuristic=10.0, cublaslt_autotune=10.5, algo=ALGO_B),
                _row("3000x512x256", torch=10.5, cublas_nn=10.6, cublaslt_heuristic=10.6, cublaslt_autotune=10.0, algo=ALGO_A)])
    two = _doc([_row("1000x512x256", torch=10.3, cublas_nn=10.4, cublaslt_heuristic=10.0, cublaslt_autotune=10.4, algo=ALGO_B),
                _row("2000x512x256", torch=10.05, cublas_nn=10.4, cublaslt_heuristic=10.0, cublaslt_autotune=10.5, algo=ALGO_B),
                _row("3000x512x256", torch=10.4, cublas_nn=10.6, cublaslt_heuristic=10.6, cublaslt_autotune=10.0, algo=ALGO_A)])
    root = _registry(tmp_path)
    filed, skipped = fill_cublas(root, [one, two])
    assert skipped == {}
    got = {e.problem: e for e in Registry.load(root).all(KEY)}
    assert {p: e.dispatch["target"] for p, e in got.items()} == {
        "1000x512x256:nn": "cublaslt-heuristic", "2000x512x256:nn": "torch", "3000x512x256:nn": "cublaslt-autotune"}
    e = got["3000x512x256:nn"]
    assert e.lt_algo == {"data": ALGO_A, "cublasLt": LT} and e.backend == "cublas"
    assert e.dispatch["ratios"]["cublaslt-autotune"] == [1.05, 1.04]
    # the filing timing is the latest compare's, all its baselines; best-cublas is its fastest
    assert e.baselines_us["torch"] == 10.4 and e.best_cublas == "cublaslt-autotune" and e.time_us == 10.0
    assert got["1000x512x256:nn"].lt_algo is None     # autotune not qualified: no algorithm stored
    # dispatch runs what the record chose (the algorithm where autotune won), torch where nothing did
    assert choose(got["3000x512x256:nn"], LT)[:2] == ("cublaslt-autotune", ALGO_A)
    assert choose(got["1000x512x256:nn"], LT)[0] == "cublaslt-heuristic"
    assert choose(got["2000x512x256:nn"], LT)[0] == "torch"


def test_autotune_counts_only_timings_of_the_algorithm_filed(tmp_path):
    # the first run tuned ALGO_B, the second ALGO_A (no cache carried between them): only one timing
    # of ALGO_A, the one filed, so autotune is not dispatched though it "won" both columns
    one = _doc([_row("1000x512x256", torch=10.5, cublaslt_heuristic=10.6, cublaslt_autotune=10.0, algo=ALGO_B),
                _row("2000x512x256", torch=10.5, cublaslt_heuristic=10.6, cublaslt_autotune=10.0)])
    two = _doc([_row("1000x512x256", torch=10.5, cublaslt_heuristic=10.6, cublaslt_autotune=10.0, algo=ALGO_A),
                _row("2000x512x256", torch=10.5, cublaslt_heuristic=10.6, cublaslt_autotune=10.0, algo=ALGO_A)])
    root = _registry(tmp_path)
    filed, _ = fill_cublas(root, [one, two])
    for e in filed:
        assert e.dispatch["target"] == "torch" and e.lt_algo is None
        # a row without the algorithm (compares before 2026-12-05) is no evidence for any
        assert e.dispatch["ratios"]["cublaslt-autotune"] == [1.05]
    # with one timing required, the algorithm filed is the latest run's and dispatch runs it
    root2 = tmp_path / "reg2"
    root2.mkdir()
    filed, _ = fill_cublas(root2, [one, two], min_repeats=1)
    assert all(e.lt_algo == {"data": ALGO_A, "cublasLt": LT} for e in filed)
    assert all(e.dispatch["target"] == "cublaslt-autotune" for e in filed)


def test_an_existing_entry_is_left_alone_and_one_file_twice_is_one_timing(tmp_path):
    one = _doc([_row("64x64x64", torch=5.2, cublaslt_heuristic=5.0),
                _row("128x64x64", torch=5.2, cublaslt_heuristic=5.0)])
    root = _registry(tmp_path, kernel_at="64x64x64:nn")
    before = Registry.load(root).lookup(Problem.parse("64x64x64:nn"), KEY)
    filed, skipped = fill_cublas(root, [one, one])
    assert [e.problem for e in filed] == ["128x64x64:nn"]
    assert skipped == {"64x64x64:nn": f"{KEY} already holds a cuda entry"}
    after = Registry.load(root)
    assert after.lookup(Problem.parse("64x64x64:nn"), KEY).to_dict() == before.to_dict()
    e = after.lookup(Problem.parse("128x64x64:nn"), KEY)
    assert len(e.dispatch["repeats"]) == 1 and e.dispatch["target"] == "torch"


def test_refusals_and_dry_run(tmp_path):
    root = _registry(tmp_path)
    a = _doc([_row("64x64x64", torch=5.2, cublaslt_heuristic=5.0)])
    with pytest.raises(RegistryError, match="same card"):
        fill_cublas(root, [a, _doc([], key="h200-sm90")])
    with pytest.raises(RegistryError, match="same card"):
        fill_cublas(root, [{"rows": []}])
    with pytest.raises(RegistryError, match="margin"):
        fill_cublas(root, [a], margin=0.99)
    with pytest.raises(RegistryError, match="min_repeats"):
        fill_cublas(root, [a], min_repeats=0)
    filed, _ = fill_cublas(root, [a], dry_run=True)
    assert len(filed) == 1 and Registry.load(root).all(KEY) == []
    # a shape with no torch.matmul time (its row failed) gets no entry: there is nothing to compare to
    filed, skipped = fill_cublas(root, [_doc([_row("64x64x64", cublaslt_heuristic=5.0)])])
    assert filed == [] and "no offline torch.matmul time" in skipped["64x64x64:nn"]


def test_cli_files_reads_gzip_and_refuses_the_shipped_registry(tmp_path):
    one = tmp_path / "a.json.gz"
    two = tmp_path / "b.json"
    rows = [_row("1000x512x256", torch=10.3, cublaslt_heuristic=10.0), _row("64x64x64", "nt", torch=5.0, cublaslt_heuristic=5.0)]
    with gzip.open(one, "wt") as f:
        json.dump(_doc(rows), f)
    two.write_text(json.dumps(_doc([_row("1000x512x256", torch=10.31, cublaslt_heuristic=10.0),
                                    _row("64x64x64", "nt", torch=5.01, cublaslt_heuristic=5.0)])))
    root = tmp_path / "out"
    run = CliRunner().invoke(app, ["registry", "file-cublas", str(one), str(two), "--registry", str(root)])
    assert run.exit_code == 0, run.output
    assert f"{KEY}: filed 2 cuBLAS entries (" in run.output and "cublaslt-heuristic 1" in run.output
    assert {e.problem: e.dispatch["target"] for e in Registry.load(root).all(KEY)} == {
        "1000x512x256:nn": "cublaslt-heuristic", "64x64x64:nt": "torch"}
    shipped = CliRunner().invoke(app, ["registry", "file-cublas", str(two), "--registry", str(Registry.load().root)])
    assert shipped.exit_code == 1 and "read-only" in shipped.output
    missing = CliRunner().invoke(app, ["registry", "file-cublas", str(tmp_path / "nope.json"), "--registry", str(root)])
    assert missing.exit_code == 1 and "no such file" in missing.output
    (tmp_path / "bad.json").write_text("{not json")
    bad = CliRunner().invoke(app, ["registry", "file-cublas", str(tmp_path / "bad.json"), "--registry", str(root)])
    assert bad.exit_code == 1 and "not a cudal2 compare JSON" in bad.output


def test_add_many_files_cublas_entries_and_keeps_what_another_filer_wrote(tmp_path):
    root = _registry(tmp_path, kernel_at="64x64x64:nn")
    reg = Registry.load(root)
    held = reg.lookup(Problem.parse("64x64x64:nn"), KEY).to_dict()

    def cub(p):
        return Entry(problem=p, device=KEY, backend="cublas", time_us=5.0, best_cublas_us=5.0, best_cublas="torch",
                     baselines_us={"torch": 5.0})
    # the race fill_cublas guards against: the kernel entry was filed after the caller looked
    got = reg.add_many([(cub("64x64x64:nn"), None), (cub("128x64x64:nn"), None)], only_new=True)
    assert [e.problem for e in got] == ["128x64x64:nn"]
    after = Registry.load(root)
    assert after.lookup(Problem.parse("64x64x64:nn"), KEY).to_dict() == held
    assert after.lookup(Problem.parse("128x64x64:nn"), KEY).backend == "cublas"
    with pytest.raises(RegistryError, match="no source text"):
        reg.add_many([(cub("256x64x64:nn"), "text")])
