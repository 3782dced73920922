"""Context features of one (problem, device): what the policy conditions on.

Problem sizes enter as log2 (GEMM cost and the right tile scale are multiplicative in M, N, K);
device figures are scaled to O(1) so a freshly initialised network sees inputs of similar size.
A compile target has no SM count or L2 (DeviceInfo.features reports 0); the policy then conditions
on the architecture limits alone, which is all the masks know too.
"""
from __future__ import annotations

import math

from cudal2.device import DeviceInfo
from cudal2.problems import Problem

NAMES = ("log2_m", "log2_n", "log2_k", "layout_nt", "sm_count", "smem_kb", "l2_mb", "cc")
# Divisors bring each feature to roughly [0, 1.5] on today's cards (14 = log2 16384, the grid's top).
_SCALE = {"log2_m": 14.0, "log2_n": 14.0, "log2_k": 14.0, "layout_nt": 1.0,
          "sm_count": 132.0, "smem_kb": 228.0, "l2_mb": 50.0, "cc": 9.0}
N_FEATURES = len(NAMES)


def raw_features(problem: Problem, device: DeviceInfo) -> dict[str, float]:
    d = device.features()
    return {
        "log2_m": math.log2(problem.M), "log2_n": math.log2(problem.N), "log2_k": math.log2(problem.K),
        "layout_nt": 1.0 if problem.layout == "nt" else 0.0,
        "sm_count": d["sm_count"], "smem_kb": d["smem_kb"], "l2_mb": d["l2_mb"], "cc": d["cc"],
    }


def context_vector(problem: Problem, device: DeviceInfo) -> list[float]:
    raw = raw_features(problem, device)
    return [raw[n] / _SCALE[n] for n in NAMES]
