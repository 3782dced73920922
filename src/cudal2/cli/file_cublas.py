"""`cudal2 registry file-cublas`: cuBLAS entries for the shapes a card has no entry for, chosen from
compares run on that card (cudal2.registry.fill has the rule). CPU only: it reads compare JSONs.

    cudal2 registry file-cublas A.json B.json.gz --registry DIR [--margin 1.01] [--min-repeats 2]

A typical use on a card whose kernels came by `cudal2 registry transfer`: two `cudal2 compare
--json` runs over its shapes (the cuBLASLt autotune cache kept between them, so both time the
algorithm filed), then this, then `add-timings` as later compares come.
"""
from __future__ import annotations

from collections import Counter
from typing import List

import typer


def file_cublas_cmd(
    compares: List[str] = typer.Argument(..., help="`cudal2 compare --json` files of one card, oldest first "
                                         "(gzipped or not); each is one independent timing per shape"),
    registry: str = typer.Option(..., "--registry", help="a registry directory to file into (not the shipped "
                                 "one: `cudal2 registry export DIR` first, then serve it with $CUDAL2_REGISTRY)"),
    margin: float = typer.Option(1.01, "--margin", help="a cuBLASLt call is dispatched only where it beat "
                                 "torch.matmul by this ratio in every timing"),
    min_repeats: int = typer.Option(2, "--min-repeats", help="... and in at least this many timings"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print what would be filed, write nothing"),
) -> None:
    """File cuBLAS entries for a card's shapes without an entry, from compares run on it."""
    from .errors import fail, load_jsons
    from ..registry import Registry, RegistryError
    from ..registry.fill import fill_cublas
    docs = load_jsons(compares, "cudal2 compare JSON")
    try:
        if Registry.load(registry, create=True).shipped:
            raise RegistryError("the shipped registry is read-only here: `cudal2 registry export DIR`, file "
                                "into DIR, and serve it with CUDAL2_REGISTRY=DIR")
        filed, skipped = fill_cublas(registry, docs, margin, min_repeats, dry_run)
    except (KeyError, TypeError) as e:
        fail(f"a compare's rows lack a field ({type(e).__name__}: {e}): not a cudal2 compare JSON", code=1)
        return
    except RegistryError as e:
        fail(str(e), code=1)
        return
    targets = Counter(e.dispatch["target"] for e in filed)
    key = filed[0].device if filed else (docs[0].get("versions") or {}).get("device_key")
    verb = "would file" if dry_run else "filed"
    typer.echo(f"{key}: {verb} {len(filed)} cuBLAS entries ("
               + ", ".join(f"{t} {n}" for t, n in targets.most_common()) + f"); {len(skipped)} shapes left alone")
    for why, n in Counter(skipped.values()).most_common(5):
        typer.echo(f"  {n}: {why}")
