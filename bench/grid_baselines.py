"""The five baselines over the 1000-shape grid, offline and server, by compare's own machinery.

  python3 bench/grid_baselines.py [--start I] [--count N] [--time-limit S] [--out DIR] [--finish]

Writes bench/results/<device key>/baselines_grid.{csv,json} and the plots (heatmaps of each
baseline against best-cublas per K, the ratio distributions), with the wall time every chunk took.

One device call may run at most 10 minutes, so the run is resumable: each measured shape is
appended to baselines_grid.rows.jsonl at once, shapes already there are skipped, and the loop stops
cleanly before --time-limit. Run it again until it says the grid is complete; each run rewrites the
CSV/JSON/plots from all rows so far.

To fit the grid (1000 shapes x 4 candidates a layout x 2 modes) in ~10 minutes of one H200, this
script uses smaller budgets than compare's defaults, named on the command line and stored in the
JSON's config: offline >= 30 calls and >= 15 ms per candidate (compare: 100 ms), server 20 calls
(compare: 50), eager at most 10 ms per candidate, autotune 3 timed calls per heuristic candidate.
A model from data/h200_torch_matmul.csv (the grid's torch times, ~15 µs of host per call) puts this
at ~6-8 minutes: server mode is the floor (1000 shapes x 4 candidates x 20 calls x 2 ms gaps = 160 s).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def latest_rows(rows: list[dict]) -> list[dict]:
    """One row per (shape, layout), the last one appended (a re-timed row replaces its old one)."""
    last = {(r["shape"], r["layout"]): i for i, r in enumerate(rows)}
    return [r for i, r in enumerate(rows) if last[(r["shape"], r["layout"])] == i]


def settle_rows(rows: list[dict], jl: Path, runs_path: Path, entries: dict, lt: int | None
                ) -> tuple[list[dict], dict[str, str], int]:
    """(rows, {problem: why} still stale, how many settled): the stale rows whose entry dispatches
    torch.matmul now take their own torch column (compare_rows.settle), appended to the rows file
    like re-timed rows."""
    from cudal2.compare_rows import first_run_ts, settle
    earlier = json.loads(runs_path.read_text()) if runs_path.exists() else []
    settled, stale = settle(rows, entries, lt, first_run_ts(earlier))
    if settled:
        with jl.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in settled)
    return latest_rows(rows + settled), stale, len(settled)


def settle_here(rows: list[dict], jl: Path, runs_path: Path, old_json: Path, registry: str) -> list[dict]:
    """--finish --retime-stale on a machine without the card: settle_rows, judged by the card key
    and the cuBLASLt version the compare's JSON recorded (what dispatch chooses depends on both).
    The rest stay stale for a card."""
    from cudal2.registry import Registry
    if not old_json.exists():
        raise SystemExit(f"error: {old_json} missing: settling needs the card and cuBLASLt version it recorded")
    vers = json.loads(old_json.read_text()).get("versions", {})
    key, lt = vers.get("device_key"), vers.get("cublasLt")
    if not key:
        raise SystemExit(f"error: {old_json} records no device_key")
    entries = {e.problem: e for e in Registry.load(registry).all(key)}
    rows, stale, n = settle_rows(rows, jl, runs_path, entries, lt)
    print(f"--retime-stale --finish ({key}, cuBLASLt {lt}): {n} of {n + len(stale)} stale rows settled "
          f"from their own torch.matmul column; {len(stale)} need the card"
          + (f" (e.g. {next(iter(stale))})" if stale else ""))
    return rows


def first_then_rest(problems: list, first_file: str) -> list:
    """`problems` with the ones FIRST_FILE names moved to the front in the file's order (shapes the
    file names off this list are ignored: a leads store may hold the other layout's shapes)."""
    from cudal2.problems import read_shape_file
    layout = problems[0].layout if problems else "nn"
    by_text = {p.text: p for p in problems}
    front = list(dict.fromkeys(p.text for p in read_shape_file(first_file, layout) if p.text in by_text))
    seen = set(front)
    return [by_text[t] for t in front] + [p for p in problems if p.text not in seen]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", default="nn", choices=("nn", "nt"))
    ap.add_argument("--start", type=int, default=0, help="first grid index of this chunk")
    ap.add_argument("--count", type=int, default=None, help="shapes in this chunk (default: to the end)")
    ap.add_argument("--stride", type=int, default=1,
                    help="visit grid index i*STRIDE mod 1000 (STRIDE coprime to 1000, e.g. 7): any prefix of a "
                         "time-limited run then spreads over the whole grid instead of the smallest M")
    ap.add_argument("--first", default=None, metavar="FILE",
                    help="a shapes file (cudal2 problems' format) whose grid shapes are visited first, in its "
                         "order, the rest after in --stride order: a time-limited re-compare then times what "
                         "a search just re-filed before the rows a guard moved")
    ap.add_argument("--time-limit", type=float, default=540.0, help="stop before this many seconds")
    ap.add_argument("--out", default=None, help="results folder (default bench/results/<device key>)")
    ap.add_argument("--min-ms", type=float, default=15.0)
    ap.add_argument("--min-calls", type=int, default=30)
    ap.add_argument("--server-calls", type=int, default=20)
    ap.add_argument("--eager-ms", type=float, default=10.0)
    ap.add_argument("--tune-calls", type=int, default=3)
    ap.add_argument("--finish", action="store_true", help="only rewrite CSV/JSON/plots from the rows so far")
    ap.add_argument("--require", action="store_true",
                    help="before the grid, build and check every baseline the layout allows on one shape; "
                         "exit 4 if any is unavailable or wrong (a run without nvmath must not pass as complete)")
    ap.add_argument("--registry", default=None,
                    help="also time cudal2's registry kernel per shape (compare's cudal2 column); writes compare_grid.*")
    ap.add_argument("--searched-only", action="store_true",
                    help="with --registry: only the shapes the registry has an entry for on this device")
    ap.add_argument("--retime-stale", action="store_true",
                    help="with --registry: also time again the rows that no longer time what dispatch runs "
                         "(a re-search or a guard re-filed the entry, add-timings chose another call; "
                         "cudal2.compare_rows.stale_rows); each new row replaces its old one. Rows whose "
                         "shape dispatches torch.matmul now are settled from their own torch.matmul column "
                         "instead (compare_rows.settle_torch); with --finish (no card) only that is done, "
                         "by the card and cuBLASLt version the compare JSON recorded")
    args = ap.parse_args(argv)
    if args.retime_stale and not args.registry:
        ap.error("--retime-stale needs --registry (what dispatch runs is the registry's)")

    from cudal2.baselines import NAMES
    from cudal2.cli.compare_measure import Config, measure_shape, summaries, summary_lines
    from cudal2.device import current, gpu_available
    from cudal2.problems import grid
    from cudal2.report import MODES, versions, write_csv, write_json, write_plots
    from cudal2.timing import Peak, get_peak

    gpu = gpu_available()
    if not gpu and not (args.finish and args.out):
        print("error: no CUDA GPU here: the grid benchmark needs one (or --finish --out DIR to rewrite "
              "the files from measured rows)", file=sys.stderr)
        return 3
    t0 = time.monotonic()
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / current().key
    out.mkdir(parents=True, exist_ok=True)
    name = "compare_grid" if args.registry else "baselines_grid"
    jl = out / f"{name}.rows.jsonl"
    runs_path = out / f"{name}.runs.json"
    rows = latest_rows([json.loads(x) for x in jl.read_text().splitlines() if x.strip()] if jl.exists() else [])
    have = {(r["shape"], r["layout"]) for r in rows}
    problems = grid(args.layout)
    if math.gcd(args.stride, len(problems)) != 1:
        raise SystemExit(f"error: --stride {args.stride} must be coprime to {len(problems)}")
    problems = [problems[(i * args.stride) % len(problems)] for i in range(len(problems))]
    spread = problems             # the files' row order, whatever order the shapes are timed in
    if args.first:
        problems = first_then_rest(problems, args.first)
    chunk = problems[args.start: None if args.count is None else args.start + args.count]
    todo = [p for p in chunk if (p.shape, p.layout) not in have]
    kernel_for = None
    if args.registry and args.finish and args.retime_stale:
        # no card: settle what needs no timing, by the card and cuBLASLt the compare recorded
        rows = settle_here(rows, jl, runs_path, out / f"{name}.json", args.registry)
    if args.registry and not args.finish:
        from cudal2.cli.compare import kernel_source
        from cudal2.registry import Registry
        entries = {e.problem: e for e in Registry.load(args.registry).all(current().key)}
        if args.retime_stale:
            from cudal2.lt_dispatch import lt_version
            rows, stale, n = settle_rows(rows, jl, runs_path, entries, lt_version())
            if n:
                print(f"--retime-stale: {n} rows now dispatching torch.matmul settled from their own "
                      "torch.matmul column (no timing)")
            todo = [p for p in chunk if (p.shape, p.layout) not in have or p.text in stale]
            print(f"--retime-stale: {len(stale)} of {len(rows)} rows no longer time what dispatch runs "
                  f"({sum(1 for p in chunk if p.text in stale)} in this chunk): timed again")
        if args.searched_only:
            problems = [p for p in problems if p.text in entries]
            todo = [p for p in todo if p.text in entries]
        kernel_for = kernel_source(None, args.registry, current())
        warm_compiles([entries[p.text] for p in todo if p.text in entries], current())
    cfg = Config(min_calls=args.min_calls, min_ms=args.min_ms, server_calls=args.server_calls,
                 eager_ms=args.eager_ms, tune_calls=args.tune_calls)
    old_json = out / f"{name}.json"
    if gpu:
        peak = get_peak().to_dict()
    elif old_json.exists():   # --finish on a CPU: keep what the GPU run recorded
        old = json.loads(old_json.read_text())
        peak = old.get("peak", {})
    else:
        peak = {}
    if args.require and not args.finish:
        bad = preflight(args.layout)
        if bad:
            for n, why in bad.items():
                print(f"error: baseline {n}: {why}", file=sys.stderr)
            return 4
    done = retimed = 0
    if not args.finish:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        with jl.open("a") as f, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                          TimeElapsedColumn()) as bar:
            task = bar.add_task("grid", total=len(todo))
            for p in todo:
                if time.monotonic() - t0 > args.time_limit:
                    break
                bar.update(task, description=f"grid {p}")
                row = measure_shape(p, NAMES, cfg, MODES, Peak(**peak), kernel_for=kernel_for)
                f.write(json.dumps(row) + "\n")     # a re-timed row follows its old one: the last counts
                f.flush()
                retimed += (p.shape, p.layout) in have
                rows = [r for r in rows if (r["shape"], r["layout"]) != (p.shape, p.layout)] + [row]
                done += 1
                bar.advance(task)
    wall = time.monotonic() - t0
    runs = json.loads(runs_path.read_text()) if runs_path.exists() else []
    if done:
        runs.append({"start": args.start, "count": args.count, "shapes": done, "retimed": retimed,
                     "wall_s": round(wall, 1),
                     "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        runs_path.write_text(json.dumps(runs, indent=1))
    order = {(p.shape, p.layout): i for i, p in enumerate(spread)}
    rows.sort(key=lambda r: order.get((r["shape"], r["layout"]), len(order)))
    complete = all((p.shape, p.layout) in {(r["shape"], r["layout"]) for r in rows} for p in problems)
    vers = versions() if gpu else json.loads(old_json.read_text()).get("versions", {}) if old_json.exists() else {}
    meta = {"versions": vers, "config": {**asdict(cfg), "modes": list(MODES), "baselines": list(NAMES),
                                              "layout": args.layout, "registry": args.registry},
            "peak": peak, "runs": runs, "wall_s_total": round(sum(r["wall_s"] for r in runs), 1),
            "complete": complete, "shapes": len(rows)}
    summ = summaries(rows, MODES, NAMES)
    write_csv(out / f"{name}.csv", rows, meta)
    write_json(out / f"{name}.json", rows, meta, summ)
    write_plots(rows, out / f"{name}.png", MODES)
    for line in summary_lines(summ):
        print(line)
    left = len(problems) - len(rows)
    print(f"{done} shapes this run in {wall:.0f} s; {len(rows)} of {len(problems)} in {out}; "
          f"total wall {meta['wall_s_total']:.0f} s" + ("" if complete else f"; {left} left: run again"))
    return 0


def warm_compiles(entries, device) -> None:
    """Compile the registry's kernels for the shapes ahead in parallel CPU processes: the backends'
    disk caches (Triton's, the cubin cache) then serve the in-process build of each shape at once,
    instead of ~1-2 s of compile per shape on the GPU's clock (cudal2.evaluate.warm)."""
    from cudal2.evaluate.warm import warm_compiles as warm
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    n, failed, secs = warm([(KernelSpec.parse(e.spec), Problem.parse(e.problem)) for e in entries
                            if e.backend != "cublas"], device)
    if n:
        print(f"compiled {n} registry kernels ahead in {secs:.1f} s ({failed} failed)")


def preflight(layout: str) -> dict[str, str]:
    """Baselines that cannot serve `layout` on a 256^3 problem, with the reason (empty: all can)."""
    import torch

    from cudal2.baselines import NAMES, prepare, serves
    from cudal2.problems import Problem
    p = Problem(256, 256, 256, layout)
    names = [n for n in NAMES if serves(n, layout) is None]
    a = torch.randn(p.M, p.K, device="cuda", dtype=torch.float16)
    b = torch.randn(*p.b_shape(), device="cuda", dtype=torch.float16)
    c = torch.empty(p.M, p.N, device="cuda", dtype=torch.float16)
    reasons: dict[str, str] = {}
    prepare(names, p, a, b, c, reasons=reasons, tune_calls=1)
    return reasons


if __name__ == "__main__":
    sys.exit(main())
