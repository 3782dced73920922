"""CI guard of the registry the package ships: every entry verifies on a CPU (`cudal2 registry verify
--render`: the index parses, each kernel's stored source hashes to its sha256, its spec is valid for
its problem, and the backend still renders the spec to exactly that source). An edit to
kernels_triton/ or kernels_cuda/ that changes what a shipped spec renders would otherwise leave
CI green while those entries are refused at run time and every such call falls back to torch.
About 4 s on 2 cores (2026-12-03).
"""
import types

import pytest

from cudal2.registry import Registry

HOW_TO_FIX = (
    "The shipped kernels were checked and timed as the sources they were filed with; a change to "
    "kernels_triton/, kernels_cuda/ or a backend's render makes the backend render different code "
    "for them, so dispatch refuses them and falls back to torch. Either revert the change, or "
    "`cudal2 registry export DIR` and then re-render (`cudal2 registry rerender --registry DIR`, "
    "then `cudal2 registry verify --gpu --render --registry DIR` on an H200) or re-file the shapes "
    "listed there (`cudal2 generate --shapes SHAPES --registry DIR ...`, bench/grid_search.sh), and "
    "copy DIR/index.json to src/cudal2/registry/ and DIR/kernels_*/generated/ to kernels_*/generated/.")


def orphan_report(results) -> str:
    bad = [r for r in results if not r.ok]
    shapes = sorted({r.entry.split("/", 1)[1].split(":")[0] for r in bad})
    head = "; ".join(r.reason for r in bad[:3])
    return (f"{len(bad)} shipped registry entries fail `cudal2 registry verify --render` "
            f"(first: {head}). Shapes: {','.join(shapes)}. {HOW_TO_FIX}")


