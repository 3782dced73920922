"""The transfer's figures per layout and class: another card's kernels on this card, and as dispatched.

  python3 bench/transfer_report.py --transfer XFER.json[.gz] --dispatch DISPATCH.json[.gz] \
      [--from h200-sm90] [--out REPORT.md]

XFER: `cudal2 compare` of `bench/transfer_registry.py build`'s shapes (every source-card kernel,
built from its spec on this card). DISPATCH: `cudal2 compare` of the registry after `file`, over
the filed shapes (an independent timing: the filing chose on XFER's). Per set: the source card's
kernels here (offline / server geomean vs best-cublas, shapes won), the source card's own filing
figure for the same shapes (in-sample there), and cudal2 as dispatched here over all of XFER's
shapes: a filed shape counts DISPATCH's time, an unfiled one torch.matmul's (no entry: dispatch
calls it), as measured in XFER. Geomeans of time ratios; classes by ../shared/classes.py's rule.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _read(path: str) -> dict:
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)


def _geo(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def table(xfer: dict, dispatch: dict, source_entries: dict) -> list[dict]:
    """One dict per set (all, each layout, each layout x class), the figures the module doc names."""
    from cudal2.stats import shape_class
    filed = {(r["shape"], r["layout"]): r for r in dispatch.get("rows", [])}
    sets: dict[tuple[str, str], list[dict]] = {}
    for r in xfer.get("rows", []):
        key = (r["shape"], r["layout"])
        e = source_entries.get(f"{r['shape']}:{r['layout']}")
        d = filed.get(key)
        v = {"here_off": r["offline_cudal2_vs_best"], "here_srv": r["server_cudal2_vs_best"],
             "source": e["best_cublas_us"] / e["time_us"] if e and e.get("time_us") else None,
             "disp_off": d["offline_cudal2_vs_best"] if d else r["offline_torch_vs_best"],
             "disp_srv": d["server_cudal2_vs_best"] if d else r["server_torch_vs_best"],
             "disp_torch": d["offline_cudal2_speedup_torch"] if d else 1.0, "filed": d is not None}
        cls = shape_class(r["M"], r["N"], r["K"])
        for s in (("all", "all"), (r["layout"], "all"), (r["layout"], cls)):
            sets.setdefault(s, []).append(v)
    out = []
    for (layout, cls), vs in sorted(sets.items(), key=lambda t: (t[0][0] != "all", t[0][0], t[0][1] != "all", t[0][1])):
        col = lambda k: [v[k] for v in vs if v[k] is not None]   # noqa: E731
        out.append({"layout": layout, "class": cls, "shapes": len(vs),
                    "here_offline": _geo(col("here_off")), "here_won": sum(x > 1 for x in col("here_off")),
                    "here_server": _geo(col("here_srv")), "source_filed": _geo(col("source")),
                    "filed": sum(v["filed"] for v in vs), "dispatched_offline": _geo(col("disp_off")),
                    "dispatched_server": _geo(col("disp_srv")), "worst_vs_torch": min(col("disp_torch"))})
    return out


def markdown(rows: list[dict], source: str, target: str) -> str:
    head = (f"| layout | class | shapes | {source} kernels here, offline (won) | server | {source}'s filing (in-sample there) "
            f"| filed for {target} | as dispatched here, offline | server | worst vs torch.matmul, offline |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    return head + "".join(
        f"| {r['layout']} | {r['class']} | {r['shapes']} | {r['here_offline']:.3f} ({r['here_won']}) | {r['here_server']:.3f} "
        f"| {r['source_filed']:.3f} | {r['filed']} | {r['dispatched_offline']:.3f} | {r['dispatched_server']:.3f} "
        f"| {r['worst_vs_torch']:.3f} |\n" for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transfer", required=True, help="compare JSON of the build's shapes (.gz read too)")
    ap.add_argument("--dispatch", required=True, help="compare JSON of the filed shapes as dispatched")
    ap.add_argument("--from", dest="from_key", default="h200-sm90", help="the source card's key")
    ap.add_argument("--registry", default=None, help="registry holding the source card's entries (default: shipped)")
    ap.add_argument("--out", default=None, help="write the table here as markdown (default: print)")
    args = ap.parse_args(argv)
    from cudal2.registry import Registry
    xfer, disp = _read(args.transfer), _read(args.dispatch)
    target = (xfer.get("versions") or {}).get("device_key", "?")
    src = {e.problem: {"time_us": e.time_us, "best_cublas_us": e.best_cublas_us}
           for e in Registry.load(args.registry).all(args.from_key)}
    md = markdown(table(xfer, disp, src), args.from_key, target)
    if args.out:
        Path(args.out).write_text(md)
    print(md, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
