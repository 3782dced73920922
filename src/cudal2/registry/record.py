"""Filing measurements into a registry: record_winner (a checked, timed kernel, or "cuBLAS wins"
when it lost to best-cublas), record_cublas (no generated kernel passed at all) and record_scope
(the range of other shapes a filed kernel was measured to win on). The rules are evidence.py's."""
from __future__ import annotations

from ..problems import Problem
from . import evidence
from .entry import Entry, RegistryError, check_margin
from .index import Registry


def _get(m, name, default=None):
    return m.get(name, default) if isinstance(m, dict) else getattr(m, name, default)


def record_winner(registry_path, measurement, source_text: str | None, device_key: str | None = None,
                  force: bool = False, lt_algo: dict | None = None, margin: float = 1.0,
                  baselines=None, repeats: list | None = None,
                  cublas_margin: float = evidence.CUBLAS_MARGIN) -> Entry | None:
    """File a Measurement (object or dict, ARCHITECTURE.md fields) as its problem's winner.

    A kernel that does not beat best-cublas by `margin` (time * margin < best-cublas; 1.0: any win)
    is filed as a "cublas" winner (dispatch then runs the fastest cuBLAS call, cudal2.lt_dispatch).
    An existing entry is kept if its speedup over best-cublas (a ratio from one run, robust to
    drift between runs) is higher, unless `force` (or it is a cuBLAS entry without a dispatch record
    and this one is cuBLAS with one: a v1 entry upgraded). `lt_algo`: cuBLASLt autotune's
    algorithm for the problem (cudal2.lt_dispatch), recorded if the entry says cuBLAS. `baselines`:
    the names best-cublas was formed from (Entry.baselines). `repeats`: every independent timing
    of the baselines at this shape ({name: us} per interleaved run; default: the measurement's
    one), from which a cuBLAS entry's call is chosen (evidence.cublas_choice, `cublas_margin`:
    with fewer than two timings that is torch.matmul). Returns the filed entry or None.
    """
    check_margin(margin)
    status = _get(measurement, "status")
    if status != "ok":
        raise RegistryError(f"measurement status is {status!r}: only checked, timed (ok) kernels can be filed")
    check = _get(measurement, "check") or {}
    if isinstance(check, dict) and check.get("passed") is False:
        raise RegistryError("measurement's checker report did not pass")
    device_key = device_key or _get(measurement, "device")
    problem = Problem.parse(_get(measurement, "problem")).text
    spec_text = _get(measurement, "spec")
    from ..spec import KernelSpec
    spec = KernelSpec.parse(spec_text)
    t, best = _get(measurement, "time_us"), _get(measurement, "best_cublas_us")
    baselines = dict(_get(measurement, "baselines_us") or {})
    best_name = min(baselines, key=baselines.get) if baselines else None
    wins = t is not None and best is not None and t * margin < best
    entry = Entry(problem=problem, device=device_key, backend=spec.backend if wins else "cublas",
                  spec=spec.text, time_us=t if wins else best, best_cublas_us=best, best_cublas=best_name,
                  baselines_us=baselines, times=dict(_get(measurement, "times") or {}),
                  check=check if isinstance(check, dict) else getattr(check, "to_dict", lambda: {})(),
                  versions=dict(_get(measurement, "versions") or {}),
                  run_id=_get(measurement, "run_id"), ts=_get(measurement, "ts"), baselines=list(baselines or []))
    if not wins:
        # Keep what the best kernel reached, for the record; the entry dispatches to cuBLAS.
        entry.times = {**entry.times, "best_kernel_us": t, "best_kernel_spec": spec.text}
        if t and best:
            entry.times["best_kernel_vs_best_cublas"] = best / t
        entry.lt_algo = lt_algo
        entry.dispatch = _choice(repeats, baselines, cublas_margin)
    def keep(old):
        if old is not None and not force and wins and lost_cold(old, spec.text):
            raise RegistryError(f"{old.key}: this spec ran {old.times['refiled']} (a guard's compare); "
                                "the entry stays cuBLAS (force files it anyway)")
        kept = old is not None and not force and (old.speedup() or 0) >= (entry.speedup() or 0) \
            and not _upgrades(old, entry)
        return (with_lost_kernel(old, entry) or True) if kept and not wins else kept
    return Registry.load(registry_path, create=True, read=False).add(entry, source_text if wins else None, keep)


def lost_ratio(entry: Entry) -> float | None:
    """best-cublas over the best kernel a cuBLAS entry's searches measured and did not file, both
    from that kernel's own run (None: no kernel on record)."""
    t = entry.times
    if t.get("best_kernel_vs_best_cublas"):
        return float(t["best_kernel_vs_best_cublas"])
    return entry.best_cublas_us / t["best_kernel_us"] if t.get("best_kernel_us") and entry.best_cublas_us else None