def test_shipped_registry_verifies_on_cpu():
    reg = Registry.load()
    assert reg.shipped and not reg.bad, reg.bad
    res = reg.verify(gpu=False, render=True)
    assert len(res) == len(reg.all()) >= 1000
    assert all(r.ok for r in res), orphan_report(res)
    kernels = [r for r in res if "render ok" in r.reason]
    # 1000 grid nn entries (81 kernels) + registry v2's nt entries (2026-12-04: the model set and
    # 199 grid nt shapes, 91 kernels) + the decode re-search with the stream rule's seeds (run 42:
    # 40 filed, 29 more kernel entries) + 133 more grid nt shapes (runs 44-45: 54 kernels) - 8
    # re-filed as cuBLAS by --server-guard 0.97 (run 43) + 17 more grid nt shapes (2026-12-04
    # evening: 12 kernels) + 117 more grid nt shapes (2026-12-04 night, runs 55-56: 30 kernels) + 142 more
    # grid nt shapes (2026-12-04 late, runs 57-58: 57 kernels) + 111 more (run 59: 38 kernels) + the
    # last 79 grid nt shapes (run 66: 25 kernels) + the decode re-search (run 68: 17 more kernel
    # entries) - 21 re-filed as cuBLAS by --server-guard 0.97 with the run 67 / 68 compares and the
    # grid nn compare (2026-12-05). h100-sm90: the H200's kernels that won on an H100 in the
    # transfer compare (runs 84-85, 489 of 633), checked there by verify --gpu, less 2 re-filed as
    # cuBLAS by --server-guard 0.97 with the run 86 compare, and 2 more with the whole-grid H100
    # compares (runs 87-90). h200-sm90 again: + 122 kernel entries from the rest of the grid nn
    # leads pass (runs 94 and 96, 785 shapes; 2026-12-05 night) - 12 re-filed as cuBLAS by
    # --server-guard 0.97 with the run 93-96 grid nn compare. h100-sm90 again: run 100 (2026-12-06)
    # filed run 99's sweep leads (38 grid nt shapes: 36 new entries, 16 more kernels, 20 cuBLAS
    # entries where the lead lost at full timing). h200-sm90: - 1 re-filed as cuBLAS by
    # --offline-guard 0.97 with the grid nn compare (2048x256x16384, 2026-12-06): a count that
    # moves says the index changed. h100-sm90: run 134 (2026-12-06) filed a sweep's leads over small
    # grid shapes the H100 ran on torch.matmul (bench/h100_small_{nn,nt}.txt, 41 of 125 swept: 13
    # leads, 10 kernels, 3 cuBLAS entries where the lead lost the 1.01x margin at full timing), then
    # `registry file-cublas` over the two small-class compares a layout on record (runs 127 + 132 nt,
    # 130 + 133 nn): 110 cuBLAS entries (torch.matmul 97, cuBLASLt autotune 7, heuristic 6).
    # h100-sm90, runs 135-139 (2026-12-06 evening): `registry transfer --searched-only` filed 94 of
    # the H200's own search winners (64 new entries, 30 re-filed: 21 cuBLAS and 9 kernels); the small
    # sweep's leads 14 kernels over cuBLAS entries (7 nn, 7 nt); the skinny nt sweep 25 new entries
    # (12 kernels, 13 cuBLAS): 648 + 64 + 25 entries, 511 + 94 - 9 + 14 + 12 kernels. Runs 141-143:
    # sweeps over the small / skinny shapes with no H100 entry filed 42 new entries (23 kernels, 19
    # cuBLAS) and 5 over held ones (3 cuBLAS became kernels); `file-cublas` of runs 132 + 140's skinny
    # nt compares 24 cuBLAS entries: 737 + 42 + 24 entries, 622 + 23 + 3 kernels. Run 145's small nn
    # sweep filed 2 kernels over held entries (1 cuBLAS); `file-cublas` of run 144's two timings of
    # those uncovered shapes 118 cuBLAS entries (77 nn, 41 nt): 803 + 118 entries, 648 + 1 kernels.
    # Runs 151-153 (2026-12-07): `registry file-graph` (the graph-clock rule) over four timings
    # turned 5 H100 cuBLAS entries into their lost kernels (4 on torch.matmul from runs 151's two,
    # then 64x8192x2048:nt on autotune's stored algorithm from run 153's two): 649 + 5 kernels.
    # Runs 154-156 (2026-12-07): `add-timings --offline-guard 0.97` of skinny nt's third timing took
    # 64x4096x12288:nt's kernel back (0.970x of torch.matmul offline; 1.018 and 0.982 before): - 1.
    # Runs 168 / 173 (2026-12-07): `file-cublas` of the decode set's two timings filed cuBLAS entries
    # at the 30 decode shapes the H100 held none for (28 torch.matmul, 2 cuBLASLt autotune): + 30.
    # Runs 175-177 (2026-12-07): `add-timings --server-guard 0.97` of small nt's server timing
    # re-filed 3 H100 kernels as cuBLAS (0.952-0.969x of torch.matmul with L2 cold; 2 Triton, 1 CUDA): - 3.
    # Runs 180-181 (2026-12-07): the stream family past 64 tokens (`stream-file:nt` / `:nn`) filed 7
    # kernels over cuBLAS entries (6 nt, 1 nn; 1.027-1.072x of best-cublas in the search's timing): + 7.
    assert sum(e.backend != "cublas" for e in reg.all("h200-sm90")) == 742
    assert len(reg.all("h100-sm90")) == 921 + 30
    assert sum(e.backend != "cublas" for e in reg.all("h100-sm90")) == 649 + 5 - 1 - 3 + 7
    assert len(kernels) == 742 + 649 + 5 - 1 - 3 + 7
    # Every kernel entry passed the full checker on its card, or is pending (check.passed None) after
    # a template edit re-rendered it (`registry rerender`) until `verify --gpu --render --record` on
    # that card: 2026-12-06, PDL by default in mma / stream (pdl.cuh; the H100's 78 re-checked by run
    # 131, the H200's 81 not yet) and in Triton tiled (the texts' footer, run 131: 104 + 90; the
    # H100's 90 re-checked by run 134; its 94 transferred on 2026-12-06 by run 138). None failed. A count that moves says the index changed; 0 pending once a card re-checked them.
    ks = [e for e in reg.all() if e.backend != "cublas"]
    assert not [e.key for e in ks if e.check.get("passed") is False]
    pending = {d: sum(e.check.get("passed") is None for e in reg.all(d) if e.backend != "cublas")
               for d in ("h200-sm90", "h100-sm90")}
    # h100-sm90: run 151's 4 graph-rule entries passed the full checker in run 152 (2026-12-07);
    # 64x8192x2048:nt (filed after run 153) passed it in run 154.
    assert pending == {"h200-sm90": 556 + 81 + 104, "h100-sm90": 0}, pending


