"""Issue 7's report: the grid search's outcome, from its store, registry and the grid compare.

  python3 bench/grid_report.py --store run/grid.db --registry run/registry \
      --compare run/compare/compare_grid.json --out bench/results/h200-sm90/grid_search

The compare may be any set's (`cudal2 compare --json` over the model set, grid nt): the report
covers the compare's problems (shape and layout) of the store and registry, nothing else.

No GPU: it reads what the device runs wrote (bench/grid_search.sh). Writes to --out:
  search_log.csv   one row per searched shape: evaluations (screen + full), failures by reason,
                   evaluator seconds per phase, wall seconds, the screened and the fully checked
                   winner, its speedup in the search, what was filed, whether the winner was one
                   of the fixed-list seeds or a policy proposal
  report.json      the summaries below, machine-readable
  report.md        the same as tables (the README quotes it)
  search_vs_cublas.png  per shape: the search's best kernel / best-cublas against GFLOP

Speedups come from the compare run only (one run, baselines interleaved). A shape whose entry
says cuBLAS has no cudal2 time there; it is counted two ways:
  counted     as 1.00x of best-cublas (the issue's rule: dispatch "uses cuBLAS" there), and
              against another baseline as t_baseline / t_best-cublas;
  dispatched  at what cudal2.matmul really calls there: the cuBLASLt call timed as the row's
              cudal2 column (`cudal2_via` cublaslt-*, src/cudal2/lt_dispatch.py; compares run
              from 2026-12-03's second session on), else torch.matmul's measured time.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import Counter
from pathlib import Path

from cudal2.stats import CLASSES

MODES = {"offline": "median_us", "server": "mean_us", "graph": "median_us"}   # graph: CUDA-graph replays


def ratios(rows: list[dict], mode: str, baseline: str | None, how: str) -> dict[str, float]:
    """shape -> t_baseline / t_cudal2-dispatch (baseline None: best-cublas)."""
    key = MODES[mode]
    out = {}
    for r in rows:
        best = r.get(f"{mode}_best_cublas_us")
        base = best if baseline is None else r.get(f"{mode}_{baseline}_{key}")
        if not best or not base:
            continue
        t = r.get(f"{mode}_cudal2_{key}")
        via_cublas = str(r.get("cudal2_via", "kernel")).startswith("cublas")
        if t is None or (via_cublas and how == "counted"):
            # A cuBLAS entry: counted at best-cublas; dispatched at the cuBLAS call timed as
            # cudal2's column (lt_dispatch), else at torch.matmul's time (what dispatch calls there).
            t = best if how == "counted" else (t or r.get(f"{mode}_torch_{key}"))
        if t:
            out[r["shape"]] = base / t
    return out


def by_class(vals: dict[str, float], gflop: dict[str, float]) -> dict:
    """cudal2.stats' summary (geomean, mean, worst ...) over all shapes and per work class."""
    from cudal2.stats import summarize_by_class
    return {c: (v.to_dict() if v else None)
            for c, v in summarize_by_class(vals, {k: g * 1e9 for k, g in gflop.items()}).items()}


