#!/usr/bin/env bash
# The grid search of issue 7 in device calls of at most 10 minutes each, resumable between them.
#
#   bash bench/grid_search.sh search SECONDS [SEEDS] [CAP]  # cudal2 generate over the grid (spread order),
#                                   # --resume; SEEDS is its --seed-list (default auto:4), CAP its
#                                   # --screen-max-calls (default 300; 0 = no cap)
#   SET=grid-nt bash bench/grid_search.sh search SECONDS ...   # the same over another set: grid-nn
#                                   # (default), grid-nt, or models (bench/model_set.txt: 224 nt shapes
#                                   # of four model configs at M 1..8192, with --m-buckets), or grid-nn2:
#                                   # the nn grid again with today's families (its first search, calls
#                                   # 1-15, predates wgmma and the stream family) in a store of its own,
#                                   # run/grid_nn2.db (--resume skips what a store finished), its policy
#                                   # starting from grid.db's; it files into the same registry, where an
#                                   # entry is replaced only by a higher speedup over best-cublas
#                                   # models-decode: the model set's 96 shapes with M <= 32 again with the
#                                   # decode lead's trimmed wgmma seeds, store run/models_decode.db
#   bash bench/grid_search.sh search-all SECONDS [SEEDS] [CAP]  # registry v2 (issue 22): grid-nn, then
#                                   # grid-nt, then models, each --resume, until SECONDS are spent; call
#                                   # it again in the next device call / session to go on
#   [SET=grid-nt] bash bench/grid_search.sh compare SECONDS  # the registry's kernels beside the five
#                                   # baselines over the searched grid shapes (nn, or nt), resumable
#   bash bench/grid_search.sh calibrate SECONDS  # screen vs capped screen vs PROTOCOL timing on
#                                              # searched shapes (bench/screen_calibration.py)
#   bash bench/grid_search.sh pack             # here, before a device call: .runpack/run.tgz with
#                                              # only the search's state (store, policy, registry,
#                                              # autotune cache, the compare's resumable rows); the
#                                              # tree the card gets is capped at 64 MiB with the carry
#
# State lives in run/ (git-ignored): run/grid.db (the store: every measurement and the search log)
# and run/registry/. Both come back packed under $OUT (run.tgz; at most 8 files come back). Send
# them out again packed: `mkdir -p .runpack && cat <files_at>/run.tgz* > .runpack/run.tgz` (a pack
# over 15 MB comes back in parts, run.tgz.part-aa, -ab, ...) and the next call's
# `carry: [".runpack", ".whl", ".commit"]`; this script unpacks .runpack/run.tgz when run/ has no
# store. (Carrying run/ unpacked went over the device's 64 MiB tree limit on 2026-12-03: the store
# is 26 MB, 6 MB packed.) run/ is one card's (run/.card names it): on another card than the H200
# the state starts from bench/results/<card>/grid_search/ (see below), and a run/ or pack of
# another card is refused.
# To go on from the committed state (2026-12-05: grid nn all 1000 searched and compared;
# the model set all 224 searched with cost:4, its 80 shapes with M <= 16 again with the stream
# rule's seeds, its 96 with M <= 32 again with the trimmed wgmma lead (models-decode, run 68),
# compared (runs 68, 93); grid nt all 1000 searched with cost:4 and compared (runs 66-67); grid
# nn's leads pass all 1000 (runs 73, 94, 96) and compared (runs 93-96)) in a new session: a call
# that carries no pack builds run/ this way on the card
# (below); by hand here, then `bash bench/grid_search.sh pack`:
#   G=bench/results/h200-sm90/grid_search; mkdir -p run/compare run/compare_nt
#   gunzip -c $G/grid_store.db.gz >run/grid.db
#   tar xzf $G/grid_policy_ckpt.tgz                     # run/grid.db.ckpt: the policy
#   cudal2 registry export run/registry                 # the shipped entries
#   cp $G/lt-autotune-h200-sm90.json run/               # cuBLASLt autotune's choices (916 shapes)
#   gunzip -c $G/compare_grid.rows.jsonl.gz >run/compare/compare_grid.rows.jsonl   # compared rows
#   gunzip -c bench/results/h200-sm90/registry_v2/grid_nt/run72_gridnt_compare.rows.jsonl.gz \
#     >run/compare_nt/compare_grid.rows.jsonl       # grid nt's (grid_baselines.py --layout nt --out run/compare_nt)
#   cp $G/compare_grid.runs.json run/compare/; cp bench/results/h200-sm90/registry_v2/grid_nt/run72_gridnt_compare.runs.json run/compare_nt/compare_grid.runs.json
#   gunzip -c $G/grid_nn2_store.db.gz >run/grid_nn2.db; tar xzf $G/grid_nn2_policy_ckpt.tgz   # once grid-nn2 ran
# Commit a call's state the other way round: `python3 bench/adopt_runpack.py <files_at>/run.tgz`
# (the registry index and its sources, the stores, the checkpoints, the autotune json, grid nn's
# compare rows; grid nt's and the model set's compare files by hand, named by run).
# The search's settings are the ones on the command line below; NOTES.md says why each.
set -uo pipefail
if [ "${1:-}" = pack ]; then       # CPU side: no device_env, no store checkpoint, nothing else
  mkdir -p .runpack
  keep=(run/registry)
  for f in run/.card run/prior run/grid.db run/grid.db.ckpt run/grid_nn2.db run/grid_nn2.db.ckpt run/grid_nn_leads.db run/grid_nn_leads.db.ckpt run/sweep_leads.db run/sweep_leads.db.ckpt run/models_decode.db run/models_decode.db.ckpt run/lt-autotune-*.json run/compare/compare_grid.rows.jsonl \
           run/compare_nt/compare_grid.rows.jsonl run/compare/compare_grid.runs.json run/compare_nt/compare_grid.runs.json; do
    [ -e "$f" ] && keep+=("$f")
  done
  tar czf .runpack/run.tgz "${keep[@]}" && ls -l .runpack/run.tgz
  exit $?
