"""Registry: round-trip, atomic writes, tamper/corruption refusal, nearest-problem choice, CLI."""
import json
import os

import pytest
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.problems import Problem
from cudal2.spec import KernelSpec
from cudal2.registry import (Entry, Registry, RegistryError, record_cublas, record_winner, sha256_text,
                             shipped_root)

DEV = "h200-sm90"
TILED = "backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=4 group_m=8"
PERSIST = "backend=triton family=persistent bm=128 bn=128 bk=64 warps=8 stages=4 group_m=8 subtile=2"
SPLITK16 = "backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=3 group_m=8 split_k=16"
MMA = "backend=cuda family=mma bm=64 bn=64 bk=32 warps=4 stages=4"
runner = CliRunner()


def entry(problem, spec=TILED, t=10.0, best=12.0):
    backend = "cublas" if spec is None else spec.split()[0].split("=")[1]
    return Entry(problem=Problem.parse(problem).text, device=DEV, backend=backend, spec=spec or "",
                 time_us=t, best_cublas_us=best, best_cublas="cublas-tn",
                 baselines_us={"torch": best * 1.1, "cublas-tn": best}, check={"passed": True, "reason": ""},
                 versions={"torch": "2.13.0"})


def src(tag):
    return f"# generated kernel {tag}\nimport triton\n"


def test_round_trip(tmp_path):
    reg = Registry.load(tmp_path)
    assert reg.all() == []                       # a new registry is empty, not an error
    e = reg.add(entry("256x512x128:nt", MMA), "// cuda " + src("a"))
    reg.add(entry("64x64x64", None, t=5.0, best=5.0), None)
    back = Registry.load(tmp_path)
    got = back.lookup(Problem(256, 512, 128, "nt"), DEV)
    assert got == e and got.source.startswith(f"kernels_cuda/generated/{DEV}/") and got.source.endswith(".cu")
    assert back.read_source(got) == "// cuda " + src("a")
    assert got.sha256 == sha256_text("// cuda " + src("a"))
    assert got.speedup() == pytest.approx(12.0 / 10.0)
    cub = back.lookup(Problem(64, 64, 64), DEV)
    assert cub.backend == "cublas" and cub.source is None


def test_entries_with_one_source_share_one_file(tmp_path):
    reg = Registry.load(tmp_path)
    a = reg.add(entry("256x128x64"), src("same"))
    b = reg.add(entry("512x512x64"), src("same"))
    c = reg.add(entry("64x64x64"), src("other"))
    assert a.source == b.source != c.source
    assert sorted(x.name for x in (tmp_path / "kernels_triton" / "generated" / DEV).iterdir()) == \
        sorted({a.source.rsplit("/", 1)[1], c.source.rsplit("/", 1)[1]})
    back = Registry.load(tmp_path)
    assert back.read_source(back.lookup(Problem(512, 512, 64), DEV)) == src("same")
    assert back.lookup(Problem(64, 64, 64, "nt"), DEV) is None      # layout is part of the key
    assert back.lookup(Problem(256, 512, 128, "nt"), "a100-sm80") is None


def test_atomic_index_write(tmp_path, monkeypatch):
    reg = Registry.load(tmp_path)
    reg.add(entry("128x128x128"), src("old"))
    before = (tmp_path / "index.json").read_bytes()
    real = os.replace

    def crash(a, b):          # die between writing the temp index and renaming it
        if str(b).endswith("index.json"):
            raise OSError("simulated crash before rename")
        return real(a, b)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        reg.add(entry("256x256x256"), src("new"))
    monkeypatch.setattr(os, "replace", real)
    assert (tmp_path / "index.json").read_bytes() == before
    back = Registry.load(tmp_path)
    assert [e.problem for e in back.all()] == ["128x128x128:nn"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]   # temp file cleaned up



def _reference_json(reg):
    """The index text as json.dumps writes it, from deep-copied entries (to_json's first form)."""
    devices = {}
    for (dev, ptext), raw in reg._raw_bad.items():
        devices.setdefault(dev, {}).setdefault("entries", {})[ptext] = raw
    for dev, ents in reg.entries.items():
        devices.setdefault(dev, {}).setdefault("entries", {}).update({p: e.to_dict() for p, e in ents.items()})
    devices = {d: {"entries": dict(sorted(v["entries"].items()))} for d, v in sorted(devices.items())}
    return json.dumps({"format": "cudal2-registry", "version": 1, "devices": devices}, indent=1) + "\n"


