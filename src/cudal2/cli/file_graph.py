"""`cudal2 registry file-graph`: a card's cuBLAS entries become the kernels their search measured and
did not file, where repeated timings on the offline, graph-replay and server clocks show them not
losing offline and winning on graph replays (cudal2.registry.graph_rule has the rule and why).
CPU only: it reads bench/graph_clock.py --lost --server JSONs and renders the kernels' sources.

    cudal2 registry file-graph A.json.gz B.json.gz --registry DIR [--offline-min 1.0]
        [--graph-margin 1.03] [--server-guard 0.97] [--min-timings 2] [--dispatch-guard 0.97] [--dry-run]

The same timings also guard the calls cuBLAS entries dispatch: one that ran under --dispatch-guard
of torch.matmul offline in every timing is kept out (graph_rule.dispatch_guard).

Then `cudal2 registry verify --gpu --render --record --pending-only --registry DIR` on that card:
the entries filed are pending the full checker.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import List

import typer


def file_graph_cmd(
    timings: List[str] = typer.Argument(..., help="bench/graph_clock.py --lost --server JSONs of one card, "
                                        "oldest first (gzipped or not); each is one independent timing"),
    registry: str = typer.Option(..., "--registry", help="a registry directory to file into (not the shipped "
                                 "one: `cudal2 registry export DIR` first, then serve it with $CUDAL2_REGISTRY)"),
    offline_min: float = typer.Option(1.0, "--offline-min", help="offline, the kernel ran at least this ratio "
                                      "of best-cublas in every timing"),
    graph_margin: float = typer.Option(1.03, "--graph-margin", help="on graph replays, at least this ratio of "
                                       "best-cublas in every timing"),
    server_guard: float = typer.Option(0.97, "--server-guard", help="in server mode, at least this ratio of "
                                       "torch.matmul in every timing"),
    min_timings: int = typer.Option(2, "--min-timings", help="timings of the shape needed, at least"),
    dispatch_guard: float = typer.Option(0.97, "--dispatch-guard", help="also: a cuBLAS entry whose dispatched "
                                         "call ran under this ratio of torch.matmul offline in every timing (at "
                                         "least --min-timings) dispatches its next qualified call; 0: off"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print what would be filed, write nothing"),
) -> None:
    """File kernels over cuBLAS entries where graph-replay timings show them winning (see --help)."""
    from .errors import fail, load_jsons
    from ..registry import Registry, RegistryError
    from ..registry.graph_rule import dispatch_guard as guard_calls, file_graph_winners
    docs = load_jsons(timings, "graph_clock JSON")
    try:
        reg = Registry.load(registry)
        if reg.shipped:
            raise RegistryError("the shipped registry is read-only here: `cudal2 registry export DIR`, file "
                                "into DIR, and serve it with CUDAL2_REGISTRY=DIR")
        if not (reg.root / "index.json").exists():
            raise RegistryError(f"{registry} holds no registry (index.json): the rule replaces its cuBLAS entries")
        filed, skipped = file_graph_winners(registry, docs, offline_min, graph_margin, server_guard,
                                            min_timings, dry_run)
        guarded = guard_calls(registry, docs, dispatch_guard, min_timings, dry_run) if dispatch_guard else []
    except (KeyError, TypeError) as e:
        fail(f"a timing's rows lack a field ({type(e).__name__}: {e}): not a graph_clock --lost JSON", code=1)
        return
    except RegistryError as e:
        fail(str(e), code=1)
        return
    verb = "would file" if dry_run else "filed"
    key = filed[0].device if filed else docs[0].get("device")
    for e in filed:
        t = e.times["graph_rule"]["timings"]
        typer.echo(f"{e.key}: cuBLAS -> {e.spec} (offline {min(x['offline'] for x in t):.3f}x, graph "
                   f"{min(x['graph'] for x in t):.3f}x best-cublas, server {e.times['server_vs_torch']:.3f}x "
                   f"torch.matmul; worst of {len(t)} timings)")
    by = ", ".join(f"{b} {n}" for b, n in Counter(e.backend for e in filed).most_common()) or "none"
    typer.echo(f"{key}: {verb} {len(filed)} kernel entries over cuBLAS entries ({by}); "
               f"{len(skipped)} shapes left alone")
    # the reasons with their figures blanked ("offline #x best-cublas in timing #, under #"), counted
    kinds = Counter(re.sub(r"\d+(\.\d+)?", "#", why) for why in skipped.values())
    for why, n in kinds.most_common(8):
        typer.echo(f"  {n}: {why}")
    for e, call, ratio in guarded:
        now = "" if dry_run else f"; dispatches {e.dispatch['target']}"
        typer.echo(f"{e.key}: {call} kept out (offline {ratio:.3f}x of torch.matmul in its kindest timing, "
                   f"guard {dispatch_guard}){now}")
    if dispatch_guard:
        typer.echo(f"{key}: --dispatch-guard {dispatch_guard}: {len(guarded)} dispatched calls "
                   f"{'would be ' if dry_run else ''}kept out")
    if filed and not dry_run:
        typer.echo(f"next, on {key}: cudal2 registry verify --gpu --render --record --pending-only --registry {registry}")
