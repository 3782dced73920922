"""`cudal2 compare`: cudal2's kernel (or none) beside the five baselines, by the PROTOCOL clock.

  cudal2 compare [--shapes grid|grid:N|FILE|MxNxK,...] [--layout nn|nt] [--mode offline|server|graph|both|LIST]
                 [--baselines LIST] [--registry PATH | --spec TEXT] [--csv F] [--json F] [--plot F.png]

Per shape: fresh randn inputs, the fp32 reference once, every baseline checked against it (and the
cudal2 kernel through check_kernel), then all candidates timed together (interleaved) in each mode,
plus each one's eager host latency. Mode `graph` is the PROTOCOL clock by CUDA-graph replays
(cudal2.timing_graph: no event between calls, where the offline loop records one after every call,
which costs a ~5 µs kernel ~2 µs of GPU time, H100 2026-12-06); with it the whole shape runs on a side
stream (capture cannot use the legacy default stream). The measuring is cli/compare_measure.py's.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import typer

from ..report import ALL_MODES, MODES, primary
from .compare_measure import Config, measure_shape, summaries, summary_lines

def kernel_source(spec_text: Optional[str], registry: Optional[str], device) -> Callable | None:
    """Returns problem -> (kernel | None, status), or None when compare runs baselines only."""
    from ..backends import build_kernel
    from ..check import check_kernel
    from ..spec import KernelSpec, SpecError, validate
    if spec_text is None and registry is None:
        return None
    if spec_text is not None:
        spec = KernelSpec.parse(spec_text)
        lookup = lambda p: spec  # noqa: E731
    else:
        try:
            from ..registry import Registry
        except ImportError as e:
            raise RuntimeError(f"--registry needs cudal2.registry, which failed to import ({e})") from None
        reg = Registry.load(registry)

        def lookup(p):
            e = reg.lookup(p, device.key)
            if e is not None and e.backend == "cublas" and e.problem == p.text:
                return e          # cuBLAS won: time the cuBLAS call dispatch makes (lt_dispatch)
            return KernelSpec.parse(e.spec) if e is not None and e.spec else None

    def get(problem):
        spec = lookup(problem)
        if spec is None:
            return None, "unavailable: the registry has no cudal2 kernel for this shape and device"
        try:
            if isinstance(spec, KernelSpec):
                validate(spec, problem, device)
                kernel = build_kernel(spec, problem, device)
            else:
                from .. import lt_dispatch
                if spec.lt_algo is None:
                    # measure_shape prepared the baselines first, so autotune's choice for this
                    # shape is in the cache now: record it, and time what dispatch will run.
                    algo = lt_dispatch.cached_algo(device.key, problem.text)
                    if algo is not None:
                        reg.set_lt_algos(device.key, {problem.text: algo})
                        spec = reg.lookup(problem, device.key)
                target, words, why = lt_dispatch.choose(spec, lt_dispatch.lt_version())
                if target == "torch":
                    return None, f"unavailable: cuBLAS won and dispatch calls torch.matmul ({why})"
                kernel = lt_dispatch.LtKernel(problem, words)
        except SpecError as e:
            return None, f"unavailable: spec not valid here ({e})"
        except Exception as e:  # CompileError / LaunchError: reported per shape, the run goes on
            return None, f"invalid: build failed ({str(e).splitlines()[0][:200]})"
        # Edges are other shapes than the one being timed; check_kernel's other five run here.
        rep = check_kernel(kernel, problem, "cuda", checks=("random", "exact", "poison", "guard", "fresh"))
        if not rep.passed:
            return None, f"invalid: {rep.reason}"
        return kernel, "ok"
    return get


def _table(rows, mode, names, has_kernel):
    from rich.table import Table
    key = primary(mode)
    t = Table(title=f"{mode} ({key.split('_')[0]} GPU µs per call)")     # offline, graph: median; server: mean
    t.add_column("shape")
    cands = list(names) + (["cudal2"] if has_kernel else [])
    for n in cands:
        t.add_column(n, justify="right")
    t.add_column("best-cublas")
    if has_kernel:
        t.add_column("cudal2/best", justify="right")
    t.add_column("floor/best", justify="right")
    if has_kernel:
        t.add_column("floor/cudal2", justify="right")
    t.add_column(f"eager {'cudal2' if has_kernel else 'torch'} µs", justify="right")
    fmt = lambda v, f="{:.2f}": "-" if v is None else f.format(v)  # noqa: E731
    for r in rows:
        cells = [f"{r['shape']}:{r['layout']}"] + [fmt(r.get(f"{mode}_{n}_{key}")) for n in cands]
        cells.append(r.get(f"{mode}_best_cublas", "-"))
        if has_kernel:
            cells.append(fmt(r.get(f"{mode}_cudal2_vs_best"), "{:.3f}x"))
        best = r.get(f"{mode}_best_cublas")
        cells.append(fmt(r.get(f"{mode}_{best}_roofline") if best else None, "{:.0%}"))
        if has_kernel:
            cells.append(fmt(r.get(f"{mode}_cudal2_roofline"), "{:.0%}"))
        cells.append(fmt(r.get(f"eager_{'cudal2' if has_kernel else 'torch'}_us")))
        t.add_row(*cells)
    return t


def parse_baselines(text: str) -> tuple[str, ...]:
    from ..baselines import NAMES
    from .errors import UserError
    if text.strip() == "all":
        return NAMES
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in NAMES]
    if bad or not names:
        raise UserError(f"--baselines: {bad[0] if bad else text!r} is not a baseline (choose from all, {', '.join(NAMES)})")
    return names


def parse_modes(mode: str) -> tuple[str, ...]:
    """offline | server | graph | both (offline and server) | a comma list of the three."""
    from .errors import UserError
    if mode == "both":
        return MODES
    out = tuple(dict.fromkeys(m.strip() for m in mode.split(",") if m.strip()))
    if not out or any(m not in ALL_MODES for m in out):
        raise UserError(f"--mode {mode!r}: choose offline, server, graph, both, or a comma list such as offline,graph")
    return out


def compare_cmd(
    shapes: str = typer.Option("grid:50", "--shapes", help="grid | grid:N (every N-th) | FILE | MxNxK,..."),
    layout: str = typer.Option("nn", "--layout", help="nn (B is [K,N]) or nt (B is [N,K])"),
    mode: str = typer.Option("offline", "--mode", help="offline, server, graph (CUDA-graph replays: no event "
                             "between calls), both (offline and server) or a comma list, e.g. offline,graph"),
    baselines_arg: Optional[str] = typer.Option(
        None, "--baselines", help="all (the default: compare refuses to run when one cannot be built, e.g. "
        "nvmath-python missing) or a comma list of baselines, e.g. torch, to run on those alone"),
    registry: Optional[str] = typer.Option(None, "--registry", help="time the registry's kernel per shape"),
    spec: Optional[str] = typer.Option(None, "--spec", help="time this kernel spec (key=value ...)"),
    csv_path: Optional[str] = typer.Option(None, "--csv", help="write every figure as CSV"),
    json_path: Optional[str] = typer.Option(None, "--json", help="write every figure as JSON"),
    plot: Optional[str] = typer.Option(None, "--plot", help="heatmap PNG (a _dist PNG is written beside)"),
    min_calls: int = typer.Option(30, "--min-calls", help="offline: at least this many calls per candidate"),
    min_ms: float = typer.Option(100.0, "--min-ms", help="offline: at least this much GPU time per candidate"),
    server_calls: int = typer.Option(50, "--server-calls", help="server: calls per candidate"),
    gap_ms: float = typer.Option(2.0, "--gap-ms", help="server: mean idle gap before each call"),
    tune_calls: int = typer.Option(5, "--tune-calls", help="cublaslt-autotune: timed calls per candidate"),
    eager_calls: int = typer.Option(200, "--eager-calls", help="eager: calls per measurement (N calls, one sync)"),
    eager_ms: float = typer.Option(20.0, "--eager-ms", help="eager: cap on host wall time per candidate"),
    seed: int = typer.Option(0, "--seed", help="seed of the random inputs"),
    retune: bool = typer.Option(False, "--retune", help="cublaslt-autotune: ignore the on-disk choice"),
    remeasure: bool = typer.Option(False, "--remeasure-roofline", help="measure P, BW and launch again"),
    table: bool = typer.Option(True, "--table/--no-table", help="print the per-shape tables"),
    resume: bool = typer.Option(False, "--resume", help="go on from --json: keep its rows of these shapes "
                                "that still time what would run now (same settings), time the others; "
                                "the JSON is rewritten as rows come in"),
    warm: bool = typer.Option(True, "--warm/--no-warm", help="with --registry or --spec: compile the kernels "
                              "of the shapes to time first, in parallel CPU processes, so no shape's build "
                              "compiles on the GPU's clock"),
    time_limit: Optional[float] = typer.Option(
        None, "--time-limit", help="seconds; time no new shape after that (with --json the rows so far are "
        "saved: --resume goes on)"),
) -> None:
    """Time cudal2's kernel (or none) beside torch, cuBLAS and cuBLASLt; print and save the figures."""
    from .errors import UserError, fail
    from ..problems import ProblemError, parse_shapes
    from ..spec import KernelSpec, SpecError
    try:
        if layout not in ("nn", "nt"):
            raise UserError(f"--layout {layout!r}: choose nn or nt")
        modes = parse_modes(mode)
        names = parse_baselines(baselines_arg or "all")
        problems = parse_shapes(shapes, layout)
        if not problems:
            raise UserError(f"--shapes {shapes!r} names no shapes")
        if spec is not None and registry is not None:
            raise UserError("give --spec or --registry, not both")
        if spec is not None:
            KernelSpec.parse(spec)
        if plot and not plot.lower().endswith((".png", ".pdf", ".svg")):
            raise UserError(f"--plot {plot!r}: give a .png, .pdf or .svg file name")
        if min_calls < 1 or server_calls < 1 or tune_calls < 1 or min_ms < 0 or gap_ms < 0:
            raise UserError("--min-calls, --server-calls and --tune-calls must be >= 1; --min-ms, --gap-ms >= 0")
        if resume and not json_path:
            raise UserError("--resume goes on from a compare's --json file: give --json")
        if time_limit is not None and time_limit <= 0:
            raise UserError(f"--time-limit must be > 0 seconds (got {time_limit})")
    except (UserError, ProblemError, SpecError) as e:
        fail(str(e))
        return
    from ..device import current, gpu_available
    if not gpu_available():
        fail("no CUDA GPU here: compare times kernels on a GPU (torch.cuda.is_available() is False)", code=3)
    strict = baselines_arg is None
    from .. import baselines as bl
    if strict and (missing := bl.unbuildable(names)):   # before any GPU work
        fail(bl.refusal(missing))
    cfg = Config(min_calls=min_calls, min_ms=min_ms, server_calls=server_calls, gap_ms=gap_ms,
                 eager_calls=eager_calls, eager_ms=eager_ms, tune_calls=tune_calls, retune=retune, seed=seed)
    device = current()
    try:
        kernel_for = kernel_source(spec, registry, device)
    except Exception as e:
        fail(str(e).splitlines()[0])
        return
    deadline = time.monotonic() + time_limit if time_limit else None   # the compile ahead counts
    from .compare_resume import RowSink, resume_state
    source = "registry" if registry is not None else ("spec" if spec is not None else "none")
    kept, todo, runs = [], problems, []
    if resume:
        try:
            kept, todo, runs = resume_state(json_path, problems, cfg, modes, names, source, registry, spec, device)
        except (ValueError, OSError, EOFError) as e:     # another compare's settings; not a compare JSON
            fail(f"--resume {json_path}: {e}")
            return
    if warm and kernel_for is not None and todo:
        _warm(todo, spec, registry, device)
    sink = RowSink(problems, kept, runs, json_path, modes, names, summaries)
    try:
        run(todo, names, modes, cfg, kernel_for, remeasure=remeasure, strict=strict, on_row=sink.add,
            meta_extra={"kernel_source": source}, meta_first=sink.run_meta, deadline=deadline)
    except bl.BaselineUnavailable as e:
        fail(str(e))
        return
    rows, meta = sink.rows(), sink.meta()
    summ = summaries(rows, modes, names)
    from rich.console import Console
    con = Console()
    if table:
        for m in modes:
            con.print(_table(rows, m, names, kernel_for is not None))
    for line in summary_lines(summ):
        con.print(line)
    save(rows, summ, meta, csv_path, json_path, plot, modes)
    if time_limit and (left := len(problems) - len(rows)) > 0:
        con.print(f"--time-limit {time_limit:g} s: {left} of {len(problems)} shapes not timed"
                  + (f"; run again with --resume --json {json_path}" if json_path else ""))


