"""`cudal2 registry merge`: another registry's entries joined into one, problem by problem
(cudal2.registry.merge has the rule: a later verdict on the same kernel first, then a passed check
over a pending one, then the higher in-run speedup over best-cublas; nothing is removed). CPU only.

    cudal2 registry merge SRC --registry DEST [--device KEY ...] [--dry-run]

A typical use: a card session's search state (`run/registry`) and the tree's registry, each with
filings the other lacks; bench/grid_search.sh runs it on a `run/` it did not just build.
"""
from __future__ import annotations

from typing import List, Optional

import typer


def merge_cmd(
    src: str = typer.Argument(..., help="the registry whose entries to join in (a directory; `shipped` for "
                              "the shipped one)"),
    registry: str = typer.Option(..., "--registry", help="the registry directory to merge into (not the "
                                 "shipped one)"),
    devices: Optional[List[str]] = typer.Option(None, "--device", help="only this card's entries (repeat; "
                                                "default: every card SRC files)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print what would change, write nothing"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="one line per entry added, replaced or kept"),
) -> None:
    """Join another registry's entries into --registry, problem by problem."""
    from .errors import fail
    from ..registry import RegistryError, shipped_root
    from ..registry.merge import merge
    from pathlib import Path
    if src != "shipped" and not (Path(src) / "index.json").is_file():
        fail(f"{src}: no registry here (no index.json)", code=1)
    try:
        res = merge(registry, str(shipped_root()) if src == "shipped" else src, devices or None, dry_run)
    except RegistryError as e:
        fail(str(e), code=1)
        return
    if verbose:
        for k in res.added:
            typer.echo(f"add {k}")
        for k, why in res.replaced:
            typer.echo(f"replace {k}: {why}")
        for k, why in res.kept:
            typer.echo(f"keep {k}: {why}")
    verb = "would merge" if dry_run else "merged"
    typer.echo(f"{verb} into {registry}: {len(res.added)} added, {len(res.replaced)} replaced, "
               f"{len(res.kept)} kept as they were (the other side's lost the rule)")
