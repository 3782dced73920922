"""One card's kernel entries as another card's registry, for timing them there (no filing).

  python3 bench/transfer_registry.py --registry SRC --from h200-sm90 [--to KEY] --out DIR

Writes DIR, a registry whose device KEY (default: this machine's card) holds SRC's `--from`
kernel entries (CUDA and Triton) with their sources, and DIR/shapes.txt listing their problems
(layouts interleaved, each in a fixed shuffle, so a time-limited compare spreads over both). `cudal2 compare --shapes
DIR/shapes.txt --registry DIR` then builds, checks and times each H200-chosen kernel on this card
beside the five baselines: whether the search's choices on one Hopper card carry over to another.

Left out on purpose: cuBLAS entries (their cuBLASLt algorithm and the repeated timings that chose
the call are the source card's) and kernel entries' `scope` (the off-grid box was measured on the
source card). The entries keep the source card's times: they are the claim being tested, never
this card's evidence, so DIR is a measuring tool and not a registry to ship.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from itertools import zip_longest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def transfer(src: str, from_key: str, to_key: str, dest: str | Path) -> list:
    """The kernel entries of `from_key` in registry `src`, filed under `to_key` in a new registry
    at `dest` (sources copied after their hash is checked); returns the new entries."""
    from cudal2.registry import Registry, RegistryError
    reg = Registry.load(src)
    if from_key == to_key:
        raise SystemExit(f"error: --from and --to are both {from_key}: nothing to transfer")
    kernels = [e for e in reg.all(from_key) if e.backend != "cublas"]
    if not kernels:
        have = ", ".join(sorted(reg.entries)) or "none"
        raise SystemExit(f"error: registry {src} has no kernel entries for {from_key} (devices: {have})")
    dest = Path(dest)
    if (dest / "index.json").exists():
        raise SystemExit(f"error: {dest} already holds a registry; give a new directory")
    out = Registry(dest)
    moved = []
    for e in kernels:
        text = reg.read_source(e)           # refuses an edited source rather than timing it
        t = dataclasses.replace(e, device=to_key, scope=None)
        try:
            t.validate()
        except RegistryError as err:
            raise SystemExit(f"error: {e.key} cannot be filed as {to_key}: {err}") from None
        path = out.source_path(t)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        out.entries.setdefault(to_key, {})[t.problem] = t
        moved.append(t)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "index.json").write_text(out.to_json())
    by_layout: dict[str, list[str]] = {}
    for t in moved:
        by_layout.setdefault(t.problem.rsplit(":", 1)[1], []).append(t.problem)
    for group in by_layout.values():        # a fixed shuffle: any prefix spreads over the sizes
        random.Random(0).shuffle(group)
    order = [p for group in zip_longest(*by_layout.values()) for p in group if p]
    (dest / "shapes.txt").write_text(
        f"# {len(order)} kernel entries of {from_key} in {src}, filed as {to_key} (layouts interleaved, each in a fixed shuffle)\n"
        + "\n".join(order) + "\n")
    return moved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--registry", required=True, help="the source registry (a directory or its index.json)")
    ap.add_argument("--from", dest="from_key", required=True, help="the source card's key, e.g. h200-sm90")
    ap.add_argument("--to", dest="to_key", default=None, help="the target card's key (default: this machine's card)")
    ap.add_argument("--out", required=True, help="a new directory for the transferred registry")
    args = ap.parse_args(argv)
    to_key = args.to_key
    if to_key is None:
        from cudal2.device import current
        to_key = current().key
    moved = transfer(args.registry, args.from_key, to_key, args.out)
    print(f"{len(moved)} kernel entries of {args.from_key} filed as {to_key} in {args.out} "
          f"(shapes: {args.out}/shapes.txt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