def _warm(todo, spec_text, registry, device) -> None:
    """Compile ahead (cudal2.evaluate.warm) the kernels `kernel_for` will build for `todo`. H100 runs
    132-133 (2026-12-06): --registry compares of 152 small shapes ran ~1.8 s a shape, the kernel of
    each compiled in turn between its timings."""
    from ..evaluate.warm import registry_pairs, warm_compiles
    from ..spec import KernelSpec
    if spec_text is not None:
        pairs = [(KernelSpec.parse(spec_text), p) for p in todo]
    else:
        from ..registry import Registry
        pairs = registry_pairs(Registry.load(registry), todo, device.key)
    n, failed, secs = warm_compiles(pairs, device)
    if n:
        print(f"compiled {n} kernels ahead in {secs:.1f} s ({failed} failed: their rows say why)", flush=True)


def run(problems, names, modes, cfg: Config, kernel_for=None, *, remeasure=False, on_row=None,
        progress=True, strict=False, meta_extra: dict | None = None, meta_first: dict | None = None,
        deadline: float | None = None):
    """All shapes, with a rich progress bar; returns rows, summaries and meta (versions, config, peak).
    `meta_extra` joins the config; `meta_first`, a dict, is filled with the meta before the first
    shape is timed (what `on_row` may save beside the rows so far). `deadline` (time.monotonic()):
    no shape starts after it; the rows are those timed."""
    from dataclasses import asdict

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..report import versions
    from ..timing import get_peak
    peak = get_peak(force=remeasure)
    meta = {"versions": versions(), "config": {**asdict(cfg), "modes": list(modes), "baselines": list(names),
                                               "baselines_named": not strict, **(meta_extra or {})},
            "peak": peak.to_dict()}
    if meta_first is not None:
        meta_first.update(meta)
    rows = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress) as bar:
        task = bar.add_task("compare", total=len(problems))
        for p in problems:
            if deadline is not None and time.monotonic() >= deadline:
                break
            bar.update(task, description=f"compare {p}")
            row = measure_shape(p, names, cfg, modes, peak, kernel_for, strict=strict)
            rows.append(row)
            if on_row is not None:
                on_row(row)
            bar.advance(task)
    return rows, summaries(rows, modes, names), meta


def save(rows, summ, meta, csv_path, json_path, plot, modes) -> None:
    from ..report import write_csv, write_json, write_plots
    if csv_path:
        write_csv(csv_path, rows, meta)
    if json_path:
        write_json(json_path, rows, meta, summ)
    if plot:
        write_plots(rows, plot, modes)


def register(app) -> None:
    app.command("compare")(compare_cmd)
