"""Writing what compare measured: CSV and JSON (every figure, plus the versions), and plots.

A row is a flat dict, one per shape. Columns (cand = a baseline name or `cudal2`, mode = offline |
server | graph):
  shape M N K layout gflop class floor_us           the problem and its roofline floor
  status_<cand>                                      ok | unavailable: ... | invalid: ...
  <mode>_<cand>_<stat>                               Stats fields (median_us mean_us p50_us p99_us min_us spread n)
  <mode>_best_cublas, <mode>_best_cublas_us          which baseline was fastest, and its time
  <mode>_<cand>_vs_best                              t_best_cublas / t_cand (> 1: faster than best-cublas)
  <mode>_cudal2_speedup_<baseline>                   t_baseline / t_cudal2
  <mode>_<cand>_roofline                             t_floor / t_cand (<= 1)
  eager_<cand>_us                                    host wall µs per call (median of repeats)
The time a mode's ratios use is `primary(mode)`: the offline and graph medians, the server mean.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

SCHEMA = "cudal2.compare/1"
MODES = ("offline", "server")                 # --mode both
# graph: the PROTOCOL clock by CUDA-graph replays (cudal2.timing_graph), no event between calls
ALL_MODES = MODES + ("graph",)


def primary(mode: str) -> str:
    return "mean_us" if mode == "server" else "median_us"


# ---- versions --------------------------------------------------------------------------------------
def versions() -> dict:
    """Software, card and commit (cudal2.versions.collect)."""
    from .versions import collect
    return collect()


# ---- CSV / JSON ------------------------------------------------------------------------------------
def columns(rows: Sequence[Mapping]) -> list[str]:
    """Every key of every row, in first-seen order (rows of one run can differ: a baseline invalid on one shape)."""
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            seen.setdefault(k, None)
    return list(seen)


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)


def _parse(s: str):
    if s == "":
        return None
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def write_csv(path, rows: Sequence[Mapping], meta: Mapping) -> Path:
    """Meta (schema, versions, config) as `# key=json` lines first, then the table."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = columns(rows)
    with path.open("w", newline="") as f:
        f.write(f"# schema={json.dumps(SCHEMA)}\n")
        for k, v in meta.items():
            f.write(f"# {k}={json.dumps(v, sort_keys=True)}\n")
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in cols])
    return path


def write_rows_csv(path, rows: Sequence[Mapping], comments: Sequence[str] = ()) -> Path:
    """The bench scripts' CSV: each comment as a `# ` line (the command, card, commit), then a
    table whose columns are every row's keys in first-seen order (a missing cell is empty)."""
    path = Path(path)
    with path.open("w", newline="") as f:
        f.writelines(f"# {c}\n" for c in comments)
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    return path


def read_rows_csv(path) -> list[dict]:
    """write_rows_csv's table back (plain or .gz), its `# ` comment lines skipped; cells as strings."""
    import gzip
    path = Path(path)
    with (gzip.open(path, "rt", newline="") if path.suffix == ".gz" else path.open(newline="")) as f:
        return list(csv.DictReader(ln for ln in f if not ln.startswith("#")))


def read_csv(path) -> tuple[list[dict], dict]:
    meta, body = {}, []
    for line in Path(path).read_text().splitlines():
        if line.startswith("# ") and "=" in line and not body:
            k, v = line[2:].split("=", 1)
            meta[k] = json.loads(v)
        else:
            body.append(line)
    reader = csv.reader(body)
    cols = next(reader, [])
    rows = [{c: _parse(v) for c, v in zip(cols, rec) if v != ""} for rec in reader]
    return rows, meta


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def write_json(path, rows: Sequence[Mapping], meta: Mapping, summary: Mapping | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": SCHEMA, **_clean(dict(meta)), "summary": _clean(dict(summary or {})),
           "rows": [_clean({k: v for k, v in r.items() if v is not None}) for r in rows]}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)
    return path


