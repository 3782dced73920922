"""cudal2.registry.graph_rule and `cudal2 registry file-graph`: a cuBLAS entry becomes its lost kernel
only where every one of at least two graph_clock --lost --server timings has it at >= 1.00x
best-cublas offline, >= 1.03x on graph replays and >= 0.97x of torch.matmul cold (the documents are
written here, no GPU; the kernel's source is rendered as the registry's verify renders it)."""
import gzip
import json

import pytest
from typer.testing import CliRunner

from cudal2.backends import get_backend
from cudal2.cli import app
from cudal2.registry import Entry, Registry, RegistryError, sha256_text
from cudal2.registry.graph_rule import file_graph_winners
from cudal2.spec import KernelSpec

KEY = "h100-sm90"
SPEC = ("backend=cuda family=wgmma bm=128 bn=64 bk=64 warps=12 stages=8 group_m=8 split_k=1 subtile=1 "
        "warp_spec=1 cluster=1")
OTHER = SPEC.replace("stages=8", "stages=6")
# off the tile grid on M and N (128 x 64 tiles)
WIN, THIN, ONCE, COLD, GUARDED, KERNEL = ("1000x200x512:nt", "1000x296x512:nt", "1000x400x512:nt",
                                          "1000x504x512:nt", "1000x600x512:nt", "1000x696x512:nt")


def _cublas(problem, refiled=None, target="torch"):
    times = {"best_kernel_us": 5.2, "best_kernel_spec": SPEC}
    if refiled:
        times.update(refiled=refiled, server_us=6.0)
    qualified = [] if target == "torch" else [target]
    return Entry(problem=problem, device=KEY, backend="cublas", time_us=5.0, best_cublas_us=5.0,
                 best_cublas="torch", baselines_us={"torch": 5.0, "cublas-tn": 5.1}, times=times,
                 dispatch={"target": target, "qualified": qualified, "why": "test", "repeats": 2, "margin": 1.01})


def _registry(tmp_path):
    root = tmp_path / "reg"
    root.mkdir()
    reg = Registry.load(root, create=True)
    items = [(_cublas(p), None) for p in (WIN, THIN, ONCE, COLD)]
    items.append((_cublas(GUARDED, refiled="server 0.930x of torch.matmul (guard 0.97)"), None))
    reg.add_many(items)
    spec = KernelSpec.parse(SPEC)
    k = Entry(problem=KERNEL, device=KEY, backend="cuda", spec=spec.text, time_us=4.0, best_cublas_us=5.0,
              best_cublas="torch", baselines_us={"torch": 5.0})
    reg.add(k, get_backend("cuda").render(spec, k.prob))
    return root


def _row(problem, off, graph, server, spec=SPEC, best_us=5.0, torch_cold=8.0):
    """graph_clock's row: `off` / `graph` the kernel's ratios to best-cublas, `server` to torch.matmul."""
    return {"problem": problem, "layout": "nt", "class": "small", "spec": spec,
            "lost offline us": round(best_us / off, 3), "torch offline us": best_us, "cublas-tn offline us": 5.3,
            "best-cublas offline": "torch", "best-cublas offline us": best_us, "lost offline / best-cublas": off,
            "lost graph us": round(3.0 / graph, 3), "torch graph us": 3.0, "best-cublas graph us": 3.0,
            "lost graph / best-cublas": graph, "dispatched call": "torch",
            "lost server us": round(torch_cold / server, 3), "torch server us": torch_cold,
            "lost server / best-cublas": server, "lost server / torch": server}


def _doc(rows, key=KEY, commit="abc1234"):
    return {"device": key, "lost": True, "versions": {"device_key": key, "commit": commit}, "rows": rows}


def _timings():
    one = _doc([_row(WIN, 1.004, 1.08, 1.01), _row(THIN, 1.01, 1.05, 1.0), _row(ONCE, 1.02, 1.10, 1.0),
                _row(COLD, 1.01, 1.09, 0.95), _row(GUARDED, 1.02, 1.10, 1.0), _row(KERNEL, 1.02, 1.10, 1.0),
                {"problem": "1000x800x512:nt", "spec": SPEC, "note": "RuntimeError: lost failed the check"}])
    two = _doc([_row(WIN, 1.002, 1.07, 0.99), _row(THIN, 1.01, 1.02, 1.0), _row(COLD, 1.01, 1.09, 1.0),
                _row(GUARDED, 1.02, 1.10, 1.0), _row(KERNEL, 1.02, 1.10, 1.0)], commit="def5678")
    return [one, two]


