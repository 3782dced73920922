"""A spec sweep's winners as `cudal2 generate --lead-specs` lines, so the search files them.

    python3 bench/sweep_leads.py SWEEP.csv [SWEEP.csv ...] --out LEADS.txt [--shapes-out SHAPES.txt]
        [--min-ratio 1.01] [--registry DIR] [--device h200-sm90]

A sweep (bench/hopper_sweep.py) times specs at 10 ms a function and files nothing; the search
(`cudal2 generate`) re-checks and times its finalist in full and files it where it beats best-cublas
by --file-margin. Per (shape, layout) this takes the sweep's fastest spec that ran at least
--min-ratio of best-cublas, and keeps it only where the registry has no entry at that shape or its
entry's speedup over best-cublas is lower than the sweep's (the registry replaces an entry only by a
higher one anyway: such a lead would spend an evaluation for nothing). --shapes-out writes the kept
shapes, one `MxNxK` a line per layout file (`SHAPES.nt.txt`, `SHAPES.nn.txt`), for generate's
--shapes; the leads file carries the layout in each line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def winners(rows, min_ratio: float) -> dict[tuple[str, str], dict]:
    """{(shape, layout): the row of its fastest spec} over the rows that ran at >= min_ratio."""
    best: dict[tuple[str, str], dict] = {}
    for r in rows:
        try:
            ratio = float(r.get("vs_best_cublas") or "nan")
        except ValueError:
            continue
        if r.get("status") != "ok" or not ratio >= min_ratio:
            continue
        key = (r["shape"], r["layout"])
        if key not in best or ratio > float(best[key]["vs_best_cublas"]):
            best[key] = r
    return best


def filed_speedups(registry: str | None, device: str) -> dict[str, float]:
    """{problem text: the entry's speedup over best-cublas} of `device`'s entries (cuBLAS: 1.0)."""
    from cudal2.registry import Registry
    from cudal2.registry.index import shipped_root
    reg = Registry.load(Path(registry) if registry else shipped_root())
    out = {}
    for e in reg.all(device):
        if e.backend == "cublas" or not e.time_us or not e.best_cublas_us:
            out[e.problem] = 1.0
        else:
            out[e.problem] = e.best_cublas_us / e.time_us
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="+", help="bench/hopper_sweep.py CSV files")
    ap.add_argument("--out", required=True, help="the --lead-specs file to write")
    ap.add_argument("--shapes-out", help="also write SHAPES.<layout>.txt per layout (generate --shapes)")
    ap.add_argument("--min-ratio", type=float, default=1.01, help="a winner ran at least this x best-cublas")
    ap.add_argument("--registry", help="the registry whose entries a winner must beat (default: shipped)")
    ap.add_argument("--device", default="h200-sm90", help="the registry's device key the sweeps ran on")
    args = ap.parse_args(argv)
    from cudal2.report import read_rows_csv
    rows = [r for path in args.sweeps for r in read_rows_csv(path)]
    best = winners(rows, args.min_ratio)
    filed = filed_speedups(args.registry, args.device)
    keep = {k: r for k, r in best.items() if float(r["vs_best_cublas"]) > filed.get(f"{k[0]}:{k[1]}", 0.0)}
    cmd = "python3 bench/sweep_leads.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"# {cmd}", f"# {len(keep)} of {len(best)} sweep winners (>= {args.min_ratio}x best-cublas) beat "
             f"the registry's entry at their shape ({args.device}); the sweep's ratio after each"]
    for (shape, layout), r in sorted(keep.items(), key=lambda kv: -float(kv[1]["vs_best_cublas"])):
        lines.append(f"{shape}:{layout}|{r['spec']}  # {float(r['vs_best_cublas']):.3f}x")
    Path(args.out).write_text("\n".join(lines) + "\n")
    if args.shapes_out:
        stem = Path(args.shapes_out)
        for layout in sorted({k[1] for k in keep}):
            dest = stem.with_name(f"{stem.stem}.{layout}{stem.suffix or '.txt'}")
            dest.write_text("".join(f"{s}\n" for (s, lay) in keep if lay == layout))
            print(f"{dest}: {sum(lay == layout for _, lay in keep)} shapes")
    print(f"{args.out}: {len(keep)} leads ({len(best)} winners, {len(best) - len(keep)} no better than filed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