def load_json(path):
    """A JSON file, gzip-compressed or not (the committed compares are .json.gz): what it holds."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        import gzip
        raw = gzip.decompress(raw)
    return json.loads(raw)


def read_json(path) -> dict:
    """A `cudal2 compare --json` file (gzipped or not); ValueError if it is not of this schema."""
    doc = load_json(path)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r} is not {SCHEMA!r}")
    return doc


# ---- plots -----------------------------------------------------------------------------------------
def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def heatmap(rows: Sequence[Mapping], series: Mapping[str, str], path, title: str = "") -> Path:
    """One row of panels per series (label -> column of speedups), one panel per K, M down, N across.

    Colour is log2 of the speedup, centred on 1x, so 0.5x and 2x are equally far from white.
    """
    plt = _plt()
    from matplotlib.colors import TwoSlopeNorm
    ks = sorted({r["K"] for r in rows})
    ms = sorted({r["M"] for r in rows})
    ns = sorted({r["N"] for r in rows})
    fig, axes = plt.subplots(len(series), len(ks), figsize=(2.2 * len(ks) + 1.5, 2.2 * len(series) + 0.8),
                             squeeze=False, layout="constrained")
    vals = [math.log2(r[c]) for r in rows for c in series.values() if r.get(c) and r[c] > 0]
    lim = max([0.1] + [abs(v) for v in vals])
    norm = TwoSlopeNorm(vmin=-lim, vcenter=0.0, vmax=lim)
    im = None
    for i, (label, col) in enumerate(series.items()):
        for j, k in enumerate(ks):
            grid = [[float("nan")] * len(ns) for _ in ms]
            for r in rows:
                if r["K"] == k and r.get(col) and r[col] > 0:
                    grid[ms.index(r["M"])][ns.index(r["N"])] = math.log2(r[col])
            ax = axes[i][j]
            im = ax.imshow(grid, cmap="RdBu", norm=norm, origin="lower", aspect="auto")
            ax.set_xticks(range(len(ns)), [str(n) for n in ns], rotation=90, fontsize=5)
            ax.set_yticks(range(len(ms)), [str(m) for m in ms], fontsize=5)
            ax.set_title(f"{label}  K={k}" if j == 0 else f"K={k}", fontsize=7)
            if j == 0:
                ax.set_ylabel("M", fontsize=7)
            if i == len(series) - 1:
                ax.set_xlabel("N", fontsize=7)
    if im is not None:
        cb = fig.colorbar(im, ax=axes, shrink=0.8)
        cb.set_label("log2 speedup (>0: faster)")
    if title:
        fig.suptitle(title, fontsize=9)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def distribution(rows: Sequence[Mapping], series: Mapping[str, str], path, title: str = "") -> Path:
    """Histogram of each series' speedups over shapes, on a log axis, with its geomean marked."""
    plt = _plt()
    from .stats import geomean
    fig, ax = plt.subplots(figsize=(7, 4))
    allv = [r[c] for r in rows for c in series.values() if r.get(c) and r[c] > 0]
    lo, hi = (min(allv), max(allv)) if allv else (0.5, 2.0)
    lo, hi = min(lo, 0.95), max(hi, 1.05)
    bins = [lo * (hi / lo) ** (i / 40) for i in range(41)]
    for label, col in series.items():
        v = [r[col] for r in rows if r.get(col) and r[col] > 0]
        if not v:
            continue
        g = geomean(v)
        ax.hist(v, bins=bins, alpha=0.45, label=f"{label} (geomean {g:.3f}x, n={len(v)})")
        ax.axvline(g, ls="--", lw=0.8)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("speedup (t_other / t_this)")
    ax.set_ylabel("shapes")
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_series(rows: Sequence[Mapping], mode: str) -> dict[str, str]:
    """What to plot: cudal2 against best-cublas and each baseline if it ran, else each baseline vs best."""
    cols = columns(rows)
    if f"{mode}_cudal2_vs_best" in cols:
        out = {"cudal2 vs best-cublas": f"{mode}_cudal2_vs_best"}
        out.update({f"cudal2 vs {c.rsplit('_', 1)[1]}": c for c in cols
                    if c.startswith(f"{mode}_cudal2_speedup_")})
        return out
    return {f"{c[len(mode) + 1:-len('_vs_best')]} vs best": c for c in cols
            if c.startswith(f"{mode}_") and c.endswith("_vs_best")}


def write_plots(rows: Sequence[Mapping], path, modes: Iterable[str]) -> list[Path]:
    """`path` is the heatmap of the first mode; other files get `_<mode>` / `_dist` suffixes."""
    path = Path(path)
    out = []
    for i, mode in enumerate(modes):
        series = plot_series(rows, mode)
        if not series:
            continue
        stem = path.stem if i == 0 else f"{path.stem}_{mode}"
        out.append(heatmap(rows, series, path.with_name(stem + path.suffix), title=f"{mode} speedups"))
        out.append(distribution(rows, series, path.with_name(stem + "_dist" + path.suffix),
                                title=f"{mode} speedup distribution"))
    return out