def search_log(store_path: str, device: str) -> list[dict]:
    from cudal2.device import DeviceInfo
    from cudal2.problems import Problem
    from cudal2.rl.staged import parse_seed_list, seed_specs
    from cudal2.stats import flop_class
    from cudal2.store import Store
    with Store(store_path) as st:
        shapes = st.shapes(device)
        runs = st.runs()
    rows = []
    rankers = {}   # a cost:N run's seeds need its cost model (the path its config recorded)
    for text, o in shapes.items():
        p = Problem.parse(text)
        cfg = next(r["config"] for r in runs if r["id"] == o["run_id"])
        dev = DeviceInfo.from_dict(cfg["device_info"])
        backends = ("triton", "cuda") if cfg["backend"] == "both" else (cfg["backend"],)
        kind, _ = parse_seed_list(cfg.get("seed_list", "fixed:8"))
        ranker = None
        if kind == "cost":
            from cudal2.rl.costmodel import CostModel
            path = cfg["cost_model"]
            ranker = rankers[path] = rankers.get(path) or CostModel.load(path)
        seeds = {s.text for s in seed_specs(o["seeded"], p, dev, backends, kind, ranker)}
        w = o.get("winner_spec")
        rows.append({
            "problem": p.text, "shape": p.shape, "layout": p.layout,
            "M": p.M, "N": p.N, "K": p.K, "gflop": p.flops / 1e9, "class": flop_class(p.flops),
            "evaluations": o["evaluations"], "full_evaluations": o["full_evaluations"],
            "failures": json.dumps({**o["failures_screen"], **{f"full {k}": v for k, v in o["failures_full"].items()}}),
            "evaluator_s": o["evaluator_s"], **{f"{k}_s": v for k, v in o["phase_s"].items()}, "wall_s": o["wall_s"],
            "screen_spec": o.get("screen_spec"), "screen_speedup": o.get("screen_speedup"),
            "winner_spec": w, "winner_us": o.get("winner_us"), "best_cublas_us": o.get("best_cublas_us"),
            "search_speedup": o.get("full_speedup"), "filed": o["filed"],
            "winner_from": None if not w else "seed" if w in seeds else "policy",
            "winner_family": w.split()[1].split("=")[1] if w else None, "run_id": o["run_id"]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--registry", required=True)
    ap.add_argument("--compare", help="compare_grid.json of bench/grid_baselines.py --registry (or cudal2 "
                    "compare --json); without it, only the search's own view of --shapes/--layout")
    ap.add_argument("--shapes", help="without --compare: the set (grid | FILE | MxNxK,...)")
    ap.add_argument("--layout", default="nn", help="without --compare: the set's layout")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="h200-sm90")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.compare is None:
        if not args.shapes:
            ap.error("give --compare, or --shapes (and --layout) for the search's own view")
        return search_only(args, out)

    cmp = json.loads(Path(args.compare).read_text())
    rows = cmp["rows"]
    # One store holds every set (grid nn, grid nt, the model set): the report covers the compare's
    # problems (shape and layout) and nothing else.
    compared = {f"{r['shape']}:{r.get('layout', 'nn')}" for r in rows}
    log = [r for r in search_log(args.store, args.device) if r["problem"] in compared]
    if not log:
        print(f"error: {args.store} has no finished shapes of {args.compare} on {args.device}", file=sys.stderr)
        return 2
    with (out / "search_log.csv").open("w", newline="") as f:
        cols = list(dict.fromkeys(k for r in log for k in r))
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(log)

    gflop = {r["shape"]: r["gflop"] for r in rows}
    names = [n for n in cmp["config"]["baselines"] if any(r.get(f"offline_{n}_median_us") for r in rows)]
    idx = json.loads((Path(args.registry) / "index.json").read_text())
    entries = {k: e for k, e in idx["devices"][args.device]["entries"].items() if e["problem"] in compared}
    rep: dict = {"device": args.device, "layouts": sorted({r.get("layout", "nn") for r in rows}),
                 "compare_config": cmp["config"], "peak": cmp["peak"],
                 "compare_wall_s": cmp.get("wall_s_total"), "shapes_compared": len(rows),
                 "shapes_searched": len(log), "speedups": {}}
    for mode in MODES:
        for how in ("counted", "dispatched"):
            for b in [None, *names]:
                label = f"{mode} {how} vs {b or 'best-cublas'}"
                rep["speedups"][label] = by_class(ratios(rows, mode, b, how), gflop)
    # The six classes of ../shared/classes.py (cudal2.stats.shape_class), which every target uses.
    dims = {r["shape"]: (r["M"], r["N"], r["K"]) for r in rows}
    rep["by_shape_class"] = {
        f"{mode} dispatched vs {b or 'best-cublas'}": by_shape_class(ratios(rows, mode, b, "dispatched"), dims)
        for mode in MODES for b in (None, "torch")}
    filed = Counter(e["backend"] for e in entries.values())
    kernel_rows = [r for r in rows if r.get("offline_cudal2_median_us")
                   and not str(r.get("cudal2_via", "kernel")).startswith("cublas")]
    rep["entries"] = dict(filed)
    rep["kernel_beats_best_cublas"] = {m: sum(r.get(f"{m}_cudal2_vs_best", 0) > 1.0 for r in kernel_rows) for m in MODES}
    backend_of = {e["problem"]: e["backend"] for e in entries.values() if e["device"] == args.device}
    rep["kernel_beats_best_cublas_by_backend"] = {
        m: dict(Counter(backend_of.get(f"{r['shape']}:{r.get('layout', 'nn')}", "?")
                        for r in kernel_rows if r.get(f"{m}_cudal2_vs_best", 0) > 1.0))
        for m in MODES}
    rep["winner_from"] = dict(Counter(r["winner_from"] for r in log if r["filed"].startswith("filed")
                                      and "cublas" not in r["filed"]))
    rep["best_found_from"] = dict(Counter(r["winner_from"] for r in log if r["winner_from"]))
    tf = {}
    for r in rows:
        if r["M"] == r["N"] == r["K"] and r["M"] in (4096, 8192):
            t = r.get("offline_cudal2_median_us") or r["offline_best_cublas_us"]
            via = r.get("cudal2_via", "kernel")
            tf[r["shape"]] = {"dispatch": (("cudal2" if via == "kernel" else via) if r.get("offline_cudal2_median_us")
                                           else r["offline_best_cublas"]),
                              "tflops": 2 * r["M"] ** 3 / t / 1e6}
    rep["cubes_tflops"] = tf
    # The search's own view (screen + full pass), for every searched shape: how close it came.
    sp = {r["shape"]: r["search_speedup"] for r in log if r["search_speedup"]}
    rep["search_best_vs_best_cublas"] = by_class(sp, {r["shape"]: r["gflop"] for r in log})
    ph: Counter = Counter()
    fails: Counter = Counter()
    for r in log:
        ph.update({k[:-2]: r[k] for k in r if k.endswith("_s") and k not in ("wall_s", "evaluator_s") and r[k]})
        fails.update(json.loads(r["failures"]))
    rep["limits"] = limits(rows, log, entries, args.device)
    rep["filing_bands"] = filing_bands(kernel_rows, log)
    rep["search_cost"] = {"wall_s": round(sum(r["wall_s"] for r in log), 1),
                          "evaluator_s": round(sum(r["evaluator_s"] for r in log), 1),
                          "phase_s": {k: round(v, 1) for k, v in ph.items()},
                          "gpu_worker_s": round(sum(ph.get(k, 0) for k in ("prepare", "check", "time")), 1),
                          "evaluations": sum(r["evaluations"] + r["full_evaluations"] for r in log),
                          "failures": dict(fails)}
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=str))
    (out / "report.md").write_text(markdown(rep))
    plot(log, out / "search_vs_cublas.png")
    print(markdown(rep))
    return 0


