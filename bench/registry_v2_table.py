"""Issue 22's target table, filled from the compares on record: one row per set (grid nn, grid nt,
the model set), as cudal2.matmul dispatches, beside the issue's targets; then per class and layout.

  python3 bench/registry_v2_table.py \
      --set grid-nn=bench/results/h200-sm90/grid_search/compare_grid.json.gz \
      --set grid-nt=bench/results/h200-sm90/registry_v2/grid_nt/run72_gridnt_compare.json.gz \
      --set models=bench/results/h200-sm90/registry_v2/models/run68_models_compare.json.gz \
      --verify bench/results/h200-sm90/registry_v2/verify_gpu_c71916b.txt \
      --index src/cudal2/registry/index.json --out bench/results/h200-sm90/registry_v2

No GPU: it reads compare JSONs (`cudal2 compare --json`, bench/grid_baselines.py; gzipped or not),
each one run with the baselines interleaved. A shape's speedup is bench/grid_report.py's
"dispatched" ratio: t_best-cublas / the time of what cudal2.matmul calls there (the filed kernel,
the cuBLASLt call a cuBLAS entry names, else torch.matmul). What each compare covered is said
beside its figures (a compare of part of a set is the figure of that part, not of the set).

Which kernel won (backend, family): a compare row names the spec it timed (`cudal2_spec`, compares
from 2026-12-05 on); an older row is attributed through --index, the registry index the compare
dispatched from or a later one: the entry at the row's shape and layout if it is a kernel, or the
spec a server or offline guard re-filed it from (`times.best_kernel_spec` of a cuBLAS entry whose
`times.refiled` says server or offline). An entry filed after the compare's last run is not attributed (it
may be another kernel than the one timed); such rows are counted as "unattributed". A compare
without run stamps (one `cudal2 compare` run) is attributed by the index as it is, and says so.
Writes registry_v2_table.md and .json under --out.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grid_report import ratios  # noqa: E402  (bench/ is not a package)

from cudal2.report import load_json  # noqa: E402
from cudal2.stats import SHAPE_CLASSES, geomean, shape_class  # noqa: E402

# The targets (issue 22, "Targets (one H200, PROTOCOL.md)").
TARGETS = {"grid-nn": 1.10, "grid-nt": 1.10, "models": 1.15}
SERVER_TARGET, WORST_TARGET, WIN_SHARE_TARGET = 1.10, 0.97, 0.50


def read_compare(path: str) -> dict:
    if not Path(path).is_file():
        raise SystemExit(f"error: {path}: no such compare file")
    data = load_json(path)
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("cudal2.compare/") or "rows" not in data:
        raise SystemExit(f"error: {path} is not a cudal2 compare JSON (schema cudal2.compare/N with rows)")
    return data


def _kernel(r: dict) -> bool:
    """The shape dispatches to a generated kernel (not a cuBLAS entry, not torch.matmul)."""
    return r.get("cudal2_via", "kernel") == "kernel" and r.get("status_cudal2") == "ok"


def read_index(path: str | None, device_key: str) -> dict:
    """problem key -> entry dict of a registry index.json for one device ({} without a path)."""
    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"error: {path}: no such registry index")
    data = json.loads(p.read_text())
    if not isinstance(data, dict) or data.get("format") != "cudal2-registry":
        raise SystemExit(f"error: {path} is not a cudal2 registry index (format cudal2-registry)")
    return data.get("devices", {}).get(device_key, {}).get("entries", {})


def stale_count(data: dict, index: str | None, key: str) -> int | None:
    """How many of the compare's rows no longer time what dispatch runs by `index`
    (cudal2.compare_rows.stale_rows, with the cuBLASLt version the compare recorded): their figure is
    of a call the registry has since replaced, so the set's figure is partly of an older registry.
    None without an index."""
    if not index:
        return None
    from cudal2.compare_rows import first_run_ts, stale_rows
    from cudal2.registry import Registry
    entries = {e.problem: e for e in Registry.load(index).all(key)}
    lt = (data.get("versions") or {}).get("cublasLt")
    return len(stale_rows(data["rows"], entries, lt, first_run_ts(data.get("runs"))))


def _last_run(data: dict) -> float | None:
    """The compare's last run as a POSIX time (None where the file does not say: a one-run compare
    of `cudal2 compare` carries no run stamps, and its peak's `measured_at` may be a cached peak's)."""
    from datetime import datetime
    stamps = [r.get("ts") for r in data.get("runs") or [] if r.get("ts")]
    if not stamps:
        return None
    return max(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in stamps)


def attribute(rows: list[dict], index: dict, last_run: float | None) -> dict[str, str]:
    """shape:layout -> "backend/family" of the kernel each kernel-dispatched row timed, or
    "unattributed" (see the module's doc for the rule)."""
    out = {}
    for r in rows:
        if not _kernel(r):
            continue
        key = f"{r['shape']}:{r.get('layout', 'nn')}"
        spec = r.get("cudal2_spec")
        if not spec:
            e = index.get(key)
            when = r.get("ts", last_run)          # the row's own time where it has one
            if e is not None and (when is None or float(e.get("ts") or 0) <= float(when)):
                times = e.get("times") or {}
                if e.get("backend") != "cublas":
                    spec = e.get("spec")
                elif str(times.get("refiled", "")).startswith(("server", "offline")):
                    spec = times.get("best_kernel_spec")
        words = dict(w.split("=", 1) for w in str(spec or "").split() if "=" in w)
        out[key] = f"{words['backend']}/{words['family']}" if {"backend", "family"} <= set(words) \
            else "unattributed"
    return out


def set_figures(rows: list[dict], kinds: dict[str, str] | None = None) -> dict:
    """The issue's columns for one set, and the same per (class, layout). `kinds`: attribute()'s
    backend/family per kernel-dispatched row (wins are counted by it where given)."""
    kinds = kinds or {}

    def figures(rs: list[dict]) -> dict | None:
        if not rs:
            return None
        f = {"shapes": len(rs)}
        for mode in ("offline", "server", "graph"):     # graph: a compare with --mode ...,graph
            best = ratios(rs, mode, None, "dispatched")
            torch = ratios(rs, mode, "torch", "dispatched")
            # a generated kernel dispatched there and faster than best-cublas in this run
            won = [r for r in rs if _kernel(r) and best.get(r["shape"], 0) > 1.0]
            served = [r for r in rs if _kernel(r) and r["shape"] in best]
            f[mode] = {"shapes": len(best),
                       "geomean": geomean(best.values()) if best else None,
                       "mean": sum(best.values()) / len(best) if best else None,
                       "worst": min(best.values()) if best else None,
                       "worst_shape": min(best, key=best.get) if best else None,
                       "geomean_vs_torch": geomean(torch.values()) if torch else None,
                       "mean_vs_torch": sum(torch.values()) / len(torch) if torch else None,
                       "worst_vs_torch": min(torch.values()) if torch else None,
                       "worst_vs_torch_shape": min(torch, key=torch.get) if torch else None,
                       "kernel_wins": len(won),
                       "kernel_served": len(served),
                       "wins_by_kind": _count(won, kinds),
                       "served_by_kind": _count(served, kinds)}
        return f

    out = {"all": figures(rows), "classes": {}}
    for c in SHAPE_CLASSES:
        for lay in sorted({r.get("layout", "nn") for r in rows}):
            sel = [r for r in rows if r.get("layout", "nn") == lay and shape_class(r["M"], r["N"], r["K"]) == c]
            if sel:
                out["classes"][f"{c}:{lay}"] = figures(sel)
    return out


def _count(rs: list[dict], kinds: dict[str, str]) -> dict[str, int]:
    c: dict[str, int] = {}
    for r in rs:
        k = kinds.get(f"{r['shape']}:{r.get('layout', 'nn')}", "unattributed")
        c[k] = c.get(k, 0) + 1
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


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
                   f"{v.get('card', '?')}; complete: {s['complete']}; kernels known by: {s['attributed_by']}"
                   + ("" if s.get("stale") is None else
                      f"; **{s['stale']} rows stale**: they timed a call the index has since replaced"
                      if s["stale"] else "; no row stale against the index") + ")")
    out += ["", "| set | target offline | offline | server (target 1.10) | graph (no event between calls) | worst vs "
            "torch.matmul, offline / server (target 0.97) | generated kernel beats best-cublas, offline (target 50%) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, s in sets.items():
        a = s["figures"]["all"]
        off, srv, gr = a["offline"], a["server"], a["graph"]
        share = off["kernel_wins"] / off["shapes"] if off["shapes"] else None
        out.append(f"| {name} | {_f(TARGETS.get(name), '{:.2f}')} | {_f(off['geomean'])} (worst {_f(off['worst'])}) | "
                   f"{_f(srv['geomean'])} | {_f(gr['geomean'])} | {_f(off['worst_vs_torch'])} "
                   f"({off['worst_vs_torch_shape']}) / {_f(srv['worst_vs_torch'])} ({srv['worst_vs_torch_shape']}) | "
                   f"{off['kernel_wins']} of {off['shapes']} ({_f(share, '{:.0%}')}) |")
    out += ["", f"`cudal2 registry verify --gpu --render` on the card: {verify or 'no log given'}", "",
            "Per class (../shared/classes.py) and layout, cudal2 as dispatched: geomean / mean / worst vs "
            "best-cublas and vs torch.matmul, offline and server; kernel wins of the shapes.", "",
            "| set | class:layout | shapes | offline vs best-cublas | offline vs torch | server vs best-cublas "
            "| server vs torch | graph vs best-cublas | kernel wins |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def gmw(m: dict, vs: str = "") -> str:
        return " / ".join(_f(m.get(k + vs)) for k in ("geomean", "mean")) + " / " + _f(m.get("worst" + vs))

    for name, s in sets.items():
        for key, f in [("all", s["figures"]["all"])] + list(s["figures"]["classes"].items()):
            off, srv, gr = f["offline"], f["server"], f["graph"]
            out.append(f"| {name} | {key} | {f['shapes']} | {gmw(off)} | {gmw(off, '_vs_torch')} | {gmw(srv)} | "
                       f"{gmw(srv, '_vs_torch')} | {gmw(gr)} | {off['kernel_wins']} |")
    out += ["", "Shapes a generated kernel won offline (beat best-cublas in the run), by backend / family, of the "
            "shapes it was dispatched at; how each row's kernel was known: the module's doc.", "",
            "| set | class:layout | won | dispatched to a kernel |", "| --- | --- | --- | --- |"]

    def kinds(c: dict) -> str:
        return ", ".join(f"{k} {n}" for k, n in c.items()) or "-"

    for name, s in sets.items():
        for key, f in [("all", s["figures"]["all"])] + list(s["figures"]["classes"].items()):
            off = f["offline"]
            if off["kernel_served"]:
                out.append(f"| {name} | {key} | {off['kernel_wins']}: {kinds(off['wins_by_kind'])} | "
                           f"{off['kernel_served']}: {kinds(off['served_by_kind'])} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", required=True, metavar="NAME=COMPARE_JSON",
                    help="a set's compare (grid-nn, grid-nt, models: the names the targets are known by)")
    ap.add_argument("--verify", help="the log of `cudal2 registry verify --gpu --render` on the card")
    ap.add_argument("--index", help="a registry index.json to attribute older compare rows' kernels by "
                    "(the one the compares dispatched from, or a later one: see the module's doc)")
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
        versions = data.get("versions", {})
        key = versions.get("device_key") or data.get("peak", {}).get("device", "")
        last = _last_run(data)
        kinds = attribute(data["rows"], read_index(args.index, key), last)
        how = "the rows' cudal2_spec" if any(r.get("cudal2_spec") for r in data["rows"]) else \
            ("no index given" if not args.index else
             f"the index, entries filed by the compare's last run" if last is not None else
             "the index as it is (the compare has no run stamps)")
        sets[name] = {"path": path, "versions": versions, "complete": data.get("complete"),
                      "attributed_by": how, "figures": set_figures(data["rows"], kinds),
                      "stale": stale_count(data, args.index, key)}
    verify = verify_line(args.verify)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "registry_v2_table.json").write_text(json.dumps({"verify": verify, "sets": sets}, indent=1) + "\n")
    cmd = "python3 bench/registry_v2_table.py " + " ".join(
        [f"--set {x}" for x in args.set] + ([f"--verify {args.verify}"] if args.verify else [])
        + ([f"--index {args.index}"] if args.index else []) + [f"--out {args.out}"])
    md = markdown(sets, verify, cmd)
    (out / "registry_v2_table.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
