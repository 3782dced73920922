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
        key = Problem(r["M"], r["N"], r["K"], r.get("layout", "nn")).text
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
