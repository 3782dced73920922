"""The reward of one Measurement (ARCHITECTURE.md).

  ok                      log(best_cublas_us / time_us)   (0 = ties best-cuBLAS, +0.1 = 10% faster)
  compile_error, invalid  -1.0   (cheap to find out, and says little about the neighbourhood)
  wrong, crash, timeout   -3.0   (a kernel that computes garbage must never look competitive)
  slow                    log of the ratio when it was stopped, at most -1.1 (the evaluator stops a
                          candidate at about 3x slower than the best so far, and log(1/3) = -1.1), and
                          at least -3.0 so a slow but correct kernel never scores below a wrong one
"""
from __future__ import annotations

import math

PENALTY = {"compile_error": -1.0, "invalid": -1.0, "wrong": -3.0, "crash": -3.0, "timeout": -3.0}
SLOW_CAP = -1.1
STATUSES = ("ok", "slow", *PENALTY)


def _get(m, key):
    return m.get(key) if isinstance(m, dict) else getattr(m, key, None)


def speedup(m) -> float | None:
    """best_cublas_us / time_us for an ok measurement with both times, else None."""
    t, ref = _get(m, "time_us"), _get(m, "best_cublas_us")
    if _get(m, "status") != "ok" or not t or not ref:
        return None
    return ref / t


def reward(m) -> float:
    status = _get(m, "status")
    if status in PENALTY:
        return PENALTY[status]
    if status == "ok":
        s = speedup(m)
        if s is None:
            raise ValueError(f"an ok measurement without time_us/best_cublas_us: {_get(m, 'spec')}")
        return math.log(s)
    if status == "slow":
        # Measurement.ratio = early median / best time known when stopped (> 1 for a slow one).
        ratio, t, ref = _get(m, "ratio"), _get(m, "time_us"), _get(m, "best_cublas_us")
        r = -math.log(ratio) if ratio else (math.log(ref / t) if t and ref else SLOW_CAP)
        return max(min(r, SLOW_CAP), PENALTY["wrong"])
    raise ValueError(f"unknown measurement status {status!r} (expected one of {STATUSES})")
