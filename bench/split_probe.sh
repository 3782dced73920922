#!/usr/bin/env bash
# Issue 19, one device call (2026-12-06): where the cluster split-K's time goes (bench/cta_timeline.py
# over bench/timeline_cases_split.txt), Nsight Compute profiles of ours against cuBLASLt's kernel at
# the issue's three shapes (nt; the split-K and no-split specs of 1024x1024x8192 side by side), and on
# an H100 the run-99 sweep's winners filed (bench/sweep_leads.txt, SET=sweep-nt). Time-boxed steps.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/device_env.sh"
W="backend=cuda family=wgmma bk=64 group_m=8 cluster=1"
timeout 100 python3 bench/cta_timeline.py --out "$OUT" --cases bench/timeline_cases_split.txt --before 0 --repeat 2 2>&1 | tail -14
timeout 150 python3 bench/kernel_profile.py --out "$OUT" \
  --case "1024x1024x8192:nt|$W bm=64 bn=128 warps=8 stages=8 split_k=1 subtile=1 warp_spec=1|$W bm=128 bn=128 warps=12 stages=6 split_k=2 subtile=1 warp_spec=1|cublaslt-autotune" \
  --case "4096x4096x512:nt|$W bm=256 bn=128 warps=12 stages=3 split_k=1 subtile=1 warp_spec=1|cublaslt-autotune" \
  --case "4096x4096x4096:nt|$W bm=128 bn=256 warps=12 stages=3 split_k=1 subtile=1 warp_spec=1|cublaslt-autotune" \
  2>&1 | grep -v "^  " | tail -12
if [ "${CARD_KEY:-}" = h100-sm90 ] && [ -s bench/sweep_leads_shapes.nt.txt ]; then
  mkdir -p "$OUT/gs"
  SET=sweep-nt OUT="$OUT/gs" bash bench/grid_search.sh search 90 2>&1 | grep -v "^-\|^total\|^d" | tail -8
  mv "$OUT"/gs/run.tgz* "$OUT"/ 2>/dev/null
  tar czf "$OUT/logs.tgz" -C "$OUT/gs" . && rm -rf "$OUT/gs"
fi
ls -la "$OUT"
