"""How far any kernel could beat best-cublas, per shape and class, by the card's own floors; beside
what cudal2 reaches there (issues 19 and 20: is a missed target out of reach by measurement?).

A GEMM of shape (M, N, K) must at least be launched and wait for a first load, read A and B once,
write C once and do 2MNK flops. Each has a time measured on the card (no GPU here: the files):

  latency  launch_cost.py: the empty kernel over 132 CTAs + the cheapest first load it measured
           (ld.global, cp.async or TMA, each over an empty kernel)
  read     stream_ceiling.py: the fastest of its read-only kernels on the bytes of A and B
  write    stream_ceiling.py: the fastest of its write-only ones (x.zero_() in runs before
           2026-12-05's CUDA writers) on the bytes of C
  compute  2MNK / the card's peak: the larger of the compare's measured one (`peak.flops`) and the
           highest rate any call in the compare reached offline (a peak measured low must not
           put a floor above a time the card ran)

  chain    chain_floor.py (with --chain, where it measured the shape): reading A and B once, then
           writing C, with every SM sharing the bytes: what the four above overlap, measured; the
           read and write floors are capped at it (its kernel moved those bytes in that time)
  tiled    with --tiled, chain_floor.py --panels's tiled chain where it measured the shape: each CTA
           reads its tile's whole A and B panels, then writes its tile (the fastest tile and split):
           a floor for kernels that do not share operand tiles between CTAs (a multicast cluster
           halves one operand's L2 reads), so it is off unless asked for; H100 run 174 found kernels
           faster than it on 13 of 22 shapes, 12 offline (bench/panel_cuda.py), where it is dropped (below)

The floor is the largest of them (they overlap; their sum would overstate it) and the ceiling
t_best-cublas / floor. A chain or tiled time above what cuBLAS or cudal2 ran the shape in is no floor
there: it is dropped for that shape and counted in the table's last column. Between the measured
sizes (8 MiB to 1 GiB) a time is interpolated linearly in bytes, below 8 MiB from the empty kernel's time at 0 bytes (over 132 CTAs where the launch file
has it), and past 1 GiB at 1 GiB's rate: an affine launch + bytes / rate, which under 8 MiB sits
below what any kernel pays (a read waits at least one load's latency). So the floors are generous
and a ceiling is an upper bound by these measurements: a faster read or write kernel than the ones
measured would raise it. Offline floors come from the offline columns, server ones (cold L2, after
an idle gap) from the server columns; the peak is the offline one in both.

  python3 bench/class_ceiling.py \
      --ceiling bench/results/h200-sm90/probe/run72_stream_ceiling_h200-sm90_e1ca355.json \
      --launch bench/results/h200-sm90/probe/run72_launch_cost_h200-sm90_e1ca355.json \
      --set grid-nt=bench/results/h200-sm90/registry_v2/grid_nt/run72_gridnt_compare.json.gz \
      --set decode=bench/results/h200-sm90/registry_v2/models/run68_models_compare_settled.json.gz \
      --only decode=bench/decode_set.txt --set-target decode=1.20 \
      --out bench/results/h200-sm90/ceiling

(--only restricts a set to a --shapes file's shapes, here the model set's compare to issue 20's decode
set; --set-target gives the whole set's target, its row "all".)

cudal2's figure is the compare's, as dispatched (bench/grid_report.py's "dispatched" ratio: the
filed kernel, the cuBLAS call an entry names, else torch.matmul). Writes class_ceiling.md / .json
(every shape's floors, the binding one and its ceiling; .json.gz) under --out.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grid_report import MODES, ratios  # noqa: E402  (bench/ is not a package)

from cudal2.report import load_json, read_json  # noqa: E402
from cudal2.stats import SHAPE_CLASSES, geomean, shape_class  # noqa: E402

# The issues' targets per class over the grid: issue 20 (small, skinny) and issue 19 (the rest).
TARGETS = {"small": 1.20, "skinny": 1.25, "starved": 1.20, "shortK": 1.20, "mid": 1.05, "large": 1.00}
FLOORS = ("latency", "read", "write", "compute", "chain", "tiled")
# The floors timed as whole kernels of the shape itself, which a real GEMM may turn out to beat (the
# other four are rates and sums the compare's own peak caps).
MEASURED_FLOORS = ("chain", "tiled")
LOAD_CASES = ("load: ld.global", "load: cp.async", "load: TMA", "load: TMA + prefetch")


class Card:
    """The card's measured floors for one clock mode (offline or server)."""

    def __init__(self, ceiling: dict, launch: dict | None, mode: str, chain: dict | None = None,
                 tiled: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
        rows = [r for r in ceiling.get("rows", []) if r.get("mode") == mode]
        if not rows:
            raise ValueError(f"the stream ceiling file has no {mode} rows")
        self.empty = float(ceiling["empty_us"])
        first_load, self.load_case = 0.0, None
        if launch:
            cases = {r["case"]: r for r in launch.get("rows", [])}
            col = "offline_us" if mode == "offline" else "server_us"
            if "empty 132x128" not in cases:
                raise ValueError("the launch cost file has no 'empty 132x128' case")
            self.empty = float(cases["empty 132x128"][col])
            loads = [(cases[c][f"{mode}_minus_empty_us"], c) for c in LOAD_CASES if c in cases]
            if loads:
                first_load, self.load_case = min(loads)
        self.latency = self.empty + first_load
        # (bytes, µs) from 0 bytes at the empty kernel's time, sorted by size
        self.read = [(0, self.empty)] + sorted((int(r["bytes"]), float(r["read_us"])) for r in rows)
        self.write = [(0, self.empty)] + sorted((int(r["bytes"]), float(r["write_us"])) for r in rows)
        # (M, N, K) -> the chain's µs in this mode, where chain_floor.py measured the shape
        self.chain = {(r["M"], r["N"], r["K"]): float(r["chain_us"]) for r in (chain or {}).get("rows", [])
                      if r.get("mode") == mode}
        # ... and its tiled chain's, where it measured one and the caller counts it (--tiled)
        self.tiled = {(r["M"], r["N"], r["K"]): float(r["panel_us"]) for r in (chain or {}).get("rows", [])
                      if tiled and r.get("mode") == mode and r.get("panel_us")}

    @staticmethod
    def _at(points: list[tuple[int, float]], nbytes: float) -> float:
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if nbytes <= x1:
                return y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0)
        x, y = points[-1]
        return y * nbytes / x            # past the largest size: its rate

    def floors(self, m: int, n: int, k: int, flops_per_s: float) -> dict[str, float]:
        f = {"latency": self.latency,
             "read": self._at(self.read, 2.0 * (m * k + n * k)),
             "write": self._at(self.write, 2.0 * m * n),
             "compute": 2.0 * m * n * k / flops_per_s * 1e6}
        if (m, n, k) in self.chain:
            # The chain kernel read A and B and wrote C in this time: a read or write floor above it
            # came from a slower reader or writer (H100 run 70's Triton reader at the decode weights'
            # sizes), so neither may exceed it.
            f["chain"] = self.chain[(m, n, k)]
            f["read"], f["write"] = min(f["read"], f["chain"]), min(f["write"], f["chain"])
        if (m, n, k) in self.tiled:
            f["tiled"] = self.tiled[(m, n, k)]
        return f