def test_index_text_is_what_json_dumps_writes(tmp_path):
    """to_json lays out the index itself and caches each entry's text (rewriting a registry of
    1,879 entries cost ~0.6 s per filing): the text must stay json.dumps(indent=1)'s, byte for byte,
    here for entries of every kind, two devices, a refused entry kept verbatim, odd values (non-ASCII,
    floats, empty and nested containers), after changes (cache hits beside misses); and for the
    shipped registry, whose index.json was written by the first form."""
    reg = Registry.load(tmp_path)
    reg.add(entry("256x512x128:nt", MMA), "// cuda " + src("a"))
    reg.add(entry("64x64x64", None, t=5.0, best=5.0), None)
    odd = entry("128x128x128")
    odd.versions = {"note": "ünïcode \"quoted\"\nline", "empty": {}, "list": [], "nested": {"a": [1, 2.5e-07, None]}}
    odd.run_id, odd.times = 7, {"offline": {"median_us": 1 / 3, "n": 10**20}}
    reg.add(odd, src("odd"))
    other = entry("64x64x64")
    other.device = "a100-sm80"
    reg.add(other, src("b"))
    data = json.loads((tmp_path / "index.json").read_text())
    data["devices"][DEV]["entries"]["32x32x32:nn"] = {"problem": "32x32x32:nn", "device": DEV, "backend": "nope"}
    (tmp_path / "index.json").write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="refusing"):
        reg = Registry.load(tmp_path)
    for _ in range(2):
        assert reg.to_json() == _reference_json(reg)
        reg.entries[DEV]["64x64x64:nn"].time_us = 4.5
    shipped = Registry.load(shipped_root())
    assert shipped.to_json() == (shipped_root() / "index.json").read_text() == _reference_json(shipped)


def test_tampered_and_missing_sources_are_refused(tmp_path):
    reg = Registry.load(tmp_path)
    e1 = reg.add(entry("128x128x128"), src("one"))
    e2 = reg.add(entry("256x256x256"), src("two"))
    (tmp_path / e1.source).write_text(src("one") + "# edited\n")
    (tmp_path / e2.source).unlink()
    with pytest.raises(RegistryError, match=f"{DEV}/128x128x128:nn.*edited or corrupt"):
        reg.read_source(e1)
    with pytest.raises(RegistryError, match=f"{DEV}/256x256x256:nn.*missing"):
        reg.read_source(e2)
    bad = {r.entry: r.reason for r in reg.verify(gpu=False) if not r.ok}
    assert set(bad) == {e1.key, e2.key}
    res = runner.invoke(app, ["registry", "verify", "--registry", str(tmp_path), "--no-gpu"])
    assert res.exit_code == 1
    assert e1.key in res.output and e2.key in res.output


def test_verify_passes_clean_registry(tmp_path):
    reg = Registry.load(tmp_path)
    reg.add(entry("128x128x128"), src("one"))
    reg.add(entry("64x64x64", None), None)
    assert all(r.ok for r in reg.verify(gpu=False))
    res = runner.invoke(app, ["registry", "verify", "--registry", str(tmp_path), "--no-gpu"])
    assert res.exit_code == 0, res.output
    assert "2 ok, 0 bad" in res.output


@pytest.mark.parametrize("text,match", [("{not json", "not valid JSON"),
                                        ('{"devices": {}}', "not a cudal2 registry"),
                                        ('{"format": "cudal2-registry", "version": 99, "devices": {}}', "version 99")])
def test_garbage_index_is_a_clear_error(tmp_path, text, match):
    (tmp_path / "index.json").write_text(text)
    with pytest.raises(RegistryError, match=match):
        Registry.load(tmp_path)
    res = runner.invoke(app, ["registry", "list", "--registry", str(tmp_path)])
    assert res.exit_code == 2 and match.split()[0] in res.output


