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
        entry.lt_algo = lt_algo
        entry.dispatch = _choice(repeats, baselines, cublas_margin)
    def keep(old):
        return old is not None and not force and (old.speedup() or 0) >= (entry.speedup() or 0) \
            and not _upgrades(old, entry)
    return Registry.load(registry_path, create=True, read=False).add(entry, source_text if wins else None, keep)


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


def add_timings(registry_path, device_key: str, timings: dict,
                margin: float | None = None) -> list[tuple[Entry, str, str]]:
    """Give the cuBLAS entries of `device_key` another independent timing of their shape
    ({problem text: {baseline: us}}, e.g. a `cudal2 compare` run's offline medians) and choose
    their call again by evidence.cublas_choice over every timing: a cuBLASLt call must still beat
    torch.matmul by the margin in all of them. Why: on the H200 model set (2026-12-04) a call that
    won by 1.2-1.7% in the three filing timings ran 0.954x of torch.matmul in the compare after.
    An entry filed before dispatch records counts its one recorded timing as the first.
    `margin`: None keeps each entry's own. Returns (entry, old target, new target) per changed entry."""
    if margin is not None and not margin >= 1.0:
        raise RegistryError(f"the cuBLAS margin must be >= 1.0, got {margin}")
    moved: list[tuple[Entry, str, str]] = []

    def add(e: Entry) -> bool:
        t = timings.get(e.problem)
        if e.backend != "cublas" or not t:
            return False
        old = e.dispatch or evidence.legacy_choice(e.baselines_us)
        reps = [dict(r) for r in old["repeats"] if r]
        if dict(t) in reps:           # the same timing twice is not a second run
            return False
        new = evidence.cublas_choice(reps + [dict(t)], margin or old["margin"])
        e.dispatch = new
        moved.append((e, old["target"], new["target"]))
        return True
    Registry.load(registry_path).update(device_key, add)
    return moved


def compare_timings(compare_json: dict) -> dict:
    """{problem text: {baseline: offline median us}} of a `cudal2 compare --json` file's rows."""
    names = compare_json.get("config", {}).get("baselines") or []
    out = {}
    for r in compare_json.get("rows", []):
        t = {n: r[f"offline_{n}_median_us"] for n in names if r.get(f"offline_{n}_median_us")}
        if t:
            out[Problem(r["M"], r["N"], r["K"], r.get("layout", "nn")).text] = t
    return out


def server_timings(compare_json: dict) -> dict:
    """{problem text: {"cudal2": us, "torch": us}} of a compare's server-mode means, for the rows
    where cudal2 dispatched to a generated kernel (a cuBLAS entry's column is not the kernel's)."""
    out = {}
    for r in compare_json.get("rows", []):
        k, t = r.get("server_cudal2_mean_us"), r.get("server_torch_mean_us")
        if r.get("cudal2_via") == "kernel" and k and t:
            out[Problem(r["M"], r["N"], r["K"], r.get("layout", "nn")).text] = {"cudal2": k, "torch": t}
    return out


def server_guard(registry_path, device_key: str, timings: dict, guard: float) -> list[tuple[Entry, float]]:
    """Re-file as cuBLAS every kernel entry of `device_key` that ran slower than torch.matmul by more
    than `guard` in a server-mode compare (`server_timings`: torch_us / kernel_us < guard). Why: on
    the H200 (2026-12-04, run 43) stream kernels whose 8-32 MB weight stays in L2 between offline
    calls won 1.06-1.19x offline and ran 0.90-0.92x of torch.matmul with L2 wiped, which is how a
    decode layer meets its weight in a server. The kernel's times stay in `times`, with the server
    figure; the entry then dispatches as a cuBLAS entry (torch.matmul without two cuBLASLt wins).
    Returns (entry, server ratio) per re-filed entry. The compare must be of this registry."""
    if not 0.0 < guard <= 1.0:
        raise RegistryError(f"the server guard is a ratio to torch.matmul in (0, 1], got {guard}")
    out: list[tuple[Entry, float]] = []

    def refile(e: Entry) -> bool:
        t = timings.get(e.problem)
        if e.backend == "cublas" or not t:
            return False
        ratio = t["torch"] / t["cudal2"]
        if ratio >= guard:
            return False
        e.refile_as_cublas(f"server {ratio:.4f}x of torch.matmul under guard {guard}",
                           server_us={"kernel": t["cudal2"], "torch": t["torch"]})
        out.append((e, ratio))
        return True
    Registry.load(registry_path).update(device_key, refile)
    return out


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