def with_lost_kernel(old: Entry | None, new: Entry) -> Entry | None:
    """`old` (a cuBLAS entry that stays) with `new`'s losing kernel as the best kernel on record,
    where that kernel ran closer to best-cublas in its own run than the one `old` names (or `old`
    names none); None leaves `old` as it is. Why: the H100's small / skinny sweeps (runs 134-145,
    2026-12-06) measured a kernel on 211 shapes whose cuBLAS entries they kept, and dropped it, so
    the graph-clock rule (graph_rule.py), which times exactly the kernel an entry names, never saw
    them. A guard's re-file (`refiled`: lost_cold reads its spec) and a graph-rule record are left
    alone: their spec is the evidence of a later timing."""
    if old is None or old.backend != "cublas" or new.backend != "cublas" or "best_kernel_spec" not in new.times:
        return None
    if "refiled" in old.times or "graph_rule" in old.times:
        return None
    ours, theirs = lost_ratio(new), lost_ratio(old)
    if ours is None or (theirs is not None and theirs >= ours):
        return None
    amended = Entry.from_dict(old.to_dict())
    amended.times = {**amended.times, "best_kernel_us": new.times["best_kernel_us"],
                     "best_kernel_spec": new.times["best_kernel_spec"], "best_kernel_vs_best_cublas": ours,
                     "best_kernel_run": new.run_id}
    return amended


def lost_cold(old: Entry, spec_text: str) -> bool:
    """True when `old` is a cuBLAS entry that `server_guard` re-filed from this very spec: the kernel
    won offline (its weight warm in L2) and ran slower than torch.matmul with L2 wiped. A re-search
    times offline only, so it would file the same kernel again at the same offline win (it did, on
    the H200, 2026-12-05: the decode re-search re-filed 1x2048x8192:nt and 2x2048x8192:nt, which the
    run 68 compare then found at 0.939x / 0.928x of torch.matmul cold). Another spec may file: it
    has not been measured cold. The same holds for `offline_guard`'s re-files: a compare timed the
    kernel under torch.matmul after the search had timed it over, and a re-search filing it again on
    its own timing would undo the later evidence."""
    from ..spec import KernelSpec, SpecError
    why = str(old.times.get("refiled", ""))
    mode = next((m for m in ("server", "offline") if why.startswith(m)), None)
    if old.backend != "cublas" or mode is None or f"{mode}_us" not in old.times:
        return False
    try:        # both as canonical spec text (an entry filed by hand may spell a spec shorter)
        return KernelSpec.parse(str(old.times.get("best_kernel_spec"))).text == KernelSpec.parse(spec_text).text
    except (SpecError, ValueError):
        return False


def record_cublas(registry_path, problem: str | Problem, device_key: str, baselines_us: dict,
                  versions: dict | None = None, force: bool = False, lt_algo: dict | None = None,
                  baselines=None, repeats: list | None = None,
                  cublas_margin: float = evidence.CUBLAS_MARGIN) -> Entry | None:
    """File "cuBLAS wins" for a problem where no generated kernel passed the checker at all, so
    dispatch uses torch.matmul there instead of borrowing a nearby problem's kernel. `repeats`
    and `cublas_margin` as in record_winner."""
    p = problem if isinstance(problem, Problem) else Problem.parse(problem)
    if not baselines_us:
        raise RegistryError(f"{device_key}/{p}: record_cublas needs the measured baseline times")
    name = min(baselines_us, key=baselines_us.get)
    e = Entry(problem=p.text, device=device_key, backend="cublas", time_us=baselines_us[name],
              best_cublas_us=baselines_us[name], best_cublas=name, baselines_us=dict(baselines_us),
              versions=dict(versions or {}), lt_algo=lt_algo, baselines=list(baselines or []),
              dispatch=_choice(repeats, baselines_us, cublas_margin))

    def keep(old):
        return old is not None and not force and not (old.backend == "cublas" and old.dispatch is None)
    return Registry.load(registry_path, create=True, read=False).add(e, None, keep)


def _upgrades(old: Entry, new: Entry) -> bool:
    """A cuBLAS entry filed before dispatch records (v1) gives way to a cuBLAS entry with one: the
    same verdict, now with the repeated timings that choose its call."""
    return old.backend == new.backend == "cublas" and old.dispatch is None and new.dispatch is not None


def _choice(repeats, baselines_us: dict, margin: float) -> dict:
    """The dispatch record of a cuBLAS entry; the filing run's own timing counts once."""
    reps = [dict(r) for r in (repeats or []) if r]
    if baselines_us and dict(baselines_us) not in reps:
        reps.append(dict(baselines_us))
    return evidence.cublas_choice(reps, margin)