def test_malformed_entries_refused_by_name(tmp_path):
    reg = Registry.load(tmp_path)
    reg.add(entry("128x128x128"), src("ok"))
    data = json.loads((tmp_path / "index.json").read_text())
    ents = data["devices"][DEV]["entries"]
    good = ents["128x128x128:nn"]
    ents["64x64x64:nn"] = {**good, "problem": "64x64x64:nn", "source": "../../etc/passwd"}
    ents["32x32x32:nn"] = {**good, "problem": "32x32x32:nn", "backend": "magic"}
    ents["16x16x16:nn"] = {**good, "problem": "16x16x16:nn", "spec": "bm=7"}
    (tmp_path / "index.json").write_text(json.dumps(data))
    with pytest.warns(UserWarning) as rec:
        back = Registry.load(tmp_path)
    msgs = " ".join(str(w.message) for w in rec)
    for name in ("64x64x64:nn", "32x32x32:nn", "16x16x16:nn"):
        assert f"{DEV}/{name}" in msgs
    assert [e.problem for e in back.all()] == ["128x128x128:nn"]
    assert {k for k, _ in back.bad} == {f"{DEV}/64x64x64:nn", f"{DEV}/32x32x32:nn", f"{DEV}/16x16x16:nn"}
    assert sum(not r.ok for r in back.verify(gpu=False)) == 3
    # Adding an entry rewrites the index but keeps the refused ones verbatim for inspection...
    with pytest.warns(UserWarning):
        back.add(entry("256x256x256"), src("new"))
    kept = json.loads((tmp_path / "index.json").read_text())["devices"][DEV]["entries"]
    assert kept["64x64x64:nn"]["source"] == "../../etc/passwd" and "256x256x256:nn" in kept
    # ...and a good entry for a refused problem replaces it.
    with pytest.warns(UserWarning):
        back.add(entry("32x32x32"), src("fixed"))
    with pytest.warns(UserWarning):
        assert Registry.load(tmp_path).lookup(Problem(32, 32, 32), DEV).backend == "triton"


def _hand_made(tmp_path):
    reg = Registry(tmp_path)
    for p, s in [("1024x1024x1024", PERSIST), ("2048x2048x2048", TILED), ("1024x1024x1024:nt", TILED),
                 ("1000x1000x64", SPLITK16), ("8192x8192x8192", None)]:
        e = entry(p, s)
        e.source, e.sha256 = (None, None) if s is None else (f"kernels_triton/generated/{DEV}/x.py", "0" * 64)
        reg.entries.setdefault(DEV, {})[e.problem] = e
    return reg


def test_nearest_picks_closest_valid_same_layout(tmp_path, hopper):
    reg = _hand_made(tmp_path)
    # N % 8 == 0: the persistent (TMA) entry at 1024^3 is nearest and valid.
    assert reg.nearest(Problem(1000, 1016, 1000), DEV, hopper).problem == "1024x1024x1024:nn"
    # N = 1001 breaks TMA's 16-byte rows: skip it for the farther tiled kernel, never the nt entry.
    assert reg.nearest(Problem(1000, 1001, 1000), DEV, hopper).problem == "2048x2048x2048:nn"
    # nt problems only see nt entries.
    assert reg.nearest(Problem(1000, 1001, 1000, "nt"), DEV, hopper).problem == "1024x1024x1024:nt"
    # split_k=16 needs >= 16 K-tiles: at K=64 (1 tile) that entry is skipped although it is closest
    # (distance 0); the next is the persistent 1024^3 entry (distance ~4: K 16x off), before 2048^3.
    assert reg.nearest(Problem(1000, 1000, 64), DEV, hopper).problem == "1024x1024x1024:nn"
    # A cuBLAS winner nearby means cuBLAS: dispatch gets it as the candidate.
    assert reg.nearest(Problem(8000, 8000, 8000), DEV, hopper).backend == "cublas"
    # Device key without a DeviceInfo: limits come from the key's sm90.
    assert reg.nearest(Problem(1000, 1001, 1000), DEV).problem == "2048x2048x2048:nn"
    assert reg.nearest(Problem(1000, 1001, 1000), "a100-sm80") is None
    assert reg.nearest(Problem(1, 1, 1), DEV, hopper, max_distance=1.0) is None
    exact = reg.candidates(Problem(2048, 2048, 2048), DEV, hopper)
    assert exact[0].problem == "2048x2048x2048:nn"


def test_record_winner(tmp_path):
    m = {"spec": TILED, "problem": "512x512x512", "device": DEV, "status": "ok", "time_us": 8.0,
         "best_cublas_us": 10.0, "baselines_us": {"torch": 11.0, "cublas-nn": 10.0},
         "check": {"passed": True}, "versions": {"torch": "2.11"}, "run_id": 3, "ts": 1.0}
    e = record_winner(tmp_path, m, src("w"))
    assert e.backend == "triton" and e.speedup() == pytest.approx(1.25) and e.best_cublas == "cublas-nn"
    assert record_winner(tmp_path, {**m, "time_us": 9.0}, src("slower")) is None   # kept the better one
    loser = record_winner(tmp_path, {**m, "problem": "64x64x64", "time_us": 12.0}, src("x"))
    assert loser.backend == "cublas" and loser.source is None and loser.times["best_kernel_us"] == 12.0
    with pytest.raises(RegistryError, match="status"):
        record_winner(tmp_path, {**m, "status": "wrong"}, src("w"))
    back = Registry.load(tmp_path)
    assert back.read_source(back.lookup(Problem(512, 512, 512), DEV)) == src("w")
    c = record_cublas(tmp_path, "100x100x100:nt", DEV, {"torch": 6.0, "cublas-tn": 5.0})
    assert c.backend == "cublas" and c.best_cublas == "cublas-tn" and c.time_us == 5.0
    assert record_cublas(tmp_path, "512x512x512", DEV, {"torch": 1.0}) is None   # never over a winner



