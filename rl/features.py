"""Context features of one (problem, device): what the policy conditions on.

Problem sizes enter as log2 (GEMM cost and the right tile scale are multiplicative in M, N, K),
centred; device figures are scaled to O(1), so a freshly initialised network sees inputs of similar size.
A compile target has no SM count or L2 (DeviceInfo.features reports 0); the policy then conditions
on the architecture limits alone, which is all the masks know too.
"""
from __future__ import annotations

import math

from cudal2.device import DeviceInfo
from cudal2.problems import Problem

NAMES = ("log2_m", "log2_n", "log2_k", "layout_nt", "sm_count", "smem_kb", "l2_mb", "cc")
# (centre, scale) per feature: centred inputs, so that a freshly initialised network already maps
# a small and a large problem to clearly different embeddings (uncentred log2 sizes all sat near
# 0.7 and the policy learnt one family for every shape). log2 sizes: 1 ... 16384 -> about -2.5 ... 1.
_NORM = {"log2_m": (10.0, 4.0), "log2_n": (10.0, 4.0), "log2_k": (10.0, 4.0), "layout_nt": (0.5, 0.5),
         "sm_count": (0.0, 132.0), "smem_kb": (0.0, 228.0), "l2_mb": (0.0, 50.0), "cc": (0.0, 9.0)}
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
    return [(raw[n] - _NORM[n][0]) / _NORM[n][1] for n in NAMES]
