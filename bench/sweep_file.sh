#!/usr/bin/env bash
# A spec sweep, its winners filed and the grid compare's rows they made stale timed again, in one
# device call (every step time-boxed; at most 8 files come back, so the logs come back as one tar):
#
#   bash bench/sweep_file.sh NAME LAYOUT SWEEP_S SEARCH_S COMPARE_S [EXTRA]
#
#   1. bench/device_run.sh sweep:NAME:LAYOUT:SWEEP_S[:EXTRA]   the wave model's specs over
#                                                      bench/NAME.txt (and bench/EXTRA.txt's specs);
#                                                      NAME stream_small: the stream-small stage instead
#   2. bench/sweep_leads.py                            the winners that beat the filed entry
#   3. SET=sweep-LAYOUT bench/grid_search.sh search    each lead screened, re-checked, timed in
#                                                      full and filed where it wins (run/registry)
#   4. [SET=grid-nt] bench/grid_search.sh compare      the grid rows whose dispatch changed
#
# $OUT gets the sweep's CSV / JSON, logs.tgz (the leads, generate's and the compare's logs) and
# grid_search.sh's run.tgz (parts): adopt it with bench/adopt_runpack.py as after any search call.
set -uo pipefail
name=$1 lay=$2 sweep_s=$3 search_s=$4 compare_s=$5 extra=${6:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/device_env.sh"
logs=$(mktemp -d)
stage="sweep:$name:$lay:$sweep_s${extra:+:$extra}"
[ "$name" = stream_small ] && stage="stream-small:$lay:$sweep_s"     # the stream rule's specs, not the wave model's
OUT="$OUT" bash "$(dirname "$0")/device_run.sh" "$stage" 2>&1 | tail -14
# the sweep's whole log (its per-shape elapsed lines: where a shape's ~6 s go, runs 135-139 lost them
# to the tail above) goes back in logs.tgz
cp "/tmp/sweep_${name}_$lay.log" "$logs/sweep.log" 2>/dev/null
csv=$(ls -t "$OUT"/${name}_${lay}_*.csv 2>/dev/null | head -1)
if [ -z "$csv" ]; then echo "no sweep CSV: nothing to file"; exit 1; fi
python3 bench/sweep_leads.py "$csv" --device "$CARD_KEY" --out bench/sweep_leads.txt --shapes-out bench/sweep_leads_shapes.txt \
  2>&1 | tee "$logs/leads.log"
cp bench/sweep_leads.txt "$logs/"
if [ -s "bench/sweep_leads_shapes.$lay.txt" ]; then
  SET=sweep-$lay OUT="$logs" bash bench/grid_search.sh search "$search_s" 2>&1 | grep -v "^-\|^total\|^d" | tail -12
  cset=grid-nn; [ "$lay" = nt ] && cset=grid-nt
  rm -f "$logs"/run.tgz*                       # the compare packs run/ again, whole
  SET=$cset OUT="$logs" bash bench/grid_search.sh compare "$compare_s" 2>&1 | grep -v "^-\|^total\|^d" | tail -12
  mv "$logs"/run.tgz* "$OUT"/
else
  echo "no winner beats the filed entries: nothing filed"
fi
tar czf "$OUT/logs.tgz" -C "$logs" .
ls -la "$OUT"