def test_files_only_the_kernel_that_held_the_rule_in_every_timing(tmp_path):
    root = _registry(tmp_path)
    filed, skipped = file_graph_winners(root, _timings())
    assert [e.problem for e in filed] == [WIN]
    assert "graph 1.020x best-cublas in timing 2, under 1.03" == skipped[THIN]
    assert skipped[ONCE] == "1 timing(s) of it, the rule asks 2"
    assert skipped[COLD] == "server 0.950x of torch.matmul in timing 1, under the guard 0.97"
    assert skipped[GUARDED].startswith("a guard took this kernel out (server 0.930x")
    assert skipped[KERNEL] == "a cuda kernel is filed here already"
    assert "1000x800x512:nt" not in skipped          # a failed row is no timing

    reg = Registry.load(root)
    e = reg.lookup(reg.entries[KEY][WIN].prob, KEY)
    assert e.backend == "cuda" and e.spec == KernelSpec.parse(SPEC).text
    # the latest timing's offline medians: 5.0 / 1.002 us against torch.matmul's 5.0
    assert e.time_us == pytest.approx(4.99) and e.best_cublas_us == 5.0 and e.best_cublas == "torch"
    assert e.baselines_us == {"torch": 5.0, "cublas-tn": 5.3} and set(e.baselines) == {"torch", "cublas-tn"}
    assert e.speedup() == pytest.approx(5.0 / 4.99)
    rule = e.times["graph_rule"]
    assert [t["graph"] for t in rule["timings"]] == [1.08, 1.07]
    assert [t["commit"] for t in rule["timings"]] == ["abc1234", "def5678"]
    assert e.times["graph_vs_best"] == 1.07 and e.times["server_vs_torch"] == 0.99
    assert rule["was"]["dispatch"]["target"] == "torch" and rule["graph_margin"] == 1.03
    # dispatch ran torch.matmul there: the torch columns are the dispatched call's
    assert [t["graph_vs_dispatched"] for t in rule["timings"]] == [pytest.approx(1.08, abs=1e-3), pytest.approx(1.07, abs=1e-3)]
    # pending the full checker; the source is exactly what the backend renders (verify's rule)
    assert e.check["passed"] is None and "pending" in e.check["reason"]
    text = reg.read_source(e)
    assert sha256_text(text) == e.sha256 == sha256_text(get_backend("cuda").render(KernelSpec.parse(SPEC), e.prob))
    assert all(r.ok for r in reg.verify(gpu=False, render=True)), [r.reason for r in reg.verify(gpu=False, render=True)]
    # the entries the rule left alone are unchanged
    assert reg.entries[KEY][THIN].backend == "cublas" and reg.entries[KEY][THIN].dispatch["target"] == "torch"


def test_offline_loss_another_spec_and_a_lower_bar(tmp_path):
    root = _registry(tmp_path)
    docs = [_doc([_row(WIN, 0.995, 1.10, 1.0), _row(THIN, 1.01, 1.05, 1.0, spec=OTHER)]),
            _doc([_row(WIN, 1.01, 1.10, 1.0), _row(THIN, 1.01, 1.05, 1.0, spec=OTHER)])]
    filed, skipped = file_graph_winners(root, docs, dry_run=True)
    assert not filed
    assert skipped[WIN] == "offline 0.995x best-cublas in timing 1, under 1.0"
    assert skipped[THIN] == "a timing is of another spec than the entry's lost kernel"
    # a lost spec the one validity rule refuses at the problem (TMA: N % 8) is not filed
    reg = Registry.load(root)
    reg.add(_cublas("1000x202x512:nt"), None)
    filed, skipped = file_graph_winners(root, [_doc([_row("1000x202x512:nt", 1.01, 1.1, 1.0)])], min_timings=1)
    assert not filed and skipped["1000x202x512:nt"].startswith("the lost kernel's spec is invalid here: ")
    assert "N % 8 == 0" in skipped["1000x202x512:nt"]
    # one timing and a 0.99 offline floor: WIN files (dry run: nothing written)
    filed, _ = file_graph_winners(root, docs[:1], offline_min=0.99, min_timings=1, dry_run=True)
    assert [e.problem for e in filed] == [WIN]
    assert Registry.load(root).entries[KEY][WIN].backend == "cublas"