def search_only(args, out: Path) -> int:
    """A set searched but not yet compared: per class of ../shared/classes.py, the search's best
    fully checked kernel / best-cublas (its full pass: one run, baselines interleaved) and what was
    filed. Not cudal2 as dispatched: that figure needs a compare run."""
    from cudal2.problems import parse_shapes
    from cudal2.stats import SHAPE_CLASSES, shape_class, summarize
    want = {p.text for p in parse_shapes(args.shapes, args.layout)}
    log = [r for r in search_log(args.store, args.device) if r["problem"] in want]
    if not log:
        print(f"error: {args.store} has no finished shapes of {args.shapes}:{args.layout}", file=sys.stderr)
        return 2
    with (out / "search_log.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in log for k in r)))
        w.writeheader()
        w.writerows(log)
    rep = {"device": args.device, "set": f"{args.shapes}:{args.layout}", "shapes_in_set": len(want),
           "shapes_searched": len(log), "classes": {}}
    for cls in ("all", *SHAPE_CLASSES):
        lg = [r for r in log if cls == "all" or shape_class(r["M"], r["N"], r["K"]) == cls]
        sp = summarize({r["shape"]: r["search_speedup"] for r in lg if r["search_speedup"]})
        filed = Counter(r["filed"].split(";")[0].split(" (")[0] for r in lg)
        rep["classes"][cls] = {"shapes": len(lg), "search_best": sp.to_dict() if sp else None,
                               "filed": dict(filed),
                               "best_family": dict(Counter(r["winner_family"] for r in lg if r["winner_family"]))}
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=str))
    lines = [f"The search's own view of {rep['set']} ({len(log)} of {len(want)} shapes searched): its best fully "
             "checked kernel / best-cublas in its full pass (geomean / mean / worst (shapes)), what was filed and "
             "the best kernel's family. Not cudal2 as dispatched (no compare run).", "",
             "| class | shapes | search best | filed | best family |", "|---|---|---|---|---|"]
    for cls, v in rep["classes"].items():
        lines.append(f"| {cls} | {v['shapes']} | {_fmt(v['search_best'])} | {_counts(v['filed'])} | "
                     f"{_counts(v['best_family'])} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def by_shape_class(vals: dict[str, float], dims: dict[str, tuple]) -> dict:
    from cudal2.stats import SHAPE_CLASSES, shape_class, summarize
    out = {}
    for cls in SHAPE_CLASSES:
        v = summarize({k: x for k, x in vals.items() if shape_class(*dims[k]) == cls})
        out[cls] = v.to_dict() if v else None
    return out


def limits(rows: list[dict], log: list[dict], entries: dict, device: str) -> dict:
    """Per work class, what holds it back: how close cuBLAS already is to the roofline (the room
    left), how close the search's best kernel came, which family that kernel was, whether seeds or
    the policy found it, and how many kernels were filed and from which backend."""
    import statistics

    from cudal2.spec import KernelSpec
    from cudal2.stats import flop_class
    best_roof = {r["shape"]: r.get(f"offline_{r['offline_best_cublas']}_roofline") for r in rows
                 if r.get("offline_best_cublas")}
    out = {}
    for cls in CLASSES:
        lg = [r for r in log if r["class"] == cls]
        shapes = {r["shape"] for r in lg}
        sp = [r["search_speedup"] for r in lg if r["search_speedup"]]
        roof = [best_roof[s] for s in shapes if best_roof.get(s)]
        filed = [e for e in entries.values() if e["device"] == device and e["backend"] != "cublas"
                 and flop_class(_flops(e["problem"])) == cls]
        split = [r for r in lg if r["winner_spec"] and KernelSpec.parse(r["winner_spec"]).split_k > 1]
        out[cls] = {
            "shapes": len(lg),
            "best_cublas_roofline_median": statistics.median(roof) if roof else None,
            "search_best_median": statistics.median(sp) if sp else None,
            "search_best_ge_0.95": sum(v >= 0.95 for v in sp), "search_best_lt_0.5": sum(v < 0.5 for v in sp),
            "best_family": dict(Counter(r["winner_family"] for r in lg if r["winner_family"])),
            "best_split_k": len(split),
            "best_from": dict(Counter(r["winner_from"] for r in lg if r["winner_from"])),
            "filed": dict(Counter(e["backend"] for e in filed)),
        }
    return out


BANDS = ((1.0, 1.01), (1.01, 1.02), (1.02, 1.05), (1.05, float("inf")))


def filing_bands(kernel_rows: list[dict], log: list[dict]) -> list[dict]:
    """Filed kernels by how much they won in the search's full pass, and how they fared in the
    compare run after it (the evidence behind `cudal2 generate --file-margin`)."""
    import math
    won = {r["shape"]: r["search_speedup"] for r in log if r["search_speedup"]}
    out = []
    for lo, hi in BANDS:
        sel = [r for r in kernel_rows if lo <= won.get(r["shape"], 0.0) < hi]
        band = {"search_win": [lo, hi if math.isfinite(hi) else None], "shapes": len(sel)}
        for m in MODES:
            v = [r[f"{m}_cudal2_vs_best"] for r in sel if r.get(f"{m}_cudal2_vs_best")]
            band[m] = {"geomean": math.exp(sum(map(math.log, v)) / len(v)) if v else None,
                       "lost": sum(x < 1.0 for x in v)}
        out.append(band)
    return out


def _flops(problem_text: str) -> float:
    from cudal2.problems import Problem
    return Problem.parse(problem_text).flops


def _fmt(s: dict | None) -> str:
    if not s:
        return "-"
    return f"{s['geomean']:.3f} / {s['mean']:.3f} / {s['worst']:.3f} ({s['n']})"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _counts(c: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))


