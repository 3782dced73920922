#!/usr/bin/env bash
# One device call = one run of this script: install from the tree, then the named stages, with
# every log under $OUT (at most 8 files come back). Stages: info tests tests:PATH baselines bench.
# To run other commands after it in the same call, `source bench/device_env.sh` instead.
#   bash bench/device_run.sh info tests bench
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/device_env.sh"
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
    *)
      echo "unknown stage $stage" ;;
  esac
done
