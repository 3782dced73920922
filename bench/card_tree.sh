#!/usr/bin/env bash
# The device takes a copy of the working tree capped at 64 MiB with the carry. Tracked files are
# ~61 MB (2026-12-05: bench/results ~40 MB of it, the registry index 8.2 MB) and the nvmath wheel
# 5.1 MiB, so a call is refused unless results the card never reads are out of the tree for it.
#
#   bash bench/card_tree.sh slim [--pack]   # before a call: delete from the working tree the
#                                           # committed results no device command reads (git
#                                           # still has them); --pack also the committed search
#                                           # state, for a call that carries .runpack/run.tgz
#   bash bench/card_tree.sh restore         # after the reply: check out the files slim deleted
#   bash bench/card_tree.sh size            # what the card would get (tracked + untracked + carry)
#
# Only files whose working copy equals the commit are deleted, so nothing uncommitted is lost;
# restore checks out every tracked file under bench/results that is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
R=bench/results
# Read on the card by grid_search.sh (the state it rebuilds run/ from), cudal2 compare --resume
# (the model set's rows), the cost model the search ranks seeds with, and the transfer compares
# (`cudal2 compare --resume` goes on from them on an H100).
keep_always='^bench/results/(h200-sm90/(costmodel/cost_h200_2859efc\.pt|registry_v2/models/run68_models_compare(_settled)?\.json\.gz)|h100-sm90/transfer/.*)$'
keep_state='^bench/results/(h200-sm90|h100-sm90)/(grid_search/(grid_store\.db\.gz|grid_policy_ckpt\.tgz|grid_nn2_store\.db\.gz|grid_nn2_policy_ckpt\.tgz|grid_nn_leads_store\.db\.gz|sweep_leads_store\.db\.gz|models_decode_store\.db\.gz|lt-autotune-[^/]*\.json|compare_grid\.rows\.jsonl\.gz|compare_grid\.runs\.json)|registry_v2/grid_nt/run72_gridnt_compare\.(rows\.jsonl\.gz|runs\.json))$'
case "${1:-}" in
  slim)
    keep="$keep_always|$keep_state"
    [ "${2:-}" = --pack ] && keep="$keep_always"
    n=0
    while IFS= read -r f; do
      [[ "$f" =~ $keep ]] && continue
      [ -f "$f" ] || continue
      git diff --quiet -- "$f" || { echo "kept (modified): $f"; continue; }
      rm -- "$f"; n=$((n + 1))
    done < <(git ls-files "$R")
    echo "slim: $n committed result files out of the working tree (bash bench/card_tree.sh restore)" ;;
  restore)
    git ls-files -d -z "$R" | xargs -0 -r git checkout --
    echo "restore: $(git ls-files -d "$R" | wc -l) result files still missing" ;;
  size)
    tracked=$( (git ls-files -z | xargs -0 stat -c %s 2>/dev/null || true) | awk '{s+=$1} END {print s+0}')
    untracked=$(git ls-files -o --exclude-standard -z | xargs -0 -r stat -c %s | awk '{s+=$1} END {print s+0}')
    carry=$( (du -sb .whl .commit .runpack 2>/dev/null || true) | awk '{s+=$1} END {print s+0}')
    awk -v t="$tracked" -v u="$untracked" -v c="$carry" 'BEGIN {
      printf "tracked %.1f MiB + untracked %.1f + carry (.whl .commit .runpack) %.1f = %.1f of 64 MiB\n",
        t/2^20, u/2^20, c/2^20, (t+u+c)/2^20 }' ;;
  *) echo "usage: bash bench/card_tree.sh slim [--pack] | restore | size"; exit 2 ;;
esac