def markdown(rep: dict) -> str:
    lines = [f"Speedup of cudal2's dispatch over each baseline on the {rep['shapes_compared']} searched shapes "
             f"({', '.join(rep.get('layouts', ['nn']))}), geomean / mean / worst (shapes); one compare run, baselines interleaved.", "",
             "| mode | counted as | vs | all | <1 GFLOP | 1-100 GFLOP | >100 GFLOP |", "|---|---|---|---|---|---|---|"]
    for label, by in rep["speedups"].items():
        mode, how, _, base = label.split(" ", 3)
        lines.append(f"| {mode} | {how} | {base} | " + " | ".join(_fmt(by.get(c)) for c in ("all", *CLASSES)) + " |")
    from cudal2.stats import SHAPE_CLASSES
    lines += ["", "The same, as dispatched, per class of ../shared/classes.py (geomean / mean / worst (shapes)):", "",
              "| mode | vs | " + " | ".join(SHAPE_CLASSES) + " |", "|---|---|" + "---|" * len(SHAPE_CLASSES)]
    for label, by in rep.get("by_shape_class", {}).items():
        mode, _, _, base = label.split(" ", 3)
        lines.append(f"| {mode} | {base} | " + " | ".join(_fmt(by.get(c)) for c in SHAPE_CLASSES) + " |")
    s = rep["search_best_vs_best_cublas"]
    beats, by_be = rep["kernel_beats_best_cublas"], rep["kernel_beats_best_cublas_by_backend"]
    lines += ["", "The search's best fully checked kernel / best-cublas (its own measurement, every searched shape): "
              + "; ".join(f"{c} {_fmt(s.get(c))}" for c in ("all", *CLASSES)), "",
              f"Registry entries: {rep['entries']}; a kernel beats best-cublas in the compare on "
              f"{beats['offline']} shapes offline ({_counts(by_be['offline'])}), "
              f"{beats['server']} server ({_counts(by_be['server'])}). "
              f"Filed kernels came from: {rep['winner_from']}; the best kernel per shape (filed or not) from: "
              f"{rep['best_found_from']}.", ""]
    pk = rep.get("peak") or {}
    lines += ["What limits each class: best-cublas's roofline fraction, median (the room left; the roofline takes "
              f"the compare run's measured peak: {pk.get('flops', 0) / 1e12:.0f} TFLOP/s, torch.matmul's best cube, "
              f"and {pk.get('bw', 0) / 1e12:.2f} TB/s), the search's best kernel / best-cublas (median; shapes "
              ">= 0.95x, < 0.5x), the family and origin of that kernel, kernels filed.", "",
              "| class | shapes | best-cublas roofline | search best | >= 0.95x / < 0.5x | best family | split-K | "
              "found by | filed |", "|---|---|---|---|---|---|---|---|---|"]
    for cls, v in rep["limits"].items():
        lines.append(f"| {cls} | {v['shapes']} | {_num(v['best_cublas_roofline_median'])} | "
                     f"{_num(v['search_best_median'])} | {v['search_best_ge_0.95']} / {v['search_best_lt_0.5']} | "
                     f"{_counts(v['best_family'])} | {v['best_split_k']} | {_counts(v['best_from'])} | "
                     f"{_counts(v['filed']) or 0} |")
    lines += ["", "Filed kernels by their win in the search's full pass, and the compare after it "
              "(geomean vs best-cublas; shapes where it lost):", "",
              "| full-pass win | shapes | offline | lost | server | lost |", "|---|---|---|---|---|---|"]
    for b in rep["filing_bands"]:
        lo, hi = b["search_win"]
        lines.append(f"| {lo:.2f}-{'' if hi is None else f'{hi:.2f}'} | {b['shapes']} | "
                     f"{_num(b['offline']['geomean'])} | {b['offline']['lost']} | "
                     f"{_num(b['server']['geomean'])} | {b['server']['lost']} |")
    lines.append("")
    for shape, v in rep["cubes_tflops"].items():
        lines.append(f"- {shape}: {v['tflops']:.0f} TFLOP/s offline via {v['dispatch']}")
    c = rep["search_cost"]
    lines += ["", f"Search cost: {c['evaluations']} evaluations, {c['wall_s']:.0f} s of search wall time, evaluator "
              f"{c['evaluator_s']:.0f} s ({', '.join(f'{k} {v:.0f}' for k, v in c['phase_s'].items())}; GPU worker "
              f"{c['gpu_worker_s']:.0f} s); compare {rep['compare_wall_s']} s. Failures: {c['failures'] or 'none'}."]
    return "\n".join(lines) + "\n"


def plot(log: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for fam, colour in (("tiled", "tab:blue"), ("persistent", "tab:green"), ("mma", "tab:orange"), ("wgmma", "tab:red")):
        pts = [(r["gflop"], r["search_speedup"]) for r in log if r["winner_family"] == fam and r["search_speedup"]]
        if pts:
            ax.scatter(*zip(*pts), s=12, c=colour, label=fam)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("GFLOP")
    ax.set_ylabel("best kernel / best-cublas (search, full pass)")
    ax.legend(title="winner family")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
