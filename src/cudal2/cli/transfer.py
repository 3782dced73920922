"""`cudal2 registry transfer`: another card's kernels, timed on this card and filed where they win.

One command on the target card for the three steps of cudal2.registry.transfer (its module doc has
the rule): the source card's kernel entries as a scratch registry of this card's key, `cudal2
compare` over them beside the baselines (offline and server, rows saved to --json as they come, so
a run cut short goes on from there when given the same file again), then the winners filed into
--registry. A card with no search of its own (a PCIe or NVL board, an H800) gets the search's
choices measured on itself: ~0.9 s a shape on an H100 (633 shapes, 2026-12-05, runs 84-85).
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

import typer


def transfer_cmd(
    from_key: str = typer.Option(..., "--from", help="the card whose kernel entries to try here, e.g. h200-sm90"),
    registry: str = typer.Option(..., "--registry", help="a registry directory to file into (not the shipped "
                                 "one: `cudal2 registry export DIR` first, then serve it with $CUDAL2_REGISTRY)"),
    json_path: str = typer.Option(..., "--json", help="the compare's rows; an existing file from the same "
                                  "settings is resumed (a run cut short goes on)"),
    src: Optional[str] = typer.Option(None, "--src", help="the registry holding the source card's entries "
                                      "(default: the shipped one)"),
    margin: float = typer.Option(1.01, "--margin", help="offline win over best-cublas a kernel needs "
                                 "(generate's --file-margin)"),
    guard: float = typer.Option(0.97, "--guard", help="server-mode (cold L2) ratio to torch.matmul a kernel "
                                "needs (add-timings' --server-guard)"),
    min_ms: float = typer.Option(15.0, "--min-ms", help="compare: offline GPU time per candidate (the grid "
                                 "compares' budget)"),
    server_calls: int = typer.Option(20, "--server-calls", help="compare: server-mode calls per candidate"),
    baselines_arg: Optional[str] = typer.Option(None, "--baselines", help="compare's --baselines (default: all "
                                                "five; refused where one cannot be built)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="time, then print the verdicts without filing"),
    searched_only: bool = typer.Option(False, "--searched-only", help="only the source card's own search "
                                       "winners: leave out its entries that came to it by a transfer, and "
                                       "kernels --registry already files here at the same problem"),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", help="seconds; time no new shape after "
                                               "that and file the winners among those timed (the same "
                                               "command again goes on from --json)"),
) -> None:
    """Time another card's kernels on this card and file those that win here."""
    from .errors import fail
    from ..device import current, gpu_available
    from ..registry import Registry, RegistryError
    from ..registry import transfer
    from ..report import load_json
    if time_limit is not None and time_limit <= 0:
        fail(f"--time-limit must be > 0 seconds (got {time_limit})")
    try:
        target = Registry.load(registry)
        if target.shipped:
            raise RegistryError("the shipped registry is read-only here: `cudal2 registry export DIR`, "
                                "transfer into DIR, and serve it with CUDAL2_REGISTRY=DIR")
        source = Registry.load(src)
        if not any(e.backend != "cublas" for e in source.all(from_key)):
            have = ", ".join(sorted(source.entries)) or "none"
            raise RegistryError(f"registry {source.root} has no kernel entries for {from_key} (devices: {have})")
    except RegistryError as e:
        fail(str(e))
        return
    if not gpu_available():
        fail("no CUDA GPU here: the transfer times kernels on the card they are filed for", code=3)
    here = current().key
    if here == from_key:
        fail(f"this card is {from_key} itself: nothing to transfer (search it with cudal2 generate)")
    from .compare import compare_cmd
    with tempfile.TemporaryDirectory(prefix="cudal2-transfer-") as tmp:
        scratch = Path(tmp) / "registry"
        try:
            moved = transfer.for_timing(str(source.root), from_key, here, scratch, searched_only=searched_only,
                                        against=str(target.root) if searched_only else None)
        except RegistryError as e:
            fail(str(e))
            return
        typer.echo(f"{len(moved)} kernel entries of {from_key} to time on {here}")
        compare_cmd(shapes=str(scratch / "shapes.txt"), layout="nn", mode="both", baselines_arg=baselines_arg,
                    registry=str(scratch), spec=None, csv_path=None, json_path=json_path, plot=None,
                    min_calls=30, min_ms=min_ms, server_calls=server_calls, gap_ms=2.0, tune_calls=5,
                    eager_calls=200, eager_ms=20.0, seed=0, retune=False, remeasure=False, table=False,
                    resume=True, warm=True, time_limit=time_limit)
    try:
        filed, skipped = transfer.file_winners(str(target.root), str(source.root), from_key, load_json(json_path),
                                               margin, guard, dry_run)
    except RegistryError as e:
        fail(str(e))
        return
    for e in filed:
        typer.echo(f"{'would file' if dry_run else 'filed'} {e.key}: {e.speedup():.3f}x best-cublas, "
                   f"server {e.times['server_vs_torch']:.3f}x torch.matmul")
    for p, why in sorted(skipped.items()):
        typer.echo(f"kept out {here}/{p}: {why}")
    typer.echo(f"{here}: {len(filed)} of {len(filed) + len(skipped)} {from_key} kernels "
               f"{'would be ' if dry_run else ''}filed into {target.root}"
               + (f" (kept out: {transfer.skip_kinds(skipped)})" if skipped else "")
               + ("" if dry_run else f"; check them in full: cudal2 registry verify --gpu --render --record "
                  f"--registry {target.root}"))
