"""bench/adopt_runpack.py: a device call's run pack becomes the committed registry and stores."""
import gzip
import json
import sqlite3
import tarfile

import pytest

from bench_import import load_bench
from cudal2.registry.index import Registry

adopt = load_bench("adopt_runpack")


def _pack(tmp_path, keep_keys, store_rows, card=None):
    """A pack as grid_search.sh leaves it: run/registry (a few shipped entries), run/grid.db, and
    run/.card naming the card (`card`; None: a pack from before .card was written)."""
    run = tmp_path / "pack" / "run"
    Registry.load().export(run / "registry")
    reg = Registry.load(run / "registry")
    for dev in reg.entries:
        reg.entries[dev] = {p: e for p, e in reg.entries[dev].items() if f"{dev}/{p}" in keep_keys}
    (run / "registry" / "index.json").write_text(reg.to_json())
    db = sqlite3.connect(run / "grid.db")
    db.execute("CREATE TABLE t (x INTEGER)")
    db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(store_rows)])
    db.commit()
    db.close()
    (run / "grid.db.ckpt").mkdir()
    (run / "grid.db.ckpt" / "policy.pt").write_bytes(b"weights %d" % store_rows)
    if card:
        (run / ".card").write_text(card + "\n")
    path = tmp_path / f"run{store_rows}.tgz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(run, arcname="run")
    return path


def _three_keys():
    """One entry of each backend from the shipped registry (device/problem)."""
    picked = {}
    for e in Registry.load().all("h200-sm90"):
        picked.setdefault(e.backend, f"{e.device}/{e.problem}")
    assert {"cuda", "triton", "cublas"} <= picked.keys()
    return [picked["cuda"], picked["triton"], picked["cublas"]]


