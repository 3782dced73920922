"""The machinery of `cudal2 compare` (cli/compare.py) that bench/grid_baselines.py reuses: one problem
measured as a report row (`measure_shape`: inputs, the reference, every candidate checked, then timed
together in each mode, plus eager latency), its ratios, and the per-class summaries of many rows.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass

from ..report import primary

STATS = ("median_us", "mean_us", "p50_us", "p99_us", "min_us", "spread", "n")
GRAPH_REPLAYS = 30      # graph mode: replays per candidate (each ~300 µs of calls; the median is the figure)
# A timing in which every candidate's spread (IQR / median) passed its mode's bar was a disturbed run
# of the whole row: it is timed once more and the second timing kept (the first's least spread is
# the row's MODE_retimed). H100 2026-12-07 (runs 156-173, 720 rows a mode): the least spread of a
# row was 0.002 median / 0.009 p99 on graph replays, where 2 rows had 0.22 and 0.26 (2048x256x256
# nt: every column 18-38 µs a call against ~6 offline); offline 0.025 / 0.048, max 0.069. Server
# mode is left alone (its idle gaps and cold L2 are its spread).
DISTURBED = {"offline": 0.15, "graph": 0.05}
_SIDE: dict = {}        # graph mode: one side stream per device, made once


@dataclass
class Config:
    min_calls: int = 30
    min_ms: float = 100.0
    server_calls: int = 50
    gap_ms: float = 2.0
    eager_calls: int = 200
    eager_ms: float = 20.0       # cap on eager's wall time per candidate (it shows host cost, not GPU)
    tune_calls: int = 5
    retune: bool = False
    seed: int = 0


def measure_shape(problem, names, cfg: Config, modes, peak, kernel_for=None, device="cuda", strict=False) -> dict:
    """One row (report.py's columns) for one problem. `device` is "cuda" but for CPU tests. `strict`:
    a baseline that serves the layout but could not be built raises BaselineUnavailable (one line)
    rather than leaving best-cublas without it. With mode graph all of it (the baselines' prepare
    included: the cuBLAS handle keeps that stream) runs on a side stream."""
    import torch
    ctx = contextlib.nullcontext()
    if "graph" in modes and device == "cuda":
        dev = torch.cuda.current_device()
        if dev not in _SIDE:
            _SIDE[dev] = torch.cuda.Stream()
        _SIDE[dev].wait_stream(torch.cuda.current_stream())
        ctx = torch.cuda.stream(_SIDE[dev])
    with ctx:
        return _measure_shape(problem, names, cfg, modes, peak, kernel_for, device, strict)


def _measure_shape(problem, names, cfg: Config, modes, peak, kernel_for, device, strict) -> dict:
    import torch
    from .. import baselines, timing
    from ..check import reference
    from ..stats import flop_class
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    a = torch.randn(problem.M, problem.K, device=device, dtype=torch.float16, generator=gen)
    b = torch.randn(*problem.b_shape(), device=device, dtype=torch.float16, generator=gen)
    c = torch.empty(problem.M, problem.N, device=device, dtype=torch.float16)
    ref = reference(a, b, problem.layout)
    reasons: dict[str, str] = {}
    fns = baselines.prepare(names, problem, a, b, c, ref=ref, reasons=reasons,
                            tune_calls=cfg.tune_calls, retune=cfg.retune)
    dropped = [n for n in names if n not in fns and not baselines.serves(n, problem.layout)]
    if strict and dropped:
        raise baselines.BaselineUnavailable(
            f"{problem}: best-cublas cannot be formed: baseline {dropped[0]} could not be built "
            f"({reasons.get(dropped[0], 'unavailable')}); name the baselines to run without it (--baselines ...)")
    del ref
    # ts (POSIX): when the row was timed, so a later run can tell which entries were filed after it
    # (compare_rows.stale_rows)
    row: dict = {"shape": problem.shape, "M": problem.M, "N": problem.N, "K": problem.K,
                 "layout": problem.layout, "gflop": problem.flops / 1e9, "class": flop_class(problem.flops),
                 "floor_us": timing.roofline_us(problem, peak), "ts": round(time.time(), 1)}
    algo = getattr(fns.get("cublaslt-autotune"), "lt_algo", None)
    if algo:
        # the algorithm autotune's column timed (the cached one, or this run's pick): the evidence
        # `cudal2 registry file-cublas` counts for a stored algorithm must be of that algorithm
        row["cublaslt-autotune_algo"] = list(algo)
    cands = list(names)
    if kernel_for is not None:
        cands.append("cudal2")
        kernel, status = kernel_for(problem)
        if kernel is not None:
            c2 = torch.empty_like(c)
            fns["cudal2"] = lambda: kernel(a, b, c2)
            # what runs: a generated kernel, or (a cublas entry) the cuBLAS call dispatch makes
            row["cudal2_via"] = getattr(kernel, "via", None) or "kernel"
            spec = getattr(kernel, "spec", None)
            if getattr(spec, "text", None):
                # which kernel ran: the report counts wins by backend and family from the row itself
                row["cudal2_spec"] = spec.text
        else:
            reasons["cudal2"] = status
    for n in cands:
        row[f"status_{n}"] = "ok" if n in fns else reasons.get(n, "unavailable")
    if not fns:
        return row
    def timed(mode):
        if mode == "offline":
            return timing.offline(fns, min_calls=cfg.min_calls, min_ms=cfg.min_ms)
        if mode == "graph":
            from .. import timing_graph
            return timing_graph.graph(fns, replays=GRAPH_REPLAYS)
        return timing.server(fns, calls=cfg.server_calls, gap_ms=cfg.gap_ms, seed=cfg.seed)
    for mode in modes:
        st = timed(mode)
        first = disturbed([x.spread for x in st.values()], mode)
        if first is not None:
            row[f"{mode}_retimed"] = round(first, 4)
            st = timed(mode)
        for n, s in st.items():
            for k in STATS:
                row[f"{mode}_{n}_{k}"] = getattr(s, k)
        _ratios(row, mode, list(st), names)
    est = {n: row.get(f"offline_{n}_median_us") or row.get(f"server_{n}_median_us") for n in fns}
    for n, fn in fns.items():
        calls = max(10, min(cfg.eager_calls, math.ceil(cfg.eager_ms * 1000.0 / max(est[n] or 1.0, 1.0))))
        row[f"eager_{n}_us"] = timing.eager(fn, calls=calls).median_us
    return row


def disturbed(spreads, mode: str) -> float | None:
    """The least of a timing's candidate spreads where every one passed DISTURBED[mode], else None
    (bench/issue20_table.py reads the same rule off recorded rows)."""
    bar = DISTURBED.get(mode)
    least = min(spreads, default=None)
    return least if bar is not None and least is not None and least > bar else None


def _ratios(row: dict, mode: str, timed: list[str], names) -> None:
    key = primary(mode)
    t = {n: row[f"{mode}_{n}_{key}"] for n in timed}
    base = [n for n in timed if n in names]
    if base:
        best = min(base, key=lambda n: t[n])
        row[f"{mode}_best_cublas"] = best
        row[f"{mode}_best_cublas_us"] = t[best]
        for n in timed:
            row[f"{mode}_{n}_vs_best"] = t[best] / t[n]
    for n in timed:
        row[f"{mode}_{n}_roofline"] = row["floor_us"] / t[n]
    if "cudal2" in t:
        for n in base:
            row[f"{mode}_cudal2_speedup_{n}"] = t[n] / t["cudal2"]


def summaries(rows, modes, names) -> dict:
    """Per mode: each baseline vs best-cublas, and cudal2 vs best-cublas and vs each baseline,
    each as the summary over all shapes and per work class."""
    from ..stats import summarize_by_class
    flops = {r["shape"]: r["gflop"] * 1e9 for r in rows}
    out: dict = {}
    for mode in modes:
        comps = {f"{n} vs best-cublas": f"{mode}_{n}_vs_best" for n in names}
        comps["cudal2 vs best-cublas"] = f"{mode}_cudal2_vs_best"
        comps.update({f"cudal2 vs {n}": f"{mode}_cudal2_speedup_{n}" for n in names})
        res = {}
        for label, col in comps.items():
            sp = {r["shape"]: r[col] for r in rows if r.get(col) is not None}
            if sp:
                res[label] = {k: (v.to_dict() if v else None) for k, v in summarize_by_class(sp, flops).items()}
        out[mode] = res
    return out


def summary_lines(summ: dict) -> list[str]:
    from ..stats import Summary
    lines = []
    for mode, comps in summ.items():
        for label, by in comps.items():
            if by.get("all"):
                lines.append(f"[{mode}] " + Summary(**by["all"]).line(label))
    return lines
