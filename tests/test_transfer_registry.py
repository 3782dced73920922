"""bench/transfer_registry.py: one card's kernel entries as another card's registry, to time there."""
import pytest

from bench_import import load_bench
from cudal2.problems import Problem
from cudal2.registry.index import Registry

xfer = load_bench("transfer_registry")


def _source(tmp_path, n_each=3):
    """An exported slice of the shipped registry: n_each entries of each backend and layout, one
    kernel entry given a scope-less copy so both kinds are present."""
    src = tmp_path / "src"
    Registry.load().export(src)
    reg = Registry.load(src)
    keep, seen = {}, {}
    for e in reg.all("h200-sm90"):
        k = (e.backend, e.problem.rsplit(":", 1)[1])
        if seen.get(k, 0) < n_each:
            seen[k] = seen.get(k, 0) + 1
            keep[e.problem] = e
    reg.entries = {"h200-sm90": keep}
    (src / "index.json").write_text(reg.to_json())
    return src, keep


def test_kernel_entries_move_to_the_target_card_with_their_sources(tmp_path):
    src, keep = _source(tmp_path)
    out = tmp_path / "xfer"
    assert xfer.main(["--registry", str(src), "--from", "h200-sm90", "--to", "h100-sm90", "--out", str(out)]) == 0
    got = Registry.load(out)                      # loads cleanly: every entry valid, none refused
    assert got.bad == [] and set(got.entries) == {"h100-sm90"}
    kernels = {p: e for p, e in keep.items() if e.backend != "cublas"}
    assert set(got.entries["h100-sm90"]) == set(kernels)
    for p, e in got.entries["h100-sm90"].items():
        old = kernels[p]
        assert (e.backend, e.spec, e.sha256, e.time_us) == (old.backend, old.spec, old.sha256, old.time_us)
        assert e.scope is None
        assert got.read_source(e) == Registry.load(src).read_source(old)   # hash-checked copy
        assert got.lookup(Problem.parse(p), "h100-sm90") is e
        assert got.lookup(Problem.parse(p), "h200-sm90") is None
    shapes = [x for x in (out / "shapes.txt").read_text().splitlines() if x and not x.startswith("#")]
    assert sorted(shapes) == sorted(kernels)
    # layouts alternate while both last: a compare cut short has timed some of each
    assert {s.rsplit(":", 1)[1] for s in shapes[:2]} == {"nn", "nt"}


def test_refuses_same_card_no_kernels_and_an_existing_registry(tmp_path):
    src, _ = _source(tmp_path, n_each=1)
    with pytest.raises(SystemExit, match="both h200-sm90"):
        xfer.transfer(str(src), "h200-sm90", "h200-sm90", tmp_path / "a")
    with pytest.raises(SystemExit, match="no kernel entries for a100-sm80"):
        xfer.transfer(str(src), "a100-sm80", "h100-sm90", tmp_path / "b")
    xfer.transfer(str(src), "h200-sm90", "h100-sm90", tmp_path / "c")
    with pytest.raises(SystemExit, match="already holds a registry"):
        xfer.transfer(str(src), "h200-sm90", "h100-sm90", tmp_path / "c")