def test_an_autotune_entry_is_judged_against_its_stored_algorithm(tmp_path):
    """graph_clock's autotune baseline tunes again in its process; what the entry serves is the
    algorithm it stored, timed as the row's "dispatched" column. Without it: not filed."""
    root = _registry(tmp_path)
    Registry.load(root).add(_cublas(WIN, target="cublaslt-autotune"), None)
    plain = [_doc([_row(WIN, 1.01, 1.08, 1.0)]), _doc([_row(WIN, 1.01, 1.08, 1.0)])]
    for d in plain:
        d["rows"][0]["dispatched call"] = "cublaslt-autotune"
    _, skipped = file_graph_winners(root, plain, dry_run=True)
    assert skipped[WIN] == ("0 timing(s) of it, the rule asks 2 (2 more did not time the call the entry dispatches, "
                            "cublaslt-autotune: graph_clock's autotune column tunes again, it is not the stored algorithm)")
    # the stored algorithm timed: 1.08x best-cublas on graph replays but only 1.02x of it
    for d in plain:
        d["rows"][0].update({"lost offline / dispatched": 1.01, "lost graph / dispatched": 1.02})
    _, skipped = file_graph_winners(root, plain, dry_run=True)
    assert skipped[WIN] == "graph 1.020x the dispatched call in timing 1, under 1.03"
    for d in plain:
        d["rows"][0]["lost graph / dispatched"] = 1.05
    filed, _ = file_graph_winners(root, plain, dry_run=True)
    assert [e.problem for e in filed] == [WIN]
    assert filed[0].times["graph_rule"]["timings"][0]["graph_vs_dispatched"] == 1.05
    # an older timing without the dispatched column does not count, for or against; the entry's
    # times are the latest timing that judged it
    old = _doc([_row(WIN, 0.90, 0.90, 1.0)])
    old["rows"][0]["dispatched call"] = "cublaslt-autotune"
    newer = _doc([{**plain[1]["rows"][0], "lost offline us": 4.9}])
    filed, _ = file_graph_winners(root, [plain[0], newer, old], dry_run=True)
    assert [e.problem for e in filed] == [WIN] and filed[0].time_us == 4.9
    assert [t["timing"] for t in filed[0].times["graph_rule"]["timings"]] == [1, 2]


def test_documents_that_are_not_one_cards_lost_timings_are_refused(tmp_path):
    root = _registry(tmp_path)
    with pytest.raises(RegistryError, match="same card"):
        file_graph_winners(root, [_doc([_row(WIN, 1.0, 1.1, 1.0)]), _doc([], key="h200-sm90")])
    filed_kernels = {"device": KEY, "rows": [{"problem": WIN, "filed offline us": 4.0}]}
    with pytest.raises(RegistryError, match="not a --lost run"):
        file_graph_winners(root, [filed_kernels])
    with pytest.raises(RegistryError, match="no rows"):
        file_graph_winners(root, [{"device": KEY}])
    with pytest.raises(RegistryError, match="at least one"):
        file_graph_winners(root, [])
    with pytest.raises(RegistryError, match="graph_margin >= 1.0"):
        file_graph_winners(root, _timings(), graph_margin=0.99)
    no_server = _row(WIN, 1.01, 1.1, 1.0)
    del no_server["lost server / torch"]
    _, skipped = file_graph_winners(root, [_doc([no_server])], min_timings=1, dry_run=True)
    assert skipped[WIN] == "timing 1 has no server-mode ratio (graph_clock --server)"


