"""The shapes where a compare on record saw cudal2's generated kernel run slower than torch.matmul:
the rows to time again before `cudal2 registry add-timings --offline-guard/--server-guard` acts on
them (issue 22's bar: no dispatch slower than torch.matmul beyond noise; worst shape >= 0.97).

    python3 bench/worst_rows.py COMPARE.json[.gz] [...] --offline 1.0 --server 0.99 --out FILE

A row is listed when cudal2 dispatched to a kernel there (`cudal2_via` == "kernel") and its offline
median ratio torch/cudal2 is under --offline or its server mean ratio under --server. One shape a
line, the layout of each compare's config (every input must share one layout: `cudal2 compare
--layout` takes one). Prints each listed row with its two ratios.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def ratio(row: dict, mode: str, stat: str) -> float | None:
    k, t = row.get(f"{mode}_cudal2_{stat}_us"), row.get(f"{mode}_torch_{stat}_us")
    return t / k if k and t else None


def worst(rows, offline: float, server: float) -> list[tuple[str, float | None, float | None]]:
    """(MxNxK, offline ratio, server ratio) of the kernel rows under either bar, worst first."""
    out = []
    for r in rows:
        if r.get("cudal2_via") != "kernel":
            continue
        off, srv = ratio(r, "offline", "median"), ratio(r, "server", "mean")
        if (off is not None and off < offline) or (srv is not None and srv < server):
            out.append((f"{r['M']}x{r['N']}x{r['K']}", off, srv))
    return sorted(out, key=lambda x: min(v for v in x[1:] if v is not None))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("compares", nargs="+", type=Path)
    ap.add_argument("--offline", type=float, default=1.0, help="list rows under this offline ratio to torch.matmul")
    ap.add_argument("--server", type=float, default=0.99, help="list rows under this server ratio to torch.matmul")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    layouts, shapes = set(), {}
    for p in a.compares:
        d = load(p)
        layouts |= {d.get("config", {}).get("layout")} - {None} or {r.get("layout") for r in d.get("rows", [])}
        for s, off, srv in worst(d.get("rows", []), a.offline, a.server):
            shapes.setdefault(s, (off, srv))
            print(f"{p.name}  {s:>20}  offline {off or float('nan'):.3f}  server {srv or float('nan'):.3f}")
    if len(layouts) != 1:
        print(f"the compares have layouts {sorted(map(str, layouts))}: give one layout's", file=sys.stderr)
        return 2
    a.out.write_text("".join(f"{s}\n" for s in shapes))
    print(f"{len(shapes)} shapes ({layouts.pop()}) -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
