"""Issue 19's table from the search stores, no GPU: per shape class and layout, the best kernel of a
family that any search measured on each grid shape, against best-cublas timed in the same
measurement (the search times every candidate beside the baselines: PROTOCOL's same-run ratio).

  python3 bench/family_best.py --stores bench/results/h200-sm90/grid_search/grid_store.db.gz \
      bench/results/h200-sm90/grid_search/grid_nn_leads_store.db.gz --family wgmma --out DIR \
      [--sweeps bench/results/h200-sm90/hopper/SWEEP.csv ...]

Per (class, layout): grid shapes, shapes the family was measured on, geomean / worst / best of its
best ratio per shape, shapes it beat best-cublas on (> 1.0), and the same for the best of every
family (what the registry could file). A store is one of `cudal2 generate`'s SQLite stores (plain or
.gz); only measurements whose status is ok (the checker passed) count. Writes family_best_<family>.md
and .json (with the stores and the command).
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path


def store_ratios(stores: list[str], device: str):
    """(spec, problem, ratio) of every ok measurement on `device` in the `cudal2 generate` stores
    (plain or .db.gz); ratio = best-cublas µs / kernel µs of the same measurement."""
    from cudal2.cli.stores import sqlite_copy          # a committed .db.gz, read from a temp copy
    for s in stores:
        path, tmp = sqlite_copy(s, option="--stores")
        try:
            con = sqlite3.connect(path)
            rows = con.execute("select spec, problem, time_us, best_cublas_us from measurements where "
                               "status = 'ok' and device = ? and time_us > 0 and best_cublas_us > 0", (device,))
            for spec, problem, t, bar in rows:
                yield spec, problem, bar / t
            con.close()
        finally:
            if tmp is not None:
                tmp.cleanup()


def read_stores(read):
    """read() (a reader of --stores, through store_ratios); a store that is missing or not readable
    (sqlite_copy's ValueError) ends the run with its one-line error."""
    try:
        return read()
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


def no_rows(device: str, what: str = "ok measurement"):
    """End a run whose --stores hold nothing of --device (e.g. "NVIDIA H200" for the key h200-sm90)."""
    raise SystemExit(f"error: --stores hold no {what} of --device {device} (a device key such as h200-sm90)")


def best_ratios(stores: list[str], device: str, family: str) -> tuple[dict, dict]:
    """({problem: best ratio of `family`}, {problem: best ratio of any family}) over every ok
    measurement on `device` (store_ratios)."""
    fam, anyf = {}, {}
    for spec, problem, r in store_ratios(stores, device):
        anyf[problem] = max(anyf.get(problem, 0.0), r)
        if f" family={family} " in f" {spec} ":
            fam[problem] = max(fam.get(problem, 0.0), r)
    return fam, anyf


def add_sweeps(paths: list[str], device: str, family: str, fam: dict, anyf: dict) -> None:
    """Fold `bench/hopper_sweep.py` CSVs (rows of one card: its JSON beside it names the card) into
    the same maxima: a row whose check passed and was timed is a measurement like a store's, its
    ratio the sweep's same-run vs_best_cublas."""
    import csv
    for path in paths:
        meta = Path(path).with_suffix(".json")
        card = json.loads(meta.read_text()).get("device") if meta.exists() else None
        if card != device:
            raise SystemExit(f"error: {path}: its JSON ({meta.name}) says card {card!r}, not {device!r}")
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r.get("status") != "ok" or not r.get("vs_best_cublas"):
                    continue
                problem, ratio = f"{r['shape']}:{r['layout']}", float(r["vs_best_cublas"])
                anyf[problem] = max(anyf.get(problem, 0.0), ratio)
                if f" family={family} " in f" {r['spec']} ":
                    fam[problem] = max(fam.get(problem, 0.0), ratio)


def _stats(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    from cudal2.stats import geomean
    return {"n": len(xs), "geomean": round(geomean(xs), 4),
            "worst": round(min(xs), 4), "best": round(max(xs), 4), "won": sum(x > 1.0 for x in xs)}


def table(grid: list[tuple[int, int, int]], fam: dict, anyf: dict) -> dict:
    from cudal2.stats import SHAPE_CLASSES, shape_class    # ../shared/classes.py's rule
    out = {}
    for lay in ("nn", "nt"):
        for cls in SHAPE_CLASSES:
            shapes = [f"{m}x{n}x{k}:{lay}" for m, n, k in grid if shape_class(m, n, k) == cls]
            out[f"{cls}:{lay}"] = {"grid": len(shapes),
                                   "family": _stats([fam[p] for p in shapes if p in fam]),
                                   "any": _stats([anyf[p] for p in shapes if p in anyf])}
    return out


def markdown(t: dict, family: str, stores: list[str], command: str) -> str:
    lines = [f"# Best {family} kernel per grid shape vs best-cublas, from the search stores", "",
             f"`{command}`", "", "Stores: " + ", ".join(f"`{s}`" for s in stores), "",
             f"| class:layout | grid shapes | {family} measured | geomean | worst | won | any family: measured | geomean | worst | won |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, v in t.items():
        f, a = v["family"], v["any"]
        lines.append(f"| {key} | {v['grid']} | {f['n']} | {f.get('geomean', '-')} | {f.get('worst', '-')} | "
                     f"{f.get('won', '-')} | {a['n']} | {a.get('geomean', '-')} | {a.get('worst', '-')} | {a.get('won', '-')} |")
    lines += ["", "A ratio is one search measurement (its kernel and the baselines timed together); the best of "
              "several per shape is biased up by noise, the same way for the family and for any family."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", nargs="+", required=True)
    ap.add_argument("--sweeps", nargs="*", default=[], help="hopper_sweep.py CSVs of the same card to count "
                    "too (e.g. a --pairs run over bench/nn_wgmma_gaps.txt)")
    ap.add_argument("--device", default="h200-sm90")
    ap.add_argument("--family", default="wgmma")
    ap.add_argument("--grid", default="", help="a shape file (cudal2's format; default: the 1000 grid)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from cudal2.problems import grid as grid_problems, read_shape_file
    grid = [(p.M, p.N, p.K) for p in (read_shape_file(args.grid) if args.grid else grid_problems())]
    fam, anyf = read_stores(lambda: best_ratios(args.stores, args.device, args.family))
    if not anyf:
        no_rows(args.device)
    add_sweeps(args.sweeps, args.device, args.family, fam, anyf)
    t = table(grid, fam, anyf)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python3", *sys.argv])
    (out / f"family_best_{args.family}.md").write_text(markdown(t, args.family, args.stores + args.sweeps, command))
    (out / f"family_best_{args.family}.json").write_text(json.dumps({"command": command, "stores": args.stores,
                                                                      "device": args.device, "table": t}, indent=1))
    print(markdown(t, args.family, args.stores, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