fi
OUT=${OUT:-/tmp/out}
[ -f .runpack/run.tgz ] && [ ! -f run/.card ] && [ ! -f run/grid.db ] && tar xzf .runpack/run.tgz
mkdir -p "$OUT" run
source "$(dirname "$0")/device_env.sh"
# The state in run/ is one card's: its stores hold that card's measurements, and --resume skips the
# shapes they finished, so an H100 must not go on from the H200's stores (nor file by them). A pack
# from before run/.card existed is the H200's.
key=${CARD_KEY:-}                 # device_env.sh's: the card's registry key
[ -n "$key" ] || { echo "no card key (device_env.sh found no CUDA device): nothing to search"; exit 3; }
held=$( [ -f run/.card ] && cat run/.card || { [ -f run/grid.db ] && echo h200-sm90; } )
if [ -n "$held" ] && [ "$held" != "$key" ]; then
  echo "run/ holds the search state of $held and this card is $key: not mixing them (carry no pack, or $key's)"
  exit 3
fi
# --init-policy's prior: the H200 grid search's policy (on another card a prior only, never its store)
prior=run/grid.db.ckpt/policy.pt
if [ "$key" != h200-sm90 ]; then
  prior=run/prior/run/grid.db.ckpt/policy.pt
  if [ -z "$held" ]; then
    # Another card (the H100s the device service lends when no H200 comes): its own committed
    # stores (bench/adopt_runpack.py --device KEY writes them) if any, else none; the registry
    # exported whole (generate files under this card's key, beside the other cards' entries).
    G=bench/results/$key/grid_search
    echo "run/ for $key from $G (stores: $(ls $G/*_store.db.gz 2>/dev/null | wc -l))"
    mkdir -p run/prior run/compare run/compare_nt
    tar xzf bench/results/h200-sm90/grid_search/grid_policy_ckpt.tgz -C run/prior
    cudal2 registry export run/registry >/dev/null
    [ -f $G/grid_store.db.gz ] && gunzip -c $G/grid_store.db.gz >run/grid.db
    for s in grid_nn2 grid_nn_leads models_decode sweep_leads; do
      [ -f $G/${s}_store.db.gz ] && gunzip -c $G/${s}_store.db.gz >run/$s.db
    done
    cp $G/lt-autotune-$key.json run/ 2>/dev/null
  fi