def record_scope(registry_path, problem: str | Problem, device_key: str, points, bounds: dict,
                 margin: float = 1.0) -> Entry:
    """Give the kernel entry of `problem` a scope (evidence.py, rule 2): `bounds` {axis: (lo, hi)}
    (axes left out stay at the entry's value), `points` the measurements (objects or dicts) of the
    entry's spec at other problems of the box, each checked and timed beside best-cublas. The
    entry's own filing measurement is a point too. Raises RegistryError, naming why, when they are
    not evidence (a corner not measured, a point slower than best-cublas by `margin`, another spec,
    a failed check); the entry then keeps serving its own problem only."""
    check_margin(margin)
    p = problem if isinstance(problem, Problem) else Problem.parse(problem)
    reg = Registry.load(registry_path)
    e = reg.lookup(p, device_key)
    if e is None or e.backend == "cublas":
        raise RegistryError(f"{device_key}/{p}: no kernel entry to give a scope")
    pts = [{"problem": e.problem, "time_us": e.time_us, "best_cublas_us": e.best_cublas_us}]
    for m in points:
        q = Problem.parse(_get(m, "problem")).text
        check = _get(m, "check") or {}
        if _get(m, "status") != "ok" or (isinstance(check, dict) and check.get("passed") is False):
            raise RegistryError(f"{e.key}: the measurement at {q} is {_get(m, 'status')!r}, not a checked kernel")
        if _get(m, "spec") != e.spec:
            raise RegistryError(f"{e.key}: the measurement at {q} is of another spec ({_get(m, 'spec')})")
        pts.append({"problem": q, "time_us": _get(m, "time_us"), "best_cublas_us": _get(m, "best_cublas_us"),
                    "run_id": _get(m, "run_id")})
    scope = {ax: [int(lo), int(hi)] for ax, (lo, hi) in bounds.items()}
    scope.update(margin=margin, points=pts)
    try:
        evidence.validate_scope(scope, p, e.key)
    except ValueError as err:
        raise RegistryError(str(err)) from None
    e.scope = scope
    return reg.add(e, reg.read_source(e))


def keep_lost(registry_path, device_key: str, rows, source: str, dry_run: bool = False) -> tuple[list, dict]:
    """Give the device's cuBLAS entries that name no losing kernel the closest one of sweep rows
    that never reached the registry (with_lost_kernel's record, one index write). `rows`: dicts with shape, layout, spec,
    status ("ok": checked and timed), us and best_cublas_us from one interleaved timing (hopper_sweep /
    sweep_leads CSVs); `source` names them in each amended entry ("best_kernel_run"). A spec that is
    not valid for the problem on this device (spec.violations, the one rule) is left out. Returns
    (the amended entries, {problem: why left alone} for the shapes the rows hold)."""
    from ..spec import KernelSpec, SpecError, violations
    from .entry import target_for_key
    target = target_for_key(device_key)
    best: dict[str, tuple[float, str, float]] = {}
    for r in rows:
        try:
            if r.get("status") != "ok":
                continue
            us, base = float(r["us"]), float(r["best_cublas_us"])
            p = Problem.parse(f"{r['shape']}:{r['layout']}")
            spec = KernelSpec.parse(r["spec"])
        except (KeyError, TypeError, ValueError, SpecError):
            continue
        if not (us > 0 and base > 0) or violations(spec, p, target):
            continue
        if p.text not in best or base / us > best[p.text][2] / best[p.text][0]:
            best[p.text] = (us, spec.text, base)
    reg = Registry.load(registry_path)
    held = reg.entries.get(device_key, {})
    amended, skipped = [], {}
    for prob, (us, spec_text, base) in sorted(best.items()):
        old = held.get(prob)
        new = Entry(problem=prob, device=device_key, backend="cublas", time_us=base, best_cublas_us=base,
                    times={"best_kernel_us": us, "best_kernel_spec": spec_text,
                           "best_kernel_vs_best_cublas": base / us}, run_id=source)
        # A sweep fills an entry that names no kernel; it does not replace one a search measured
        # (its 30 ms pass): across runs of different lengths "closer" is as likely noise (the H200's
        # sweeps would have replaced 355 searches' kernels, 2026-12-07).
        e = None if old is not None and old.times.get("best_kernel_spec") else with_lost_kernel(old, new)
        if e is None:
            skipped[prob] = ("no entry" if old is None else "a kernel entry" if old.backend != "cublas"
                             else "a guard's or the graph rule's record" if {"refiled", "graph_rule"} & set(old.times)
                             else "it names a kernel already")
            continue
        amended.append(e)
    if amended and not dry_run:
        reg.add_many([(e, None) for e in amended])
    return amended, skipped
