"""Issue 22's target table, filled from the compares on record: one row per set (grid nn, grid nt,
the model set), as cudal2.matmul dispatches, beside the issue's targets; then per class and layout.

  python3 bench/registry_v2_table.py \
      --set grid-nn=bench/results/h200-sm90/grid_search/compare_grid.json.gz \
      --set grid-nt=bench/results/h200-sm90/registry_v2/grid_nt/run67_gridnt_compare.json.gz \
      --set models=bench/results/h200-sm90/registry_v2/models/run68_models_compare.json.gz \
      --verify bench/results/h200-sm90/registry_v2/verify_gpu_c71916b.txt \
      --out bench/results/h200-sm90/registry_v2

No GPU: it reads compare JSONs (`cudal2 compare --json`, bench/grid_baselines.py; gzipped or not),
each one run with the baselines interleaved. A shape's speedup is bench/grid_report.py's
"dispatched" ratio: t_best-cublas / the time of what cudal2.matmul calls there (the filed kernel,
the cuBLASLt call a cuBLAS entry names, else torch.matmul). What each compare covered is said
beside its figures (a compare of part of a set is the figure of that part, not of the set).
Writes registry_v2_table.md and .json under --out.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grid_report import ratios  # noqa: E402  (bench/ is not a package)

from cudal2.stats import SHAPE_CLASSES, geomean, shape_class  # noqa: E402

# The targets (issue 22, "Targets (one H200, PROTOCOL.md)").
TARGETS = {"grid-nn": 1.10, "grid-nt": 1.10, "models": 1.15}
SERVER_TARGET, WORST_TARGET, WIN_SHARE_TARGET = 1.10, 0.97, 0.50


def read_compare(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"error: {path}: no such compare file")
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("cudal2.compare/") or "rows" not in data:
        raise SystemExit(f"error: {path} is not a cudal2 compare JSON (schema cudal2.compare/N with rows)")
    return data


def _kernel(r: dict) -> bool:
    """The shape dispatches to a generated kernel (not a cuBLAS entry, not torch.matmul)."""
    return r.get("cudal2_via", "kernel") == "kernel" and r.get("status_cudal2") == "ok"


def set_figures(rows: list[dict]) -> dict:
    """The issue's columns for one set, and the same per (class, layout)."""
    def figures(rs: list[dict]) -> dict | None:
        if not rs:
            return None
        f = {"shapes": len(rs)}
        for mode in ("offline", "server"):
            best = ratios(rs, mode, None, "dispatched")
            torch = ratios(rs, mode, "torch", "dispatched")
            f[mode] = {"shapes": len(best),
                       "geomean": geomean(best.values()) if best else None,
                       "worst": min(best.values()) if best else None,
                       "worst_vs_torch": min(torch.values()) if torch else None,
                       "worst_vs_torch_shape": min(torch, key=torch.get) if torch else None,
                       # a generated kernel dispatched there and faster than best-cublas in this run
                       "kernel_wins": sum(1 for r in rs if _kernel(r) and best.get(r["shape"], 0) > 1.0)}
        return f

    out = {"all": figures(rows), "classes": {}}
    for c in SHAPE_CLASSES:
        for lay in sorted({r.get("layout", "nn") for r in rows}):
            sel = [r for r in rows if r.get("layout", "nn") == lay and shape_class(r["M"], r["N"], r["K"]) == c]
            if sel:
                out["classes"][f"{c}:{lay}"] = figures(sel)
    return out


def verify_line(path: str | None) -> str | None:
    """The last summary line of a `cudal2 registry verify --gpu --render` log (its ok / bad count)."""
    if not path:
        return None
    lines = [l.strip() for l in Path(path).read_text().splitlines() if l.strip()]
    return next((l for l in reversed(lines) if " ok" in l or "bad" in l), lines[-1] if lines else None)


def _f(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def markdown(sets: dict, verify: str | None, command: str) -> str:
    out = ["# Issue 22's targets, from the compares on record", "", f"    {command}", "",
           "cudal2.matmul as dispatched vs best-cublas (geomean), worst shape vs torch.matmul, shapes a generated",
           "kernel wins, each from one compare run. `bench/registry_v2_table.py`; the sources:", ""]
    for name, s in sets.items():
        v = s["versions"]
        out.append(f"- {name}: `{s['path']}` ({s['figures']['all']['shapes']} shapes; commit {v.get('commit', '?')}, "
                   f"{v.get('card', '?')}; complete: {s['complete']})")
    out += ["", "| set | target offline | offline | server (target 1.10) | worst vs torch.matmul, offline / server "
            "(target 0.97) | generated kernel beats best-cublas, offline (target 50%) |",
            "| --- | --- | --- | --- | --- | --- |"]
    for name, s in sets.items():
        a = s["figures"]["all"]
        off, srv = a["offline"], a["server"]
        share = off["kernel_wins"] / off["shapes"] if off["shapes"] else None
        out.append(f"| {name} | {_f(TARGETS.get(name), '{:.2f}')} | {_f(off['geomean'])} (worst {_f(off['worst'])}) | "
                   f"{_f(srv['geomean'])} | {_f(off['worst_vs_torch'])} ({off['worst_vs_torch_shape']}) / "
                   f"{_f(srv['worst_vs_torch'])} ({srv['worst_vs_torch_shape']}) | "
                   f"{off['kernel_wins']} of {off['shapes']} ({_f(share, '{:.0%}')}) |")
    out += ["", f"`cudal2 registry verify --gpu --render` on the card: {verify or 'no log given'}", "",
            "Per class (../shared/classes.py) and layout: offline geomean / worst vs best-cublas, server geomean, "
            "kernel wins (shapes).", "", "| set | class:layout | offline | server | kernel wins |",
            "| --- | --- | --- | --- | --- |"]
    for name, s in sets.items():
        for key, f in s["figures"]["classes"].items():
            out.append(f"| {name} | {key} | {_f(f['offline']['geomean'])} / {_f(f['offline']['worst'])} | "
                       f"{_f(f['server']['geomean'])} | {f['offline']['kernel_wins']} ({f['shapes']}) |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", required=True, metavar="NAME=COMPARE_JSON",
                    help="a set's compare (grid-nn, grid-nt, models: the names the targets are known by)")
    ap.add_argument("--verify", help="the log of `cudal2 registry verify --gpu --render` on the card")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    sets = {}
    for item in args.set:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            ap.error(f"--set {item!r}: expected NAME=COMPARE_JSON")
        if name in sets:
            ap.error(f"--set {name} given twice")
        data = read_compare(path)
        sets[name] = {"path": path, "versions": data.get("versions", {}), "complete": data.get("complete"),
                      "figures": set_figures(data["rows"])}
    verify = verify_line(args.verify)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "registry_v2_table.json").write_text(json.dumps({"verify": verify, "sets": sets}, indent=1) + "\n")
    cmd = "python3 bench/registry_v2_table.py " + " ".join(
        [f"--set {x}" for x in args.set] + ([f"--verify {args.verify}"] if args.verify else []) + [f"--out {args.out}"])
    md = markdown(sets, verify, cmd)
    (out / "registry_v2_table.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
