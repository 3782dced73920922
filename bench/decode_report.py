"""Issue 20's decode-set table from a compare run, as dispatched: per M and per projection, cudal2
vs best-cublas offline and server, with achieved TB/s (PROTOCOL bytes 2(MK + KN + MN) / time) and
that over the compare run's measured copy bandwidth.

  python3 bench/decode_report.py COMPARE.json [--configs bench/configs/llama-3-8b.json,...]
                                 [--tokens 1,2,4,8,16,32,64] [--out DIR]

COMPARE.json is `cudal2 compare --json` over a set holding the decode shapes (the model set holds
them). A shape that cudal2 dispatches to torch.matmul has no cudal2 column: its time is
torch.matmul's (that is what runs). Writes decode_set.md and decode_set.csv under --out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from cudal2.report import primary, write_rows_csv

ROOT = Path(__file__).resolve().parents[1]
# compare modes a decode row may hold: offline and CUDA-graph replays (medians), server (a mean)
MODES = ("offline", "graph", "server")
DEFAULT_CONFIGS = ("bench/configs/llama-3-8b.json", "bench/configs/qwen2.5-7b.json")


def geo(xs) -> float:
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def dispatched_us(row: dict, mode: str) -> float | None:
    """cudal2's time as dispatched: its own column, else torch.matmul's (a cuBLAS entry running it)."""
    key = primary(mode)
    t = row.get(f"{mode}_cudal2_{key}")
    return t if t is not None else row.get(f"{mode}_torch_{key}")


def decode_rows(compare: dict, problems) -> list[dict]:
    by = {(r["M"], r["N"], r["K"], r["layout"]): r for r in compare["rows"]}
    bw = compare["peak"]["bw"]
    out = []
    for p in problems:
        r = by.get((p.M, p.N, p.K, p.layout))
        if r is None:
            continue
        nbytes = 2 * (p.M * p.K + p.K * p.N + p.M * p.N)
        row = {"shape": p.shape, "M": p.M, "N": p.N, "K": p.K, "via": r.get("cudal2_via") or "torch"}
        for mode in MODES:
            t, b = dispatched_us(r, mode), r.get(f"{mode}_best_cublas_us")
            if not t or not b:
                continue
            row.update({f"{mode}_us": round(t, 3), f"{mode}_best_cublas_us": round(b, 3),
                        f"{mode}_vs_best": round(b / t, 4), f"{mode}_tbs": round(nbytes / t / 1e6, 3),
                        f"{mode}_cublas_tbs": round(nbytes / b / 1e6, 3),
                        f"{mode}_of_copy": round(nbytes / t / 1e6 / (bw / 1e12), 3)})
        out.append(row)
    return out


def table(rows: list[dict], bw: float) -> str:
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")   # noqa: E731
    modes = [m for m in MODES if any(f"{m}_vs_best" in r for r in rows)]

    def gw(rs, mode):
        xs = [r[f"{mode}_vs_best"] for r in rs if f"{mode}_vs_best" in r]
        return f"{geo(xs):.3f} / {min(xs):.3f}" if xs else "-"
    lines = [f"copy bandwidth (the compare run's, read + write): {bw / 1e12:.2f} TB/s", "",
             "| M | shapes | " + " | ".join(f"{m} vs best-cublas, geomean / worst" for m in modes)
             + " | TB/s offline, cudal2 / cuBLAS (median) | of copy (median) |",
             "| --- | --- | " + " | ".join("---" for _ in modes) + " | --- | --- |"]
    for m in sorted({r["M"] for r in rows}):
        rs = [r for r in rows if r["M"] == m and "offline_vs_best" in r]
        lines.append(f"| {m} | {len(rs)} | " + " | ".join(gw(rs, mode) for mode in modes)
                     + f" | {med([r['offline_tbs'] for r in rs]):.2f} / {med([r['offline_cublas_tbs'] for r in rs]):.2f} | "
                     f"{med([r['offline_of_copy'] for r in rs]):.2f} |")
    rs = [r for r in rows if "offline_vs_best" in r]
    lines.append(f"| all | {len(rs)} | " + " | ".join(gw(rs, mode) for mode in modes) + " | | |")
    lines += ["", "Per shape: cudal2 as dispatched, TB/s and the fraction of the copy's (offline).", "",
              "| shape | dispatched to | " + " | ".join(f"{m} vs best" for m in modes)
              + " | TB/s offline (cuBLAS) | of copy | server TB/s (cuBLAS) |",
              "| --- | --- | " + " | ".join("---" for _ in modes) + " | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['via']} | "
                     + " | ".join(f"{r.get(f'{mode}_vs_best', float('nan')):.3f}" for mode in modes)
                     + f" | {r.get('offline_tbs', float('nan')):.2f} ({r.get('offline_cublas_tbs', float('nan')):.2f}) | "
                     f"{r.get('offline_of_copy', float('nan')):.2f} | "
                     f"{r.get('server_tbs', float('nan')):.2f} ({r.get('server_cublas_tbs', float('nan')):.2f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compare", help="cudal2 compare --json output")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64")
    ap.add_argument("--out", default=None, help="folder for decode_set.md / .csv (default: beside COMPARE)")
    args = ap.parse_args(argv)
    from cudal2.problems import problems_from_hf_config
    from cudal2.report import read_json
    try:
        compare = read_json(args.compare)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tokens = [int(t) for t in args.tokens.split(",") if t]
    problems, seen = [], set()
    for cfg in [c for c in args.configs.split(",") if c]:
        path = Path(cfg) if Path(cfg).is_absolute() else ROOT / cfg
        for p in problems_from_hf_config(path, tokens, "nt"):
            if p not in seen:
                seen.add(p)
                problems.append(p)
    rows = decode_rows(compare, problems)
    if not rows:
        print(f"error: none of the {len(problems)} decode shapes is in {args.compare}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.compare).parent
    out.mkdir(parents=True, exist_ok=True)
    text = (f"Decode set (issue 20): {', '.join(Path(c).stem for c in args.configs.split(',') if c)}, "
            f"M in {{{args.tokens}}}, nt; {len(rows)} of {len(problems)} shapes in {Path(args.compare).name}; "
            f"cudal2 as dispatched.\n\n" + table(rows, compare["peak"]["bw"]) + "\n")
    (out / "decode_set.md").write_text(text)
    write_rows_csv(out / "decode_set.csv", rows,
                   (f"python3 bench/decode_report.py {' '.join(argv if argv is not None else sys.argv[1:])}",))
    print(text.split("\n\n")[1] if "\n\n" in text else text)
    print(f"-> {out / 'decode_set.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