def test_a_kernel_source_edit_fails_with_how_to_fix(monkeypatch):
    """What CI says when a Triton family's source changes: every shipped Triton entry is named bad,
    and the message says how to re-file or re-render (here the edit is a line appended to every
    rendering, which is what any edit to kernels_triton/tiled.py amounts to for the hash)."""
    from cudal2.backends import triton as tb
    monkeypatch.setattr(tb, "FOOTER", tb.FOOTER + "# an edit\n")
    reg = Registry.load()
    res = reg.verify(gpu=False, render=True)
    bad = [r for r in res if not r.ok]
    assert len(bad) == sum(e.backend == "triton" for e in reg.all()) == 105 + 104   # h200, h100 (the offline guard's two were CUDA; the server guard's run 175-177 three, 2 Triton)
    assert all("no longer renders this spec" in r.reason for r in bad)
    msg = orphan_report(res)
    assert msg.startswith("209 shipped registry entries fail") and "re-file" in msg and "re-render" in msg


@pytest.mark.parametrize("edit", ["source", "index"])
def test_cli_verify_names_the_orphaned_entry(tmp_path, edit):
    """The same check from the command line on an exported copy: exit 1, the entry named."""
    import json
    from typer.testing import CliRunner
    from cudal2.cli import app
    runner = CliRunner()
    r = runner.invoke(app, ["registry", "export", str(tmp_path / "reg")])
    assert r.exit_code == 0 and "exported 3111 entries" in r.output
    reg = Registry.load(tmp_path / "reg")
    e = next(x for x in reg.all() if x.backend == "triton")
    n = 1
    if edit == "source":        # content-addressed: every entry sharing the file goes bad with it
        n = sum(x.source == e.source for x in reg.all())
        path = reg.source_path(e)
        path.write_text(path.read_text() + "# edited\n")
        want = "edited or corrupt"
    else:
        idx = tmp_path / "reg" / "index.json"
        data = json.loads(idx.read_text())
        data["devices"][e.device]["entries"][e.problem]["time_us"] = "abc"
        idx.write_text(json.dumps(data))
        want = "time_us must be a positive number or null, got 'abc'"
    r = runner.invoke(app, ["registry", "verify", "--render", "--no-gpu", "--registry", str(tmp_path / "reg")])
    assert r.exit_code == 1
    assert f"bad entry {e.key}: " in r.output and want in r.output
    assert f"{len(reg.all()) - n} ok, {n} bad" in r.output


def test_rerender_repairs_an_exported_copy(tmp_path, monkeypatch):
    """The re-render step the message names: after a family edit, the exported copy's orphaned
    entries get new sources, their checks marked not re-run, and the copy verifies again. (Without
    the SASS comparison: this edit is a comment, which keeps the Triton kernels' machine code and
    so their checks; tests/test_triton_pdl.py has the comparison.)"""
    from typer.testing import CliRunner
    from cudal2.backends import triton as tb
    from cudal2.cli import app
    runner = CliRunner()
    dest = tmp_path / "reg"
    assert runner.invoke(app, ["registry", "export", str(dest)]).exit_code == 0
    monkeypatch.setattr(tb, "FOOTER", tb.FOOTER + "# an edit\n")
    r = runner.invoke(app, ["registry", "rerender"])
    assert r.exit_code == 1 and "the shipped registry is read-only here" in r.output
    r = runner.invoke(app, ["registry", "rerender", "--no-compare-sass", "--registry", str(dest)])
    assert r.exit_code == 0 and "209 entries re-rendered" in r.output and "re-check the other 209 on a card" in r.output
    reg = Registry.load(dest)
    assert all(r.ok for r in reg.verify(gpu=False, render=True))
    moved = [e for e in reg.all() if e.backend == "triton"]
    assert all(e.check["passed"] is None and "rerendered_from" in e.times for e in moved)
    assert all(e.check.get("passed") is not False for e in reg.all() if e.backend == "cuda")
    r = runner.invoke(app, ["registry", "rerender", "--registry", str(dest)])
    assert r.exit_code == 0 and "0 entries re-rendered" in r.output
    # a second edit before the card re-checked them: each still names the source it was measured on
    first = {e.problem + e.device: e.times["rerendered_from"] for e in moved}
    monkeypatch.setattr(tb, "FOOTER", tb.FOOTER + "# another edit\n")
    r = runner.invoke(app, ["registry", "rerender", "--no-compare-sass", "--registry", str(dest)])
    assert r.exit_code == 0 and "209 entries re-rendered" in r.output
    again = [e for e in Registry.load(dest).all() if e.backend == "triton"]
    assert {e.problem + e.device: e.times["rerendered_from"] for e in again} == first
    assert all(e.sha256 != first[e.problem + e.device] for e in again)



