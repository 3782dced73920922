#!/usr/bin/env bash
# One device call = one run of this script: install from the tree, then the named stages, with
# every log under $OUT (at most 8 files come back). Stages: info tests tests:PATH baselines bench
# probe (the next card session's first call, ~8 minutes at most: see the stage) decode-trim variants
# ceiling launch cublas-evidence band:NAME (bench/NAME_band.txt) bk sweep:NAME:LAYOUT[:SECONDS]
# retime:NAME:LAYOUT[:PASSES] recheck[:SECONDS[:VARIANT]] graph:SHAPES:LAYOUT[:SECONDS[:TAG]] (server:... too)
# small-sweep[:NN_S[:NT_S]] transfer[:SECONDS] lost:CLASSES:LAYOUTS[:SECONDS[:TAG]] pairs:FILE[:SECONDS]
# profile19[:SECONDS] profile-starved[:SECONDS] raster[:SECONDS] ring:CLASSES:LAYOUT[:SECONDS] decode-set[:SECONDS]
# chain[:SECONDS[:EVERY[:panels|panel[:CLASSES]]]] pending next[:SECONDS] next-probe[:SECONDS] next-lost[:SECONDS]
# tiled-stream[:SECONDS] stream-small[:LAYOUT[:SECONDS]] stream-file[:LAYOUT[:SECONDS]] krot[:SECONDS].
# To run other commands after it in the same call, `source bench/device_env.sh` instead.
#   bash bench/device_run.sh info tests bench
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/device_env.sh"
# recheck SECONDS VARIANT: the recheck stage (below), also the H200 half of the next stage.
recheck() {
  timeout $(($1 - 100)) python3 bench/variant_sweep.py --out "$OUT" --variant "$2" \
    --max-seconds $(($1 - 160)) 2>&1 | tail -12
  rm -rf /tmp/regcopy && cudal2 registry export /tmp/regcopy >/dev/null
  timeout 260 cudal2 registry verify --gpu --render --record --pending-only --time-limit 200 --registry /tmp/regcopy >"$OUT/verify_gpu.txt" 2>&1
  tail -4 "$OUT/verify_gpu.txt"; gzip -c /tmp/regcopy/index.json >"$OUT/index_rechecked.json.gz"
}

# small_sweep NN_S NT_S: issue 20's coverage pass on an H100, the small grid shapes it runs on
# torch.matmul (bench/h100_small_nn.txt / _nt.txt, worst first; run 134 swept the first 41 of 125;
# both lists empty since run 145, 2026-12-06 night):
# bench/sweep_file.sh per layout (the wave model's specs and bench/small_extra.txt's Triton tiled /
# mma / stream specs, the leads searched and filed in run/registry), then one run.tgz of the whole run/ (adopt it with bench/adopt_runpack.py).
# Files: nn/ and nt/ (the sweep's CSV / JSON, logs.tgz), run.tgz. A layout given 0 s is skipped.
# profile_cases SECONDS CASE...: bench/kernel_profile.py (ncu) over the cases ("SHAPE|kernel|..."),
# time-boxed, its summary lines only (~20 s a kernel; H100 run 100).
profile_cases() {
  local secs=$1 c args=()
  shift
  for c in "$@"; do args+=(--case "$c"); done
  timeout "$secs" python3 bench/kernel_profile.py --out "$OUT" "${args[@]}" 2>&1 | grep -v "^  " | tail -12
}
small_sweep() {
  local lay secs
  for lay in nn nt; do
    secs=$1; [ $lay = nt ] && secs=$2
    [ "$secs" -gt 0 ] || continue
    mkdir -p "$OUT/$lay"
    OUT="$OUT/$lay" bash bench/sweep_file.sh h100_small_$lay $lay "$secs" $((secs * 3 / 4)) 1 small_extra 2>&1 \
      | grep -v "^-r\|^d\|^total\|^│\|^└\|^┃\|^┏\|^┡" | tail -12
    rm -f "$OUT/$lay"/run.tgz*
  done
  tar czf "$OUT/run.tgz" run
}

# transfer_new SECONDS: the other Hopper card's own search winners this card does not file with the
# same spec (on an H200 the H100's: 48 on 2026-12-06 17:00, its sweeps' kernels since run 100; on an
# H100 the H200's, as below)
# (2026-12-06, on the H100: 268 = 214 shapes with no entry, 41 cuBLAS entries, 13 another kernel;
# 113 of them never timed there, 54 small nn, filed on the H200 after runs 84-85), timed here offline
# and in server mode beside the baselines and filed where they win (`cudal2 registry transfer
# --searched-only`, ~0.6-0.9 s a shape on an H100, runs 84-85) on an export, /tmp/xreg. Files:
# transfer.txt, xfer_from_FROM.json.gz (the compare; cut short, carry it back as
# .runpack/xfer_from_FROM.json and the next call resumes it), index_transfer.json.gz (copy it over
# src/cudal2/registry/index.json after checking that only this card's entries moved; the sources
# are the source card's, already in the tree).
# --time-limit, not the timeout, ends it: run 135 (2026-12-06, H100) was killed by `timeout 280`
# after timing 217 of 268 shapes, before it filed any (run 136 resumed the rows and filed 95);
# the time limit stops the compare ~30 s early and files the winners among the shapes timed.
transfer_new() {
  local from=h200-sm90; [ "${CARD_KEY:-}" = h200-sm90 ] && from=h100-sm90
  local xj=xfer_from_$from.json    # one per direction: a warm card keeps run/ between calls
  rm -rf /tmp/xreg && cudal2 registry export /tmp/xreg >/dev/null && mkdir -p run
  [ -f .runpack/$xj ] && [ ! -f run/$xj ] && cp .runpack/$xj run/
  timeout $(($1 + 30)) cudal2 registry transfer --from $from --registry /tmp/xreg --json run/$xj \
    --searched-only --time-limit $(($1 - 30)) >"$OUT/transfer.txt" 2>&1
  tail -8 "$OUT/transfer.txt"
  gzip -c run/$xj >"$OUT/$xj.gz" 2>/dev/null
  gzip -c /tmp/xreg/index.json >"$OUT/index_transfer.json.gz"
}