def test_a_filing_reads_the_index_once_and_a_kept_entry_writes_nothing(tmp_path, monkeypatch):
    """record_winner / record_cublas decide under add()'s lock on its one read of the index (each
    read of a 1,879-entry index costs ~0.15 s); an entry they keep leaves every file as it was."""
    m = {"spec": TILED, "problem": "512x512x512", "device": DEV, "status": "ok", "time_us": 8.0,
         "best_cublas_us": 10.0, "baselines_us": {"torch": 11.0, "cublas-nn": 10.0}, "check": {"passed": True}}
    record_winner(tmp_path, m, src("w"))
    from pathlib import Path
    reads, real = [], Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (reads.append(1) if self.name == "index.json"
                                                                  else None) or real(self, *a, **k))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert record_winner(tmp_path, {**m, "time_us": 9.0}, src("slower")) is None
    assert record_cublas(tmp_path, "512x512x512", DEV, {"torch": 1.0}) is None
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before and len(reads) == 2
    assert record_winner(tmp_path, {**m, "time_us": 7.0}, src("faster")).time_us == 7.0 and len(reads) == 3
    assert Registry.load(tmp_path).read_source(Registry.load(tmp_path).lookup(Problem(512, 512, 512), DEV)) == src("faster")


def test_record_winner_margin(tmp_path):
    """A win smaller than the filing margin files cuBLAS (keeping the kernel's time for the record);
    the comparison is exact at the edge: 9.9 us * 1.01 = 9.999 < 10 files the kernel."""
    m = {"spec": TILED, "problem": "512x512x512", "device": DEV, "status": "ok", "time_us": 9.95,
         "best_cublas_us": 10.0, "baselines_us": {"cublas-nn": 10.0}, "check": {"passed": True}}
    near = record_winner(tmp_path / "a", m, src("w"), margin=1.01)
    assert near.backend == "cublas" and near.times["best_kernel_us"] == 9.95 and near.time_us == 10.0
    assert record_winner(tmp_path / "b", m, src("w")).backend == "triton"           # margin 1.0: any win
    assert record_winner(tmp_path / "c", {**m, "time_us": 9.9}, src("w"), margin=1.01).backend == "triton"
    with pytest.raises(RegistryError, match="margin"):
        record_winner(tmp_path / "d", m, src("w"), margin=0.99)


def test_a_kept_cublas_entry_keeps_the_closest_losing_kernel(tmp_path):
    """A search that loses on a shape whose cuBLAS entry stays leaves its kernel on that entry when
    it ran closer to best-cublas (in its own run) than the kernel the entry names: the graph-clock
    rule times exactly that kernel. A farther one, or one over a guard's re-file, changes nothing."""
    m = {"spec": TILED, "problem": "256x256x512", "device": DEV, "status": "ok", "time_us": 12.0,
         "best_cublas_us": 10.0, "baselines_us": {"torch": 10.0, "cublas-nn": 10.5}, "check": {"passed": True},
         "run_id": 1}
    first = record_winner(tmp_path, m, src("a"))
    assert first.backend == "cublas" and first.times["best_kernel_vs_best_cublas"] == pytest.approx(10 / 12)
    # another run: baselines drifted to 8 us, the kernel at 8.4 (0.952 of best-cublas, closer than 0.833)
    closer = {**m, "spec": MMA, "time_us": 8.4, "best_cublas_us": 8.0,
              "baselines_us": {"torch": 8.0, "cublas-nn": 8.2}, "run_id": 2}
    assert record_winner(tmp_path, closer, src("b")) is None           # the cuBLAS verdict stays ...
    e = Registry.load(tmp_path).lookup(Problem(256, 256, 512), DEV)
    assert e.backend == "cublas" and e.time_us == 10.0 and e.best_cublas_us == 10.0     # ... as filed
    assert e.times["best_kernel_spec"] == KernelSpec.parse(MMA).text and e.times["best_kernel_us"] == 8.4
    assert e.times["best_kernel_vs_best_cublas"] == pytest.approx(8 / 8.4) and e.times["best_kernel_run"] == 2
    before = (tmp_path / "index.json").read_bytes()
    assert record_winner(tmp_path, {**m, "time_us": 11.0, "run_id": 3}, src("c")) is None     # 0.909: farther
    assert (tmp_path / "index.json").read_bytes() == before
    reg = Registry.load(tmp_path)
    guarded = reg.lookup(Problem(256, 256, 512), DEV)
    guarded.times = {**guarded.times, "refiled": "server 0.95x of torch.matmul under guard 0.97", "server_us": {}}
    reg.add(guarded, None)
    assert record_winner(tmp_path, {**closer, "time_us": 8.1, "run_id": 4}, src("d")) is None
    assert Registry.load(tmp_path).lookup(Problem(256, 256, 512), DEV).times["best_kernel_us"] == 8.4


