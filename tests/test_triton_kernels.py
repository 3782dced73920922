"""Both Triton families under the interpreter (TRITON_INTERPRET=1), judged by the shared checker.

Why a subprocess: Triton picks interpreted or compiled functions when @triton.jit runs, i.e. when
kernels_triton is first imported, and other test files in the same pytest process may import it
compiled first. So the interpreter cases run once in a child process (this file run as a script
with TRITON_INTERPRET=1), which prints one JSON report per case; the tests below assert on them.

Tolerances are the checker's own (PROTOCOL.md): relative error <= 5e-3, exact 0/1 products,
every C element written, guards intact. On top, each random-type figure must stay below 1e-3:
fp16 output rounding alone gives ~2e-4 and the interpreter accumulates in fp32, so a correct
kernel sits near 2e-4 and anything several times that is a real defect the 5e-3 bar would let by.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
TIGHT = 1e-3
SMALL = "bm=32 bn=32 bk=16 warps=2 stages=2 group_m=4"   # small tiles: several programs per axis
# (name, spec text, shape): shapes that are multiples of no tile (1, 17, 100, 300 ...); split-K on
# and off; persistent with both epilogue subtilings and warp specialisation (a no-op for the
# interpreter, but it must still compute the same product).
CASES = [
    ("tiled-sk1", f"family=tiled {SMALL} split_k=1", "100x17x300"),
    ("tiled-sk2", f"family=tiled {SMALL} split_k=2", "17x100x40"),
    ("tiled-sk4", "family=tiled bm=16 bn=32 bk=16 warps=2 stages=2 split_k=4", "1x33x100"),
    ("persistent-st1", "family=persistent bm=32 bn=32 bk=16 warps=4 stages=2 group_m=4 subtile=1", "100x40x72"),
    ("persistent-st2", "family=persistent bm=32 bn=32 bk=16 warps=4 stages=2 group_m=4 subtile=2", "17x48x24"),
    ("persistent-ws", "family=persistent bm=64 bn=32 bk=16 warps=8 stages=2 subtile=2 warp_spec=1", "1x64x40"),
    # 7 K-tiles over 3 slices: 3 + 3 + 1 (the split grammar takes 3 / 6 / 12 since 2026-12-05)
    ("tiled-sk3", f"family=tiled {SMALL} split_k=3", "17x100x100"),
]
LAYOUTS = ("nn", "nt")
EDGE_SIZES = (1, 17, 100)


def _worker() -> None:
    """Runs in the child (TRITON_INTERPRET=1): every case through the checker, one JSON line each."""
    import torch

    from cudal2.backends import get_backend
    from cudal2.check import check_kernel, rel_error
    from cudal2.device import DeviceInfo
    from cudal2.kernels_triton import persistent, tiled
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec

    be = get_backend("triton")
    dev = DeviceInfo.target("sm_90a")
    families = {"tiled": tiled, "persistent": persistent}
    for name, text, shape in CASES:
        for layout in LAYOUTS:
            p = Problem.parse(shape, layout)
            spec = KernelSpec.parse(text)
            kernel = be.load(be.compile(spec, p, dev))
            rep = check_kernel(kernel, p, "cpu", edge_sizes=EDGE_SIZES)
            # The family's own fp32 reference (what its module says it computes) on other inputs.
            g = torch.Generator().manual_seed(7)
            a = torch.randn(p.M, p.K, generator=g).half()
            b = torch.randn(*p.b_shape(), generator=g).half()
            c = torch.empty(p.M, p.N, dtype=torch.float16)
            kernel(a, b, c)
            family_error = rel_error(c, families[spec.family].reference(a, b, layout))
            print(json.dumps({"case": f"{name}-{layout}", "spec": spec.text, "family_error": family_error,
                              **rep.to_dict()}), flush=True)
    # A misaligned base pointer must be refused by the TMA family, not computed on.
    p = Problem(16, 32, 32, "nn")
    k = be.load(be.compile(KernelSpec.parse(CASES[3][1]), p, dev))
    buf = torch.zeros(16 * 32 + 1, dtype=torch.float16)
    a = buf[1:].view(16, 32)                     # 2 bytes past an aligned start
    b = torch.zeros(32, 32, dtype=torch.float16)
    c = torch.empty(16, 32, dtype=torch.float16)
    try:
        k(a, b, c)
        msg = None
    except ValueError as e:
        msg = str(e)
    print(json.dumps({"case": "misaligned", "error": msg}), flush=True)


@pytest.fixture(scope="module")
def reports() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(HERE), "--worker"], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {r["case"]: r for r in rows}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_family_passes_checker(reports, name, layout):
    r = reports[f"{name}-{layout}"]
    assert r["passed"], f"{r['spec']}: {r['reason']}"
    by = {x["name"]: x for x in r["results"]}
    assert list(by) == ["random", "exact", "poison", "guard", "fresh", "edges"]
    for check in ("random", "guard", "fresh", "edges"):
        assert by[check]["value"] < TIGHT, f"{check}: {by[check]['value']} (expected ~2e-4)"
    for check in ("exact", "poison"):
        assert by[check]["value"] == 0
    assert r["family_error"] < TIGHT, f"{r['spec']}: vs the family's reference: {r['family_error']}"


def test_edge_shapes_were_run(reports):
    # The edges check must really exercise off-grid shapes, not skip them all: tiled claims every
    # shape with enough K-tiles, persistent every M (N and K must be multiples of 8 for TMA).
    for name, _, _ in CASES:
        detail = next(x for x in reports[f"{name}-nn"]["results"] if x["name"] == "edges")["detail"]
        tried = int(detail.split(" over ")[1].split()[0])
        assert tried >= 3, f"{name}: {detail}"


def test_misaligned_pointer_is_refused(reports):
    err = reports["misaligned"]["error"]
    assert err is not None and "16-byte aligned" in err


def test_bad_inputs_raise_valueerror():
    # Input checks run before any launch, so they need neither a GPU nor the interpreter.
    import torch

    from cudal2.backends import get_backend
    from cudal2.backends.base import Artifact
    from cudal2.device import DeviceInfo
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec

    spec = KernelSpec.parse(f"family=tiled {SMALL}")
    dev = DeviceInfo.target("sm_90a")
    src = get_backend("triton").render(spec, Problem(64, 64, 64, "nt"))
    k = get_backend("triton").load(Artifact("triton", spec, src, meta={"layout": "nt", "device": dev.to_dict()}))
    h = torch.float16
    a, c = torch.zeros(8, 16, dtype=h), torch.zeros(8, 4, dtype=h)
    with pytest.raises(ValueError, match="float16"):
        k(a.float(), torch.zeros(4, 16, dtype=h), c)
    with pytest.raises(ValueError, match="layout nt"):
        k(a, torch.zeros(16, 4, dtype=h), c)            # an nn-shaped B given to an nt kernel
    with pytest.raises(ValueError, match="contiguous"):
        k(a, torch.zeros(16, 4, dtype=h).t(), c)
    assert k.supports(Problem(100, 17, 300, "nt")) and not k.supports(Problem(100, 17, 300, "nn"))


def test_cli_check_interpret_end_to_end():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", "from cudal2.cli import main; main()", "check",
                          "--backend", "triton", "--shape", "100x17x300", "--interpret"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("PASS", "FAIL"))]
    assert [ln.split()[1] for ln in lines] == ["random", "exact", "poison", "guard", "fresh", "edges"]
    assert all(ln.startswith("PASS") for ln in lines)


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker()