def peak_flops(doc: dict) -> float:
    """FLOP/s: the compare's measured peak, or the highest rate one of its calls reached offline."""
    rates = [2.0 * r["M"] * r["N"] * r["K"] / (t * 1e-6) for r in doc["rows"]
             for t in (r.get("offline_best_cublas_us"), r.get("offline_cudal2_median_us")) if t]
    peak = max([(doc.get("peak") or {}).get("flops") or 0.0] + rates)
    if not peak:
        raise ValueError("the compare has no measured peak (peak.flops) and no offline time")
    return peak


def shape_rows(doc: dict, card: Card, mode: str) -> list[dict]:
    """Per shape of a compare: floors, the binding one, the ceiling and cudal2's ratio (both vs
    best-cublas, as dispatched)."""
    peak = peak_flops(doc)
    ours = ratios(doc["rows"], mode, None, "dispatched")
    out = []
    for r in doc["rows"]:
        best = r.get(f"{mode}_best_cublas_us")
        if not best or r["shape"] not in ours:
            continue
        f = card.floors(r["M"], r["N"], r["K"], peak)
        # A floor above a time some kernel ran the shape in (cuBLAS's best, or cudal2 as dispatched)
        # is contradicted there: its probe is slower than a real GEMM on that shape, so it bounds
        # nothing. H100 run 174: the tiled chain (its load kind) lost to torch.matmul in the same run on
        # 6 of 22 shapes offline (M 64, N 1024-12288), to cuBLAS's best or cudal2 on 12; the chain to
        # torch.matmul at 64x8192x4096 (27.1 / 25.3 µs).
        fastest = best / max(1.0, ours[r["shape"]])
        beaten = sorted(k for k, v in f.items() if v > fastest and k in MEASURED_FLOORS)
        f = {k: v for k, v in f.items() if k not in beaten}
        bind = max(sorted(f, key=lambda name: name != "chain"), key=f.get)    # a tie: the chain, measured
        out.append({"shape": r["shape"], "class": shape_class(r["M"], r["N"], r["K"]), "best_cublas_us": best,
                    "floors_us": {k: round(v, 3) for k, v in f.items()}, "binding": bind,
                    "beaten": beaten, "ceiling": best / f[bind], "cudal2": ours[r["shape"]]})
    return out


