"""bench/spec_sweep.py's rows: each spec's status and its ratio to best-cublas from the same stats."""
from types import SimpleNamespace
from bench_import import load_bench

ss = load_bench("spec_sweep")


def test_rows_ratio_only_for_timed_specs():
    stats = {"a": SimpleNamespace(median_us=8.0, spread=0.01), "b": SimpleNamespace(median_us=12.5, spread=0.2)}
    statuses = {"a": "ok", "b": "ok", "c": "build failed: boom"}
    rows = ss.shape_rows("64x64x64:nn", statuses, stats, "cublas-nn", 10.0)
    by = {r["spec"]: r for r in rows}
    assert by["a"]["vs_best_cublas"] == 1.25 and by["a"]["us"] == 8.0       # 10 / 8
    assert by["b"]["vs_best_cublas"] == 0.8 and by["b"]["spread"] == 0.2    # 10 / 12.5
    assert by["c"]["us"] is None and by["c"]["vs_best_cublas"] is None and by["c"]["status"].startswith("build")
    assert {r["best_cublas"] for r in rows} == {"cublas-nn"}


def test_default_specs_parse_and_are_distinct():
    from cudal2.spec import KernelSpec
    texts = [KernelSpec.parse(s).text for s in ss.SPECS.split(";")]
    assert len(texts) == len(set(texts)) == 13