def test_rerender_keeps_checks_where_the_sass_is_unchanged(tmp_path, monkeypatch):
    """A CUDA template edit that leaves an entry's machine code alone (here a comment) keeps its
    check and timings (they were measured on that SASS); one that changes the code (the tile order's
    group size) leaves the check to be re-run on a card."""
    from typer.testing import CliRunner
    from cudal2.backends import cuda as cb
    from cudal2.backends.sass import cuobjdump
    from cudal2.cli import app
    if cuobjdump() is None:
        pytest.skip("no cuobjdump (CUDA toolkit on PATH or the triton wheel's copy)")
    runner = CliRunner()
    dest = tmp_path / "reg"
    assert runner.invoke(app, ["registry", "export", str(dest)]).exit_code == 0
    reg = Registry.load(dest)
    # two persistent wgmma entries with group_m 8 keep the test to four NVRTC compiles per edit
    picked = [e for e in reg.all() if e.backend == "cuda" and "family=wgmma" in e.spec
              and "group_m=8" in e.spec and "warp_spec=1" in e.spec][:2]
    assert len(picked) == 2
    for e in picked:           # as if a card had checked them (shipped ones may be pending a re-check)
        e.check["passed"] = True
    reg.entries = {d: {k: e for k, e in es.items() if e in picked} for d, es in reg.entries.items()}
    (dest / "index.json").write_text(reg.to_json())
    render = cb.render_template
    monkeypatch.setattr(cb, "render_template", lambda spec, layout: render(spec, layout) + "// a comment\n")
    before = {reg.source_path(e) for e in picked}
    r = runner.invoke(app, ["registry", "rerender", "--registry", str(dest)])
    assert r.exit_code == 0 and "2 entries re-rendered, 2 to the same SASS" in r.output, r.output
    kept = Registry.load(dest).all()
    # the old sources are gone (no entry names them), the new ones are there
    assert before and not any(p.exists() for p in before)
    assert all(Registry.load(dest).source_path(e).is_file() for e in kept)
    assert all(e.check["passed"] is True and e.times["same_sass_as"] for e in kept)
    assert all(r.ok for r in Registry.load(dest).verify(gpu=False, render=True))
    monkeypatch.setattr(cb, "render_template",
                        lambda spec, layout: render(spec, layout).replace("#define GROUP_M 8", "#define GROUP_M 4"))
    r = runner.invoke(app, ["registry", "rerender", "--registry", str(dest)])
    assert r.exit_code == 0 and "2 entries re-rendered, 0 to the same SASS; re-check the other 2" in r.output, r.output
    assert all(e.check["passed"] is None and "rerendered_from" in e.times for e in Registry.load(dest).all())