def test_apply_margin_refiles_thin_wins(tmp_path):
    """Entries filed before --file-margin: a win under the margin becomes a cuBLAS entry (the
    kernel's figures kept in `times`), a clear win and a cuBLAS entry stay; the algorithm comes
    from the autotune cache where it has the problem; export then carries only named sources."""
    reg = Registry.load(tmp_path / "a", create=True)
    reg.add(entry("128x128x128", t=10.0, best=12.0), src("clear"))
    reg.add(entry("256x256x256", t=9.95, best=10.0), src("thin"))        # 1.005x
    reg.add(entry("64x64x64", None, t=5.0, best=5.0), None)
    cache = tmp_path / f"lt-autotune-{DEV}.json"
    cache.write_text(json.dumps({"256x256x256:nn|cublasLt130000": {"algo": list(range(8))}}))
    bad = tmp_path / f"lt-autotune-{DEV}-x.json"
    bad.write_text("{not json")
    res = runner.invoke(app, ["registry", "apply-margin", "--margin", "1.01", "--registry", str(tmp_path / "a"),
                              "--lt-cache", str(bad)])
    assert res.exit_code == 1 and "unreadable" in res.output
    assert Registry.load(tmp_path / "a").lookup(Problem(256, 256, 256), DEV).backend == "triton"   # untouched
    res = runner.invoke(app, ["registry", "apply-margin", "--margin", "1.01", "--registry", str(tmp_path / "a"),
                              "--lt-cache", str(cache)])
    assert res.exit_code == 0, res.output
    assert "re-filed h200-sm90/256x256x256:nn" in res.output and "1 entries re-filed" in res.output
    back = Registry.load(tmp_path / "a")
    thin = back.lookup(Problem(256, 256, 256), DEV)
    assert thin.backend == "cublas" and thin.source is None and thin.time_us == 10.0
    assert thin.times["best_kernel_us"] == 9.95 and thin.times["best_kernel_spec"] == TILED
    assert thin.lt_algo == {"data": list(range(8)), "cublasLt": 130000}
    assert back.lookup(Problem(128, 128, 128), DEV).backend == "triton"
    assert back.lookup(Problem(64, 64, 64), DEV).time_us == 5.0
    assert back.apply_margin(DEV, 1.01) == []                           # idempotent
    back.export(tmp_path / "b")
    assert len(list((tmp_path / "b").rglob("*.py"))) == 1               # the thin kernel's file is not shipped
    with pytest.raises(RegistryError, match="margin"):
        back.apply_margin(DEV, 0.5)
    res = runner.invoke(app, ["registry", "apply-margin", "--margin", "1.01"])
    assert res.exit_code == 1 and "read-only" in res.output


