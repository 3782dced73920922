"""Another card's kernels timed and filed on this card (cudal2.registry.transfer has the rule).

  python3 bench/transfer_registry.py build --registry SRC --from h200-sm90 [--to KEY] --out DIR
  cudal2 compare --shapes DIR/shapes.txt --registry DIR --mode both --json F [--resume]   # on the card
  python3 bench/transfer_registry.py file F --from h200-sm90 [--src SRC] [--registry REG]
                                      [--margin 1.01] [--guard 0.97] [--dry-run]

build: SRC's `--from` kernel entries as a registry of KEY (default: this machine's card) in the new
directory DIR, and DIR/shapes.txt. file: from the compare F (run on the target card), a kernel
entry for that card wherever the kernel won by the margin offline and held the guard against
torch.matmul in server mode; SRC and REG default to the shipped registry. Prints each shape's
verdict; `--dry-run` files nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main(argv=None) -> int:
    from cudal2.registry import RegistryError, shipped_root
    from cudal2.registry import transfer
    from cudal2.report import load_json
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="the source card's kernel entries as the target card's registry, to time")
    b.add_argument("--registry", required=True, help="the source registry (a directory or its index.json)")
    b.add_argument("--from", dest="from_key", required=True, help="the source card's key, e.g. h200-sm90")
    b.add_argument("--to", dest="to_key", default=None, help="the target card's key (default: this machine's card)")
    b.add_argument("--out", required=True, help="a new directory for the transferred registry")
    b.add_argument("--searched-only", action="store_true", help="leave out the source card's entries that came "
                   "to it by a transfer (an H100's searched winners only, for the H200)")
    b.add_argument("--against", default=None, help="a registry holding the target card's entries: kernels it "
                   "already files at their problem (same spec) are left out")
    f = sub.add_parser("file", help="file the kernels a compare on the target card shows winning")
    f.add_argument("compare", help="the `cudal2 compare --json` file of the build's shapes, --mode both")
    f.add_argument("--from", dest="from_key", required=True, help="the source card's key, e.g. h200-sm90")
    f.add_argument("--src", default=None, help="the source registry (default: the shipped one)")
    f.add_argument("--registry", default=None, help="the registry to file into (default: the shipped one)")
    f.add_argument("--margin", type=float, default=1.01, help="offline win over best-cublas a kernel needs")
    f.add_argument("--guard", type=float, default=0.97, help="server-mode ratio to torch.matmul a kernel needs")
    f.add_argument("--dry-run", action="store_true", help="print the verdicts, file nothing")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            to_key = args.to_key
            if to_key is None:
                from cudal2.device import current
                to_key = current().key
            moved = transfer.for_timing(args.registry, args.from_key, to_key, args.out,
                                        searched_only=args.searched_only, against=args.against)
            print(f"{len(moved)} kernel entries of {args.from_key} filed as {to_key} in {args.out} "
                  f"(shapes: {args.out}/shapes.txt)")
            return 0
        doc = load_json(args.compare)                 # the committed compares are gzipped
        filed, skipped = transfer.file_winners(args.registry or str(shipped_root()), args.src or str(shipped_root()),
                                               args.from_key, doc, args.margin, args.guard, args.dry_run)
    except (RegistryError, OSError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for e in filed:
        print(f"file {e.key}: {e.speedup():.3f}x best-cublas, server {e.times['server_vs_torch']:.3f}x torch.matmul")
    for p, why in sorted(skipped.items()):
        print(f"skip {p}: {why}")
    print(f"{'would file' if args.dry_run else 'filed'} {len(filed)}, skipped {len(skipped)} "
          f"({transfer.skip_kinds(skipped)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
