"""Shared memory of compiled persistent-family kernels for sm_90, on a CPU (no GPU needed).

Compiles kernels_triton/persistent.py ahead of time (the backend's own `_aot`, validation skipped so
specs the rule refuses can be measured too) and prints one JSON line per (spec, layout) with
Triton's `metadata.shared` (what the launch asks of the device, static + dynamic) beside the
spec's `smem_bytes()`. Run it under each Triton version the project uses:

  python3 bench/persistent_smem.py "bm=64 bn=128 bk=32 warps=4 stages=18 subtile=2 warp_spec=1" ...
  python3 bench/persistent_smem.py --grid        # the spread behind NOTES.md 2026-12-04
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from concurrent.futures import ProcessPoolExecutor

SHAPE = (4096, 4096, 4096)


def grid() -> list[str]:
    """The spread behind NOTES.md 2026-12-04 (1,448 specs; bench/results/cpu-sm90/persistent_smem.csv):
    every valid persistent tile (bm 16-256, bn 16-256, bk 16-128; bk 16 only for bm >= 64) x warps
    4/8 x subtile 1/2 x warp_spec 0/1, each at 2 stages, a middle depth and the deepest near the
    limit (three passes, as they were run)."""
    out = []
    for bm, bn, bk, sub, ws, w in itertools.product((16, 32, 64, 128, 256), (16, 32, 64, 128, 256),
                                                   (16, 32, 64, 128), (1, 2), (0, 1), (4, 8)):
        if bm * bn < w * 256 or bm * bn > w * 32 * 128 or bn % (sub * 16):   # _tile_warps, _acc_regs, _subtile
            continue
        per = (bm * bk + bk * bn) * 2
        if bm < 64:
            if bk == 16:
                continue
            depths = (2, 4, max(2, min(20, 200_000 // per)))
        elif bn >= 64 and bk >= 32:
            depths = (2, 3, max(2, min(20, 200_000 // per)))
        else:
            depths = (2, 5, max(2, min(20, 232_448 // per)))
        out += [f"bm={bm} bn={bn} bk={bk} warps={w} stages={st} subtile={sub} warp_spec={ws}"
                for st in sorted(set(depths))]
    return out


def measure(job: tuple[str, str, tuple]) -> dict:
    text, layout, shape = job
    import triton

    from cudal2.backends.triton import _aot, _jit_kwargs, _launch_args, constexprs
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    spec = KernelSpec.parse(f"backend=triton family=persistent {text}")
    p = Problem(*shape, layout)
    row = {"spec": spec.text, "layout": layout, "triton": triton.__version__, "est": spec.smem_bytes()}
    try:
        cex, opts = constexprs(spec, layout)
        fn, args = _launch_args(spec, p)
        c = _aot(fn, args, _jit_kwargs(fn, cex, opts), 90)
        row["shared"] = int(c.metadata.shared)
    except Exception as e:       # noqa: BLE001 - 3.6 aborts some tiles; record and go on
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*", help="persistent spec texts (fields besides backend/family)")
    ap.add_argument("--grid", action="store_true", help="measure grid() too")
    ap.add_argument("--shape", default="x".join(map(str, SHAPE)))
    ap.add_argument("--layouts", default="nn,nt")
    ap.add_argument("-j", type=int, default=2)
    a = ap.parse_args(argv)
    texts = list(a.specs) + (grid() if a.grid else [])
    shape = tuple(int(x) for x in a.shape.split("x"))
    jobs = [(t, lay, shape) for t in texts for lay in a.layouts.split(",")]
    with ProcessPoolExecutor(a.j) as ex:
        for row in ex.map(measure, jobs):
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
