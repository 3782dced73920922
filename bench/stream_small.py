"""The stream family on the small class past 64 tokens: its candidate specs for the grid shapes a
card serves worst, as `bench/hopper_sweep.py --pairs` lines (issue 20, 2026-12-07).

    python3 bench/stream_small.py --layout nt --out run/stream_small_nt.pairs
        [--registry DIR] [--device-key KEY --sms N] [--served cublas|all] [--max-ratio 1.10]
        [--n 6] [--limit 0]
    python3 bench/stream_small.py --report SWEEP.csv [SWEEP.csv ...] --out TABLE.md
        what a sweep of those pairs found, per shape, beside the re-read estimate it was ordered by

Why: on the H100 the small class misses its 1.20 only where dispatch serves cuBLAS (80 / 85 shapes
at 0.994-0.995, bench/results/issue20_report.md), and most of those have min(M, N) > 64, where no
stream kernel was allowed until 2026-12-07 (spec_stream.stream_serves). A stream CTA issues its first
loads at entry, with no barrier init, tensor map or producer warp (the ~0.6 us before a lite wgmma
kernel's first TMA load, NOTES 2026-12-05 run 70), which is what a launch-bound shape pays for.

Which shapes, per layout: the 1000 grid's small-class shapes with min(M, N) > 64 whose entry on this
card is a cuBLAS one (--served cublas, the default) or, with --served all, also those whose kernel
entry's speedup over best-cublas is under --max-ratio; cuBLAS-served first, then by the filed speedup,
lowest first, and within each, fewest bytes re-read first (`reread_bytes`: a stream CTA holds at
most 2,048 outputs, so the operands are read again per tile; an estimate of where the family can
win, so that a sweep cut by its time limit has timed those). Which specs:
`cudal2.stream_tiles.stream_candidates` (the one-wave rule, tokens in tiles of 32 and 64), its first --n. The device's limits are read from the card; without one
(--device-key and --sms given), from the sm_90a target with that SM count, for a dry run here.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path


def reread_bytes(problem, spec) -> int:
    """Bytes a stream spec's CTAs read of A and B together: each CTA its rows of the large operand
    and its tokens of the small one over all of K (split-K CTAs a share of K each: the same sum)."""
    import math
    big, small = max(problem.M, problem.N), min(problem.M, problem.N)
    ctas = math.ceil(big / spec.bm) * math.ceil(small / spec.bn)
    return ctas * (spec.bm + spec.bn) * problem.K * 2


def pick(registry, device_key: str, layout: str, served: str, max_ratio: float,
         cost=lambda p: 0) -> list[tuple[float, object]]:
    """[(filed speedup, Problem)] of the small grid shapes past 64 tokens to time, worst served first
    (a cuBLAS entry, or no entry, counts 1.0 and comes before any kernel entry), then by cost(p)."""
    from cudal2.problems import grid
    from cudal2.stats import shape_class
    out = []
    for p in grid(layout):
        if shape_class(p.M, p.N, p.K) != "small" or min(p.M, p.N) <= 64:
            continue
        e = registry.lookup(p, device_key)
        kernel = e is not None and e.backend != "cublas" and e.time_us and e.best_cublas_us
        ratio = e.best_cublas_us / e.time_us if kernel else 1.0
        if not kernel:
            out.append((0, ratio, p))
        elif served == "all" and ratio < max_ratio:
            out.append((1, ratio, p))
    return [(r, p) for _, r, p in sorted(out, key=lambda t: (t[0], t[1], cost(t[2]), t[2].M, t[2].N, t[2].K))]


def report(rows: list[dict]) -> str:
    """A markdown table of a stream sweep's rows (bench/hopper_sweep.py's CSV): per shape its fastest
    checked stream spec over best-cublas and that spec's re-read MB, wins first; then the count of
    wins (>= 1.01x), the geomean over the shapes swept and how the ratio ranks with the estimate."""
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    from cudal2.stats import geomean, spearman
    best, failed = {}, {}
    for r in rows:
        if "family=stream" not in r.get("spec", ""):
            continue
        key = f"{r['shape']}:{r['layout']}"
        if r.get("status") != "ok":
            failed[key] = failed.get(key, 0) + 1
            continue
        if key not in best or float(r["vs_best_cublas"]) > float(best[key]["vs_best_cublas"]):
            best[key] = r
    out = ["| shape | stream spec | µs | best-cublas µs | ratio | re-read MB |", "| --- | --- | --- | --- | --- | --- |"]
    mb = {}
    for key, r in sorted(best.items(), key=lambda kv: -float(kv[1]["vs_best_cublas"])):
        spec = KernelSpec.parse(r["spec"])
        mb[key] = reread_bytes(Problem.parse(key), spec) / 1e6
        short = " ".join(t for t in r["spec"].split() if t.split("=")[0] in ("bm", "bn", "warps", "stages", "split_k"))
        out.append(f"| {key} | {short} | {float(r['us']):.2f} | {float(r['best_cublas_us']):.2f} | "
                   f"{float(r['vs_best_cublas']):.3f} | {mb[key]:.1f} |")
    ratios = {k: float(r["vs_best_cublas"]) for k, r in best.items()}
    wins = sum(v >= 1.01 for v in ratios.values())
    lines = [f"{len(best)} shapes with a checked stream kernel ({sum(failed.values())} specs failed on "
             f"{len(failed)} shapes); {wins} at >= 1.01x best-cublas; geomean "
             f"{geomean(ratios.values()):.3f}" if ratios else "no checked stream kernel in these rows"]
    if len(ratios) >= 3:     # Spearman's rank correlation of the estimate with the ratio (ties share a rank)
        rho = spearman([mb[k] for k in ratios], list(ratios.values()))
        lines.append(f"rank correlation of re-read MB with the ratio: {rho:+.2f} (negative: fewer bytes, faster)")
    return "\n".join(lines + [""] + out) + "\n"


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--report"]:
        ap = argparse.ArgumentParser(description="a stream sweep's rows as a table")
        ap.add_argument("--report", nargs="+", required=True, help="bench/hopper_sweep.py CSV files")
        ap.add_argument("--out", required=True)
        args = ap.parse_args(argv)
        from cudal2.report import read_rows_csv
        text = report([r for path in args.report for r in read_rows_csv(path)])
        Path(args.out).write_text(f"# python3 bench/stream_small.py {' '.join(argv)}\n\n" + text)
        print(text.split("\n")[0])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layout", choices=("nn", "nt"), required=True)
    ap.add_argument("--out", required=True, help="the --pairs file to write")
    ap.add_argument("--registry", default="", help="registry directory (default: the shipped one)")
    ap.add_argument("--device-key", default="", help="the registry's key (default: this card's)")
    ap.add_argument("--sms", type=int, default=0, help="without a card: the SM count the rule plans waves for")
    ap.add_argument("--served", choices=("cublas", "all"), default="cublas",
                    help="cublas: shapes served by cuBLAS; all: also kernel entries under --max-ratio")
    ap.add_argument("--max-ratio", type=float, default=1.10, help="with --served all: kernel entries under this")
    ap.add_argument("--n", type=int, default=6, help="stream specs per shape (the rule's first N)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many shapes (0: all)")
    args = ap.parse_args(argv)
    from cudal2.device import DeviceInfo, current, gpu_available
    from cudal2.registry import Registry
    from cudal2.registry.index import shipped_root
    from cudal2.stream_tiles import stream_candidates

    if gpu_available():
        dev = current()
    elif args.device_key and args.sms > 0:
        dev = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=args.sms)
    else:
        print("error: no GPU here: give --device-key and --sms for a dry run", file=sys.stderr)
        return 2
    key = args.device_key or dev.key
    reg = Registry.load(Path(args.registry) if args.registry else shipped_root())
    if not reg.all(key):
        print(f"error: the registry has no {key} entries", file=sys.stderr)
        return 2
    specs = {}

    def cost(p):            # the rule's specs' fewest re-read bytes (none: last)
        specs[p] = stream_candidates(p, dev, args.n)
        return min((reread_bytes(p, s) for s in specs[p]), default=1 << 62)
    shapes = pick(reg, key, args.layout, args.served, args.max_ratio, cost)
    if args.limit > 0:
        shapes = shapes[:args.limit]
    none = [p for _, p in shapes if not specs[p]]          # no one-wave spec fits (many tiles)
    shapes = [(r, p) for r, p in shapes if specs[p]]
    cmd = "python3 bench/stream_small.py " + " ".join(argv)
    lines = [f"# {cmd}", f"# {key}, {args.layout}: {len(shapes)} small-class shapes past 64 tokens "
             f"(served {args.served}), the stream rule's first {args.n} specs each; the filed speedup after '#'",
             f"# no one-wave stream spec: {' '.join(p.shape for p in none) or 'none'}"]
    n_specs = 0
    for ratio, p in shapes:
        for s in specs[p]:
            lines.append(f"{p.M}x{p.N}x{p.K}:{p.layout}|{s.text}  # filed {ratio:.3f}x, "
                         f"re-reads {reread_bytes(p, s) / 1e6:.1f} MB")
            n_specs += 1
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"{args.out}: {len(shapes)} shapes, {n_specs} specs ({key}, {args.layout}); {len(none)} shapes "
          f"with no one-wave spec")
    return 0 if n_specs else 1


if __name__ == "__main__":
    sys.exit(main())
