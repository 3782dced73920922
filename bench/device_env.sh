# Source this (do not run it) at the start of a device call, so PYTHONPATH reaches every later
# command of that call:   source bench/device_env.sh && python3 bench/grid_baselines.py ...
# Running it in a child shell (`bash bench/device_env.sh; python3 ...`) loses the export: on
# 2026-12-02 that left nvmath-python off the path and the grid run measured torch alone.
# Sourced again in the same call (sweep_file.sh -> device_run.sh -> grid_search.sh each source it):
# the installs are done and PYTHONPATH / CARD_KEY exported, so it returns at once.
if [ "${CUDAL2_DEVICE_ENV:-}" = "$PWD" ]; then return 0; fi
export PYTHONUNBUFFERED=1
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
[ -f .commit ] || git rev-parse --short HEAD >.commit 2>/dev/null || true
python3 -m pip install -q -e . --no-deps --no-build-isolation >/tmp/install.log 2>&1 || cat /tmp/install.log
python3 -c "import nvmath" 2>/dev/null || echo "warning: nvmath-python does not import: cuBLAS/cuBLASLt baselines will be unavailable" >&2
# The card's registry key (h200-sm90, h100-sm90, ...): scripts that keep per-card state read it
# (grid_search.sh refuses to go on from another card's stores).
CARD_KEY=$(python3 -c 'from cudal2.device import current; print(current().key)' 2>/dev/null) && export CARD_KEY
export CUDAL2_DEVICE_ENV=$PWD
