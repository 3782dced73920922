#!/usr/bin/env bash
# Issue 19, one device call (2026-12-06): where the cluster split-K's time goes (bench/cta_timeline.py
# over bench/timeline_cases_split.txt: mainloop full -> mma, partials visible -> partial, sums stored
# -> summed, the exit barrier -> reduce; the split's work a CTA without / with a 2-CTA cluster).
# On an H200 also issue 22's retime (bench/worst_rows.py's lists, two compares each: what
# `cudal2 registry add-timings --offline-guard` reads) and issue 19's Nsight profiles of ours against
# cuBLASLt's kernel at the issue's three shapes (H100 run 100 has them for the H100). Time-boxed.
#   OUT=... bash bench/split_probe.sh [CASES [BEFORE]]   # files: the timeline's JSON / MD, retime.tgz,
#                                                         # profiles; CASES default
#                                                         # bench/timeline_cases_split.txt (none: no
#                                                         # timeline), BEFORE 0
set -uo pipefail
CASES=${1:-bench/timeline_cases_split.txt}
BEFORE=${2:-0}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/device_env.sh"
W="backend=cuda family=wgmma bk=64 group_m=8 cluster=1"
if [ "${CARD_KEY:-}" = h200-sm90 ]; then
  rt=$(mktemp -d)
  OUT="$rt" bash "$(dirname "$0")/device_run.sh" retime:retime_nn:nn retime:retime_nt:nt 2>&1 | tail -12
  tar czf "$OUT/retime.tgz" -C "$rt" .
  timeout 170 python3 bench/kernel_profile.py --out "$OUT" \
    --case "1024x1024x8192:nt|$W bm=64 bn=128 warps=8 stages=8 split_k=1 subtile=1 warp_spec=1|$W bm=128 bn=128 warps=12 stages=6 split_k=2 subtile=1 warp_spec=1|cublaslt-autotune" \
    --case "4096x4096x512:nt|$W bm=256 bn=128 warps=12 stages=3 split_k=1 subtile=1 warp_spec=1|cublaslt-autotune" \
    --case "4096x4096x4096:nt|$W bm=128 bn=256 warps=12 stages=3 split_k=1 subtile=1 warp_spec=1|cublaslt-autotune" \
    2>&1 | grep -v "^  " | tail -12
fi
# the timeline last on an H200 (the retime and profiles are what only that card can give)
left=$(( 560 - SECONDS )); [ $left -gt 200 ] && left=200
[ $left -gt 30 ] && [ "$CASES" != none ] && timeout $left python3 bench/cta_timeline.py --out "$OUT" --cases "$CASES" --before "$BEFORE" --repeat 2 2>&1 | tail -16
ls -la "$OUT"