elif [ ! -f run/grid.db ]; then
  # No pack carried: start from the committed state (the recipe above), so a call need not carry
  # the 6.6 MB pack beside a tree that is already ~55 MB of the 64 MiB the card takes.
  G=bench/results/h200-sm90/grid_search
  echo "run/ from the committed state ($G)"
  mkdir -p run/compare run/compare_nt
  gunzip -c $G/grid_store.db.gz >run/grid.db && tar xzf $G/grid_policy_ckpt.tgz && cp $G/lt-autotune-*.json run/
  cudal2 registry export run/registry >/dev/null
  gunzip -c $G/compare_grid.rows.jsonl.gz >run/compare/compare_grid.rows.jsonl
  gunzip -c bench/results/h200-sm90/registry_v2/grid_nt/run72_gridnt_compare.rows.jsonl.gz \
    >run/compare_nt/compare_grid.rows.jsonl
  # the runs' times too: --retime-stale judges rows without their own time against the first run
  cp $G/compare_grid.runs.json run/compare/
  cp bench/results/h200-sm90/registry_v2/grid_nt/run72_gridnt_compare.runs.json run/compare_nt/compare_grid.runs.json
  if [ -f $G/grid_nn2_store.db.gz ]; then
    gunzip -c $G/grid_nn2_store.db.gz >run/grid_nn2.db && tar xzf $G/grid_nn2_policy_ckpt.tgz
  fi
  for s in grid_nn_leads models_decode sweep_leads; do
    [ -f $G/${s}_store.db.gz ] && gunzip -c $G/${s}_store.db.gz >run/$s.db
  done
fi
# A run/ this call did not build (a carried pack, or the previous call's on a warm card) has its own
# filings and lacks the tree's since: join the tree's registry in, so adopting this call's pack
# keeps both (run 137, 2026-12-06, H100: a warm card's run/registry from run 135 lacked run 136's
# 95 transferred entries). cudal2.registry.merge has the rule; nothing is removed.
if [ -n "$held" ] && [ -d run/registry ]; then
  cudal2 registry merge shipped --registry run/registry | tail -1
