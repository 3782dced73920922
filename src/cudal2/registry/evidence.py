"""The two rules by which the registry serves a call only on measured evidence (issue 22).

1. The cuBLAS call of a cuBLAS entry (`cublas_choice`). Dispatch can run cuBLASLt with autotune's
   stored algorithm, cuBLASLt's heuristic, or torch.matmul (DISPATCH_TARGETS). A cuBLASLt call is
   chosen only when it beat torch.matmul by `margin` in *every* one of at least `min_repeats`
   independent timings of the shape (each an interleaved run of the baselines: the search's screen
   and full passes each time them again); among those that qualify, the largest geometric-mean
   ratio. Anything else - a thin win, a win in one run and a loss in the next, no timing - is
   plain torch.matmul. Why: on the shipped H200 registry the old rule (the fastest in one run)
   sent 8192x4096x8192 to an algorithm that had won by 0.1% and ran 0.93x of torch.matmul later;
   over 697 compared cuBLAS entries, filing wins under 1% lost by more than 2% in the compare on
   18 of 300 shapes, wins of 1-2% on 1 of 78 (NOTES.md, 2026-12-03 "CPU").
   A timing's autotune column is evidence for the algorithm the entry stores only: where a compare
   tuned afresh and timed another one, that column is left out (timings.other_algorithm; H100
   2026-12-06: 12288x64x1024:nt's stored call won 1.06x in five timings and was held on torch.matmul
   by one 0.90x timing of another algorithm).
   The choice and the timings behind it are recorded in the entry (`Entry.dispatch`); an entry
   filed before the record exists gets the same rule over its one recorded timing (`legacy_choice`).

2. The range a kernel entry may serve besides its own shape (`Entry.scope`). A scope is a box of
   problems of the entry's layout, {"M": [lo, hi], "N": [...], "K": [...]} (inclusive; an axis left
   out is the entry's own value), plus the `points` where the entry's kernel was measured beside
   best-cublas. It is evidence only if the entry's problem lies in the box, every corner of the box
   was measured, and at every measured point the kernel was not slower than best-cublas by the
   scope's `margin` (>= 1.0). `scope_problems` lists the corners a search must measure.
   Dispatch serves a shape with no entry of its own only from a scope that holds it, else cuBLAS
   (torch.matmul): the nearest-entry fallback it replaces ran a neighbour's kernel with no
   measurement at the new size, and lost (0.89x of best-cublas on an odd shape, issue 22).

Pure functions over plain dicts: no file access, no torch.
"""
from __future__ import annotations

import itertools
import math

from ..problems import Problem