# verify_pending: the full checker over this card's pending registry entries (on an H200 the 741
# re-rendered for PDL: issue 22's "every entry ok"), recorded on an export, ~230 s at most. Files:
# verify_gpu.txt, index_rechecked.json.gz (copy it over src/cudal2/registry/index.json after checking
# that only check fields moved).
verify_pending() {
  rm -rf /tmp/regcopy && cudal2 registry export /tmp/regcopy >/dev/null
  timeout 230 cudal2 registry verify --gpu --render --record --pending-only --time-limit 200 \
    --registry /tmp/regcopy >"$OUT/verify_gpu.txt" 2>&1
  tail -4 "$OUT/verify_gpu.txt"; gzip -c /tmp/regcopy/index.json >"$OUT/index_rechecked.json.gz"
}

# tests_passed FILE: a pytest log that passed something and failed or errored nothing.
tests_passed() { grep -q " passed" "$1" && ! grep -qiE "failed|error" "$1"; }

for stage in "$@"; do
  echo "=== $stage $(date +%T)"
  case "$stage" in
    info)
      { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
        python3 -c "import torch,triton;from cudal2.device import current;print(torch.__version__,triton.__version__,current())"
      } 2>&1 | tee "$OUT/info.txt" ;;
    tests)
      # every GPU-marked test; pytest-timeout (in the device image) stops a hung one
      timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 150 -rfE tests \
        >"$OUT/gpu_tests.txt" 2>&1; tail -45 "$OUT/gpu_tests.txt" ;;
    tests:*)
      timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 150 -rfE ${stage#tests:} \
        >"$OUT/gpu_tests.txt" 2>&1; tail -45 "$OUT/gpu_tests.txt" ;;
    baselines)
      timeout 560 python3 bench/grid_baselines.py --out bench/results/h200-sm90 --time-limit 500 2>&1 | tail -30
      cp -r bench/results/h200-sm90 "$OUT/" ;;
    bench)
      timeout 420 python3 bench/families.py --out "$OUT/h200-sm90" --max-seconds 360 2>&1 | tail -50 ;;
    probe)
      # Issue 20 / 19 / 22's open questions in one call, each step time-boxed so the whole stays
      # under ~500 s of the 600 a call may run (a call that ran past its limit came back empty,
      # 2026-12-04): the nn odd-BN boxes under the full checker (before any grid-nn2 search), split_k
      # 3 / 6 / 12 (clusters off the powers of two: bit-identical runs, two streams), A_TRIM=1 and
      # EPI_DIRECT=1 under the checker (A's box M rows tall at decode M; stores from registers), the
      # cluster probe and the timeline's own GPU tests; where a short kernel's time goes, CTA by
      # CTA, and the reduction / nn variants beside the filed kernels (bench/timeline_cases.txt);
      # the SM clock while ours and cuBLAS's run back to back at 4096^3 nt.
      timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 60 -rfE \
        tests/test_backends_gpu.py::test_wgmma_odd_bn tests/test_backends_gpu.py::test_wgmma_a_trim \
        tests/test_backends_gpu.py::test_wgmma_epi_direct \
        tests/test_backends_gpu.py::test_wgmma_split_k_off_powers_of_two tests/test_cluster_fit.py tests/test_cta_timeline.py \
        >"$OUT/gpu_tests.txt" 2>&1; tail -12 "$OUT/gpu_tests.txt"
      timeout 190 python3 bench/cta_timeline.py --out "$OUT" --cases bench/timeline_cases.txt --before 0,200 \
        --repeat 3 2>&1 | tail -40
      timeout 50 python3 bench/clock_watch.py --out "$OUT" --seconds 3 --rounds 3 --spec "backend=cuda \
family=wgmma bm=128 bn=256 bk=64 warps=12 stages=4 group_m=8 split_k=1 subtile=2 warp_spec=1 cluster=1" 2>&1 | tail -12 ;;
    variants)
      # The wgmma experiments against each filed wgmma entry they change the SASS of
      # (bench/variant_sweep.py; pairs compiled first, in parallel): the code before 2026-12-05's
      # defaults (RED_CHUNK 1, EXIT_RELAXED 0, A_TRIM 0), and EARLY_LOAD / EPI_DIRECT, both still off
      # (run 62: 0.98x and 0.75x of the filed kernels). Run 62's four variants took ~145 s over 228.
      timeout 520 python3 bench/variant_sweep.py --out "$OUT" --variant "RED_CHUNK=1 EXIT_RELAXED=0 A_TRIM=0" \
        --variant EARLY_LOAD=1 --variant EPI_DIRECT=1 --max-seconds 440 2>&1 | tail -14 ;;
    decode-trim)
      # Issue 20: the decode set with wgmma built plain (A_TRIM=0) and trimmed (the default since
      # 2026-12-05) beside the stream family and cuBLAS (bench/decode_trim.py; run 62: 48 shapes, 42 s).
      timeout 300 python3 bench/decode_trim.py --out "$OUT" --max-seconds 240 2>&1 | tail -12 ;;
    ceiling)
      # Issue 20: what the card streams one way (read-only, write-only) beside the copy PROTOCOL's BW
      # is, 8 MB to 1 GiB, offline and with L2 wiped (bench/stream_ceiling.py; seconds): whether a
      # decode kernel can pass cuBLAS's ~3.6 TB/s on the 117-136 MB weights at all, and the read and
      # write floors of bench/class_ceiling.py. Since 2026-12-05 it times the CUDA readers and
      # writers too (TMA bulk copies and stores, 16-byte loads and stores: 15 ops a size where it
      # timed 7, each reader and writer checked over the whole buffer first, at 9 sizes where it
      # took 7), hence 200 s where run 72 needed well under 120.
      timeout 200 python3 bench/stream_ceiling.py --out "$OUT" 2>&1 | tail -20 ;;
    launch)
      # Issues 20 / 19: what a short kernel pays before its work: empty kernels by parameter block,
      # dynamic smem, cluster, CTAs; a 64x64 tile's first load by TMA (with / without the tensor-map
      # prefetch), cp.async and plain loads (bench/launch_cost.py; seconds).
      timeout 120 python3 bench/launch_cost.py --out "$OUT" 2>&1 | tail -20 ;;
    band:*)
      # band:NAME[:SECONDS] (default 300): the shapes of bench/NAME_band.txt swept wider than the
      # grid search did (~9 specs a shape there): the wave model's 16 specs, the lite schedule of its
      # 8 best tiles and the cost model's 4, timed beside the baselines (bench/hopper_sweep.py). If
      # the best of ~28 still ties cuBLAS, a class's miss is the kernels', not the search's.
      #   small    issue 20: 40 grid nt shapes at 5.5-8 µs where cudal2 ties cuBLAS (the class's
      #            ceiling there 1.44, bench/class_ceiling.py; 1,008 of the 1,105 pairs unmeasured)
      #   starved  issue 19: 40 grid nt shapes where cudal2 ties cuBLAS (the class's ceiling 1.505)
      rest=${stage#band:}; name=${rest%%:*}; secs=300; [ "$rest" != "$name" ] && secs=${rest#*:}
      list=bench/${name}_band.txt
      if [ ! -f "$list" ]; then echo "no $list (bands: $(ls bench/*_band.txt | sed 's|bench/||; s|_band.txt||' | paste -sd' ' -))"; else
      timeout $((secs + 90)) python3 bench/hopper_sweep.py --out "$OUT" --layouts nt --tag "${name}_band" \
        --shapes "$(grep -v '^#' "$list" | cut -d: -f1 | paste -sd, -)" --n-cands 16 --lite 8 \
        --cost-model bench/results/h200-sm90/costmodel/cost_h200_2859efc.pt --n-cost 4 \
        --time-limit "$secs" 2>&1 | tail -20; fi ;;
    sweep:*)
      # sweep:NAME:LAYOUT[:SECONDS] (default 300): the wave model's 8 specs and 2 ping-pongs a shape
      # (no lite) over the shapes of bench/NAME.txt in one layout, beside the baselines
      # (bench/hopper_sweep.py, 10 ms a function). acc128_split: issue 19's 254 grid shapes whose list
      # now holds a 128-accumulator cluster split-K (128x256 / 256x128, refused before 2026-12-06).
      # sweep:NAME:LAYOUT:SECONDS:EXTRA also tries the specs of bench/EXTRA.txt where valid
      # (small_extra: the Triton tiled / mma / stream specs most filed at small shapes).
      IFS=: read -r _ name lay secs extra <<<"$stage"; secs=${secs:-300}
      list=bench/$name.txt; xopt=(); [ -n "$extra" ] && xopt=(--extra-file "bench/$extra.txt")
      if [ ! -f "$list" ] || [ -z "$lay" ]; then echo "sweep:NAME:LAYOUT[:SECONDS[:EXTRA]] needs bench/NAME.txt and nn or nt"; else
      timeout $((secs + 120)) python3 bench/hopper_sweep.py --out "$OUT" --layouts "$lay" --tag "${name}_$lay" \
        --shapes "$(grep -v '^#' "$list" | cut -d' ' -f1 | paste -sd, -)" --n-cands 8 --lite 0 \
        "${xopt[@]}" --time-limit "$secs" 2>&1 | tee "/tmp/sweep_${name}_$lay.log" | tail -12; fi ;;
    stream-small|stream-small:*)
      # stream-small[:LAYOUT[:SECONDS]] (defaults nt, 300): issue 20's small class past 64 tokens, where
      # the stream family was refused until 2026-12-07: bench/stream_small.py writes the one-wave
      # rule's specs for this card's cuBLAS-served small grid shapes (~60 a layout, ~4 specs each),
      # timed beside the baselines by bench/hopper_sweep.py --pairs (10 ms a function). Files nothing:
      # `bash bench/sweep_file.sh stream_small LAYOUT ...` files its winners. Here, after the call:
      # `python3 bench/stream_small.py --report <its CSV> --out <table.md>` (wins, the estimate's rank).
      IFS=: read -r _ slay ssecs <<<"$stage"; slay=${slay:-nt}; ssecs=${ssecs:-300}
      mkdir -p run && if python3 bench/stream_small.py --layout "$slay" --registry src/cudal2/registry \
          --out "run/stream_small_$slay.pairs"; then
        timeout $((ssecs + 120)) python3 bench/hopper_sweep.py --out "$OUT" --layouts "$slay" --tag "stream_small_$slay" \
          --pairs "run/stream_small_$slay.pairs" --n-cands 0 --time-limit "$ssecs" 2>&1 \
          | tee "/tmp/sweep_stream_small_$slay.log" | tail -12
      fi ;;
    bk|bk:*)
      # bk[:SECONDS] (default 200): issue 19's k-tile depth. The wave model's 6 best specs of 6 grid nt
      # shapes of each class (small, shortK, starved, mid, large) again at bk 32 and 128, each with
      # the deepest ring that fits, timed beside their bk-64 parents and the baselines
      # (bench/hopper_sweep.py --bks; the JSON's bk_pairs: each variant over its parent).
      secs=200; [ "$stage" != bk ] && secs=${stage#bk:}
      timeout $((secs + 90)) python3 bench/hopper_sweep.py --out "$OUT" --layouts nt --tag bk \
        --classes small,shortK,starved,mid,large --per-class 6 --n-cands 6 --bks 32,128 \
        --time-limit "$secs" 2>&1 | tail -14 ;;
    cublas-evidence|cublas-evidence:*)
      # cublas-evidence[:SECONDS] (default 480). A card whose kernels came by transfer (the H100) has no cuBLAS entries: torch.matmul ran 0.965x
      # of best-cublas on its 1,564 grid shapes without a kernel (runs 87-90). `cudal2 registry
      # file-cublas` files the call that beat torch.matmul in >= 2 timings; these are two offline
      # timings of the three calls dispatch can make, over bench/h100_cublas_shapes.txt, the second
      # after the first is complete, with autotune's cache kept between them (and between calls: it
      # comes back in the pack), so both time the algorithm filed. Resumable: carry the returned
      # cublas_ev.tgz as .runpack/cublas_ev.tgz.
      mkdir -p run ~/.cache/cudal2
      [ -f .runpack/cublas_ev.tgz ] && [ ! -d run/cublas_ev ] && tar xzf .runpack/cublas_ev.tgz
      mkdir -p run/cublas_ev && cp run/cublas_ev/lt-autotune-*.json ~/.cache/cudal2/ 2>/dev/null
      key=$(python3 -c "from cudal2.device import current; print(current().key)")
      secs=480; [ "$stage" != cublas-evidence ] && secs=${stage#cublas-evidence:}
      t_end=$(( $(date +%s) + secs ))
      for pass in 1 2; do
        left=$(( t_end - $(date +%s) )); [ $left -lt 20 ] && break
        timeout $left cudal2 compare --shapes bench/h100_cublas_shapes.txt --baselines torch,cublaslt-heuristic,cublaslt-autotune \
          --mode offline --min-ms 15 --no-table --json run/cublas_ev/pass$pass.json --resume >run/cublas_ev/pass$pass.log 2>&1
        rc=$?; tail -3 run/cublas_ev/pass$pass.log; cp ~/.cache/cudal2/lt-autotune-$key.json run/cublas_ev/ 2>/dev/null
        [ $rc = 0 ] || break           # cut short by the time box: the next call resumes this pass
      done
      tar czf "$OUT/cublas_ev.tgz" run/cublas_ev ;;
    recheck|recheck:*)
      # recheck[:SECONDS[:VARIANT]] (default 300, PDL=0,EPI_WIDE=0): after a template edit moved some
      # entries' SASS (`cudal2 registry rerender` left them pending, check.passed None), the filed
      # kernels of this card against the old code (VARIANT: the edits of 2026-12-06, PDL on by default
      # and EPI_WIDE by rule; entries whose SASS it does not change are not timed; on the offline
      # clock, where PDL is 0.999x), then `registry verify --gpu --render --record` on an export of
      # the tree's registry (the sweep's parallel compiles warm its cache). Files: the sweep's CSV /
      # JSON, verify_gpu.txt, index_rechecked.json.gz (copy it over src/cudal2/registry/index.json
      # after checking that only check fields moved).
      IFS=: read -r _ secs variant <<<"$stage"; recheck "${secs:-300}" "${variant:-PDL=0,EPI_WIDE=0}" ;;
    retime:*)
      # retime:NAME:LAYOUT[:PASSES] (default 2): the registry's dispatch at bench/NAME.txt's shapes
      # (bench/worst_rows.py: the rows a compare on record saw a kernel lose to torch.matmul) beside
      # the five baselines, offline and server, PASSES independent compares (each its own JSON), the
      # evidence `cudal2 registry add-timings --offline-guard / --server-guard` acts on. The grid
      # compares' settings (15 ms offline, 20 server calls); ~0.7 s a shape a pass on the H200.
      IFS=: read -r _ rname rlay rpasses <<<"$stage"
      for pass in $(seq 1 "${rpasses:-2}"); do
        timeout 240 cudal2 compare --shapes "bench/$rname.txt" --layout "$rlay" --mode both \
          --registry src/cudal2/registry --min-ms 15 --server-calls 20 --no-table \
          --json "$OUT/retime_${rname}_${rlay}_p$pass.json" 2>&1 | tail -4
      done ;;
    graph:*|server:*)
      # graph:SHAPES:LAYOUT[:SECONDS[:TAG]] (default 420): the registry as dispatched on SHAPES (a
      # `--shapes` value: a file such as bench/graph_small_nt.txt, grid, grid:N) beside the five
      # baselines on both PROTOCOL clocks, offline and CUDA-graph replays (no event between calls:
      # where wgmma's PDL shows; H100 run 127: ~1.8 s a shape). server:... the same with server mode
      # (cold L2 after an idle gap, 30 calls) in place of the graph replays (H100 runs 175-177: 152
      # small nt shapes in ~380 s). Resumable: the JSON is rewritten as rows come in, so a later call
      # with the same JSON (carry it back into run/) goes on. TAG names a second, independent timing of
      # the same shapes (its own JSON): `registry file-cublas` files a cuBLASLt call only on two such
      # timings.
      IFS=: read -r gclock gshapes glay gsecs gtag <<<"$stage"
      gname=$(basename "$gshapes" .txt | tr -c 'A-Za-z0-9_\n-' _)${gtag:+_$gtag}
      gargs=(--mode offline,graph); [ "$gclock" = server ] && gargs=(--mode offline,server --server-calls 30)
      # --time-limit ends it with the summary printed (run 136, H100: 152 small nn shapes in ~300 s).
      mkdir -p run && gjson="run/${gclock}_${gname}_${glay}.json" && gsecs=${gsecs:-420}
      [ -f ".runpack/$(basename "$gjson")" ] && [ ! -f "$gjson" ] && cp ".runpack/$(basename "$gjson")" run/
      timeout $((gsecs + 30)) cudal2 compare --shapes "$gshapes" --layout "$glay" "${gargs[@]}" \
        --registry src/cudal2/registry --min-ms 15 --eager-ms 2 --no-table --json "$gjson" --resume \
        --time-limit $((gsecs - 20)) 2>&1 | tail -12
      gzip -c "$gjson" >"$OUT/$(basename "$gjson").gz" ;;
    lost:*)
      # lost:CLASSES:LAYOUTS[:SECONDS[:TAG[:MIN]]] (default 240 s, tag 1): bench/graph_clock.py --lost
      # --server, the card's cuBLAS entries of CLASSES (e.g. small,skinny) with the best kernel their
      # search measured and did not file, on the offline, graph and server clocks beside the
      # baselines (~3 s a shape): does a shape the offline clock gave to cuBLAS hold a kernel that
      # wins where calls run back to back (graph replays)? Two tags are two independent timings,
      # what `cudal2 registry file-graph` files from. A cut pass resumes from its JSON carried back
      # as .runpack/lost_CARD_TAG.json.gz (CARD: h200-sm90 / h100-sm90). MIN: only lost kernels that
      # ran at least MIN of best-cublas where measured (--lost-min; 0.97 leaves out the hopeless).
      IFS=: read -r _ lclasses llays lsecs ltag lmin <<<"$stage"
      lres=.runpack/lost_${CARD_KEY:-none}_${ltag:-1}.json.gz; largs=()
      [ -f "$lres" ] && largs=(--resume "$lres")
      timeout $((${lsecs:-240} + 40)) python3 bench/graph_clock.py --out "$OUT" --lost --server \
        --classes "$lclasses" --layouts "$llays" --per-class 400 --families wgmma,mma,stream,tiled \
        --max-seconds "${lsecs:-240}" --tag "${ltag:-1}" --lost-min "${lmin:-0}" "${largs[@]}" 2>&1 | tail -6
      for f in "$OUT"/graph_clock_lost_*_"${ltag:-1}".json; do [ -f "$f" ] && gzip -f "$f"; done ;;
    pairs:*)
      # pairs:FILE[:SECONDS] (default 300): bench/hopper_sweep.py --pairs FILE --n-cands 0, each
      # problem of FILE with its own specs beside the baselines (bench/nn_wgmma_gaps.txt: the nt
      # search's best wgmma spec on the 108 nn grid shapes that never ran it, bench/nn_family_gaps.py)
      IFS=: read -r _ pfile psecs <<<"$stage"
      timeout $((${psecs:-300} + 60)) python3 bench/hopper_sweep.py --out "$OUT" --pairs "$pfile" --n-cands 0 \
        --time-limit "${psecs:-300}" --tag "pairs_$(basename "$pfile" .txt)" 2>&1 | tail -12 ;;
    raster|raster:*)
      # raster[:SECONDS] (default 150): issue 19's tile orders (group_m > 0 groups tile rows walked
      # down M, < 0 tile columns walked along N; 2026-12-07). The wave model's 3 best specs of 8
      # grid nt shapes of large and mid (where group_m spread most in the H200 stores: best / worst
      # 1.024 / 1.016 median, p90 1.41 / 1.29) again at each order, timed beside their group-8
      # parents and the baselines (the JSON's group_pairs: each order over its parent).
      secs=150; [ "$stage" != raster ] && secs=${stage#raster:}
      timeout $((secs + 90)) python3 bench/hopper_sweep.py --out "$OUT" --layouts nt --tag raster \
        --classes large,mid --per-class 8 --n-cands 3 --groups=-1,-4,-8,-16,1,4,16 \
        --time-limit "$secs" 2>&1 | tail -14 ;;
    ring:*)
      # ring:CLASSES:LAYOUT[:SECONDS] (default 200): the wave candidates (tiles.candidates: subtile 2
      # where it deepens a shallow ring, ping-pong of the tiles one warpgroup holds) beside
      # bench/shortk_ring_specs.txt (the subtile-1 parents and their deeper rings) over every grid
      # shape of CLASSES (in that order; the time box cuts the rest), against the baselines. H100 runs
      # 158 / 160 / 163 measured it over shortK, mid and large; the H200 stores ran ping-pong 128x128
      # 6 sub2 on 7 grid shapes only (within 1% of the wgmma best on 6).
      IFS=: read -r _ rclasses rlay rsecs <<<"$stage"; rsecs=${rsecs:-200}
      timeout $((rsecs + 60)) python3 bench/hopper_sweep.py --out "$OUT" --layouts "$rlay" --tag "ring_$rlay" \
        --classes "$rclasses" --per-class 0 --n-cands 4 --extra-file bench/shortk_ring_specs.txt \
        --time-limit "$rsecs" 2>&1 | tail -12 ;;
    profile19|profile19:*)
      # profile19[:SECONDS] (default 170): issue 19's Nsight Compute profiles, ours against cuBLASLt's
      # autotuned kernel at the issue's three shapes (nt), with the specs both cards file or search
      # best there (1024x1024x8192: 64x128 one consumer, 8 stages, and a 128x128 split-K 2;
      # 4096x4096x512: 256x128; 4096^3: 128x256); ~20 s a kernel under ncu (H100 run 100).
      psecs=170; [ "$stage" != profile19 ] && psecs=${stage#profile19:}
      W="backend=cuda family=wgmma bk=64 group_m=8 cluster=1"
      profile_cases "$psecs" \
        "1024x1024x8192:nt|$W bm=64 bn=128 warps=8 stages=8 split_k=1 subtile=1 warp_spec=1|$W bm=128 bn=128 warps=12 stages=6 split_k=2 subtile=1 warp_spec=1|cublaslt-autotune" \
        "4096x4096x512:nt|$W bm=256 bn=128 warps=12 stages=3 split_k=1 subtile=1 warp_spec=1|cublaslt-autotune" \
        "4096x4096x4096:nt|$W bm=128 bn=256 warps=12 stages=3 split_k=1 subtile=1 warp_spec=1|cublaslt-autotune" ;;
    profile-starved|profile-starved:*)
      # profile-starved[:SECONDS] (default 200): where the starved class's worst shapes lose (runs
      # 164-165: small outputs, K 16384): the cluster split-K that ran 2-3x over its k-tiles' time
      # (1024x512x16384 nn 128x176 split 4, 71.5 us), the workspace split-K beside it (64x128
      # ping-pong split 2, 47.9), the best spec of 512x512 / 256x256 and cuBLASLt's autotuned kernel
      # (32.8 / 21.8 / 11.6 us): DRAM / L2 throughput and hit rate say whether bytes or the
      # reduction hold them (run 167: cuBLASLt's kernels there are 64x64 / 128x64 on 2-CTA clusters).
      psecs=200; [ "$stage" != profile-starved ] && psecs=${stage#profile-starved:}
      W="backend=cuda family=wgmma bk=64 group_m=8 cluster=1"
      profile_cases "$psecs" \
        "1024x512x16384:nn|$W bm=128 bn=176 warps=12 stages=4 split_k=4 subtile=1 warp_spec=1|$W bm=64 bn=128 warps=12 stages=8 split_k=2 subtile=1 warp_spec=2|$W bm=128 bn=128 warps=12 stages=6 split_k=1 subtile=2 warp_spec=1|cublaslt-autotune" \
        "512x512x16384:nn|$W bm=128 bn=128 warps=12 stages=6 split_k=6 subtile=1 warp_spec=1|cublaslt-autotune" \
        "256x256x16384:nn|$W bm=64 bn=64 warps=8 stages=13 split_k=6 subtile=1 warp_spec=1|cublaslt-autotune" ;;
    small-sweep|small-sweep:*)
      # small-sweep[:NN_S[:NT_S]] (defaults 120, 80): issue 20's coverage pass on an H100 (small_sweep above)
      IFS=: read -r _ s_nn s_nt <<<"$stage"; small_sweep "${s_nn:-120}" "${s_nt:-80}" ;;
    transfer|transfer:*)
      # transfer[:SECONDS] (default 300): transfer_new above
      secs=300; [ "$stage" != transfer ] && secs=${stage#transfer:}; transfer_new "$secs" ;;
    decode-set|decode-set:*)
      # decode-set[:SECONDS] (default 200): issue 20's decode set (bench/decode_set.txt: Llama-3-8B and
      # Qwen2.5-7B projections at M 1-64, nt) as dispatched beside the five baselines on three clocks:
      # offline, CUDA-graph replays and server (cold L2, the way decode runs in a server); ~2.5 s a
      # shape. Resumable like graph:*: carry run/decode_set_nt.json back as .runpack/decode_set_nt.json.
      dsecs=200; [ "$stage" != decode-set ] && dsecs=${stage#decode-set:}
      mkdir -p run && djson=run/decode_set_nt.json
      [ -f .runpack/decode_set_nt.json ] && [ ! -f "$djson" ] && cp .runpack/decode_set_nt.json run/
      timeout $((dsecs + 30)) cudal2 compare --shapes bench/decode_set.txt --layout nt --mode offline,graph,server \
        --registry src/cudal2/registry --min-ms 15 --server-calls 30 --eager-ms 2 --no-table --json "$djson" \
        --resume --time-limit $((dsecs - 20)) 2>&1 | tail -12
      gzip -c "$djson" >"$OUT/decode_set_nt.json.gz" ;;
    chain|chain:*)
      # chain[:SECONDS[:EVERY[:panels|panel[:CLASSES]]]] (default 200 s, every shape): bench/chain_floor.py over the
      # small and skinny grid shapes and the decode set, offline and server: per shape the time of
      # reading A and B once and then writing C, checked, beside torch.matmul in the same run
      # (`class_ceiling.py --chain`); ~1 s a shape (H100 runs 168 / 170). EVERY measures each
      # EVERY-th shape only (a smaller set; any run measures in a spread order). `panels` adds the
      # tiled chain (--panels: each CTA its tile's whole panels, every tile and split, by 16-byte
      # loads and, since 2026-12-07, by bulk copies into a shared-memory ring, each kind's 4 fastest
      # of a screen timed; the loads alone took ~10 s a shape in H100 run 174, where torch.matmul beat
      # them on 6 of 22 shapes; the bulk kind not run yet).
      # `panel` instead: the tiled chain's 16-byte kind only (the bulk kind never won on the 211
      # shapes of H100 runs 178-179; on an H100 half the checks for the same floor). CLASSES (default
      # small,skinny; `none`: the decode set alone) the grid classes beside the decode set.
      # Resumable: the JSON is kept in run/chain_floor.json (carry it back as
      # .runpack/chain_floor.json) and a later call goes on.
      IFS=: read -r _ csecs cevery cpanels cclasses <<<"$stage"; csecs=${csecs:-200}
      cclasses=${cclasses:-small,skinny}; [ "$cclasses" = none ] && cclasses=
      mkdir -p run && cres=run/chain_floor.json && cargs=(--every "${cevery:-1}")
      [ "${cpanels:-}" = panels ] && cargs+=(--panels)
      [ "${cpanels:-}" = panel ] && cargs+=(--panels --panel-kinds panel)
      [ -f .runpack/chain_floor.json ] && [ ! -f $cres ] && cp .runpack/chain_floor.json run/
      [ -f $cres ] && cargs+=(--resume $cres)
      timeout $((csecs + 40)) python3 bench/chain_floor.py --out "$OUT" --classes "$cclasses" \
        --shapes bench/decode_set.txt --time-limit "$csecs" "${cargs[@]}" 2>&1 | tail -14
      for f in "$OUT"/chain_floor_*.json; do [ -f "$f" ] && cp "$f" $cres; done ;;
    krot|krot:*)
      # krot[:SECONDS] (default 200): wgmma.cu's K_ROT experiment (each work unit's k-tiles loaded
      # from a rotated start) on the decode set: the filed wgmma kernels and the cuBLAS entries' best
      # lost ones (--lost), each beside K_ROT=1 and K_ROT=13 and torch.matmul in one interleaved run,
      # each variant checked first (bench/variant_sweep.py). Why: the H200's HBM-bound decode shapes'
      # best kernels move 3.0-3.3 TB/s where cuBLAS moves 3.5-3.7 (NOTES 2026-12-07 23:00); 36
      # entries on the H200, 19 on the H100.
      ksecs=200; [ "$stage" != krot ] && ksecs=${stage#krot:}
      timeout $((ksecs + 60)) python3 bench/variant_sweep.py --out "$OUT" --variant K_ROT=1 --variant K_ROT=13 \
        --layouts nt --shapes bench/decode_set.txt --lost --torch --max-seconds "$ksecs" 2>&1 | tail -14 ;;
    pending)
      # pending: verify_pending above (also the H200 half of the next stage)
      verify_pending ;;
    next|next:*)
      # next[:SECONDS] (default 560): the first call of the next card session, by card, time-boxed
      # (rewritten 2026-12-07 when issue 19 closed: issues 20 and 22 only).
      # On an H200 (none since run 96): the K_ROT experiment on the decode set (krot:150), the full
      # checker over the H200's 741 entries re-rendered for
      # PDL (issue 22's "every entry ok"; recorded on an export: index_rechecked.json.gz, copy it over
      # src/cudal2/registry/index.json after checking that only check fields moved), then the chain
      # floor with the tiled chain (both kinds) over the decode set
      # in what is left (never run on an H200; since 2026-12-07 23:00 it replaces the chain over every
      # other small / skinny shape and small nt b on the graph clock: on the H100 the tiled chain put
      # the decode target past the ceiling, which is what the H200's offline figure lacks).
      # On an H100: krot:90 (the K_ROT experiment, 19 decode entries there), then `next-lost` (the
      # H100's `next` again since 2026-12-07 21:45; runs 178-181 ran `tiled-stream` and `stream-file`
      # in its place; NOTES). `next-lost`, the H100's `next` from 18:50 to 21:00, is
      # (the chain on every shape in runs 168 / 170, the decode set three times, small nt
      # on all three clocks; rewritten 2026-12-07 18:50): two independent timings of the small
      # cuBLAS entries' lost kernels that ran >= 0.97 of best-cublas where measured (102 since
      # `registry keep-lost`), what `cudal2 registry file-graph` files from: on the graph clock the
      # small class misses 1.20 only on its cuBLAS-served shapes, which would need 1.075-1.082
      # there (issue20_table.py --target), and kernels at < 1.02 offline ran >= 1.03 on graph
      # replays on 75 of 76 kernel-served shapes. The tiled chain's probe is `next-probe`.
      nsecs=560; [ "$stage" != next ] && nsecs=${stage#next:}
      if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
        # a short call (nsecs < ~500) drops what does not fit, from the end
        ksecs=$((nsecs / 3 < 150 ? nsecs / 3 : 150))
        bash "$0" krot:$ksecs
        [ $((nsecs - SECONDS)) -gt 240 ] && verify_pending
        csecs=$((nsecs - SECONDS - 60))
        [ $csecs -gt 60 ] && bash "$0" chain:$csecs:1:panels:none
      else
        ksecs=$((nsecs / 6 < 90 ? nsecs / 6 : 90))
        bash "$0" krot:$ksecs
        bash "$0" next-lost:$((nsecs - SECONDS))
      fi ;;
    tiled-stream|tiled-stream:*)
      # tiled-stream[:SECONDS] (default 560): the H100's `next` of 2026-12-07 21:00-21:40 (run 178):
      # the tiled chain's GPU check (both kinds) and the stream family's past 64 tokens, each result
      # kept (the tests stage writes gpu_tests.txt); then the chain with the tiled chain over every
      # other shape where its check passed, the stream sweep in what is left.
      nsecs=560; [ "$stage" != tiled-stream ] && nsecs=${stage#tiled-stream:}
      bash "$0" tests:tests/test_panel_cuda.py
      mv "$OUT/gpu_tests.txt" "$OUT/gpu_tests_panel.txt"
      tiled=; tests_passed "$OUT/gpu_tests_panel.txt" && tiled=:panels
      bash "$0" tests:tests/test_stream_gpu.py::test_checker_small
      bash "$0" chain:$(( (nsecs - SECONDS) * 55 / 100 - 40 )):2$tiled
      ssecs=$((nsecs - SECONDS - 100))
      tests_passed "$OUT/gpu_tests.txt" && [ $ssecs -gt 60 ] && bash "$0" stream-small:nt:$ssecs ;;
    next-lost|next-lost:*)
      # next-lost[:SECONDS] (default 560): on an H100 (its `next`; its reasons above): two independent
      # timings of the small cuBLAS entries' lost kernels at >= 0.97 of best-cublas where measured.
      nsecs=560; [ "$stage" != next-lost ] && nsecs=${stage#next-lost:}
      lsecs=$(( (nsecs - SECONDS - 100) / 2 ))
      bash "$0" lost:small:nt,nn:$lsecs:1:0.97
      lsecs=$((nsecs - SECONDS - 60))
      bash "$0" lost:small:nt,nn:$lsecs:2:0.97 ;;
    stream-file|stream-file:*)
      # stream-file[:LAYOUT[:SECONDS]] (defaults nt, 560): the stream family's GPU check past 64
      # tokens, then `bench/sweep_file.sh stream_small LAYOUT`: the stream-small sweep (above), its
      # winners searched, filed where they win in full and the grid compare's changed rows timed
      # again; adopt the run.tgz it leaves (bench/adopt_runpack.py). The kernels only where the
      # check passed: a wrong one would be timed for nothing (the sweep checks each kernel anyway).
      IFS=: read -r _ flay fsecs <<<"$stage"; flay=${flay:-nt}; fsecs=${fsecs:-560}
      bash "$0" tests:tests/test_stream_gpu.py::test_checker_small
      if tests_passed "$OUT/gpu_tests.txt"; then
        left=$((fsecs - SECONDS - 30))
        OUT="$OUT" bash bench/sweep_file.sh stream_small "$flay" $((left * 5 / 10)) $((left * 3 / 10)) $((left * 15 / 100)) \
          2>&1 | tail -30
      else
        echo "stream-file: the stream GPU check did not pass: no sweep"
      fi ;;
    next-probe|next-probe:*)
      # next-probe[:SECONDS] (default 560): on an H100, the tiled chain's GPU check (both kinds), the
      # chain with the tiled chain over every other shape (the bulk kind's first run: is the small
      # target inside a tiled floor?), then small nn in server mode in what is left (none on the H100).
      nsecs=560; [ "$stage" != next-probe ] && nsecs=${stage#next-probe:}
      bash "$0" tests:tests/test_panel_cuda.py
      # the tiled chain only where both kinds passed their check on this card (a hung or wrong
      # bulk kernel would stop the chain stage at its first shape)
      tiled=; tests_passed "$OUT/gpu_tests.txt" && tiled=:panels
      bash "$0" chain:$(( (nsecs - SECONDS) * 2 / 3 - 40 )):2$tiled
      gsecs=$((nsecs - SECONDS - 40))
      [ $gsecs -gt 60 ] && bash "$0" server:bench/graph_small_nt.txt:nn:$gsecs ;;
    *)
      echo "unknown stage $stage" ;;
  esac
done
