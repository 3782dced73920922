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
if [ "${CARD_KEY:-}" = h200-sm90 ]; then
  rt=$(mktemp -d)
  OUT="$rt" bash "$(dirname "$0")/device_run.sh" retime:retime_nn:nn retime:retime_nt:nt 2>&1 | tail -12
  tar czf "$OUT/retime.tgz" -C "$rt" .
  bash "$(dirname "$0")/device_run.sh" profile19:170
fi
# the timeline last on an H200 (the retime and profiles are what only that card can give)
left=$(( 560 - SECONDS )); [ $left -gt 200 ] && left=200
[ $left -gt 30 ] && [ "$CASES" != none ] && timeout $left python3 bench/cta_timeline.py --out "$OUT" --cases "$CASES" --before "$BEFORE" --repeat 2 2>&1 | tail -16
ls -la "$OUT"
