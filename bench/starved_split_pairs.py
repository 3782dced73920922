"""Pairs for hopper_sweep.py --pairs: the starved shapes whose best spec ran furthest under best-cublas
in a ring sweep, each with one-launch split-K at every split of the grammar that gives about one wave
of work units (64-264), for the 128x128, 64x128, 128x64 and 64x64 cooperative tiles (split reduced in a
cluster of the tile's slices), and 64x64, 128x64, 64x128 on 2-CTA clusters (TMA multicast; no split,
or a split reduced through the workspace), deepest ring that fits. (Ping-pong 128x128 split-K is not
valid: the workspace reduction holds at most 96 accumulators a thread.)

  python3 bench/starved_split_pairs.py --sweeps bench/results/h100-sm90/hopper/run164_ring_starved_large_nt_1534d61.csv.gz \
      bench/results/h100-sm90/hopper/run165_ring_starved_mid_shortk_nn_1534d61.csv.gz --worst 20 \
      --card bench/results/h100-sm90/hopper/run164_info.txt > bench/starved_split_pairs.txt

The questions it asks the card: do splits the wave list does not rank first close the deep-K gap (run
167, before the cluster specs were added: yes, 0.769 -> 0.87 over the 40; its list is
bench/results/h100-sm90/hopper/run167_starved_split_pairs.txt), and do cuBLASLt's 2-CTA clusters?
"""
from __future__ import annotations

import argparse
import ast
import csv
import gzip
import math
import re
import sys

from cudal2.device import DeviceInfo
from cudal2.problems import Problem
from cudal2.spec import KernelSpec, is_valid
from cudal2.tiles import deepest

TILES = ((128, 128, 12, 1), (64, 128, 8, 1), (128, 64, 12, 1), (64, 64, 8, 1))   # bm, bn, warps, warp_spec
COOP_SPLITS = (2, 3, 4, 6, 8, 12, 16)
# 2-CTA clusters (TMA multicast of the shared operand; split-K through the workspace), as cuBLASLt
# runs these shapes (run 167's profiles: 64x64 13 stages on 2x1 clusters at 1024x512x16384 nn, no
# split; 128x64 on 1x2 with a split at 512x512x16384): cooperative small tiles, no split or a split.
CLUSTER_TILES = ((64, 64, 8), (128, 64, 12), (64, 128, 8))
CLUSTER_SPLITS = (1, 2, 4, 8)


def card(path: str) -> DeviceInfo:
    """The DeviceInfo line device_run.sh's info stage printed on the card (limits read there)."""
    m = re.search(r"DeviceInfo\((.*)\)\s*$", open(path).read(), re.M)
    if not m:
        raise SystemExit(f"error: {path} holds no DeviceInfo(...) line")
    call = ast.parse(f"DeviceInfo({m.group(1)})", mode="eval").body
    return DeviceInfo(**{k.arg: ast.literal_eval(k.value) for k in call.keywords})


def worst(paths: list[str], n: int, cls: str) -> list[tuple[str, str, float]]:
    """(shape, layout, best ratio) of the n problems of class `cls` whose best ok row is lowest, per
    sweep CSV, lowest first."""
    out = []
    for path in paths:
        best: dict = {}
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            for r in csv.DictReader(f):
                if r["class"] == cls and r["status"] == "ok":
                    k = (r["shape"], r["layout"])
                    best[k] = max(best.get(k, 0.0), float(r["vs_best_cublas"]))
        out += [(s, lay, v) for (s, lay), v in sorted(best.items(), key=lambda x: x[1])[:n]]
    return sorted(out, key=lambda x: x[2])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", nargs="+", required=True, help="hopper_sweep CSVs (.csv or .csv.gz)")
    ap.add_argument("--worst", type=int, default=20, help="problems per sweep file")
    ap.add_argument("--card", required=True, help="an info.txt with the card's DeviceInfo line")
    ap.add_argument("--cls", default="starved")
    args = ap.parse_args(argv)
    dev = card(args.card)
    bases = [(bm, bn, w, ws, s) for s in COOP_SPLITS for bm, bn, w, ws in TILES]
    bases = [b + (1,) for b in bases] + [(bm, bn, w, 1, s, 2) for s in CLUSTER_SPLITS for bm, bn, w in CLUSTER_TILES]
    lines = []
    for shape, layout, v in worst(args.sweeps, args.worst, args.cls):
        M, N, K = map(int, shape.split("x"))
        p = Problem(M, N, K, layout)
        for bm, bn, warps, ws, split, cluster in bases:
            if not 64 <= math.ceil(M / bm) * math.ceil(N / bn) * split <= 2 * dev.sm_count:
                continue
            base = KernelSpec(backend="cuda", family="wgmma", bm=bm, bn=bn, bk=64, warps=warps, stages=2,
                              group_m=8, split_k=split, subtile=1, warp_spec=ws, cluster=cluster)
            s = deepest(base, p, dev)
            if s is not None and is_valid(s, p, dev):
                lines.append(f"{shape}:{layout}|{s.text}  # {args.cls} {v:.3f}")
    print("# " + " ".join(["python3", "bench/starved_split_pairs.py"] + (argv or sys.argv[1:])))
    print(f"# {len(lines)} pairs; after '#': the class and the problem's best ratio in the sweep. Timed by:")
    print("#   python3 bench/hopper_sweep.py --pairs bench/starved_split_pairs.txt --n-cands 4 --clusters 4 --tag starved_cluster")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
