#!/usr/bin/env bash
# The grid search of issue 7 in device calls of at most 10 minutes each, resumable between them.
#
#   bash bench/grid_search.sh search SECONDS   # cudal2 generate over the grid (spread order), --resume
#   bash bench/grid_search.sh compare SECONDS  # the registry's kernels beside the five baselines
#
# State lives in run/ (git-ignored): run/grid.db (the store: every measurement and the search log)
# and run/registry/. Both come back packed under $OUT (run.tgz; at most 8 files come back) and go
# out again with the next call's `carry: ["run", ...]`: unpack run.tgz at the repo root in between.
# The search's settings are the ones on the command line below; NOTES.md says why each.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" run
source "$(dirname "$0")/device_env.sh"
stage=$1
limit=$2
case "$stage" in
  search)
    n=$(ls "$OUT"/generate_*.log 2>/dev/null | wc -l)
    # budget 8 = the fixed list's first 4 (one per family) + one policy group of 4; screen 10 ms;
    # the fastest screened candidate re-checked in full with 30 ms of timing (replaced if it fails).
    timeout $((${limit%.*} + 45)) cudal2 generate --shapes grid --stride 7 --backend both \
      --budget 8 --group 4 --seed-list fixed:4 --screen-ms 10 --full-ms 30 --recheck 1 \
      --store run/grid.db --registry run/registry --resume --time-limit "$limit" \
      >"$OUT/generate_$n.log" 2>"$OUT/generate_$n.err"
    echo "generate exit $?"
    tail -5 "$OUT/generate_$n.log"; tail -3 "$OUT/generate_$n.err" ;;
  compare)
    timeout $((${limit%.*} + 60)) python3 bench/grid_baselines.py --registry run/registry --searched-only \
      --stride 7 --out run/compare --time-limit "$limit" 2>&1 | tail -20
    cp run/compare/compare_grid.csv run/compare/compare_grid.json "$OUT/" 2>/dev/null ;;
  *)
    echo "unknown stage $stage (search | compare)"; exit 2 ;;
esac
python3 - <<'EOF'
import sqlite3
db = sqlite3.connect("run/grid.db")
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")   # the WAL's rows into the file before packing
print("store:", db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0], "measurements,",
      db.execute("SELECT COUNT(*) FROM shapes").fetchone()[0], "shapes finished")
EOF
tar czf "$OUT/run.tgz" run
ls -la "$OUT"