def class_table(rows: list[dict], targets: dict[str, float], set_target: float | None = None) -> list[dict]:
    """Per class: shapes, the geomean ceiling and cudal2's, the target against the ceiling (the row
    "all" against `set_target`, a whole set's target such as the decode set's)."""
    out = []
    for cls in ("all",) + SHAPE_CLASSES:
        rs = [r for r in rows if cls in ("all", r["class"])]
        if not rs:
            continue
        ceil, ours = geomean(r["ceiling"] for r in rs), geomean(r["cudal2"] for r in rs)
        t = set_target if cls == "all" else targets.get(cls)
        out.append({"class": cls, "shapes": len(rs), "ceiling": ceil, "cudal2": ours, "target": t,
                    # the share of the ceiling's gain (log scale) cudal2 has, and the target would need
                    "cudal2_share": _share(ours, ceil), "target_share": _share(t, ceil) if t else None,
                    "binding": dict(Counter(r["binding"] for r in rs).most_common()),
                    "beaten": dict(Counter(b for r in rs for b in r.get("beaten", ())).most_common()),
                    "above_target": sum(r["ceiling"] >= t for r in rs) if t else None})
    return out


def read_shapes(path: str) -> set[str]:
    """`MxNxK:layout` lines of a --shapes file ('#' comments), as compare rows name them (shape, layout)."""
    from cudal2.problems import Problem
    out = set()
    for line in Path(path).read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            p = Problem.parse(text)
            out.add(f"{p.shape}:{p.layout}")
    return out


def _share(x: float, ceil: float) -> float | None:
    """How much of the way from 1.0 to the ceiling x is, on a log scale (1.0: at the ceiling)."""
    return math.log(x) / math.log(ceil) if ceil > 1.0 else None


