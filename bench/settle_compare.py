"""Settle a `cudal2 compare --json` file's stale rows without a card.

    python3 bench/settle_compare.py IN.json[.gz] --out OUT.json[.gz] [--registry DIR]

A row is stale when the registry's entry at its shape dispatches something else than the row timed
(cudal2.compare_rows.stale_rows, judged with the card key and cuBLASLt version IN recorded). Where
that something is torch.matmul, the row's own torch.matmul column, timed in the same interleaved
run, is how a compare records the shape, so the row is settled from it (compare_rows.settle_torch);
the summary is recomputed as `cudal2 compare` computes it, and the other stale rows are listed:
they need the card (`cudal2 compare --resume` re-times them, and settles the same way on its own).
A new file: IN, a committed run's record, is left as it is. The grid compares' rows log has its
own path (`bench/grid_baselines.py --finish --retime-stale`).
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))


def main(argv=None) -> int:
    from cudal2.cli.compare_measure import summaries
    from cudal2.compare_rows import first_run_ts, settle
    from cudal2.problems import Problem
    from cudal2.registry import Registry, RegistryError
    from cudal2.report import load_json, write_json
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("compare", help="a `cudal2 compare --json` file (gzipped or not)")
    ap.add_argument("--out", required=True, help="the settled compare (.json or .json.gz); not IN")
    ap.add_argument("--registry", default=None, help="the registry dispatch reads (default: the shipped one)")
    args = ap.parse_args(argv)
    src, out = Path(args.compare), Path(args.out)
    if out.resolve() == src.resolve():
        ap.error("--out must be a new file: IN is a run's record")
    try:
        doc = load_json(src)
        vers = doc.get("versions") or {}
        key, lt = vers["device_key"], vers.get("cublasLt")
        entries = {e.problem: e for e in Registry.load(args.registry).all(key)}
        rows = doc["rows"]
    except (OSError, ValueError, KeyError, RegistryError) as e:
        print(f"error: {src}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    found, stale = settle(rows, entries, lt, first_run_ts(doc.get("runs")))
    settled = {Problem.of_row(r).text: r for r in found}
    new_rows = [settled.get(Problem.of_row(r).text, r) for r in rows]
    cfg = doc.get("config") or {}
    meta = {k: v for k, v in doc.items() if k not in ("schema", "summary", "rows")}
    plain = out.with_suffix("") if out.suffix == ".gz" else out
    write_json(plain, new_rows, meta, summaries(new_rows, cfg.get("modes") or ["offline"], cfg.get("baselines") or []))
    if plain != out:
        with open(plain, "rb") as f, open(out, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as z:
            shutil.copyfileobj(f, z)
        plain.unlink()
    print(f"{key} (cuBLASLt {lt}): {len(settled)} of {len(settled) + len(stale)} stale rows settled from their "
          f"own torch.matmul column -> {out}")
    for p, why in stale.items():
        print(f"  needs the card: {p}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
