"""Compare rows against the registry: what a `cudal2 compare` row timed as cudal2 (a kernel, a
cuBLASLt call, torch.matmul) and whether dispatch still runs that (`stale_rows`), so a resumed
compare re-times only what changed (bench/grid_baselines.py --retime-stale). Outside
cudal2.registry: it asks cudal2.lt_dispatch which call a cuBLAS entry runs, and lt_dispatch
reads the registry's evidence rules."""
from __future__ import annotations

from .problems import Problem
from .registry.entry import Entry


def dispatched_now(entry: Entry, lt_version: int | None) -> str:
    """What cudal2.matmul runs for an entry today: "kernel", or the cuBLAS call's name
    (lt_dispatch.choose: a cuBLASLt call, else "torch")."""
    if entry.backend != "cublas":
        return "kernel"
    from .lt_dispatch import choose
    return choose(entry, lt_version)[0]


# A compare row's cudal2 status when cudal2.matmul ran torch.matmul there (no cudal2 column; its
# time is torch's): a cuBLAS entry dispatching it, or (rows from before cuBLAS entries dispatched,
# 2026-12-03) no kernel for the shape.
_TORCH_STATUS = ("unavailable: cuBLAS won", "unavailable: the registry has no cudal2 kernel")


def row_dispatch(row: dict) -> str | None:
    """What a compare row timed as cudal2: its `cudal2_via` ("kernel" or a cuBLASLt call; a row
    from before `cudal2_via` existed that timed cudal2 ran a kernel), "torch" where cudal2.matmul
    ran torch.matmul, None where nothing ran (a kernel that failed to build or check)."""
    via, status = row.get("cudal2_via"), str(row.get("status_cudal2", ""))
    if via:
        return str(via)
    if status == "ok":
        return "kernel"
    return "torch" if status.startswith(_TORCH_STATUS) else None


def stale_rows(rows: list[dict], entries: dict[str, Entry], lt_version: int | None,
               timed_by: float | None) -> dict[str, str]:
    """{problem text: why} for the compare rows that no longer time what dispatch runs: the entry
    at the row's shape dispatches another thing than the row timed (a guard or a re-search
    re-filed it, add-timings chose another call), or another kernel (the row's `cudal2_spec`), or
    the entry was filed after the row was timed (the row's `ts`; rows from before 2026-12-05 have
    none and are judged against `timed_by`, a POSIX time such as the compare's first run; None:
    unknown, such rows are kept) where the row cannot tell what it ran. A row without an entry now
    is not stale (a compare over --searched-only shapes never holds one). Re-timing only these
    keeps a compare of a whole set current after a partial re-search
    (bench/grid_baselines.py --retime-stale)."""
    out = {}
    for r in rows:
        key = Problem.of_row(r).text
        e = entries.get(key)
        if e is None:
            continue
        now, then = dispatched_now(e, lt_version), row_dispatch(r)
        when = r.get("ts", timed_by)
        refiled = when is not None and e.ts is not None and float(e.ts) > float(when)
        if then is None:
            if refiled:
                out[key] = "nothing ran then; the entry was filed since"
        elif now != then:
            out[key] = f"timed {then}, dispatch runs {now} now"
        elif now == "kernel" and r.get("cudal2_spec") and r["cudal2_spec"] != e.spec:
            out[key] = "timed another kernel than the entry's"
        elif now == "kernel" and not r.get("cudal2_spec") and refiled:
            out[key] = "the kernel entry was filed after the compare"
    return out