fi
echo "$key" >run/.card
# cuBLASLt autotune's choices (baselines.py's on-disk cache) travel in run/ too: the registry's
# cuBLAS entries record the algorithm that won, so dispatch can run the same one.
mkdir -p ~/.cache/cudal2 && cp run/lt-autotune-*.json ~/.cache/cudal2/ 2>/dev/null
stage=$1
limit=$2
seeds=${3:-auto:4}
cap=${4:-300}
# SEEDS cost:N ranks each shape's pool with the learned cost model (issue 21): the committed one
# unless COST_MODEL names another `cudal2 train` checkpoint.
COST_DEFAULT=bench/results/h200-sm90/costmodel/cost_h200_2859efc.pt
costopt=()
case "$seeds" in cost:*) costopt=(--cost-model "${COST_MODEL:-$COST_DEFAULT}") ;; esac
# One set's search: its shapes, layout, stride (coprime to the set's size) and extra flags. grid-nt
# and grid-nn2 visit the grid in bench/search_order.py's order (the likeliest kernel wins first: the
# nt entries' outcome for nn2, the cost model's for nt), so a session that ends part-way has searched
# the shapes that move the figures; grid-nn (searched) and models keep their spread order. grid-nn2
# evaluates first, per shape, the nt search's best kernel spec of the same M, N, K (--lead-specs
# bench/grid_nn2_leads.txt; on the Hopper sweeps the nt-best spec was within 2% of the nn-best on 480
# of 539 shapes), then the cost model's best 3. All sets
# share one store and one registry: the store's search log is keyed by shape and layout, so --resume
# skips what any earlier call finished, whichever set it was in.
search_set() {   # search_set SET SECONDS
  local set=$1 lim=$2 shapes layout stride extra=() store=run/grid.db budget=8 sl=$seeds co=("${costopt[@]}")
  case "$set" in
    grid-nn) shapes=grid; layout=nn; stride=7 ;;
    grid-nn2) shapes=bench/grid_nn2_order.txt; layout=nn; stride=1; store=run/grid_nn2.db
              extra=(--init-policy "$prior" --lead-specs bench/grid_nn2_leads.txt) ;;
    # The nn grid's cheap pass: per shape only the nt search's best spec (the lead) and the cost
    # model's best one, no policy group (budget 2 = the seed list), in grid-nn2's order and a store
    # of its own (run/grid_nn_leads.db, so a later grid-nn2 still searches every shape). The
    # estimate behind it (CPU, the Hopper sweeps, NOTES 2026-12-04 late night): the nt-best spec was
    # within 2% of the nn-best on 480 of 539 shapes. Not measured as a search: at ~1.2 s per shape
    # (2 of run 59's ~9 evaluations, plus the baselines) all 1000 would take ~20 device minutes
    # where grid-nn2 needs ~55.
    grid-nn-leads) shapes=bench/grid_nn2_order.txt; layout=nn; stride=1; store=run/grid_nn_leads.db
              budget=2; sl=cost:2; co=(--cost-model "${COST_MODEL:-$COST_DEFAULT}")
              extra=(--init-policy "$prior" --lead-specs bench/grid_nn2_leads.txt) ;;
    grid-nt) shapes=bench/grid_nt_order.txt; layout=nt; stride=1 ;;
    models)  shapes=bench/model_set.txt; layout=nt; stride=11; extra=(--m-buckets) ;;
    # The model set's 96 decode shapes (M <= 32; bench/model_decode_set.txt, the M <= 32 lines of
    # model_set.txt) again, since decode_lead seeds the wave model's trimmed wgmma specs (run 62:
    # trimmed wgmma beat the stream rule on 31 of 48 decode shapes), in a store of its own
    # (run/models_decode.db: models' store has finished these shapes, and --resume would skip them).
    # Files into the same registry, where an entry is replaced only by a higher speedup.
    models-decode) shapes=bench/model_decode_set.txt; layout=nt; stride=1; store=run/models_decode.db
              extra=(--m-buckets --init-policy "$prior") ;;
    # A spec sweep's winners filed (bench/sweep_leads.py writes bench/sweep_leads.txt and its
    # shapes per layout): per shape only the lead (budget 1; no cost model, which is one card's),
    # screened, re-checked and timed in full, filed where it beats best-cublas by --file-margin and
    # the entry there (a store of its own, run/sweep_leads.db, so a later sweep's leads run again).
    sweep-nn|sweep-nt) layout=${set#sweep-}; shapes=bench/sweep_leads_shapes.$layout.txt; stride=1
              store=run/sweep_leads.db; budget=1; sl=fixed:1; co=()
              extra=(--init-policy "$prior" --lead-specs bench/sweep_leads.txt) ;;
    *) echo "unknown SET $set (grid-nn | grid-nt | models | models-decode | grid-nn2 | grid-nn-leads | sweep-nn | sweep-nt)"; return 2 ;;
  esac
  n=$(ls "$OUT"/generate_*.log 2>/dev/null | wc -l)
  capopt=(); [ "$cap" != 0 ] && capopt=(--screen-max-calls "$cap")
  timeout $((${lim%.*} + 45)) cudal2 generate --shapes "$shapes" --layout "$layout" --stride "$stride" \
    --backend both --budget "$budget" --group 4 --seed-list "$sl" "${co[@]}" "${capopt[@]}" --screen-ms 10 --full-ms 30 \
    --recheck 1 "${extra[@]}" --store "$store" --registry run/registry --resume --time-limit "$lim" \
    >"$OUT/generate_$n.log" 2>"$OUT/generate_$n.err"
  local rc=$?
  echo "generate $set exit $rc"
  tail -5 "$OUT/generate_$n.log"; tail -3 "$OUT/generate_$n.err"
  # generate says so when it stopped at the time limit with shapes left: the next set must wait.
  ! grep -q "stopped at the time limit" "$OUT/generate_$n.log" && [ $rc = 0 ]
}
case "$stage" in
  search-all)
    t0=$(date +%s)
    for set in grid-nn grid-nt models; do
      left=$(( ${limit%.*} - ($(date +%s) - t0) ))
      [ "$left" -lt 30 ] && { echo "time limit: $set not started"; break; }
      search_set "$set" "$left" || break
    done ;;
  search)
    if [ "${SET:-grid-nn}" != grid-nn ]; then search_set "$SET" "$limit"; else
    n=$(ls "$OUT"/generate_*.log 2>/dev/null | wc -l)
    # budget 8 = 4 seeds + one policy group of 4; screen 10 ms; the fastest screened candidate
    # re-checked in full with 30 ms of timing (replaced if it fails). Calls 10-13 (2026-12-03) ran
    # --seed-list fixed:4 and no cap (377 shapes); calls 14-15 the defaults here (450 shapes): on
    # shapes whose tiles cannot fill the SMs with K >= 2048 the search's best went from 0.51x to
    # 0.78x of best-cublas (other shapes of the same grid, not the same ones), none below 0.5x.
    # CAP: the screen's calls per function. Uncapped, shapes under 1 GFLOP spent 2.5 s each timing
    # thousands of ~5 us calls at ~30 us of host time each; capped at 300, 1.6 s. The finalist's
    # full pass stays uncapped: full/screen median 1.011x there, within 3% on 84% (96% uncapped).
    capopt=(); [ "$cap" != 0 ] && capopt=(--screen-max-calls "$cap")
    timeout $((${limit%.*} + 45)) cudal2 generate --shapes grid --stride 7 --backend both \
      --budget 8 --group 4 --seed-list "$seeds" "${capopt[@]}" --screen-ms 10 --full-ms 30 --recheck 1 \
      --store run/grid.db --registry run/registry --resume --time-limit "$limit" \
      >"$OUT/generate_$n.log" 2>"$OUT/generate_$n.err"
    echo "generate exit $?"
    tail -5 "$OUT/generate_$n.log"; tail -3 "$OUT/generate_$n.err"; fi ;;
  compare)
    # SET=grid-nt: the nt grid's searched shapes into run/compare_nt (its rows.jsonl resumes).
    # --retime-stale: the rows whose entry dispatches something else now (a re-search, a guard,
    # add-timings since they were timed) are timed again, the rest kept: a current compare of the
    # whole set for the price of what changed.
    # nn: the shapes the leads pass finished come first, in its order (what it re-filed is what moved;
    # a call that ends part-way has timed those), then the rest of the stale rows in stride order.
    cl=nn; cdir=run/compare; first=()
    [ "${SET:-grid-nn}" = grid-nt ] && { cl=nt; cdir=run/compare_nt; }
    if [ "$cl" = nn ] && [ -f run/grid_nn_leads.db ]; then
      python3 -c 'import sys; from cudal2.store import Store; print(*Store(sys.argv[1]).shapes(), sep="\n")' \
        run/grid_nn_leads.db >run/compare_first.txt && first=(--first run/compare_first.txt)
    fi
    timeout $((${limit%.*} + 60)) python3 bench/grid_baselines.py --layout "$cl" --registry run/registry \
      --searched-only --retime-stale --stride 7 "${first[@]}" --out "$cdir" --time-limit "$limit" 2>&1 | tail -20
    cp "$cdir"/compare_grid.csv "$cdir"/compare_grid.json "$OUT/" 2>/dev/null ;;
  calibrate)
    timeout $((${limit%.*} + 60)) python3 bench/screen_calibration.py --store run/grid.db --shapes 24 \
      --max-calls 300 --time-limit "$limit" --out "$OUT" 2>&1 | tail -8 ;;
  *)
    echo "unknown stage $stage (search | search-all | compare | calibrate)"; exit 2 ;;