# What dispatch can run for a cuBLAS entry (cudal2.lt_dispatch); cublas-nn / cublas-tn are cuBLAS
# calls torch.matmul makes itself, so they are not separate targets.
AUTOTUNE = "cublaslt-autotune"     # the one call whose timing is of a stored algorithm (Entry.lt_algo)
DISPATCH_TARGETS = (AUTOTUNE, "cublaslt-heuristic", "torch")
# 1.01: over the shipped registry's cuBLAS entries, re-timed in the compare (697 shapes), choosing
# cuBLASLt only on a >= 1% win over torch in the filing run took the worst re-timed call from 0.877x
# to 0.924x of torch.matmul and the shapes under 0.98x from 17 to 2, for a geomean 1.0281 -> 1.0271.
CUBLAS_MARGIN = 1.01
MIN_REPEATS = 2
AXES = ("M", "N", "K")


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _geomean(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def cublas_choice(repeats: list[dict], margin: float = CUBLAS_MARGIN, min_repeats: int = MIN_REPEATS,
                  blocked: dict | None = None) -> dict:
    """The dispatch record of a cuBLAS entry from `repeats` (each {baseline: median us} of one
    interleaved run). `blocked`: {target: why} for calls that cannot run (e.g. no stored algorithm).
    Returns {"target", "why", "margin", "min_repeats", "repeats", "ratios", "spread", "qualified"}:
    ratios are per target the torch.matmul / target time of each repeat; qualified, best first, the
    targets that won every repeat by the margin (torch always last)."""
    if not margin >= 1.0:
        raise ValueError(f"the cuBLAS margin must be >= 1.0 (a ratio over torch.matmul), got {margin}")
    blocked = blocked or {}
    reps = [{k: float(v) for k, v in r.items() if _num(v)} for r in repeats if isinstance(r, dict)]
    reps = [r for r in reps if "torch" in r]
    ratios = {t: [r["torch"] / r[t] for r in reps if t in r] for t in DISPATCH_TARGETS if t != "torch"}
    ratios = {t: v for t, v in ratios.items() if v}
    spread = {}
    for name in sorted({k for r in reps for k in r}):
        xs = sorted(r[name] for r in reps if name in r)
        if len(xs) > 1:        # (max - min) / median of the repeats' medians: how far runs disagree
            spread[name] = (xs[-1] - xs[0]) / xs[len(xs) // 2]
    won = {t: v for t, v in ratios.items() if len(v) >= min_repeats and min(v) >= margin}
    runnable = sorted((t for t in won if t not in blocked), key=lambda t: -_geomean(won[t]))
    if runnable:
        t = runnable[0]
        why = (f"{t} beat torch.matmul by >= {margin:g}x in all {len(won[t])} timings "
               f"(worst {min(won[t]):.3f}x, geomean {_geomean(won[t]):.3f}x)")
    else:
        t = "torch"
        lost = [f"{k} {min(v):.3f}x worst of {len(v)}" for k, v in ratios.items() if k not in won]
        why = ("torch.matmul: no cuBLASLt call beat it by >= " + f"{margin:g}x in >= {min_repeats} timings"
               + (f" ({', '.join(lost)})" if lost else ""))
    if any(k in blocked for k in won):
        why += f"; won but not runnable: {', '.join(f'{k} ({blocked[k]})' for k in won if k in blocked)}"
    return {"target": t, "why": why, "margin": margin, "min_repeats": min_repeats, "repeats": reps,
            "ratios": {k: [round(x, 5) for x in v] for k, v in ratios.items()},
            "spread": {k: round(v, 5) for k, v in spread.items()}, "qualified": runnable + ["torch"]}


def qualified_calls(rec: dict) -> list[str]:
    """The calls a dispatch record lets run, best first (a record without the list: its target)."""
    return rec.get("qualified") or [rec["target"]]


def legacy_choice(baselines_us: dict, blocked: dict | None = None) -> dict:
    """The rule for an entry filed before dispatch records existed: its one recorded timing, the
    same margin, one repeat (what was measured is all there is)."""
    rec = cublas_choice([baselines_us or {}], CUBLAS_MARGIN, 1, blocked)
    rec["why"] = "legacy entry, one timing: " + rec["why"]
    return rec


def validate_dispatch(d, where: str) -> None:
    """A dispatch record as filed (a hand edit must not name a target dispatch cannot run)."""
    if not isinstance(d, dict) or d.get("target") not in DISPATCH_TARGETS:
        raise ValueError(f"{where}: dispatch must be an object whose target is one of {DISPATCH_TARGETS}")
    q = d.get("qualified", [d["target"]])
    if not isinstance(q, list) or not all(t in DISPATCH_TARGETS for t in q):
        raise ValueError(f"{where}: dispatch.qualified must list targets of {DISPATCH_TARGETS}")


# ---- scopes --------------------------------------------------------------------------------------
def box(scope: dict, problem: Problem) -> dict[str, tuple[int, int]]:
    """{axis: (lo, hi)} of a scope; an axis it leaves out is the entry's own value."""
    out = {}
    for ax in AXES:
        r = scope.get(ax)
        out[ax] = (getattr(problem, ax),) * 2 if r is None else (int(r[0]), int(r[1]))
    return out


def scope_problems(b: dict[str, tuple[int, int]], layout: str) -> list[Problem]:
    """The corners of a box (distinct problems): where a kernel must be measured to claim it."""
    vals = [sorted({lo, hi}) for lo, hi in (b[ax] for ax in AXES)]
    return [Problem(m, n, k, layout) for m, n, k in itertools.product(*vals)]


def contains(b: dict[str, tuple[int, int]], p: Problem) -> bool:
    return all(lo <= getattr(p, ax) <= hi for ax, (lo, hi) in b.items())


def validate_scope(scope, problem: Problem, where: str) -> None:
    """Raise ValueError unless `scope` is evidence (see the module doc) for its entry's problem."""
    if not isinstance(scope, dict):
        raise ValueError(f"{where}: scope must be an object")
    for ax in AXES:
        r = scope.get(ax)
        if r is not None and not (isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and
                                                                            not isinstance(x, bool) for x in r)
                                  and 1 <= r[0] <= r[1]):
            raise ValueError(f"{where}: scope.{ax} must be [lo, hi] with 1 <= lo <= hi, got {r!r}")
    margin = scope.get("margin")
    if not (_num(margin) and margin >= 1.0):
        raise ValueError(f"{where}: scope.margin must be a number >= 1.0, got {margin!r}")
    b = box(scope, problem)
    if not contains(b, problem):
        raise ValueError(f"{where}: scope {b} does not hold the entry's own problem")
    points = scope.get("points")
    if not isinstance(points, list) or not points:
        raise ValueError(f"{where}: scope.points must list the measured problems")
    seen = set()
    for pt in points:
        try:
            q = Problem.parse(pt["problem"])
            t, best = pt["time_us"], pt["best_cublas_us"]
        except (TypeError, KeyError, ValueError) as e:
            raise ValueError(f"{where}: scope point {pt!r} is not {{problem, time_us, best_cublas_us}} ({e})") from None
        if q.layout != problem.layout or not contains(b, q):
            raise ValueError(f"{where}: scope point {q} lies outside the scope")
        if not (_num(t) and _num(best)) or best / t < margin:
            raise ValueError(f"{where}: scope point {q} is no evidence: kernel {t!r} us vs best-cublas "
                             f"{best!r} us, under the margin {margin}")
        seen.add(q.text)
    missing = [c.text for c in scope_problems(b, problem.layout) if c.text not in seen]
    if missing:
        raise ValueError(f"{where}: scope corners not measured: {', '.join(missing)}")


def scope_worst(scope: dict) -> float:
    """The scope's weakest evidence: the smallest best-cublas / kernel ratio of its points."""
    return min(p["best_cublas_us"] / p["time_us"] for p in scope["points"])


def scope_size(scope: dict, problem: Problem) -> float:
    """log2 volume of the box: among scopes that hold a shape, the tightest is the closest evidence."""
    return sum(math.log2(hi / lo) for lo, hi in box(scope, problem).values())


def unrunnable_calls(e) -> dict:
    """{call: why} of the dispatch targets cuBLAS entry `e` can never run with what it stores:
    cuBLASLt autotune without its algorithm. The record keeps them out of its choice
    (timings._chosen), as lt_dispatch.choose does, so the record names the call that runs."""
    return {} if (e.lt_algo or {}).get("data") else {AUTOTUNE: "no algorithm stored"}


def unrunnable_record(e) -> str | None:
    """Why a cuBLAS entry's dispatch record names a call it can never run (unrunnable_calls), None if
    it does not. `registry verify` reports it; `registry rechoose` repairs it."""
    target = (e.dispatch or {}).get("target")
    why = unrunnable_calls(e).get(target) if e.backend == "cublas" else None
    return f"its record dispatches {target} but stores no algorithm (dispatch runs its next qualified call)" \
        if why else None
