"""Off-grid dispatch serves a kernel only on measured evidence (cudal2.registry.evidence, rule 2):
which entry `Registry.serving` and `ops._choose` pick for on-grid, in-scope and out-of-scope shapes,
in both layouts, and scopes refused when they are not evidence. CPU only: kernels are stand-ins
(`ops._kernel` patched), so no backend compiles anything."""
import dataclasses
import json

import pytest

from cudal2 import ops
from cudal2.problems import Problem
from cudal2.registry import Entry, Registry, RegistryError, record_scope, scope_problems

DEV = "h200-sm90"
TILED = "backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=4 group_m=8"
TILED2 = "backend=triton family=tiled bm=32 bn=64 bk=64 warps=4 stages=4 group_m=8"
PERSIST = "backend=triton family=persistent bm=128 bn=128 bk=64 warps=8 stages=4 group_m=8 subtile=2"


def kernel(reg, problem, spec=TILED, t=8.0, best=10.0):
    return reg.add(Entry(problem=problem, device=DEV, backend=spec.split()[0][8:], spec=spec, time_us=t,
                         best_cublas_us=best, baselines_us={"torch": best}), f"# {problem} {spec}\n")


def point(problem, spec=TILED, t=8.0, best=10.0, status="ok"):
    """A measurement (as record_scope takes it) of `spec` at `problem`: kernel t us, best-cublas best."""
    return {"problem": problem, "spec": spec, "status": status, "time_us": t, "best_cublas_us": best,
            "check": {"passed": status == "ok"}}


def decode_registry(tmp_path, layout):
    """Model-set-like entries at N=K=4096: M=16 a kernel whose scope is M 9..16 (measured at 9 and at
    16), M=32 a kernel without a scope, M=64 a cuBLAS entry."""
    reg = Registry.load(tmp_path)
    kernel(reg, f"16x4096x4096:{layout}")
    kernel(reg, f"32x4096x4096:{layout}")
    reg.add(Entry(problem=f"64x4096x4096:{layout}", device=DEV, backend="cublas", time_us=9.0,
                  best_cublas_us=9.0, baselines_us={"torch": 9.0}), None)
    record_scope(tmp_path, f"16x4096x4096:{layout}", DEV, [point(f"9x4096x4096:{layout}", t=7.0)], {"M": (9, 16)})
    return Registry.load(tmp_path)


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_serving_on_grid_in_scope_out_of_scope(tmp_path, hopper, layout):
    reg = decode_registry(tmp_path, layout)
    other = "nt" if layout == "nn" else "nn"

    def served(m, n=4096, lay=layout):
        return [e.problem for e in reg.serving(Problem(m, n, 4096, lay), DEV, hopper)]
    assert served(16) == [f"16x4096x4096:{layout}"]                 # on the grid: its own entry
    assert served(64) == [f"64x4096x4096:{layout}"]                 # its own cuBLAS entry
    assert served(32) == [f"32x4096x4096:{layout}"]
    assert served(9) == served(12) == [f"16x4096x4096:{layout}"]   # inside the measured M 9..16
    assert served(8) == []            # below the scope: cuBLAS, though 16's kernel is close
    assert served(24) == []           # 32 is the nearest entry, but it was measured at 32 only
    assert served(40) == []           # between a kernel and a cuBLAS entry: cuBLAS
    assert served(12, n=4095) == []   # N is not in the scope (an axis left out is the entry's own)
    assert served(12, lay=other) == []                            # a scope is of one layout


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_ops_choose_follows_the_rule(tmp_path, hopper, monkeypatch, layout):
    decode_registry(tmp_path, layout)
    built = []

    class StandIn:
        def __init__(self, e):
            self.e = e

        def supports(self, p):
            return p.layout == self.e.prob.layout

    monkeypatch.setattr(ops, "_kernel", lambda reg, e, dev, idx: built.append(e.problem) or StandIn(e))
    dev = dataclasses.replace(hopper, name="NVIDIA H200", sm_count=1)
    ops.set_registry(tmp_path)
    try:
        kern, info = ops._choose(Problem(16, 4096, 4096, layout), dev, 0, strict=False)
        assert kern.e.problem == f"16x4096x4096:{layout}" and f"(exact, triton: {TILED})" in info
        kern, info = ops._choose(Problem(12, 4096, 4096, layout), dev, 0, strict=False)
        assert kern.e.problem == f"16x4096x4096:{layout}" and "(in its measured scope M 9..16, triton" in info
        for m in (8, 24):
            kern, info = ops._choose(Problem(m, 4096, 4096, layout), dev, 0, strict=False)
            assert kern is None and info.startswith(f"torch: no registry entry for {m}x4096x4096:{layout}")
        # The 32 entry's kernel was never built for 24: no neighbour is even tried.
        assert built == [f"16x4096x4096:{layout}"] * 2
    finally:
        ops.set_registry(None)