esac
python3 - <<'EOF'
import glob
import sqlite3
for path in sorted(glob.glob("run/grid*.db") + glob.glob("run/models_decode.db") + glob.glob("run/sweep_leads.db")):
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")   # the WAL's rows into the file before packing
    print(f"store {path}:", db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0], "measurements,",
          db.execute("SELECT COUNT(*) FROM shapes").fetchone()[0], "shapes finished")
EOF
# cublas entries dispatch to the cuBLAS call that won (src/cudal2/lt_dispatch.py): generate and
# the compare record autotune's algorithm as they file / time; this catches any entry filed before.
for f in ~/.cache/cudal2/lt-autotune-*.json; do
  [ -f "$f" ] && cudal2 registry attach-lt "$f" --registry run/registry && cp "$f" run/
done
# A file over 16 MiB does not come back from $OUT (2026-12-05, run 94: a 20.8 MB run.tgz was left
# out, a 16.3 MB one came back): a larger pack comes back in parts run.tgz.part-aa, -ab, ...,
# which bench/adopt_runpack.py takes as they are (or `cat run.tgz.part-* > run.tgz`).
tar czf "$OUT/run.tgz" run
if [ "$(stat -c %s "$OUT/run.tgz")" -gt 15000000 ]; then
  split -b 15000000 "$OUT/run.tgz" "$OUT/run.tgz.part-" && rm "$OUT/run.tgz"
fi
ls -la "$OUT"
