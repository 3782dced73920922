"""The efficiency study's outputs (bench/efficiency.py rows -> tables, CSV, plot, sizing).

Per shape the reference is the best kernel any method found at any budget (the full re-check's
speedup over best-cuBLAS; best-so-far never falls with the budget, so that is the best at the
largest). Each (shape, method, budget) gives best-so-far / reference; a method with no correct
kernel within a budget counts RATIO_FLOOR there (the `none` counts say how often), and a shape
where no method found one has no reference and stays out of the ratios.

  summary(rows, methods, budgets)   per group (all, nn, nt, each class, off-grid): geomean ratio per
                                    budget, share of shapes >= 0.98 of the reference at 16, geomean
                                    speedup over best-cuBLAS, device seconds per shape
  markdown(result)                  study.md
  write_csv(result, path)           study.csv: one row per shape x method x budget
  plot(result, path)                best_so_far.png
  plan_calls(result, model, limit)  the sizing: device calls of `limit` seconds for the whole study
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from cudal2.problems import Problem
from cudal2.stats import SHAPE_CLASSES as CLASSES
from study_shapes import offgrid as _offgrid

RATIO_FLOOR = 0.1
REACH = 0.98


def _gm(xs) -> float | None:
    xs = list(xs)
    return math.exp(sum(math.log(max(x, RATIO_FLOOR)) for x in xs) / len(xs)) if xs else None


def offgrid(problem: str) -> bool:
    return _offgrid(Problem.parse(problem))


def _secs_key(result: dict) -> str:
    return "modeled_s" if result.get("results_are") == "model" else "gpu_s"


def groups(rows: list[dict]) -> dict[str, list[dict]]:
    out = {"all": rows, "nn": [r for r in rows if r.get("layout") == "nn"],
           "nt": [r for r in rows if r.get("layout") == "nt"]}
    out.update({c: [r for r in rows if r.get("class") == c] for c in CLASSES})
    out["off-grid"] = [r for r in rows if offgrid(r["problem"])]
    return {k: v for k, v in out.items() if v}


def summary(rows: list[dict], methods, budgets, secs: str = "gpu_s") -> dict:
    out = {}
    for g, rs in groups(rows).items():
        ref = [r for r in rs if r.get("reference", 0) > 0]
        d = {"shapes": len(rs), "with_reference": len(ref), "methods": {}}
        for m in methods:
            e = {"ratio": {}, "none": {}, "speedup": {}, "secs": {}}
            for b in map(str, budgets):
                e["ratio"][b] = _gm(r[m]["ratio"][b] for r in ref)
                e["none"][b] = sum(not r[m][b] for r in rs)
                e["speedup"][b] = _gm(r[m][b] for r in rs)
                e["secs"][b] = sum(r[m].get(secs, {}).get(b, 0.0) for r in rs) / len(rs)
            b16 = "16" if "16" in e["ratio"] else str(min(budgets))
            e["reach_098_at_16"] = (sum(r[m]["ratio"][b16] >= REACH for r in ref) / len(ref)) if ref else None
            d["methods"][m] = e
        for learner in ("policy", "critic"):        # the methods that learn: is each ahead of the others?
            if learner in methods and ref:
                d[f"{learner}_ahead"] = {o: {b: d["methods"][learner]["ratio"][b] > d["methods"][o]["ratio"][b]
                                             for b in map(str, budgets)} for o in methods if o != learner}
        d["shape_s"] = sum(r["shape_cost"].get("shape_" + ("modeled_s" if secs == "modeled_s" else "gpu_s"), 0.0)
                           for r in rs) / len(rs)
        out[g] = d
    return out


def _f(x, fmt="{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown(result: dict) -> str:
    rows, b, methods = result["rows"], [str(x) for x in result["budgets"]], result["methods"]
    secs = _secs_key(result)
    summ = summary(rows, methods, result["budgets"], secs)
    unit = "modelled device s" if secs == "modeled_s" else "evaluator s"
    lines = [f"{len(rows)} of {len(result['test'])} held-out shapes done; methods {', '.join(methods)}; budgets "
             f"{'/'.join(b)} proposals; policy trained on {len(result['train'])} shapes x {result['train_budget']} "
             "proposals" + (f" from {result['init_policy']}" if result.get("init_policy") else " from fresh weights")
             + ".",
             "Reference per shape: the best kernel any method found at any budget (full PROTOCOL re-check and "
             f"re-timing). Ratio = best-so-far / reference, geomean over shapes (no correct kernel within a budget "
             f"counts {RATIO_FLOOR}; `none` says how often). Seconds: {unit} of the method's first proposals "
             "alone (each measurement's share of its evaluator call), and of every measurement of the shape.", ""]
    for g, d in summ.items():
        lines += [f"### {g} ({d['shapes']} shapes; {d['shape_s']:.1f} {unit} per shape, all methods and the re-check)",
                  "", "| method | " + " | ".join(f"@{x}" for x in b)
                  + f" | >= {REACH} ref @{'16' if '16' in b else b[0]} | none @{b[0]} | "
                  f"x best-cublas @{b[0]} / @{b[-1]} | {unit} / shape @{b[-1]} |",
                  "| --- | " + " | ".join("---" for _ in b) + " | --- | --- | --- | --- |"]
        for m in methods:
            e = d["methods"][m]
            reach = e["reach_098_at_16"]
            lines.append(f"| {m} | " + " | ".join(_f(e["ratio"][x]) for x in b)
                         + f" | {'-' if reach is None else f'{100 * reach:.0f}%'} | {e['none'][b[0]]} | "
                         f"{_f(e['speedup'][b[0]])} / {_f(e['speedup'][b[-1]])} | {e['secs'][b[-1]]:.1f} |")
        for learner in ("policy", "critic"):
            if d.get(f"{learner}_ahead"):
                lines.append("")
                lines.append(f"{learner.capitalize()} ahead (geomean ratio): " + "; ".join(
                    f"of {o} " + " ".join(f"@{x} {'yes' if v[x] else 'no'}" for x in b[:2])
                    for o, v in d[f"{learner}_ahead"].items()) + ".")
        lines.append("")
    ps = result.get("per_shape", {})
    if result.get("train_cost"):
        tc = result["train_cost"]
        lines.append(f"Training: {tc.get('proposals', 0)} proposals, {tc.get('unique', 0)} new evaluations, "
                     f"{tc.get('modeled_s' if secs == 'modeled_s' else 'eval_s', 0.0):.1f} {unit}.")
    if ps:
        lines.append(f"Per shape: {ps.get('new_evaluations', 0):.0f} new evaluations, "
                     f"{ps.get('wall_s', 0):.1f} s wall (in the call that measured it).")
    if "modeled_device_s" in result:
        lines.append(f"Cost model: {result['modeled_device_s']:.0f} s of device wall time for this call (a model).")
    if result.get("plan"):
        lines.append(result["plan"]["line"])
    if not result.get("complete", True):
        lines.append(f"INCOMPLETE: {result.get('stopped')}; re-run with the same --store to continue.")
    if rows:
        show = list(dict.fromkeys((b[0], "16" if "16" in b else b[0], b[-1])))
        lines += ["", "| shape | class | reference (x best-cublas) | "
                  + " | ".join(f"{m} " + "/".join(f"@{x}" for x in show) for m in methods)
                  + f" | {unit} |", "| --- | --- | --- | " + " | ".join("---" for _ in methods) + " | --- |"]
        for r in rows:
            cells = [" / ".join(_f(r[m]["ratio"][x], "{:.2f}") for x in show) for m in methods]
            sk = "shape_modeled_s" if secs == "modeled_s" else "shape_gpu_s"
            lines.append(f"| {r['problem']} | {r['class']} | {r['reference']:.3f} | " + " | ".join(cells)
                         + f" | {r['shape_cost'].get(sk, 0.0):.1f} |")
    return "\n".join(lines)


CSV_FIELDS = ("problem", "layout", "class", "offgrid", "method", "budget", "proposals", "best_vs_reference",
              "speedup_vs_best_cublas", "screen_speedup", "reference_speedup", "gpu_s", "shape_gpu_s",
              "seconds_are", "winner_spec")


def csv_rows(result: dict) -> list[dict]:
    secs = _secs_key(result)
    out = []
    for r in result["rows"]:
        for m in result["methods"]:
            for b in map(str, result["budgets"]):
                ratio = r[m]["ratio"][b]
                out.append({
                    "problem": r["problem"], "layout": r["layout"], "class": r["class"],
                    "offgrid": int(offgrid(r["problem"])), "method": m, "budget": int(b),
                    "proposals": r[m]["proposals"][b], "best_vs_reference": "" if ratio is None else round(ratio, 5),
                    "speedup_vs_best_cublas": round(r[m][b], 5), "screen_speedup": round(r[m]["screen"][b] or 0.0, 5),
                    "reference_speedup": round(r["reference"], 5), "gpu_s": round(r[m][secs][b], 3),
                    "shape_gpu_s": round(r["shape_cost"]["shape_modeled_s" if secs == "modeled_s" else "shape_gpu_s"], 3),
                    "seconds_are": "model" if secs == "modeled_s" else result.get("results_are", "measurement"),
                    "winner_spec": r[m]["winner"][b] or ""})
    return out


def write_csv(result: dict, path: Path) -> int:
    rows = csv_rows(result)
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)
    return len(rows)


def screen_curve(rows: list[dict], method: str, n: int) -> list[float | None]:
    """Geomean over shapes of the screened best-so-far / the shape's screened best (any method), k = 1..n."""
    rs = [r for r in rows if r.get("screen_reference", 0) > 0]
    out = []
    for k in range(1, n + 1):
        vals = []
        for r in rs:
            c = r[method]["curve"]
            vals.append((c[min(k, len(c)) - 1] if c else 0.0) / r["screen_reference"])
        out.append(_gm(vals))
    return out


