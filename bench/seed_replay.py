"""Replays a seed rule over hopper_sweep timings: per shape, the best of the specs each rule would
have seeded, where the sweep timed all of them. No GPU: it reads what a card measured.

The rules compared are `model:N`'s wgmma seeds before and after 2026-12-07: from 1 GFLOP the first n
of the wave model's cooperative list before, and now `rl.staged.model_seeds` (the cooperative list's
best, then the half-wave and ping-pong specs); under 1 GFLOP both give the same list. A sweep run with
`--n-cands N` timed the cooperative list, the ping-pong pair, the half-wave specs (since run 167)
and, with --lite, the lite ones, so a shape counts where one sweep timed every spec of both lists
(the model may have changed since a sweep: a spec it did not time leaves the shape out, counted).
The card is rebuilt from the sweep's JSON (its cluster counts decide the lists) and --sm-count.

The figure is the seed list's best, not a search's result: the search goes on from its seeds.

    python3 bench/seed_replay.py bench/results/h100-sm90/hopper/run163_ring_classes_3089a07.csv.gz \\
        [more CSVs, each beside its .json] --n 4 [--json out.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path


def read_sweep(path: Path) -> tuple[dict, list[dict]]:
    """A sweep CSV (plain or .gz) and the JSON beside it (same stem)."""
    stem = path.name.removesuffix(".gz").removesuffix(".csv")
    meta_path = path.with_name(stem + ".json")
    if not meta_path.is_file():
        raise SystemExit(f"{path}: no {meta_path.name} beside it (the sweep's card is read from there)")
    from cudal2.report import read_rows_csv
    return json.loads(meta_path.read_text()), read_rows_csv(path)


def sweep_device(meta: dict, sm_count: int):
    from cudal2.device import DeviceInfo
    cc = meta.get("cluster_ctas")
    return dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=sm_count,
                               cluster_ctas=tuple((int(a), int(b)) for a, b in cc) if cc else None)


def rules(problem, dev, n: int) -> tuple[list[str], list[str]]:
    """(model:N's wgmma seeds before 2026-12-07, `model_seeds`' now) as spec texts. Before: the
    first n of `candidates`, lite ones in place of the last quarter under 1 GFLOP (as now), so only
    the cooperative list's first n from 1 GFLOP."""
    from cudal2.rl.staged import lite_seed_count, model_seeds
    from cudal2.tiles import candidate_groups
    lite = lite_seed_count(n, problem)
    g = candidate_groups(problem, dev, n, lite=lite)
    lites = g["lite"][:lite]
    before = g["cooperative"][:n - len(lites)] + lites
    return [s.text for s in before], [s.text for s in model_seeds(n, problem, dev, ("cuda",))]


def replay(sweeps: list[tuple[dict, list[dict]]], n: int, sm_count: int) -> dict:
    """Each shape from the first sweep (in the order given) that timed every spec of both lists:
    the two bests then come from one run, as PROTOCOL's ratios do."""
    from cudal2.problems import Problem
    done: dict[tuple, dict] = {}
    same, seen = set(), set()
    for meta, rows in sweeps:
        dev = sweep_device(meta, sm_count)
        by_shape: dict[tuple, list[dict]] = {}
        for r in rows:
            by_shape.setdefault((r["shape"], r["layout"]), []).append(r)
        for key, rs in by_shape.items():
            seen.add(key)
            if key in done or key in same:
                continue
            old, new = rules(Problem.parse(f"{key[0]}:{key[1]}"), dev, n)
            if old == new:
                same.add(key)
                continue
            timed = {r["spec"]: (float(r["us"]) if r["status"] == "ok" and r["us"] else math.inf) for r in rs}
            if any(t not in timed for t in old + new):
                continue
            b_old, b_new = min(timed[t] for t in old), min(timed[t] for t in new)
            done[key] = {"shape": key[0], "layout": key[1], "class": rs[0]["class"],
                         "best_cublas_us": float(rs[0]["best_cublas_us"]), "old_us": b_old, "new_us": b_new,
                         "new_spec": min(new, key=timed.get), "sweep": meta.get("command", "")}
    return {"shapes": list(done.values()),
            "left_out": {"same list": len(same), "a spec of either list not timed": len(seen - same - set(done))}}


def summary(shapes: list[dict]) -> dict:
    """Per class/layout: shapes, geomean of old / new (the new list's best, > 1 faster), of each list's
    best vs best-cublas, the worst old / new, and how many the new list made faster / slower."""
    groups: dict[str, list[dict]] = {}
    for s in shapes:
        groups.setdefault(f"{s['class']}/{s['layout']}", []).append(s)
    groups["all"] = shapes

    from cudal2.stats import geomean

    def gm(xs):                 # a spec that failed everywhere is inf: left out
        xs = [x for x in xs if 0 < x < math.inf]
        return round(geomean(xs), 4) if xs else None
    return {g: {"shapes": len(ss), "new_vs_old": gm([s["old_us"] / s["new_us"] for s in ss]),
                "worst": round(min(s["old_us"] / s["new_us"] for s in ss), 4),
                "old_vs_best_cublas": gm([s["best_cublas_us"] / s["old_us"] for s in ss]),
                "new_vs_best_cublas": gm([s["best_cublas_us"] / s["new_us"] for s in ss]),
                "faster": sum(s["new_us"] < s["old_us"] for s in ss),
                "slower": sum(s["new_us"] > s["old_us"] for s in ss)}
            for g, ss in sorted(groups.items()) if ss}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", type=Path, help="hopper_sweep CSVs (.csv or .csv.gz), each beside its JSON")
    ap.add_argument("--n", type=int, default=4, help="seeds per rule (a sweep's --n-cands at least)")
    ap.add_argument("--sm-count", type=int, default=132, help="the sweep card's SM count (H100 SXM, H200: 132)")
    ap.add_argument("--json", type=Path, help="write the shapes and the summary here")
    a = ap.parse_args(argv)
    if a.n < 1:
        raise SystemExit("--n must be >= 1")
    res = replay([read_sweep(p) for p in a.csv], a.n, a.sm_count)
    res["summary"] = summary(res["shapes"])
    res["command"] = " ".join(["python3", "bench/seed_replay.py"] + [str(x) for x in (argv or sys.argv[1:])])
    print(f"left out: {res['left_out']}")
    for g, s in res["summary"].items():
        print(f"{g:14s} {s['shapes']:4d} shapes  new/old {s['new_vs_old']}x (worst {s['worst']}x, "
              f"{s['faster']} faster, {s['slower']} slower)  vs best-cublas {s['old_vs_best_cublas']} -> "
              f"{s['new_vs_best_cublas']}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
