"""The shapes where a compare on record saw cudal2's generated kernel run slower than torch.matmul:
the rows to time again before `cudal2 registry add-timings --offline-guard/--server-guard` acts on
them (issue 22's bar: no dispatch slower than torch.matmul beyond noise; worst shape >= 0.97).

    python3 bench/worst_rows.py COMPARE.json[.gz] [...] --offline 1.0 --server 0.99 --out FILE

A row is listed when cudal2 dispatched to a kernel there and its offline median ratio torch/cudal2
is under --offline or its server mean ratio under --server: the rows `add-timings`' guards judge
(cudal2.registry.timings). One shape a line; the rows must share one layout (`cudal2 compare
--layout` takes one). Prints each listed row with its two ratios.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cudal2.registry.timings import offline_kernel_timings, server_timings
from cudal2.report import load_json


def worst(compare: dict, offline: float, server: float) -> list[tuple[str, float | None, float | None]]:
    """(problem text, offline ratio, server ratio) of the kernel rows under either bar, worst first:
    the rows the guards judge (cudal2.registry.timings), as torch.matmul's time over cudal2's."""
    off = {p: t["torch"] / t["cudal2"] for p, t in offline_kernel_timings(compare).items()}
    srv = {p: t["torch"] / t["cudal2"] for p, t in server_timings(compare).items()}
    out = [(p, off.get(p), srv.get(p)) for p in off.keys() | srv.keys()
           if off.get(p, offline) < offline or srv.get(p, server) < server]
    return sorted(out, key=lambda x: (min(v for v in x[1:] if v is not None), x[0]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("compares", nargs="+", type=Path)
    ap.add_argument("--offline", type=float, default=1.0, help="list rows under this offline ratio to torch.matmul")
    ap.add_argument("--server", type=float, default=0.99, help="list rows under this server ratio to torch.matmul")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    shapes: dict[str, None] = {}
    for path in a.compares:
        for p, off, srv in worst(load_json(path), a.offline, a.server):
            shapes.setdefault(p)
            print(f"{path.name}  {p:>22}  offline {off or float('nan'):.3f}  server {srv or float('nan'):.3f}")
    layouts = {p.split(":")[1] for p in shapes}
    if len(layouts) > 1:
        print(f"the rows have layouts {sorted(layouts)}: give one layout's compares", file=sys.stderr)
        return 2
    a.out.write_text("".join(f"{p.split(':')[0]}\n" for p in shapes))
    print(f"{len(shapes)} shapes ({''.join(layouts) or 'none'}) -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
