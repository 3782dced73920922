"""`cudal2 registry keep-lost`: a card's cuBLAS entries that name no losing kernel take the closest
one a sweep measured on their shape and that never reached the registry, so the graph-clock rule (`cudal2
registry file-graph` over bench/graph_clock.py --lost timings) can time it. CPU only: it reads the
sweep CSVs (bench/hopper_sweep.py / sweep_leads.py rows: shape, layout, spec, status, us,
best_cublas_us) and changes no dispatch.

    cudal2 registry keep-lost RUN_sweep.csv ... --device h100-sm90 --registry DIR [--dry-run]

Why: before 2026-12-07 a search that lost on a shape whose cuBLAS entry stayed dropped its kernel
(record.with_lost_kernel has the rule now). The H100's sweeps of runs 134-145 measured one on 211
cuBLAS entries that named none. An entry that names a search's kernel keeps it: a sweep's shorter
timing "closer" than a search's is as likely noise. A sweep row is "ok" when it
passed the random check; file-graph's kernels are pending the full checker on the card.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import List

import typer


def _rows(path: str) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        from .errors import fail
        fail(f"{path}: no such file", code=1)
    from ..report import read_rows_csv
    rows = read_rows_csv(p)
    need = {"shape", "layout", "spec", "status", "us", "best_cublas_us"}
    if rows and not need <= set(rows[0]):
        from .errors import fail
        fail(f"{path}: not a sweep CSV (lacks {', '.join(sorted(need - set(rows[0])))})", code=1)
    return rows


def keep_lost_cmd(
    sweeps: List[str] = typer.Argument(..., help="sweep CSVs of one card (gzipped or not)"),
    device: str = typer.Option(..., "--device", help="the card's device key, e.g. h100-sm90"),
    registry: str = typer.Option(..., "--registry", help="a registry directory (not the shipped one: "
                                 "`cudal2 registry export DIR` first)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print what would be kept, write nothing"),
) -> None:
    """Keep the closest losing kernel of sweeps on the cuBLAS entries that name none (see --help)."""
    from .errors import fail
    from ..registry import Registry, RegistryError
    from ..registry.record import keep_lost
    try:
        reg = Registry.load(registry)
        if reg.shipped:
            raise RegistryError("the shipped registry is read-only here: `cudal2 registry export DIR`, keep "
                                "into DIR, and ship that")
        if device not in reg.entries:
            raise RegistryError(f"{registry} has no entries for {device!r}")
        amended, skipped = [], {}
        for path in sweeps:        # one at a time: a later sweep competes with what an earlier one kept
            a, s = keep_lost(registry, device, _rows(path), Path(path).name, dry_run)
            amended += a
            skipped.update(s)
    except RegistryError as e:
        fail(str(e), code=1)
        return
    for e in amended:
        typer.echo(f"{e.key}: {e.times['best_kernel_spec']} ({e.times['best_kernel_vs_best_cublas']:.3f}x "
                   f"best-cublas in {e.times['best_kernel_run']})")
    latest = {e.problem: e for e in amended}
    skipped = {k: v for k, v in skipped.items() if k not in latest}
    verb = "would keep" if dry_run else "kept"
    typer.echo(f"{device}: {verb} a losing kernel on {len(latest)} cuBLAS entries; {len(skipped)} shapes left alone")
    for why, n in Counter(w.split(" (")[0] for w in skipped.values()).most_common():
        typer.echo(f"  {n}: {why}")
