"""What `cudal2 generate` prints: a compile error in one line, the per-shape table, the run's totals."""
from __future__ import annotations

import typer


def report_compile_errors(problem, ms, store_path: str) -> None:
    """One line per candidate that failed to compile: the error's first line and where its full log
    is (the store's measurement row, meta.compile_log) - never the compiler's multi-page dump."""
    for m in ms:
        if m.status == "compile_error":
            where = f"; full log: store {store_path}, meta.compile_log" if m.meta.get("compile_log") else ""
            typer.echo(f"compile error {problem} {m.spec}: {m.reason}{where}", err=True)


def summary_table(results, device_key: str, store_path: str) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"cudal2 generate on {device_key} (store {store_path})")
    num = ("evals", "failures", "kernel us", "best-cuBLAS us", "speedup (full)", "speedup (screen)")
    for col in ("problem", "evals", "failures", "winner", *num[2:], "registry"):
        t.add_column(col, justify="right" if col in num else "left")
    for out, action in results:
        w = out["winner"]
        fails = sum(out["failures_screen"].values()) + sum(out["failures_full"].values())
        t.add_row(out["problem"], f"{out['evaluations']}+{out['full_evaluations']}", str(fails),
                  w.spec if w else "-", f"{w.time_us:.2f}" if w else "-",
                  f"{w.best_cublas_us:.2f}" if w and w.best_cublas_us else "-",
                  f"{out['full_speedup']:.3f}x" if out["full_speedup"] else "-",
                  f"{out['screen_speedup']:.3f}x" if out["screen_speedup"] else "-", action)
    con = Console()
    # Piped (a log, a test): do not squeeze the spec column into the 80-column default.
    (con if con.is_terminal else Console(width=260)).print(t)


def totals_line(results, shared, wall_s: float, replayed: bool = False) -> None:
    """Totals of the run: evaluations, failures by reason, evaluator seconds (the GPU worker's share:
    prepare + check + time; compile is CPU work in the pools), wall seconds."""
    from collections import Counter
    fails: Counter = Counter()
    for out, _ in results:
        fails.update(out["failures_screen"])
        fails.update(out["failures_full"])
    tot = shared.totals()
    ph = tot["phase_s"]
    gpu = sum(ph.get(k, 0.0) for k in ("prepare", "check", "time"))
    what = "evaluations replayed from the store" if replayed else "new evaluations"
    typer.echo(f"{len(results)} shapes, {tot['unique']} {what} ({tot['reused'] + tot['resumed']} reused), "
               f"wall {wall_s:.1f} s, evaluator {tot['eval_s']:.1f} s: "
               + ", ".join(f"{k} {v:.1f}" for k, v in ph.items()) + f" (GPU worker {gpu:.1f} s)")
    if fails:
        typer.echo("failures: " + "; ".join(f"{k} x{v}" for k, v in fails.most_common()))