def plot(result: dict, path: Path) -> bool:
    """best_so_far.png: per method, geomean best-so-far / reference at each budget (all shapes, nn,
    nt), and the screened best-so-far after every proposal. False where matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows, methods, budgets = result["rows"], result["methods"], result["budgets"]
    summ = summary(rows, methods, budgets)
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    for ax, g in zip(axes[:3], ("all", "nn", "nt")):
        d = summ.get(g)
        for m in methods:
            if d:
                ax.plot(budgets, [d["methods"][m]["ratio"][str(b)] for b in budgets], marker="o", label=m)
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.set_title(f"{g}: {d['with_reference'] if d else 0} shapes (full re-check)")
        ax.set_xlabel("proposals")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("best-so-far / per-shape reference (geomean)")
    n = max(budgets)
    for m in methods:
        axes[3].plot(range(1, n + 1), screen_curve(rows, m, n), label=m)
    axes[3].set_xscale("log", base=2)
    axes[3].set_title("screened, after every proposal")
    axes[3].set_xlabel("proposals")
    axes[3].grid(alpha=0.3)
    if rows:
        axes[0].legend()
    src = "stub clock (a model, not a measurement)" if result.get("results_are") == "model" else result.get("device", "")
    fig.suptitle(f"Search efficiency on held-out shapes: {src}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plan_calls(result: dict, model, limit: float) -> dict:
    """Device calls for the whole study at `limit` s each, from the modelled seconds of the shapes
    done (and training): each call pays the model's start and finish; no evaluation starts after
    `limit`, so a call ends by about limit + its last evaluator call + finish."""
    rows = result["rows"]
    train = float((result.get("train_cost") or {}).get("modeled_s", 0.0))
    shapes = [r["shape_cost"].get("shape_modeled_s", 0.0) for r in rows]
    work = train + sum(shapes)
    left = len(result["test"]) - len(rows)
    mean = sum(shapes) / len(shapes) if shapes else 0.0
    work_full = work + left * mean
    usable = max(limit - model.start_s, 1.0)
    calls = max(1, math.ceil(work_full / usable))
    device = work_full + calls * (model.start_s + model.finish_s)
    line = (f"Sizing (cost model): the whole study ({len(result['test'])} shapes) is {device:.0f} s of device time: "
            f"training {train:.0f} s, {mean:.0f} s per held-out shape, {calls} call(s) at --time-limit {limit:g} "
            f"(each {model.start_s:.0f} s start + {model.finish_s:.0f} s finish)"
            + (f"; {left} shapes not run here, counted at the mean" if left else "") + ".")
    return {"device_s": round(device, 1), "train_s": round(train, 1), "per_shape_s": round(mean, 1),
            "calls": calls, "limit_s": limit, "line": line}
