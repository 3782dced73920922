"""Issue 20's figures from the compares on record, by one command (bench/results/issue20_report.md
quotes it): per set, cudal2.matmul as dispatched against best-cublas on each clock the compares hold;
with --chain, how far past the chain floor (bench/chain_floor.py) ours and cuBLAS finish; for a set
holding the decode shapes, the bandwidth on its HBM-bound ones; per clock, the split by what
dispatch served (a generated kernel, or a cuBLAS call) and what the cuBLAS-served shapes would have
to reach for the set to make its target with the kernel-served ones as they are.

  python3 bench/issue20_table.py \
      --set small-nt=bench/results/h100-sm90/pdl/run156_small_nt_graph_3.json.gz,bench/results/h100-sm90/issue20/run169_small_b_nt_graph.json.gz \
      --set decode=bench/results/h100-sm90/issue20/run168_decode_set_nt.json.gz \
      --chain bench/results/h100-sm90/issue20/run168_chain_floor_h100-sm90_2eee105.json \
      --out bench/results/h100-sm90/issue20

A set is one or more compares of disjoint shapes (halves of a class timed in different runs); a
shape in two of them is refused. The ratio is bench/grid_report.py's "dispatched" one. A row whose
every column spread past compare_measure.DISTURBED's bar in a mode (a disturbed run, re-timed by
compares since 2026-12-07) is counted, and the figure without those rows is given beside it.
Bandwidth: PROTOCOL bytes 2(MK + KN + MN) over the dispatched offline time, at M <= 16 where the
weight (N x K) is at least 100 MB (HBM-bound: past L2), against the compare's copy (peak.bw).
Writes issue20_table.md / .json under --out.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grid_report import MODES, ratios  # noqa: E402  (bench/ is not a package)

from cudal2.cli import compare_measure  # noqa: E402
from cudal2.report import load_json, read_json  # noqa: E402
from cudal2.stats import geomean  # noqa: E402

BANDS = ((0.0, 5.5, "< 5.5 µs"), (5.5, 8.0, "5.5-8 µs"), (8.0, float("inf"), ">= 8 µs"))   # best-cublas offline
HBM_WEIGHT = 100e6       # bytes of N x K past which a decode weight is read from HBM, not L2 (50 MB)


def load_set(paths: list[str]) -> tuple[list[dict], float | None, set]:
    """The rows of a set's compares (disjoint shapes), the last one's copy bandwidth, their cards."""
    rows, seen, bw, cards = [], {}, None, set()
    for p in paths:
        doc = read_json(p)
        cards.add((doc.get("versions") or {}).get("card"))
        for r in doc["rows"]:
            key = (r["shape"], r.get("layout"))
            if key in seen:
                raise ValueError(f"{r['shape']}:{r.get('layout')} is in {seen[key]} and {p}")
            seen[key] = p
            rows.append(r)
        bw = (doc.get("peak") or {}).get("bw") or bw
    return rows, bw, cards


def disturbed(row: dict, mode: str) -> bool:
    """A row whose every column's spread passed the mode's bar (cudal2 compare's re-timing rule)."""
    spreads = [v for k, v in row.items() if k.startswith(f"{mode}_") and k.endswith("_spread") and v is not None]
    return compare_measure.disturbed(spreads, mode) is not None


def clock_table(rows: list[dict]) -> list[dict]:
    out = []
    for mode in MODES:
        r = ratios(rows, mode, None, "dispatched")
        if not r:
            continue
        noisy = {row["shape"] for row in rows if disturbed(row, mode)}
        clean = [v for s, v in r.items() if s not in noisy]
        worst = min(r, key=r.get)
        out.append({"mode": mode, "shapes": len(r), "geomean": geomean(r.values()),
                    "mean": sum(r.values()) / len(r), "worst": r[worst], "worst_shape": worst,
                    "over_1": sum(v > 1.0 for v in r.values()), "disturbed": sorted(noisy),
                    "geomean_undisturbed": geomean(clean) if noisy and clean else None,
                    "worst_undisturbed": min(clean) if noisy and clean else None})
    return out


def by_dispatch(rows: list[dict], target: float | None) -> list[dict]:
    """Per clock: the geomean over the shapes dispatch served with a generated kernel and over those
    it served with a cuBLAS call; `needed`: the geomean the cuBLAS-served shapes would need for the
    whole set to reach `target` with the kernel-served ones unchanged (what a kernel there must do)."""
    via = {r["shape"]: r.get("cudal2_via") == "kernel" for r in rows}
    out = []
    for mode in MODES:
        r = ratios(rows, mode, None, "dispatched")
        if not r:
            continue
        ker = [v for s, v in r.items() if via.get(s)]
        cub = [v for s, v in r.items() if not via.get(s)]
        need = None
        if target and ker and cub:
            need = math.exp((len(r) * math.log(target) - sum(map(math.log, ker))) / len(cub))
        out.append({"mode": mode, "kernel_shapes": len(ker), "kernel": geomean(ker) if ker else None,
                    "cublas_shapes": len(cub), "cublas": geomean(cub) if cub else None, "needed": need})
    return out


def past_chain(rows: list[dict], chain: dict[tuple, float]) -> list[dict]:
    """Per band of best-cublas's offline time: the median µs ours (as dispatched) and cuBLAS finish
    past the chain's time, and the ceiling best-cublas / chain (geomean)."""
    pts = []
    for r in rows:
        c = chain.get((r["M"], r["N"], r["K"]))
        best = r.get("offline_best_cublas_us")
        ours = r.get("offline_cudal2_median_us") or r.get("offline_torch_median_us")
        if c and best and ours:
            pts.append((best, ours, c))
    out = []
    for lo, hi, name in BANDS:
        b = [p for p in pts if lo <= p[0] < hi]
        if b:
            out.append({"band": name, "shapes": len(b), "ours_past_chain_us": statistics.median(o - c for _, o, c in b),
                        "cublas_past_chain_us": statistics.median(x - c for x, _, c in b),
                        "ceiling": geomean(x / c for x, _, c in b), "cudal2": geomean(x / o for x, o, _ in b)})
    return out


def bandwidth(rows: list[dict], bw: float | None) -> dict | None:
    """The HBM-bound decode shapes at M <= 16: TB/s as dispatched (offline) and over the copy's."""
    rs = [r for r in rows if r["M"] <= 16 and 2 * r["N"] * r["K"] >= HBM_WEIGHT]
    if not rs or not bw:
        return None
    tbs, cub = [], []
    for r in rs:
        nbytes = 2 * (r["M"] * r["K"] + r["K"] * r["N"] + r["M"] * r["N"])
        ours = r.get("offline_cudal2_median_us") or r.get("offline_torch_median_us")
        tbs.append(nbytes / ours / 1e6)
        cub.append(nbytes / r["offline_best_cublas_us"] / 1e6)
    frac = [t / (bw / 1e12) for t in tbs]
    return {"shapes": len(rs), "copy_tbs": bw / 1e12, "tbs": (min(tbs), max(tbs)), "cublas_tbs": (min(cub), max(cub)),
            "of_copy": (min(frac), max(frac)), "at_85": sum(f >= 0.85 for f in frac)}


def markdown(result: dict) -> str:
    lines = [f"# Issue 20's figures ({result['card']})", "", "    " + result["command"], "",
             "cudal2.matmul as dispatched vs best-cublas (bench/issue20_table.py says how).", ""]
    for name, s in result["sets"].items():
        lines += [f"## {name}", "", "Compares: " + ", ".join(f"`{p}`" for p in s["compares"]), "",
                  "| clock | shapes | geomean | mean | worst | over 1.00 | disturbed rows (geomean, worst without them) |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for c in s["clocks"]:
            dist = "-" if not c["disturbed"] else \
                f"{', '.join(c['disturbed'])} ({c['geomean_undisturbed']:.3f}, {c['worst_undisturbed']:.3f})"
            lines.append(f"| {c['mode']} | {c['shapes']} | {c['geomean']:.3f} | {c['mean']:.3f} | {c['worst']:.3f} "
                         f"({c['worst_shape']}) | {c['over_1']} | {dist} |")
        if s.get("by_dispatch"):
            f = lambda x: "-" if x is None else f"{x:.3f}"   # noqa: E731
            lines += ["", f"By what dispatch served (target {s['target']:g}: 'needed' is what the cuBLAS-served "
                      "shapes would have to reach, the kernel-served ones as they are):", "",
                      "| clock | kernel shapes | their geomean | cuBLAS shapes | their geomean | needed |",
                      "| --- | --- | --- | --- | --- | --- |"]
            lines += [f"| {b['mode']} | {b['kernel_shapes']} | {f(b['kernel'])} | {b['cublas_shapes']} | {f(b['cublas'])} | "
                      f"{f(b['needed'])} |" for b in s["by_dispatch"]]
        if s.get("past_chain"):
            lines += ["", "Past the chain (offline; median µs over the chain's time, by best-cublas's time):", "",
                      "| band | shapes | ours | cuBLAS | ceiling (best-cublas / chain) | cudal2 |", "| --- | --- | --- | --- | --- | --- |"]
            lines += [f"| {b['band']} | {b['shapes']} | {b['ours_past_chain_us']:.2f} | {b['cublas_past_chain_us']:.2f} | "
                      f"{b['ceiling']:.3f} | {b['cudal2']:.3f} |" for b in s["past_chain"]]
        if s.get("bandwidth"):
            b = s["bandwidth"]
            lines += ["", f"HBM-bound shapes at M <= 16 ({b['shapes']}): {b['tbs'][0]:.2f}-{b['tbs'][1]:.2f} TB/s "
                      f"(cuBLAS {b['cublas_tbs'][0]:.2f}-{b['cublas_tbs'][1]:.2f}), {b['of_copy'][0]:.2f}-{b['of_copy'][1]:.2f} "
                      f"of the {b['copy_tbs']:.2f} TB/s copy; {b['at_85']} at 0.85 or more."]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", action="append", required=True, metavar="NAME=COMPARE[,COMPARE...]")
    ap.add_argument("--chain", action="append", default=[], help="chain_floor.py's JSON of the same card; repeatable")
    ap.add_argument("--target", action="append", default=[], metavar="NAME=X",
                    help="a set's target geomean (issue 20: small 1.20, skinny 1.25, decode 1.20): adds the split by dispatch")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    targets = {}
    for t in a.target:
        name, _, x = t.partition("=")
        try:
            targets[name] = float(x)
        except ValueError:
            raise SystemExit(f"error: --target {t!r}: NAME=X with X a number")
    chain: dict[tuple, float] = {}
    for path in a.chain:
        chain.update({(r["M"], r["N"], r["K"]): r["chain_us"] for r in load_json(path)["rows"] if r["mode"] == "offline"})
    result = {"card": None, "command": "python3 bench/issue20_table.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "sets": {}}
    for spec in a.set:
        name, _, paths = spec.partition("=")
        if not name or not paths:
            raise SystemExit(f"error: --set {spec!r}: NAME=COMPARE[,COMPARE...]")
        try:
            rows, bw, cards = load_set(paths.split(","))
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: --set {name}: {e}")
        result["card"] = result["card"] or ", ".join(sorted(c for c in cards if c))
        result["sets"][name] = {"compares": paths.split(","), "clocks": clock_table(rows),
                                "past_chain": past_chain(rows, chain) if chain else None,
                                "bandwidth": bandwidth(rows, bw), "target": targets.get(name),
                                "by_dispatch": by_dispatch(rows, targets[name]) if name in targets else None}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "issue20_table.json").write_text(json.dumps(result, indent=1) + "\n")
    md = markdown(result)
    (out / "issue20_table.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