def test_rerender_compares_each_shared_source_once(tmp_path, monkeypatch):
    """Entries that share a source (same spec and layout at other shapes: 926 CUDA entries over 192
    sources on 2026-12-05) cost one SASS comparison per (old, new) source pair and arch, not one per
    entry, and each of them keeps its check by that one verdict and its source's folder."""
    from collections import Counter

    from cudal2.backends import cuda as cb
    from cudal2.backends import sass
    dest = Registry.load().export(tmp_path / "reg")
    reg = Registry.load(dest)
    by_sha = Counter(e.sha256 for e in reg.all() if e.backend == "cuda" and e.check.get("passed"))
    sha, n = by_sha.most_common(1)[0]
    assert n >= 2
    # the checked entries of that source (one card's may be pending a re-check on that card)
    picked = [e for e in reg.all() if e.sha256 == sha and e.backend == "cuda" and e.check.get("passed")]
    reg.entries = {d: {k: e for k, e in es.items() if e in picked} for d, es in reg.entries.items()}
    (dest / "index.json").write_text(reg.to_json())
    folders = {e.key: e.source.split("/")[2] for e in picked}
    assert any(folders[e.key] != e.device for e in picked)     # a transferred entry among them
    # the source each was measured on: an earlier same-SASS re-render's, else this one
    measured = {e.key: e.times.get("same_sass_as", sha) for e in picked}
    calls = []
    monkeypatch.setattr(sass, "same_machine_code", lambda old, new, arch: calls.append(arch) or True)
    render = cb.render_template
    monkeypatch.setattr(cb, "render_template", lambda spec, layout: render(spec, layout) + "// a comment\n")
    changed = Registry.load(dest).rerender(compare_sass=True)
    # one comparison, also where the source sits under both cards' directories (both sm_90a)
    assert len(changed) == len(picked)
    assert len(calls) == 1 and all(e.check["passed"] is True and e.times["same_sass_as"] == measured[e.key]
                                   for e in changed)
    # each new source lands in the folder the old one was in: a transferred entry's stays under its
    # source card's key, not copied under its own
    assert {e.key: e.source.split("/")[2] for e in changed} == folders


def test_record_rechecks_marks_only_pending_entries_it_was_given(tmp_path):
    """`verify --gpu --render --record` writes check.passed True for the pending entries whose
    checker run it just saw pass, and for nothing else: an entry not re-checked stays pending, and
    an entry already passed keeps its original check."""
    dest = Registry.load().export(tmp_path / "reg")
    copy = Registry.load(dest)
    kern = [e for e in copy.all() if e.backend != "cublas" and e.check.get("passed")][:3]
    for e in kern[:2]:        # what `rerender` leaves behind for a changed SASS
        e.check = {**e.check, "passed": None, "reason": "re-rendered; re-check with verify --gpu --render"}
    kern[0].check["checks_here"] = ["random"]       # a filing that ran one check (file-graph)
    (dest / "index.json").write_text(copy.to_json())
    done = kern[2].check
    copy = Registry.load(dest)
    changed = copy.record_rechecks({kern[0].key, kern[2].key}, "re-checked on a card")
    assert [e.key for e in changed] == [kern[0].key]
    after = {e.key: e for e in Registry.load(dest).all()}
    assert after[kern[0].key].check["passed"] is True
    assert after[kern[0].key].check["reason"] == "re-checked on a card"
    # verify ran the full checker: the record says so, not the filing's one check
    assert after[kern[0].key].check["checks_here"] == ["random", "exact", "poison", "guard", "fresh", "edges"]
    assert after[kern[1].key].check["passed"] is None
    assert after[kern[2].key].check == done


def test_verify_record_refuses_the_shipped_registry():
    """--record writes the index: like rerender and apply-margin it works on an exported copy only,
    and says so in one line before any checking starts."""
    from typer.testing import CliRunner
    from cudal2.cli import app
    r = CliRunner().invoke(app, ["registry", "verify", "--record", "--no-gpu"])
    assert r.exit_code == 1 and "the shipped registry is read-only here" in r.output
    assert "ok," not in r.output


