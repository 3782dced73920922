"""Evaluate: turn (problem, specs) into Measurements on a GPU, safely.

Owns: the Evaluator (evaluator.py: validate, compile on CPU workers, dedup, check and time in a GPU
worker process), the worker process's body (worker.py), the process plumbing (procs.py: compile
pools, the restartable worker, EvaluatorError) and the Ray evaluator (dist.py, the `dist` extra).
May import: spec, problems, device, check, timing, baselines, backends, measurement, versions.
Must not import: store, registry, ops, cli, rl (they sit above it in the flow).

`make_evaluator(cluster)` picks the local Evaluator or the RayEvaluator; Ray is imported only then.
"""
from __future__ import annotations

from ..measurement import STATUSES, KernelCrash, KernelHang, Measurement, WrongResult
from .evaluator import DEFAULT_BASELINES, DEFAULT_CHECKS, Evaluator, parse_and_validate
from .procs import EvaluatorError

__all__ = ["Evaluator", "Measurement", "STATUSES", "EvaluatorError", "make_evaluator", "parse_and_validate",
           "DEFAULT_BASELINES", "DEFAULT_CHECKS", "WrongResult", "KernelCrash", "KernelHang"]


def make_evaluator(cluster: str | None = None, **kw):
    """`--cluster`: None / "local" -> Evaluator; "ray" (a local Ray, or RAY_ADDRESS) or "ray:ADDRESS"
    (e.g. ray:auto, ray:10.0.0.1:6379, ray:ray://head:10001) -> RayEvaluator on that cluster."""
    if cluster in (None, "", "local"):
        return Evaluator(**kw)
    if cluster == "ray" or cluster.startswith("ray:"):
        from .dist import RayEvaluator      # the optional Ray extra: imported only when asked for
        address = cluster[4:] or None
        return RayEvaluator(address=address, **kw)
    raise ValueError(f"--cluster {cluster!r}: use 'local', 'ray' or 'ray:ADDRESS'")
