"""cudal2.registry.merge and `cudal2 registry merge`: two registries of one card joined by the rule in
the module's doc, on slices of the shipped registry (CPU only)."""
import json

import pytest
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.registry import Registry, RegistryError
from cudal2.registry.merge import decide, merge

KEY = "h100-sm90"


def _slice(tmp_path):
    """SRC: an export holding 8 H100 entries (6 kernels with their sources, 2 cuBLAS); DEST: a new
    registry filed with the first 5 of them, through add_many as a search files."""
    full = tmp_path / "full"
    Registry.load().export(full, KEY)
    reg = Registry.load(full)
    kernels = [e for e in reg.all(KEY) if e.backend != "cublas" and e.check.get("passed")][:6]
    cublas = [e for e in reg.all(KEY) if e.backend == "cublas"][:2]
    picked = {e.problem: e for e in kernels + cublas}
    src = tmp_path / "src"
    s = Registry.load(src, create=True)
    s.add_many([(e, None if e.backend == "cublas" else reg.read_source(e)) for e in picked.values()])
    dest = tmp_path / "dest"
    d = Registry.load(dest, create=True)
    first = list(picked.values())[:5]
    d.add_many([(e, None if e.backend == "cublas" else reg.read_source(e)) for e in first])
    return src, dest, list(picked)


def _edit(root, problem, **fields):
    idx = json.loads((root / "index.json").read_text())
    entry = idx["devices"][KEY]["entries"][problem]
    for k, v in fields.items():
        if k == "passed":
            entry["check"] = {**entry.get("check", {}), "passed": v}
        else:
            entry[k] = v
    (root / "index.json").write_text(json.dumps(idx, indent=1) + "\n")


def test_merge_adds_replaces_by_time_and_check_and_keeps_sources_whole(tmp_path):
    src, dest, problems = _slice(tmp_path)
    kern = [p for p in problems[:5] if Registry.load(src).entries[KEY][p].backend != "cublas"]
    faster, slower, pending = kern[0], kern[1], kern[2]
    t = {p: Registry.load(src).entries[KEY][p].time_us for p in kern[:3]}
    _edit(src, faster, time_us=t[faster] * 0.9)     # SRC timed it faster: SRC's wins
    _edit(src, slower, time_us=t[slower] * 1.1)     # slower: DEST's stays
    # SRC's is faster but pending (re-rendered, not re-checked): a passed check beats it
    _edit(src, pending, time_us=t[pending] * 0.5, passed=None)
    res = merge(dest, src)
    got = Registry.load(dest)
    assert sorted(k.split("/", 1)[1] for k in res.added) == sorted(problems[5:])
    assert [k for k, _ in res.replaced] == [f"{KEY}/{faster}"]
    assert sorted(k for k, _ in res.kept) == sorted([f"{KEY}/{slower}", f"{KEY}/{pending}"])
    assert got.entries[KEY][faster].time_us == pytest.approx(t[faster] * 0.9)
    assert got.entries[KEY][slower].time_us == pytest.approx(t[slower])
    assert got.entries[KEY][pending].check["passed"] is True
    assert set(got.entries[KEY]) == set(problems)          # nothing removed, every SRC problem there
    # the added kernels' sources came along, hash-checked: the merged registry verifies
    assert all(r.ok for r in got.verify(gpu=False))
    again = merge(dest, src)                                 # a second merge finds nothing new to take
    assert again.added == [] and again.replaced == [] and len(again.kept) == 2


def test_decide_ties_keep_the_destination_and_a_failed_check_loses(tmp_path):
    src, dest, problems = _slice(tmp_path)
    p = next(q for q in problems if Registry.load(src).entries[KEY][q].backend != "cublas")
    a, b = Registry.load(dest).entries[KEY][p], Registry.load(src).entries[KEY][p]
    assert decide(a, b)[0] is a                              # equal times: DEST's
    _edit(dest, p, passed=False)
    failed = Registry.load(dest).entries[KEY][p]
    assert decide(failed, b)[0] is b
    # the in-run ratio decides, not two runs' absolute times: a cuBLAS entry timed in another run
    # at 3% under the kernel's time still loses to a kernel its own run timed 1.02x best-cublas
    c = next(e for e in Registry.load(src).all(KEY) if e.backend == "cublas")
    c.problem = p
    c.time_us = c.best_cublas_us = b.time_us * 0.97
    b.best_cublas_us = b.time_us * 1.02
    assert c.speedup() == pytest.approx(1.0) and b.speedup() == pytest.approx(1.02)
    assert decide(c, b)[0] is b and decide(b, c)[0] is b
    # ... unless that cuBLAS entry is the kernel re-filed (a margin or guard took it out): the later
    # verdict on the same kernel stays, whichever side holds it
    import copy
    r = copy.deepcopy(b)
    r.refile_as_cublas("offline 1.005x best-cublas, under the margin 1.01")
    assert decide(r, b)[0] is r and decide(b, r)[0] is r
    # one spec, two sources: the one the backend renders today wins, though it is pending (a
    # template edit re-rendered it) and the other passed its check
    stale = copy.deepcopy(b)
    stale.sha256 = "0" * 64
    new = copy.deepcopy(b)
    new.check = {**new.check, "passed": None}
    assert stale.check.get("passed") is True
    assert decide(stale, new)[0] is new and decide(new, stale)[0] is new
    # two cuBLAS entries of one problem: the one chosen on more timings (add-timings only adds)
    more = copy.deepcopy(c)
    more.dispatch = {**(c.dispatch or {}), "repeats": list((c.dispatch or {}).get("repeats") or []) + [{"torch": 1.0}]}
    assert decide(c, more)[0] is more and decide(more, c)[0] is more


def test_dry_run_writes_nothing_and_the_shipped_registry_is_refused(tmp_path):
    src, dest, problems = _slice(tmp_path)
    before = (dest / "index.json").read_text()
    res = merge(dest, src, dry_run=True)
    assert len(res.added) == 3 and (dest / "index.json").read_text() == before
    with pytest.raises(RegistryError, match="read-only"):
        merge(Registry.load().root, src)
    with pytest.raises(RegistryError, match="files nothing for h200-sm90"):
        merge(dest, src, device_keys=["h200-sm90"])


def test_cli_merges_and_reports(tmp_path):
    src, dest, problems = _slice(tmp_path)
    r = CliRunner().invoke(app, ["registry", "merge", str(src), "--registry", str(dest), "-v"])
    assert r.exit_code == 0, r.output
    assert "merged into" in r.output and "3 added, 0 replaced, 0 kept" in r.output
    assert sum(line.startswith("add ") for line in r.output.splitlines()) == 3
    assert set(Registry.load(dest).entries[KEY]) == set(problems)
    r = CliRunner().invoke(app, ["registry", "merge", str(tmp_path / "nowhere"), "--registry", str(dest)])
    assert r.exit_code == 1 and "no registry here" in r.output