def test_the_strongest_then_tightest_scope_serves(tmp_path, hopper):
    """Two scopes hold 12: the one whose weakest measured point won by more serves; at equal evidence
    the tighter box (closer measurements) does."""
    reg = Registry.load(tmp_path)
    kernel(reg, "16x256x256:nn", t=8.0)                             # 1.25x at 16
    kernel(reg, "32x256x256:nn", TILED2, t=8.0)                     # 1.25x at 32
    record_scope(tmp_path, "16x256x256:nn", DEV, [point("9x256x256:nn", t=9.5)], {"M": (9, 16)})       # 1.05x
    record_scope(tmp_path, "32x256x256:nn", DEV, [point("5x256x256:nn", TILED2, t=8.0)], {"M": (5, 32)})
    reg = Registry.load(tmp_path)
    assert [e.problem for e in reg.serving(Problem(12, 256, 256), DEV, hopper)] == ["32x256x256:nn", "16x256x256:nn"]
    record_scope(tmp_path, "16x256x256:nn", DEV, [point("9x256x256:nn", t=8.0)], {"M": (9, 16)})       # 1.25x now
    reg = Registry.load(tmp_path)
    assert reg.serving(Problem(12, 256, 256), DEV, hopper)[0].problem == "16x256x256:nn"    # 7 vs 27 wide


def test_a_scope_does_not_serve_where_its_spec_is_invalid(tmp_path, hopper):
    """The persistent (TMA) family needs N % 8 == 0 (test_registry's nearest test): a box over N that
    holds 1001 does not send 1001 to it, though the corners 1000 and 1024 were measured."""
    reg = Registry.load(tmp_path)
    kernel(reg, "64x1024x1024:nn", PERSIST)
    record_scope(tmp_path, "64x1024x1024:nn", DEV, [point("64x1000x1024:nn", PERSIST)], {"N": (1000, 1024)})
    reg = Registry.load(tmp_path)
    assert [e.problem for e in reg.serving(Problem(64, 1008, 1024), DEV, hopper)] == ["64x1024x1024:nn"]
    assert reg.serving(Problem(64, 1001, 1024), DEV, hopper) == []


def test_scope_problems_are_the_corners():
    b = {"M": (9, 16), "N": (4096, 4096), "K": (1024, 2048)}
    assert [p.text for p in scope_problems(b, "nt")] == ["9x4096x1024:nt", "9x4096x2048:nt",
                                                         "16x4096x1024:nt", "16x4096x2048:nt"]


@pytest.mark.parametrize("points, bounds, why", [
    ([point("9x256x256:nn", t=10.5)], {"M": (9, 16)}, "no evidence: kernel 10.5 us vs best-cublas 10.0"),
    ([point("9x256x256:nn", t=9.95)], {"M": (9, 16)}, "under the margin 1.01"),    # a 0.5% win: noise
    ([], {"M": (9, 16)}, "corners not measured: 9x256x256:nn"),
    ([point("12x256x256:nn")], {"M": (9, 16)}, "corners not measured: 9x256x256:nn"),
    ([point("9x256x256:nn")], {"M": (9, 16), "K": (128, 256)}, "corners not measured: 9x256x128:nn, 16x256x128:nn"),
    ([point("9x256x256:nn", TILED2)], {"M": (9, 16)}, "of another spec"),
    ([point("9x256x256:nn", status="wrong")], {"M": (9, 16)}, "is 'wrong', not a checked kernel"),
    ([point("9x256x256:nt")], {"M": (9, 16)}, "lies outside the scope"),
    ([point("9x256x256:nn")], {"M": (9, 12)}, "does not hold the entry's own problem"),
])
def test_a_scope_without_evidence_is_refused(tmp_path, points, bounds, why):
    reg = Registry.load(tmp_path)
    kernel(reg, "16x256x256:nn")
    with pytest.raises(RegistryError, match=why.replace("(", r"\(")):
        record_scope(tmp_path, "16x256x256:nn", DEV, points, bounds, margin=1.01)
    assert Registry.load(tmp_path).lookup(Problem(16, 256, 256), DEV).scope is None    # nothing written


def test_a_hand_edited_scope_is_refused_at_load(tmp_path):
    """An index edited to claim a wider box than was measured: the entry is refused (listed in .bad,
    its own shape then goes to torch, tests/test_bad_input.py), never served on the claim."""
    reg = Registry.load(tmp_path)
    kernel(reg, "16x256x256:nn")
    record_scope(tmp_path, "16x256x256:nn", DEV, [point("9x256x256:nn")], {"M": (9, 16)})
    idx = json.loads((tmp_path / "index.json").read_text())
    idx["devices"][DEV]["entries"]["16x256x256:nn"]["scope"]["M"] = [1, 16]
    (tmp_path / "index.json").write_text(json.dumps(idx))
    with pytest.warns(UserWarning, match="scope corners not measured: 1x256x256:nn"):
        reg = Registry.load(tmp_path)
    assert reg.lookup(Problem(16, 256, 256), DEV) is None and len(reg.bad) == 1


def test_v1_entries_round_trip_unchanged(tmp_path):
    """Entries without the v2 fields write no `dispatch` / `scope` keys, so a v1 index re-written
    by this cudal2 is byte-identical (the shipped index keeps its form; tests/test_shipped_registry
    verifies it), and an older cudal2 reading a v2 index ignores the keys it does not know."""
    reg = Registry.load(tmp_path)
    kernel(reg, "16x256x256:nn")
    reg.add(Entry(problem="64x64x64:nt", device=DEV, backend="cublas", time_us=2.0, best_cublas_us=2.0), None)
    text = (tmp_path / "index.json").read_text()
    assert '"scope"' not in text and '"dispatch"' not in text
    Registry.load(tmp_path).add(Registry.load(tmp_path).lookup(Problem(64, 64, 64, "nt"), DEV), None)
    assert (tmp_path / "index.json").read_text() == text