def _f(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def markdown(result: dict) -> str:
    lines = [f"# Per-class ceilings by the card's floors ({result['card']})", "",
             "    " + result["command"], "",
             f"Floors from `{result['ceiling']}`" + (f" and `{result['launch']}`" if result["launch"] else "")
             + "".join(f" and `{c}`" for c in result.get("chain") or [])
             + " (bench/class_ceiling.py says how). Ceiling = best-cublas / the largest floor, geomean per "
             "class; cudal2 as dispatched by the compare; share = log(x) / log(ceiling): how much of the "
             "possible gain a figure is (above 1: the target is past the ceiling).", ""]
    for mode, lat in result["latency"].items():
        lines.append(f"- latency floor, {mode}: {lat['latency_us']:.3f} µs (the empty kernel over 132 CTAs "
                     f"{lat['empty_us']:.3f} µs + the cheapest first load: {lat['first_load'] or 'none measured'})")
    lines.append("")
    for name, s in result["sets"].items():
        lines += [f"## {name}: `{s['compare']}` ({s['card']}, commit {s['commit']})", ""]
        if s.get("only"):
            lines += [f"Only the shapes of `{s['only']}`" + (f" ({s['missing']} of them not in the compare)" if s["missing"] else "")
                      + ".", ""]
        for mode, table in s["modes"].items():
            lines += [f"{mode}:", "",
                      "| class | shapes | target | ceiling | cudal2 | cudal2 share | target share | shapes with ceiling >= target | binding floor | floors beaten by a kernel (dropped) |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            for c in table:
                lines.append(f"| {c['class']} | {c['shapes']} | {_f(c['target'], '{:.2f}')} | {_f(c['ceiling'])} | "
                             f"{_f(c['cudal2'])} | {_f(c['cudal2_share'], '{:.2f}')} | {_f(c['target_share'], '{:.2f}')} | "
                             f"{_f(c['above_target'], '{}')} | "
                             + ", ".join(f"{k} {v}" for k, v in c["binding"].items()) + " | "
                             + (", ".join(f"{k} {v}" for k, v in c.get("beaten", {}).items()) or "-") + " |")
            lines.append("")
    return "\n".join(lines)


def _pairs(opts: list[str], flag: str) -> dict[str, str]:
    out = {}
    for o in opts:
        k, _, v = o.partition("=")
        if not k or not v:
            raise SystemExit(f"error: {flag} {o!r}: NAME=VALUE")
        out[k] = v
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ceiling", required=True, help="stream_ceiling.py's JSON (read / write rates, the empty kernel)")
    ap.add_argument("--launch", help="launch_cost.py's JSON (the empty kernel over 132 CTAs, the first loads)")
    ap.add_argument("--chain", action="append", default=[],
                    help="chain_floor.py's JSON (read A and B, then write C, per shape) of the same card; repeatable "
                         "(a run cut by its time limit and the run over the shapes it left)")
    ap.add_argument("--tiled", action="store_true",
                    help="count the --chain files' tiled chain (chain_floor.py --panels) as a floor: a floor only "
                         "for kernels that do not share operand tiles between CTAs")
    ap.add_argument("--set", action="append", required=True, metavar="NAME=COMPARE",
                    help="a compare JSON (gzipped or not) of the same card; repeatable")
    ap.add_argument("--only", action="append", default=[], metavar="NAME=SHAPES",
                    help="restrict set NAME to the shapes of a --shapes file (MxNxK:layout lines)")
    ap.add_argument("--set-target", action="append", default=[], metavar="NAME=X",
                    help="a whole set's target (its row 'all'), e.g. the decode set's 1.20")
    ap.add_argument("--modes", default="offline,server")
    ap.add_argument("--target", action="append", default=[], metavar="CLASS=X", help="override a class's target")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    targets = dict(TARGETS)
    for t in a.target:
        cls, _, x = t.partition("=")
        if cls not in SHAPE_CLASSES or not x:
            raise SystemExit(f"error: --target {t!r}: CLASS=X with CLASS one of {', '.join(SHAPE_CLASSES)}")
        targets[cls] = float(x)
    only = _pairs(a.only, "--only")
    set_targets = {k: float(v) for k, v in _pairs(a.set_target, "--set-target").items()}
    names = {s.partition("=")[0] for s in a.set}
    for k in set(only) | set(set_targets):
        if k not in names:
            raise SystemExit(f"error: --only / --set-target name {k!r} is not a --set ({', '.join(sorted(names))})")
    ceiling = load_json(a.ceiling)
    launch = load_json(a.launch) if a.launch else None
    chain = None
    for path in a.chain:                     # one card's runs: their rows together
        doc = load_json(path)
        if chain and doc.get("card") != chain.get("card"):
            raise SystemExit(f"error: --chain {path} was run on {doc.get('card')}, {a.chain[0]} on {chain.get('card')}")
        chain = {"card": doc.get("card"), "rows": (chain or {}).get("rows", []) + doc.get("rows", [])}
    card_key = ceiling.get("card") or "?"
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        raise SystemExit(f"error: --modes {a.modes!r}: a comma-separated list of {', '.join(MODES)}")
    result = {"card": card_key, "ceiling": a.ceiling, "launch": a.launch, "chain": a.chain, "targets": targets,
              "command": "python3 bench/class_ceiling.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "latency": {}, "sets": {}, "shapes": {}}
    for spec in a.set:
        name, _, path = spec.partition("=")
        if not path:
            raise SystemExit(f"error: --set {spec!r}: NAME=COMPARE")
        doc = read_json(path)
        if name in only:
            keep = read_shapes(only[name])
            doc = {**doc, "rows": [r for r in doc["rows"] if f"{r['shape']}:{r.get('layout', 'nn')}" in keep]}
            missing = len(keep) - len(doc["rows"])
            if not doc["rows"]:
                raise SystemExit(f"error: none of the {len(keep)} shapes of {only[name]} is in {path}")
        v = doc.get("versions") or {}
        floors_on = {d.get("card") for d in (ceiling, launch, chain) if d and d.get("card")}
        if v.get("card") and floors_on - {v["card"]}:
            raise SystemExit(f"error: {path} was run on {v['card']}, the floors on {', '.join(sorted(floors_on))}: "
                             "give one card's files")
        s = {"compare": path, "card": v.get("card"), "commit": v.get("commit"), "modes": {},
             "only": only.get(name), "missing": missing if name in only else None}
        for mode in modes:
            card = Card(ceiling, launch, mode, chain, a.tiled)
            rows = shape_rows(doc, card, mode)
            s["modes"][mode] = class_table(rows, targets, set_targets.get(name))
            result["latency"][mode] = {"empty_us": card.empty, "first_load": card.load_case,
                                       "latency_us": round(card.latency, 3)}
            result["shapes"][f"{name}:{mode}"] = rows
        result["sets"][name] = s
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    # every shape's floors for each set and mode: ~1.3 MB as text, so gzipped (cudal2.report.load_json reads it)
    (out / "class_ceiling.json.gz").write_bytes(gzip.compress((json.dumps(result, indent=1) + "\n").encode(), mtime=0))
    (out / "class_ceiling.md").write_text(markdown(result) + "\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
