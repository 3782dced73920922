"""`cudal2 generate`'s filing path: what each searched shape leaves in the registry.

file_outcome  the full pass's winner (record_winner: a kernel if it beat best-cublas by
              --file-margin, else cuBLAS), or cuBLAS when no candidate passed (record_cublas); a
              cuBLAS entry's call is chosen from every baseline timing of the shape in the store
              (repeats_of) by cudal2.registry.evidence's rule (--cublas-margin)
scope_bucket  --m-buckets: the filed kernel timed at the bottom of its M bucket (bucket_floors), and
              its entry given that scope when it wins there too (record_scope)
"""
from __future__ import annotations

from typing import Optional

from ..problems import Problem


def file_winner(registry: Optional[str], best, device_key: str, margin: float = 1.0, names=None,
                repeats=None, cublas_margin: float | None = None) -> str:
    """File a fully checked measurement; returns what happened, for the summary table. `repeats`:
    the shape's independent baseline timings (`repeats_of`), from which a cuBLAS entry's call is
    chosen by `cublas_margin` (cudal2.registry.evidence)."""
    from ..backends import get_backend
    from ..registry import RegistryError, record_winner
    from ..spec import KernelSpec
    spec = KernelSpec.parse(best.spec)
    try:
        source = get_backend(spec.backend).render(spec, Problem.parse(best.problem))
        entry = record_winner(registry, best, source, device_key, lt_algo=lt_algo(device_key, best.problem),
                              margin=margin, baselines=names, repeats=repeats, **_cm(cublas_margin))
    except (RegistryError, ImportError, ValueError) as e:
        return f"not filed: {str(e).splitlines()[0]}"
    if entry is None:
        return "kept (registry has faster)"
    if entry.backend == "cublas" and best.time_us < best.best_cublas_us:
        return f"filed cublas (kernel won by less than the {margin:g}x margin)"
    return f"filed {entry.backend}"


def _cm(cublas_margin):
    return {} if cublas_margin is None else {"cublas_margin": cublas_margin}


def repeats_of(store, problem: str, device_key: str) -> list[dict]:
    """Every independent timing of the baselines at `problem` in the store (this run's and earlier
    ones'): each evaluator call times them once, interleaved with its candidates, and hands that
    {name: median us} to every measurement of the call, so distinct (run, profile, timing) rows are
    distinct calls. Two calls that gave every baseline the very same median count once (fewer
    repeats: the cuBLAS rule then leans to torch.matmul, never away from it)."""
    import json
    seen, out = set(), []
    for m in store.measurements(problem=problem, device=device_key):
        if not m.baselines_us:
            continue
        key = (m.run_id, (m.meta.get("profile") or {}).get("name"), json.dumps(m.baselines_us, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append(dict(m.baselines_us))
    return out


def file_outcome(registry, out, device_key: str, margin: float = 1.0, names=None, store=None,
          cublas_margin: float | None = None) -> str:
    """File the shape's outcome: the full pass's winner, or cuBLAS when nothing passed it but
    baselines were measured (so dispatch does not borrow a neighbour's kernel here)."""
    from ..registry import RegistryError, record_cublas
    repeats = repeats_of(store, out["problem"], device_key) if store is not None else None
    if out["winner"] is not None:
        return file_winner(registry, out["winner"], device_key, margin, names, repeats, cublas_margin)
    seen = out["screen_best"]
    if seen is None or not seen.baselines_us:
        return "nothing filed: no candidate passed the checks"
    try:
        entry = record_cublas(registry, out["problem"], device_key, seen.baselines_us, versions=seen.versions,
                              lt_algo=lt_algo(device_key, out["problem"]), baselines=names, repeats=repeats,
                              **_cm(cublas_margin))
    except RegistryError as e:
        return f"not filed: {str(e).splitlines()[0]}"
    return "filed cublas (no kernel passed the full check)" if entry else "kept (registry has faster)"


def bucket_floors(problems) -> dict[str, int]:
    """{problem text: the lowest M of its bucket} for shapes with a smaller M of the same N, K and
    layout in the list: the bucket of M is (the next smaller M, M], so the model set's M list
    (1, 2, 4, ... 8192) splits every M into exactly one bucket."""
    by_nk: dict = {}
    for p in problems:
        by_nk.setdefault((p.N, p.K, p.layout), set()).add(p.M)
    out = {}
    for p in problems:
        below = [m for m in by_nk[(p.N, p.K, p.layout)] if m < p.M]
        if below and max(below) + 1 < p.M:
            out[p.text] = max(below) + 1
    return out


def scope_bucket(shared, registry, p: Problem, lo: int, device_key: str, margin: float) -> str:
    """Time the filed kernel's spec at M = lo (the full profile: six checks, PROTOCOL timing) and
    give its entry the scope M lo..p.M when it wins there by `margin` (the other edge is its own
    filing measurement). Returns what happened, for the log."""
    from ..registry import Registry, RegistryError, record_scope
    from ..spec import KernelSpec
    from ..rl.shared_eval import StudyDeadline
    entry = Registry.load(registry).lookup(p, device_key)
    edge = Problem(lo, p.N, p.K, p.layout)
    try:
        got = [m for m in shared.view("bucket", "full").evaluate(edge, [KernelSpec.parse(entry.spec)]) if m]
    except StudyDeadline:
        return f"scope not measured (time limit) at {edge}"
    try:
        record_scope(registry, p, device_key, got, {"M": (lo, p.M)}, margin=margin)
    except RegistryError as e:
        return f"no scope: {str(e).splitlines()[0]}"
    return f"scope M {lo}..{p.M}"


def lt_algo(device_key: str, problem) -> dict | None:
    """The algorithm cuBLASLt autotune chose for `problem` in this run (the GPU worker's on-disk
    cache), for a cublas entry to record: dispatch then runs that call (cudal2.lt_dispatch)."""
    from ..lt_dispatch import cached_algo
    return cached_algo(device_key, Problem.parse(str(problem)).text)