def test_adopt_writes_registry_sources_and_stores_then_nothing(tmp_path, capsys):
    keys = _three_keys()
    root = tmp_path / "repo"
    stale = root / "kernels_cuda" / "generated" / "h200-sm90" / "0000stale.cu"
    stale.parent.mkdir(parents=True)
    stale.write_text("// a source no entry names any more\n")
    pack = _pack(tmp_path, set(keys), store_rows=5)

    assert adopt.main([str(pack), "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "remove kernels_cuda/generated/h200-sm90/0000stale.cu" in out
    assert not stale.exists()
    index = json.loads((root / "src/cudal2/registry/index.json").read_text())
    filed = {f"{d}/{p}" for d, s in index["devices"].items() for p in s["entries"]}
    assert filed == set(keys)
    # every source an entry names is there, byte for byte the shipped one (hash-checked on load)
    shipped = Registry.load()
    for e in Registry.load(tmp_path / "pack" / "run" / "registry").all():
        if e.source:
            assert (root / e.source).read_text() == shipped.read_source(e)
    assert len([f for f in (root / "kernels_cuda").rglob("*") if f.is_file()]) == 1
    assert len([f for f in (root / "kernels_triton").rglob("*") if f.is_file()]) == 1
    g = root / "bench/results/h200-sm90/grid_search"
    with gzip.open(g / "grid_store.db.gz") as f:
        assert f.read() == (tmp_path / "pack/run/grid.db").read_bytes()
    with tarfile.open(g / "grid_policy_ckpt.tgz") as tar:
        assert tar.extractfile("run/grid.db.ckpt/policy.pt").read() == b"weights 5"

    # the same pack again: every file already holds its bytes
    assert adopt.main([str(pack), "--root", str(root)]) == 0
    assert capsys.readouterr().out.strip() == "nothing to change"


def test_adopt_dry_run_writes_nothing_and_a_new_store_is_noticed(tmp_path, capsys):
    keys = _three_keys()
    root = tmp_path / "repo"
    assert adopt.main([str(_pack(tmp_path, set(keys), 5)), "--root", str(root)]) == 0
    capsys.readouterr()
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    newer = _pack(tmp_path / "b", set(keys[:1]), 7)
    # by default the tree's two entries the pack lacks are merged back in: nothing is dropped
    assert adopt.main([str(newer), "--root", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "store run/grid.db" in out and "checkpoint run/grid.db.ckpt" in out
    assert "2 added, 0 replaced" in out and "remove " not in out and "update src/cudal2" not in out
    # --replace: the pack's one entry alone
    assert adopt.main([str(newer), "--root", str(root), "--dry-run", "--replace"]) == 0
    out = capsys.readouterr().out
    assert "remove kernels_triton/" in out and "update src/cudal2/registry/index.json (1 entries)" in out
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_source_another_device_names_stays(tmp_path, capsys):
    """A transferred h100 entry names its source under the h200 folder (registry.transfer keeps
    the content-addressed path): adopting a pack with it and no h200 entry naming that file keeps
    the file, and still removes what no entry names."""
    h100 = next(e for e in Registry.load().all("h100-sm90") if e.backend == "cuda")
    assert h100.source.startswith("kernels_cuda/generated/h200-sm90/")
    root = tmp_path / "repo"
    stale = root / "kernels_cuda" / "generated" / "h200-sm90" / "0000stale.cu"
    stale.parent.mkdir(parents=True)
    stale.write_text("// a source no entry names any more\n")
    # and an h200 entry of another source: its device's folder is swept, and h100's file lives there
    h200 = next(e for e in Registry.load().all("h200-sm90") if e.backend == "cuda" and e.source != h100.source)
    pack = _pack(tmp_path, {h100.key, h200.key}, store_rows=3)
    assert adopt.main([str(pack), "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"add {h100.source}" in out and f"add {h200.source}" in out
    assert "remove kernels_cuda/generated/h200-sm90/0000stale.cu" in out
    assert (root / h100.source).read_text() == Registry.load().read_source(h100)
    assert adopt.main([str(pack), "--root", str(root)]) == 0
    assert capsys.readouterr().out.strip() == "nothing to change"
    assert (root / h100.source).is_file()


def test_adopt_refuses_what_is_not_a_pack(tmp_path, capsys):
    bogus = tmp_path / "x.tgz"
    with tarfile.open(bogus, "w:gz") as tar:
        (tmp_path / "f").write_text("x")
        tar.add(tmp_path / "f", arcname="run/f")
    assert adopt.main([str(bogus), "--root", str(tmp_path / "repo")]) == 2
    assert "not a grid_search.sh pack" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        adopt.main([str(tmp_path / "missing.tgz")])


def test_an_h100_pack_lands_in_the_h100_folder_and_is_refused_elsewhere(tmp_path, capsys):
    """grid_search.sh on an H100 keeps stores of its own (run/.card says whose): adopting its pack
    writes them under bench/results/h100-sm90/, never over the H200's, which the next H200 call
    would go on from."""
    keys = _three_keys()
    root = tmp_path / "repo"
    pack = _pack(tmp_path, set(keys), store_rows=4, card="h100-sm90")
    assert adopt.main([str(pack), "--root", str(root), "--device", "h200-sm90"]) == 2
    assert "holds h100-sm90's search state, not h200-sm90's" in capsys.readouterr().err
    assert not (root / "bench/results/h200-sm90").exists()
    assert adopt.main([str(pack), "--root", str(root)]) == 0
    with gzip.open(root / "bench/results/h100-sm90/grid_search/grid_store.db.gz") as f:
        assert f.read() == (tmp_path / "pack/run/grid.db").read_bytes()
    assert not (root / "bench/results/h200-sm90").exists()


def test_a_pack_that_came_back_in_parts_is_read_as_one(tmp_path, capsys):
    """grid_search.sh splits a pack over 15 MB (a file over 16 MiB does not come back from a device
    call): the folder, the missing run.tgz or any part names the same pack, the parts read in order."""
    keys = _three_keys()
    whole = _pack(tmp_path, set(keys), store_rows=7)
    data = whole.read_bytes()
    back = tmp_path / "files_at"
    back.mkdir()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    for i, name in enumerate(("aa", "ab", "ac")):
        (back / f"run.tgz.part-{name}").write_bytes(data[cut[i]:cut[i + 1]])
    assert adopt.pack_parts(back) == adopt.pack_parts(back / "run.tgz") == adopt.pack_parts(back / "run.tgz.part-ab")
    assert [p.name for p in adopt.pack_parts(back)] == ["run.tgz.part-aa", "run.tgz.part-ab", "run.tgz.part-ac"]
    assert adopt.pack_parts(whole) == [whole]
    for i, name in enumerate((back, back / "run.tgz", back / "run.tgz.part-ac")):
        root = tmp_path / f"repo{i}"
        assert adopt.main([str(name), "--root", str(root)]) == 0
        g = root / "bench/results/h200-sm90/grid_search"
        with gzip.open(g / "grid_store.db.gz") as f:
            assert f.read() == (tmp_path / "pack/run/grid.db").read_bytes()
        index = json.loads((root / "src/cudal2/registry/index.json").read_text())
        assert {f"{d}/{p}" for d, s in index["devices"].items() for p in s["entries"]} == set(keys)
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(SystemExit):
        adopt.main([str(empty), "--root", str(tmp_path / "repo9")])
    assert "is not a pack" in capsys.readouterr().err


def test_the_trees_filings_since_the_packs_export_are_merged_in_unless_replace(tmp_path, capsys):
    """A warm card keeps run/ between calls: the second call's pack may lack what the tree filed in
    between (runs 136-137, 2026-12-06: 95 transferred entries). Adopting merges the tree's entries
    into the pack's (cudal2.registry.merge); --replace takes the pack's registry as it came."""
    keys = _three_keys()
    root = tmp_path / "repo"
    assert adopt.main([str(_pack(tmp_path, set(keys), 5)), "--root", str(root)]) == 0
    # the tree files one more entry (as a transfer adopted between two calls would)
    shipped = Registry.load()
    named = {e.source for e in shipped.all() if f"{e.device}/{e.problem}" in keys}
    extra = next(e for e in shipped.all("h100-sm90") if e.backend == "cuda" and e.source not in named)
    idx = json.loads((root / "src/cudal2/registry/index.json").read_text())
    idx["devices"].setdefault("h100-sm90", {"entries": {}})["entries"][extra.problem] = extra.to_dict()
    (root / "src/cudal2/registry/index.json").write_text(json.dumps(idx, indent=1) + "\n")
    (root / extra.source).parent.mkdir(parents=True, exist_ok=True)
    (root / extra.source).write_text(shipped.read_source(extra))
    capsys.readouterr()
    # the next call's pack: the same three entries and a grown store, without the tree's new one
    newer = _pack(tmp_path / "b", set(keys), 7)
    assert adopt.main([str(newer), "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "merge the tree's registry into the pack's: 1 added, 0 replaced" in out
    index = json.loads((root / "src/cudal2/registry/index.json").read_text())
    filed = {f"{d}/{p}" for d, s in index["devices"].items() for p in s["entries"]}
    assert filed == set(keys) | {extra.key}
    assert (root / extra.source).read_text() == shipped.read_source(extra)     # its source stays
    assert all(r.ok for r in Registry.load(tmp_path / "b" / "pack" / "run" / "registry").verify(gpu=False))
    # --replace: the pack's registry whole, the tree's extra entry and its source gone
    assert adopt.main([str(newer), "--root", str(root), "--replace"]) == 0
    index = json.loads((root / "src/cudal2/registry/index.json").read_text())
    assert {f"{d}/{p}" for d, s in index["devices"].items() for p in s["entries"]} == set(keys)
    assert not (root / extra.source).exists()


def test_an_empty_compare_rows_file_is_not_committed(tmp_path, capsys):
    """sweep_file.sh's last step (the grid compare) leaves an empty rows file when its time box was
    spent (runs 134-139): committing it would replace rows on record with none."""
    keys = _three_keys()
    root = tmp_path / "repo"
    pack = _pack(tmp_path, set(keys), 5)
    run = tmp_path / "pack" / "run"
    (run / "compare").mkdir()
    (run / "compare" / "compare_grid.rows.jsonl").write_text("")
    with tarfile.open(pack, "w:gz") as tar:
        tar.add(run, arcname="run")
    assert adopt.main([str(pack), "--root", str(root)]) == 0
    assert "compare_grid.rows" not in capsys.readouterr().out
    assert not (root / "bench/results/h200-sm90/grid_search/compare_grid.rows.jsonl.gz").exists()