def test_cli_files_from_gzipped_timings_and_refuses_the_shipped_registry(tmp_path):
    root = _registry(tmp_path)
    paths = []
    for i, d in enumerate(_timings()):
        p = tmp_path / f"t{i}.json.gz"
        p.write_bytes(gzip.compress(json.dumps(d).encode()))
        paths.append(str(p))
    runner = CliRunner()
    dry = runner.invoke(app, ["registry", "file-graph", *paths, "--registry", str(root), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would file 1 kernel entries" in dry.output and Registry.load(root).entries[KEY][WIN].backend == "cublas"
    res = runner.invoke(app, ["registry", "file-graph", *paths, "--registry", str(root)])
    assert res.exit_code == 0, res.output
    assert f"{KEY}/{WIN}: cuBLAS -> " in res.output and "graph 1.070x" in res.output
    assert "verify --gpu --render --record --pending-only" in res.output
    assert "1: graph #x best-cublas in timing #, under #" in res.output
    assert Registry.load(root).entries[KEY][WIN].backend == "cuda"
    shipped = runner.invoke(app, ["registry", "file-graph", paths[0], "--registry", str(Registry.load().root)])
    assert shipped.exit_code == 1 and "read-only" in shipped.output
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    res = runner.invoke(app, ["registry", "file-graph", str(bad), "--registry", str(root)])
    assert res.exit_code == 1 and "not a graph_clock JSON" in res.output


def test_dispatch_guard_keeps_out_a_dispatched_call_slower_than_torch_in_every_timing(tmp_path):
    """The same timings show the call a cuBLAS entry dispatches beside torch.matmul: slower than
    0.97x of it in every timing (its kindest), it is kept out and the entry dispatches its next
    qualified call, which is judged the same way where it was timed as often."""
    from cudal2.registry import cublas_choice
    from cudal2.registry.graph_rule import dispatch_guard
    root = _registry(tmp_path)
    reps = [{"torch": 10.0, "cublaslt-heuristic": 9.7, "cublaslt-autotune": 9.0}] * 2
    reg = Registry.load(root)
    for p in (WIN, THIN, ONCE):
        e = _cublas(p)
        e.dispatch = cublas_choice(reps, 1.01)
        e.lt_algo = {"data": [1, 2, 3, 4, 5, 6, 7, 8], "cublasLt": 130100}
        reg.add(e, None)
    assert reg.entries[KEY][WIN].dispatch["target"] == "cublaslt-autotune"

    def row(p, autotune_stored, heuristic, retuned=4.0):
        r = _row(p, 0.9, 0.9, 1.0)           # the lost kernel's ratios do not matter here
        r.update({"dispatched call": "cublaslt-autotune", "torch offline us": 5.0, "dispatched offline us": autotune_stored,
                  "cublaslt-heuristic offline us": heuristic, "cublaslt-autotune offline us": retuned})
        return r
    docs = [_doc([row(WIN, 6.0, 5.05), row(THIN, 6.0, 5.0), row(ONCE, 6.0, 5.0)]),
            _doc([row(WIN, 5.9, 5.1), row(THIN, 5.0, 5.0)])]
    # WIN: the stored algorithm at 5.0 / 5.9 = 0.847x at its kindest; the heuristic 0.98x stays.
    # THIN: 0.833x, then 1.0x: not in every timing. ONCE: one timing. The re-tuned autotune column
    # (4.0 us) is another algorithm: no evidence for the stored one.
    want = [(WIN, "cublaslt-autotune", pytest.approx(5.0 / 5.9))]
    assert [(e.problem, c, r) for e, c, r in dispatch_guard(root, docs, dry_run=True)] == want
    assert Registry.load(root).entries[KEY][WIN].dispatch["target"] == "cublaslt-autotune"    # dry run
    assert [(e.problem, c, r) for e, c, r in dispatch_guard(root, docs)] == want
    e = Registry.load(root).entries[KEY][WIN]
    assert e.dispatch["target"] == "cublaslt-heuristic"
    assert e.dispatch["cold"] == {"cublaslt-autotune": "offline 0.8475x of torch.matmul under guard 0.97"}
    assert Registry.load(root).entries[KEY][THIN].dispatch["target"] == "cublaslt-autotune"
    # the heuristic slower too in both timings: it goes as well, and torch.matmul is left
    for d, h in zip(docs, (5.3, 5.4)):
        d["rows"][0]["cublaslt-heuristic offline us"] = h
    assert [c for _, c, _ in dispatch_guard(root, docs)] == ["cublaslt-heuristic"]
    assert Registry.load(root).entries[KEY][WIN].dispatch["target"] == "torch"
    # a dry run follows the same chain (both calls) and writes nothing
    (tmp_path / "b").mkdir()
    fresh = _registry(tmp_path / "b")
    e = _cublas(WIN)
    e.dispatch = cublas_choice(reps, 1.01)
    e.lt_algo = {"data": [1, 2, 3, 4, 5, 6, 7, 8], "cublasLt": 130100}
    Registry.load(fresh).add(e, None)
    got = dispatch_guard(fresh, docs, dry_run=True)
    assert [c for _, c, _ in got] == ["cublaslt-autotune", "cublaslt-heuristic"] and got[-1][0].dispatch["target"] == "torch"
    assert Registry.load(fresh).entries[KEY][WIN].dispatch["target"] == "cublaslt-autotune"