def settle_torch(rows: list[dict], entries: dict[str, Entry], lt_version: int | None,
                 stale: dict[str, str]) -> list[dict]:
    """New versions of the `stale` rows whose entry dispatches torch.matmul now (a guard or
    add-timings re-filed it after the row was timed): cudal2's time there is the row's own
    torch.matmul column, timed in the same interleaved run, which is how a compare records a shape
    where cudal2.matmul calls torch.matmul (no cudal2 column; report.py and grid_report read
    torch's), so a re-time would measure torch.matmul again beside the same baselines. Each settled
    row says what it timed before (`cudal2_settled`). Why: of the H200 grid nn compare's 510 stale
    rows (2026-12-05), 299 were such, ~300 s of a card's time."""
    import time
    out = []
    for r in rows:
        key = Problem.of_row(r).text
        e = entries.get(key)
        if key not in stale or e is None or dispatched_now(e, lt_version) != "torch":
            continue
        if not (r.get("offline_torch_median_us") and (r.get("server_torch_mean_us") or "server_best_cublas_us" not in r)):
            continue          # no torch.matmul column to stand for it: time it again
        new = {k: v for k, v in r.items()
               if not (k.startswith(("offline_cudal2", "server_cudal2", "eager_cudal2")) or k in ("cudal2_via", "cudal2_spec"))}
        new["status_cudal2"] = f"{_TORCH_STATUS[0]} and dispatch calls torch.matmul (settled: this row's torch column)"
        new["cudal2_settled"] = {"was": row_dispatch(r), "spec": r.get("cudal2_spec"), "why": stale[key],
                                 "at": round(time.time(), 1)}
        out.append(new)
    return out


def settle(rows: list[dict], entries: dict[str, Entry], lt_version: int | None,
           timed_by: float | None) -> tuple[list[dict], dict[str, str]]:
    """(settled rows, {problem text: why} for the stale rows left to time): stale_rows, then
    settle_torch on them, in one place for every caller (a resumed compare, the grid compares on a
    card and on a CPU, bench/settle_compare.py)."""
    stale = stale_rows(rows, entries, lt_version, timed_by)
    settled = settle_torch(rows, entries, lt_version, stale)
    for r in settled:
        del stale[Problem.of_row(r).text]
    return settled, stale


def first_run_ts(runs: list[dict] | None) -> float | None:
    """The POSIX time of a compare's first run (its `runs` records), None without one. Rows without
    their own `ts` are judged stale against it: an entry filed after the first chunk may postdate
    the row, and re-timing a current row costs less than keeping a stale one."""
    from datetime import datetime
    ts = [r["ts"] for r in runs or [] if r.get("ts")]
    return min(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in ts) if ts else None


# The settings a resumed compare must share with the file it resumes: rows timed with other budgets,
# inputs or baselines would not be one run's figures.
RESUME_KEYS = ("min_calls", "min_ms", "server_calls", "gap_ms", "tune_calls", "eager_calls", "eager_ms",
               "seed", "retune", "modes", "baselines", "kernel_source")


def resume_rows(doc: dict, problems, config: dict, entries: dict[str, Entry] | None,
                lt_version: int | None, spec_text: str | None = None) -> tuple[list[dict], list, dict[str, str]]:
    """(rows kept, problems left to time, {problem text: why timed again}) for `cudal2 compare
    --resume` from an earlier compare JSON `doc`: its rows of the asked problems are kept unless
    stale (`entries`: the registry's, see stale_rows; `spec_text`: a row that timed another spec, or
    does not say which); the rest of the problems are timed. ValueError names the first setting in
    RESUME_KEYS that differs from `config`."""
    old = doc.get("config") or {}
    for k in RESUME_KEYS:
        if k in old and k in config and old[k] != config[k]:
            raise ValueError(f"it was made with {k}={old[k]!r} and this run asks {config[k]!r}: give the "
                             f"same settings, or another --json to start a new compare")
    want = {p.text: p for p in problems}
    by: dict[str, dict] = {}
    for r in doc.get("rows") or []:
        key = Problem.of_row(r).text
        if key in want:
            by[key] = r
    if entries is not None:
        settled, stale = settle(list(by.values()), entries, lt_version, first_run_ts(doc.get("runs")))
        for r in settled:             # kept, with cudal2_settled saying why; no timing needed
            by[Problem.of_row(r).text] = r
    elif spec_text is not None:
        from .spec import KernelSpec
        text = KernelSpec.parse(spec_text).text
        stale = {k: "timed another kernel than --spec" for k, r in by.items() if r.get("cudal2_spec") != text}
    else:
        stale = {}
    kept = [r for k, r in by.items() if k not in stale]
    todo = [p for k, p in want.items() if k not in by or k in stale]
    return kept, todo, stale
