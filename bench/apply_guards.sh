#!/usr/bin/env bash
# The shipped H200 registry judged by compares timed after its entries were filed (issue 22: no
# dispatch slower than torch.matmul beyond noise), then the set compares on record settled and
# issue 22's table made again. No card needed.
#
#   bash bench/apply_guards.sh [-g GUARD] COMPARE.json[.gz] ...      # GUARD: 0.97, issue 22's bar
#
#   1. `cudal2 registry add-timings C --offline-guard G --server-guard G` for each compare, in the
#      order given, on an exported copy of the shipped registry (it is read-only in place); the
#      copy's index replaces src/cudal2/registry/index.json. Log:
#      bench/results/h200-sm90/registry_v2/guards_<UTC date>.txt.
#   2. The grid nn and grid nt compares on record: rows whose entry now dispatches torch.matmul take
#      their own torch.matmul column (bench/grid_baselines.py --finish --retime-stale, through each
#      compare's rows log, in place). The model set's compare: bench/settle_compare.py into
#      MODELS_settled.json.gz beside it. Rows that now dispatch something else are listed: a card
#      times them (`SET=... bash bench/grid_search.sh compare`, `cudal2 compare --resume`). A compare
#      where nothing was settled is left byte for byte as it was.
#   3. bench/registry_v2_table.py over the three (the model set's settled copy where one was made).
set -euo pipefail
cd "$(dirname "$0")/.."
guard=0.97
if [ "${1:-}" = -g ]; then guard=$2; shift 2; fi
[ $# -ge 1 ] || { echo "usage: bash bench/apply_guards.sh [-g GUARD] COMPARE.json[.gz] ..." >&2; exit 2; }
R=bench/results/h200-sm90
V=$R/registry_v2
GRID_NN=$R/grid_search/compare_grid                      # + .json.gz .rows.jsonl.gz .runs.json
GRID_NT=$V/grid_nt/run72_gridnt_compare
MODELS=$V/models/run93_models_compare
VERIFY=$V/verify_gpu_run98.txt
for c in "$@"; do [ -f "$c" ] || { echo "no such compare: $c" >&2; exit 2; }; done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=$V/guards_$(date -u +%Y-%m-%d).txt
cudal2 registry export "$tmp/reg" >/dev/null
for c in "$@"; do
  echo "== $c (--offline-guard $guard --server-guard $guard)"
  cudal2 registry add-timings "$c" --registry "$tmp/reg" --offline-guard "$guard" --server-guard "$guard"
done | tee -a "$log"
cp "$tmp/reg/index.json" src/cudal2/registry/index.json

settle_grid() {   # $1: the compare's path without suffixes; $2: its layout
  local d="$tmp/$2"
  mkdir -p "$d"
  zcat "$1.json.gz" >"$d/compare_grid.json"
  zcat "$1.rows.jsonl.gz" >"$d/compare_grid.rows.jsonl"
  cp "$1.runs.json" "$d/compare_grid.runs.json"
  python3 bench/grid_baselines.py --finish --retime-stale --registry src/cudal2/registry --out "$d" \
    --layout "$2" 2>&1 | grep -- "--retime-stale"
  # nothing settled: keep the record as it is (--finish rewrites the JSON's summary and config)
  if zcat "$1.rows.jsonl.gz" | cmp -s - "$d/compare_grid.rows.jsonl"; then return; fi
  gzip -9c "$d/compare_grid.json" >"$1.json.gz"
  gzip -9c "$d/compare_grid.rows.jsonl" >"$1.rows.jsonl.gz"
  cp "$d/compare_grid.runs.json" "$1.runs.json"
}
settle_grid "$GRID_NN" nn
settle_grid "$GRID_NT" nt
models=$MODELS.json.gz
python3 bench/settle_compare.py "$models" --out "$tmp/models_settled.json.gz" | tee "$tmp/settle.log"
if ! grep -q ": 0 of [0-9]* stale rows settled" "$tmp/settle.log"; then
  models=${MODELS}_settled.json.gz                      # a new file: the run's record stays as it was
  cp "$tmp/models_settled.json.gz" "$models"
fi

python3 bench/registry_v2_table.py --set "grid-nn=$GRID_NN.json.gz" --set "grid-nt=$GRID_NT.json.gz" \
  --set "models=$models" --verify "$VERIFY" --index src/cudal2/registry/index.json \
  --out "$V" | tail -3
sed -n '/^| set | target offline/,/^$/p' "$V/registry_v2_table.md"
echo "log: $log; check tests/test_shipped_registry.py's counts (cudal2 registry verify --render)"