def test_verify_pending_only_checks_only_the_pending_kernels(tmp_path, monkeypatch):
    """`verify --gpu --pending-only`: the checker runs (a stand-in card: build and check recorded) on
    the running card's pending kernels only; its other kernels are hashed and rendered, another
    card's are not built; without the flag every kernel of the card is checked."""
    import cudal2.backends
    import cudal2.check
    import cudal2.device
    dest = Registry.load().export(tmp_path / "reg")
    reg = Registry.load(dest)
    for e in [e for e in reg.all("h100-sm90") if e.backend != "cublas" and e.check.get("passed")][:3]:
        e.check = {**e.check, "passed": None}           # as `rerender` leaves them
    (dest / "index.json").write_text(reg.to_json())
    reg = Registry.load(dest)
    dev = types.SimpleNamespace(key="h100-sm90")         # the running card (only its key is read)
    monkeypatch.setattr(cudal2.device, "gpu_available", lambda: True)
    monkeypatch.setattr(cudal2.device, "current", lambda: dev)
    built = []
    monkeypatch.setattr(cudal2.backends, "build_kernel", lambda spec, prob, d: built.append(prob.text) or object())
    monkeypatch.setattr(cudal2.check, "check_kernel",
                        lambda k, p, device="cuda", **kw: types.SimpleNamespace(passed=True, reason=""))
    mine = [e for e in reg.all("h100-sm90") if e.backend != "cublas"]
    pending = {e.prob.text for e in mine if e.check.get("passed") is None}
    warmed = []       # the compile-ahead pass gets exactly the kernels the checker will build
    import cudal2.evaluate.warm as warm_mod
    monkeypatch.setattr(warm_mod, "warm_compiles", lambda pairs, d: warmed.append(sorted(p.text for _, p in pairs)))
    res = reg.verify(gpu=True, render=True, pending_only=True)
    assert warmed == [sorted(pending)]
    assert all(r.ok for r in res) and sorted(built) == sorted(pending) and 0 < len(pending) < len(mine)
    assert {r.entry for r in res if r.checked} == {e.key for e in mine if e.check.get("passed") is None}
    built.clear()
    reg.verify(gpu=True, render=False)
    assert sorted(built) == sorted(e.prob.text for e in mine)
    # --time-limit: no check starts after it (0: none); those say so and stay pending, nothing fails
    built.clear()
    res = reg.verify(gpu=True, render=True, pending_only=True, time_limit=0.0, warm=False)
    left = [r for r in res if "checker not run (time limit)" in r.reason]
    assert not built and all(r.ok and not r.checked for r in res)
    assert {r.entry for r in left} == {e.key for e in mine if e.check.get("passed") is None}
    from typer.testing import CliRunner
    from cudal2.cli import app
    r = CliRunner().invoke(app, ["registry", "verify", "--registry", str(dest), "--gpu", "--render",
                                 "--pending-only", "--record", "--time-limit", "0", "--no-warm"])
    assert r.exit_code == 0 and f"{len(pending)} not checked by the GPU checker (--time-limit 0 s): run again" in r.output
    assert "the GPU checker passed no entry here, nothing recorded" in r.output
    assert sum(e.check.get("passed") is None for e in Registry.load(dest).all("h100-sm90")
               if e.backend != "cublas") == len(pending)


def test_rerender_asks_the_triton_comparison_once_per_text_spec_and_problem_class(tmp_path, monkeypatch):
    """A Triton edit (here a footer comment) goes through backends/sass.py's Triton comparison (a
    stand-in here: the real one compiles every kernel, ~60 s for the shipped set), asked once per
    (old text, new text, arch, spec, layout, problem class); its verdict keeps or drops the checks."""
    import cudal2.backends.sass as sass
    from cudal2.backends import triton as tb
    from cudal2.backends.triton import spec_class
    dest = Registry.load().export(tmp_path / "reg")
    monkeypatch.setattr(tb, "FOOTER", tb.FOOTER + "# an edit\n")
    asked = []

    def stand_in(old, new, spec, problem, device):
        asked.append((spec.text, problem.layout, spec_class(problem)))
        return problem.layout == "nn"          # "same" for nn entries, "different" for nt
    monkeypatch.setattr(sass, "same_triton_machine_code", stand_in)
    reg = Registry.load(dest)
    trit = [e for e in reg.all() if e.backend == "triton" and e.check.get("passed")]
    changed = reg.rerender(compare_sass=True)
    assert {e.key for e in changed} >= {e.key for e in trit}
    assert len(asked) == len(set(asked)) <= len(trit)
    after = {e.key: e for e in Registry.load(dest).all()}
    for e in trit:
        kept = after[e.key].check.get("passed") is True
        assert kept == (e.prob.layout == "nn"), e.key
        times = after[e.key].times          # which old text the verdict was about (the first named)
        field = "same_sass_as" if kept else "rerendered_from"
        assert times.get(field) == e.times.get(field, e.sha256), e.key