def test_export_is_standalone(tmp_path):
    reg = Registry.load(tmp_path / "a", create=True)
    reg.add(entry("128x128x128"), src("one"))
    reg.add(entry("64x64x64", None), None)
    res = runner.invoke(app, ["registry", "export", str(tmp_path / "b"), "--registry", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    back = Registry.load(tmp_path / "b")
    assert back.all() == reg.all()
    assert back.read_source(back.lookup(Problem(128, 128, 128), DEV)) == src("one")
    (tmp_path / "a" / reg.all()[0].source).write_text("tampered")
    res = runner.invoke(app, ["registry", "export", str(tmp_path / "c"), "--registry", str(tmp_path / "a")])
    assert res.exit_code == 1 and "128x128x128:nn" in res.output


def test_list_and_show(tmp_path):
    reg = Registry.load(tmp_path)
    reg.add(entry("128x128x128", t=10.0, best=12.0), src("shown"))
    # A wide terminal so rich does not wrap the cells the test looks for.
    res = runner.invoke(app, ["registry", "list", "--registry", str(tmp_path)], env={"COLUMNS": "240"})
    assert res.exit_code == 0 and "128x128x128:nn" in res.output and "1.200x" in res.output
    res = runner.invoke(app, ["registry", "show", "128x128x128", "--registry", str(tmp_path)])
    assert res.exit_code == 0 and "generated kernel shown" in res.output
    res = runner.invoke(app, ["registry", "show", "99x99x99", "--registry", str(tmp_path)])
    assert res.exit_code == 1 and "no entry" in res.output


def test_shipped_and_env_override(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAL2_REGISTRY", raising=False)
    shipped = Registry.load()
    assert shipped.shipped and shipped.root.resolve() == shipped_root().resolve()
    assert (shipped.root / "index.json").is_file()      # ships valid (possibly empty)
    e = entry("128x128x128")
    e.source, e.sha256 = f"kernels_triton/generated/{DEV}/k.py", "0" * 64
    import cudal2.kernels_triton as kt
    assert shipped.source_path(e).parent.parent.parent.resolve() == \
        __import__("pathlib").Path(kt.__file__).parent.resolve()
    monkeypatch.setenv("CUDAL2_REGISTRY", str(tmp_path))
    user = Registry.load()
    assert user.root == tmp_path and not user.shipped
    assert user.source_path(e) == tmp_path / e.source


def test_problems_cli(tmp_path):
    cfg = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 128, "vocab_size": 100}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    res = runner.invoke(app, ["problems", "--hf-config", str(path), "--tokens", "1,16"])
    assert res.exit_code == 0, res.output
    # q/o: 64x64; k/v: 32 out (2 kv heads x 16); gate/up: 128x64; down: 64x128; lm_head: 100x64.
    want = [f"{t}x{n}x{k}:nt" for t in (1, 16) for n, k in ((64, 64), (32, 64), (128, 64), (64, 128), (100, 64))]
    assert res.output.split() == want
    res = runner.invoke(app, ["problems", "--hf-config", str(tmp_path / "nope.json")])
    assert res.exit_code == 2 and "no such file" in res.output
    res = runner.invoke(app, ["problems", "--hf-config", str(path), "--tokens", "a,b"])
    assert res.exit_code == 2 and "integers" in res.output


def test_path_forms(tmp_path):
    reg = Registry.load(tmp_path)
    reg.add(entry("128x128x128"), src("one"))
    assert Registry.load(tmp_path / "index.json").all() == reg.all()     # the index file itself
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(RegistryError, match="is a file"):
        Registry.load(tmp_path / "other.json")


@pytest.mark.parametrize("source", [f"kernels_cuda/generated/{DEV}/k.py",       # another backend's tree
                                    f"kernels_triton/{DEV}/extra/k.py",         # no generated/ part
                                    f"kernels_triton/generated/k.py"])          # no device part
def test_source_path_must_match_backend_form(tmp_path, source):
    e = entry("128x128x128")
    e.source, e.sha256 = source, "0" * 64
    with pytest.raises(RegistryError, match=f"^{DEV}/128x128x128:nn: source path .*kernels_triton/generated"):
        e.validate()
    # The same entry in an index is refused at load by name, and the good one still loads.
    reg = Registry.load(tmp_path)
    reg.add(entry("64x64x64"), src("ok"))
    data = json.loads((tmp_path / "index.json").read_text())
    data["devices"][DEV]["entries"]["128x128x128:nn"] = e.to_dict()
    (tmp_path / "index.json").write_text(json.dumps(data))
    with pytest.warns(UserWarning, match=f"refusing entry {DEV}/128x128x128:nn: .*source path"):
        back = Registry.load(tmp_path)
    assert [x.problem for x in back.all()] == ["64x64x64:nn"]
    assert [k for k, _ in back.bad] == [f"{DEV}/128x128x128:nn"]


def test_check_render_refuses_a_different_source():
    from cudal2.backends import get_backend
    from cudal2.registry import check_render
    from cudal2.spec import KernelSpec
    e, spec = entry("128x128x128"), KernelSpec.parse(TILED)
    text = get_backend("triton").render(spec, e.prob)
    e.source, e.sha256 = f"kernels_triton/generated/{DEV}/k.py", sha256_text(text)
    assert check_render(e) == spec                           # what was stored is what renders
    e.sha256 = sha256_text(text + "# tuned by an older backend\n")
    with pytest.raises(RegistryError, match=f"^{DEV}/128x128x128:nn: backend triton no longer renders"):
        check_render(e)


def _server_compare(path, rows):
    """A `cudal2 compare --json --mode both` file: per row the server means of cudal2 and torch."""
    path.write_text(json.dumps({"versions": {"device_key": DEV}, "config": {"baselines": ["torch"],
                                                                          "modes": ["offline", "server"]},
                                "rows": [{"M": p.M, "N": p.N, "K": p.K, "layout": p.layout, "cudal2_via": via,
                                          "offline_torch_median_us": 10.0, "server_cudal2_mean_us": k,
                                          "server_torch_mean_us": t} for p, via, k, t in rows]}))
    return path


def test_server_guard_refiles_kernels_that_lose_cold(tmp_path):
    """H200 2026-12-04 (run 43): 1x8192x2048 nt's stream kernel won 1.19x offline (its 32 MB weight
    in L2) and ran 0.898x of torch.matmul in server mode. Under --server-guard 0.97 such an entry
    becomes cuBLAS with its kernel and server figures kept; one at 0.98x stays; a cuBLAS row and a
    shape the registry lacks are ignored; without server columns the option is refused."""
    reg = Registry.load(tmp_path / "r", create=True)
    cold, held, cub = Problem(1, 8192, 2048, "nt"), Problem(4, 4096, 4096, "nt"), Problem(64, 64, 64)
    reg.add(entry(cold.text, MMA, t=9.5, best=11.3), "// cuda " + src("cold"))
    reg.add(entry(held.text, MMA, t=10.4, best=12.3), "// cuda " + src("held"))
    reg.add(entry(cub.text, None, t=5.0, best=5.0), None)
    cmp = _server_compare(tmp_path / "c.json", [(cold, "kernel", 18.76, 16.85), (held, "kernel", 19.0, 18.62),
                                                (cub, "", None, 5.0), (Problem(2, 8192, 2048, "nt"), "kernel", 20.0, 10.0)])
    res = runner.invoke(app, ["registry", "add-timings", str(cmp), "--registry", str(tmp_path / "r"),
                              "--server-guard", "0.97"])
    assert res.exit_code == 0, res.output
    assert f"{DEV}/{cold.text}: kernel -> cuBLAS (server mode 0.898x" in res.output
    assert "--server-guard 0.97: 1 kernel entries re-filed as cuBLAS" in res.output
    back = Registry.load(tmp_path / "r")
    e = back.lookup(cold, DEV)
    assert e.backend == "cublas" and e.source is None and e.time_us == 11.3
    assert e.times["best_kernel_spec"] == MMA and e.times["server_us"] == {"kernel": 18.76, "torch": 16.85}
    assert {"torch": 10.0} in e.dispatch["repeats"]      # the same compare's timing, in the same command
    assert back.lookup(held, DEV).backend == "cuda"                  # 18.62 / 19.0 = 0.98x: kept
    no_server = tmp_path / "n.json"
    no_server.write_text(json.dumps({"versions": {"device_key": DEV}, "config": {"baselines": ["torch"],
                                                                                "modes": ["offline"]}, "rows": []}))
    res = runner.invoke(app, ["registry", "add-timings", str(no_server), "--registry", str(tmp_path / "r"),
                              "--server-guard", "0.97"])
    assert res.exit_code == 1 and "needs a compare with server mode" in res.output
    with pytest.raises(RegistryError, match="server guard"):
        from cudal2.registry import server_guard
        server_guard(tmp_path / "r", DEV, {}, 1.5)


def test_offline_guard_refiles_kernels_that_lose_offline(tmp_path):
    """H200 grid nn compare (2026-12-05, commit 4bbf039): the wgmma split-K filed at 2048x256x16384
    ran 39.52 us offline where torch.matmul ran 33.92 (0.858x). Under --offline-guard 0.97 it becomes
    cuBLAS with its kernel and offline figures kept; one at 0.98x stays; cuBLAS rows, shapes the
    registry lacks and the server columns are not what it judges; a guard past 1.0 is refused."""
    reg = Registry.load(tmp_path / "r", create=True)
    lost, held, cub = Problem(2048, 256, 16384), Problem(4096, 128, 16384), Problem(64, 64, 64)
    reg.add(entry(lost.text, MMA, t=33.0, best=34.46), "// cuda " + src("lost"))
    reg.add(entry(held.text, MMA, t=20.0, best=21.0), "// cuda " + src("held"))
    reg.add(entry(cub.text, None, t=5.0, best=5.0), None)
    rows = [(lost, "kernel", 39.52, 33.92), (held, "kernel", 20.0, 19.6), (cub, "", None, 5.0),
            (Problem(2, 8192, 2048), "kernel", 20.0, 10.0)]
    cmp = tmp_path / "c.json"
    cmp.write_text(json.dumps({"versions": {"device_key": DEV}, "config": {"baselines": ["torch"], "modes": ["offline"]},
                               "rows": [{"M": p.M, "N": p.N, "K": p.K, "layout": p.layout, "cudal2_via": via,
                                         "offline_cudal2_median_us": k, "offline_torch_median_us": t,
                                         "server_cudal2_mean_us": 1.0, "server_torch_mean_us": 100.0}
                                        for p, via, k, t in rows]}))
    res = runner.invoke(app, ["registry", "add-timings", str(cmp), "--registry", str(tmp_path / "r"),
                              "--offline-guard", "0.97"])
    assert res.exit_code == 0, res.output
    assert f"{DEV}/{lost.text}: kernel -> cuBLAS (offline 0.858x of torch.matmul, guard 0.97)" in res.output
    assert "--offline-guard 0.97: 1 kernel entries re-filed as cuBLAS" in res.output
    back = Registry.load(tmp_path / "r")
    e = back.lookup(lost, DEV)
    assert e.backend == "cublas" and e.source is None and e.time_us == 34.46
    assert e.times["best_kernel_spec"] == MMA and e.times["offline_us"] == {"kernel": 39.52, "torch": 33.92}
    assert e.times["refiled"] == "offline 0.8583x of torch.matmul under guard 0.97"
    assert {"torch": 33.92} in e.dispatch["repeats"]     # the same compare's timing joins its evidence
    assert back.lookup(held, DEV).backend == "cuda"                  # 19.6 / 20.0 = 0.98x: kept
    assert back.lookup(cub, DEV).backend == "cublas"
    # A re-search timing the same spec over would file it again on its own timing: refused, as
    # after the server guard; another spec files.
    m = {"spec": MMA, "problem": lost.text, "device": DEV, "status": "ok", "time_us": 33.0, "best_cublas_us": 34.46,
         "baselines_us": {"torch": 33.92}, "check": {"passed": True}, "versions": {}}
    with pytest.raises(RegistryError, match=r"this spec ran offline 0\.8583x of torch.matmul .*stays cuBLAS"):
        record_winner(tmp_path / "r", m, "// cuda " + src("again"))
    other = MMA.replace("stages=4", "stages=3")
    assert record_winner(tmp_path / "r", {**m, "spec": other}, "// cuda " + src("other")).backend == "cuda"
    with pytest.raises(RegistryError, match="offline guard"):
        from cudal2.registry import offline_guard
        offline_guard(tmp_path / "r", DEV, {}, 1.5)


def test_a_search_does_not_file_again_the_kernel_the_server_guard_refiled(tmp_path):
    """H200 2026-12-05 (run 68): the decode re-search re-filed at 1x2048x8192:nt the very stream
    spec the server guard had re-filed as cuBLAS (0.917x of torch.matmul cold); the next compare
    found it at 0.939x cold again. The same spec at that shape is refused with the reason, `force`
    files it; another spec, not yet measured cold, files as before."""
    p = Problem(1, 2048, 8192, "nt")
    m = {"spec": MMA, "problem": p.text, "device": DEV, "status": "ok", "time_us": 9.4, "best_cublas_us": 11.3,
         "baselines_us": {"torch": 11.5, "cublas-tn": 11.3}, "check": {"passed": True}, "versions": {}}

    def guarded(root):
        Registry.load(root, create=True).add(entry(p.text, MMA, t=9.5, best=11.3), "// cuda " + src("cold"))
        cmp = _server_compare(tmp_path / "c.json", [(p, "kernel", 21.0, 19.3)])
        res = runner.invoke(app, ["registry", "add-timings", str(cmp), "--registry", str(root),
                                  "--server-guard", "0.97"])
        assert res.exit_code == 0 and "kernel -> cuBLAS (server mode 0.919x" in res.output, res.output
        return root

    root = guarded(tmp_path / "r")
    with pytest.raises(RegistryError, match=r"this spec ran server 0\.9190x of torch.matmul .*stays cuBLAS"):
        record_winner(root, m, "// cuda " + src("again"))
    assert Registry.load(root).lookup(p, DEV).backend == "cublas"
    other = MMA.replace("stages=4", "stages=3")
    assert record_winner(root, {**m, "spec": other}, "// cuda " + src("other")).backend == "cuda"
    root = guarded(tmp_path / "r2")
    e = record_winner(root, m, "// cuda " + src("again"), force=True)
    assert e.backend == "cuda" and Registry.load(root).lookup(p, DEV).time_us == 9.4
