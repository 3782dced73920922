"""How far the registry's figures are from what a kernel could reach at our measured limits (CPU only).

    python3 bench/headroom.py [--registry src/cudal2/registry/index.json] [--device h200-sm90] \
        [--floor-us 5.0] [--peak-tflops 744] [--bw-tbs 4.22] [--grid] [--out DIR]

Per layout, class (../shared/classes.py) and K band, over the registry's entries: the filed ratio
(best-cublas / the time dispatch serves, cuBLAS entries 1.0; the filing-time figure, not a compare)
beside a ceiling: best-cublas / t_min, with t_min = max(floor, FLOP / peak, bytes / bandwidth) the
least time a kernel of ours could take at limits measured on the card, or the filed time where that
is lower. Defaults, each measured on the H200 (NOTES.md): floor 5.0 µs, the wgmma lite kernel at
64^3 (runs 32/37; an empty kernel is ~3.55 µs on the same clock); peak 744 TFLOPS, ours at 4096^3
nt alone under ncu (184.8 µs, run 57); bandwidth 4.22 TB/s, a device copy. bytes = A + B + C read
or written once. On the offline clock small operands stay in L2 between calls, so bytes / HBM
bandwidth is not a bound there; the floor is what binds small shapes.

A class whose ceiling is under its target cannot meet it by better tile choice alone: it needs a
lower floor (fewer fixed costs per launch) or a higher peak. Writes headroom_<commit>.md / .json
with --out (stdout always), with the command and the limits used.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from cudal2.problems import Problem
from cudal2.stats import SHAPE_CLASSES as CLASSES, shape_class   # the package's copy of ../shared/classes.py
from cudal2.versions import source_commit

ROOT = Path(__file__).resolve().parents[1]
BANDS = ((256, "K <= 256"), (1024, "K <= 1024"), (4096, "K <= 4096"), (None, "K > 4096"))




def band(k: int) -> str:
    return next(name for hi, name in BANDS if hi is None or k <= hi)


def t_min_us(m: int, n: int, k: int, floor_us: float, peak_tflops: float, bw_tbs: float) -> float:
    p = Problem(m, n, k)
    return max(floor_us, p.flops / (peak_tflops * 1e12) * 1e6, p.min_bytes / (bw_tbs * 1e12) * 1e6)


def _geomean(xs):
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def rows(entries: dict, floor_us: float, peak_tflops: float, bw_tbs: float) -> list[dict]:
    out = []
    for key, e in entries.items():
        p = Problem.parse(key)
        best, t = e.get("best_cublas_us"), e.get("time_us")
        if not best or not t:
            continue
        tm = min(t_min_us(p.M, p.N, p.K, floor_us, peak_tflops, bw_tbs), t)
        out.append({"problem": key, "layout": p.layout, "class": shape_class(p.M, p.N, p.K), "band": band(p.K),
                    "best_cublas_us": best, "time_us": t, "t_min_us": tm, "filed": best / t, "ceiling": best / tm,
                    "kernel": e.get("backend") != "cublas"})
    return out


def table(rs: list[dict]) -> list[dict]:
    groups = defaultdict(list)
    for r in rs:
        groups[(r["layout"], r["class"], "all")].append(r)
        groups[(r["layout"], r["class"], r["band"])].append(r)
    order = {c: i for i, c in enumerate(CLASSES)}
    border = {name: i for i, (_, name) in enumerate(BANDS)}
    out = []
    for (layout, cls, b), g in sorted(groups.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99),
                                                                       -1 if kv[0][2] == "all" else border[kv[0][2]])):
        out.append({"layout": layout, "class": cls, "band": b, "shapes": len(g),
                    "kernels": sum(r["kernel"] for r in g),
                    "best_cublas_median_us": statistics.median(r["best_cublas_us"] for r in g),
                    "filed": _geomean([r["filed"] for r in g]), "ceiling": _geomean([r["ceiling"] for r in g])})
    return out


def markdown(t: list[dict], limits: dict) -> str:
    lines = [f"{limits['set']}; limits: floor {limits['floor_us']} µs, peak {limits['peak_tflops']} TFLOPS, "
             f"bandwidth {limits['bw_tbs']} TB/s\n",
             "| layout | class | K | shapes | kernels | best-cublas median µs | filed (geomean) | ceiling (geomean) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in t:
        lines.append(f"| {r['layout']} | {r['class']} | {r['band']} | {r['shapes']} | {r['kernels']} | "
                     f"{r['best_cublas_median_us']:.2f} | {r['filed']:.3f} | {r['ceiling']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--registry", default=str(ROOT / "src/cudal2/registry/index.json"))
    ap.add_argument("--device", default="h200-sm90")
    ap.add_argument("--floor-us", type=float, default=5.0)
    ap.add_argument("--peak-tflops", type=float, default=744.0)
    ap.add_argument("--bw-tbs", type=float, default=4.22)
    ap.add_argument("--grid", action="store_true", help="only the 1000-shape grid's entries (the class targets' set)")
    ap.add_argument("--out", help="write headroom_<commit>.md / .json here")
    a = ap.parse_args(argv)
    if min(a.floor_us, a.peak_tflops, a.bw_tbs) <= 0:
        ap.error("--floor-us, --peak-tflops and --bw-tbs must be > 0")
    idx = json.loads(Path(a.registry).read_text())
    devices = idx.get("devices", {})
    if a.device not in devices:
        ap.error(f"--device {a.device}: the registry holds {', '.join(sorted(devices)) or 'no device'}")
    limits = {"floor_us": a.floor_us, "peak_tflops": a.peak_tflops, "bw_tbs": a.bw_tbs}
    entries = devices[a.device]["entries"]
    if a.grid:
        from cudal2.problems import grid
        keep = {p.text for layout in ("nn", "nt") for p in grid(layout)}
        entries = {k: e for k, e in entries.items() if k in keep}
    rs = rows(entries, **limits)
    t = table(rs)
    md = markdown(t, {**limits, "set": "grid entries" if a.grid else "every entry"})
    print(md, end="")
    if a.out:
        commit = source_commit()
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        cmd = "python3 " + " ".join([str(Path(sys.argv[0]))] + (argv if argv is not None else sys.argv[1:]))
        (out / f"headroom_{commit}.md").write_text(f"# Headroom of the registry ({a.device}, commit {commit})\n\n"
                                                   f"    {cmd}\n\n" + md)
        (out / f"headroom_{commit}.json").write_text(json.dumps(
            {"command": cmd, "commit": commit, "device": a.device, "limits": limits, "table": t, "rows": rs},
            separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
