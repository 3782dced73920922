"""Kernels the offline filing gave to cuBLAS that win where calls run back to back, filed from
repeated timings on both clocks (`cudal2 registry file-graph`, bench/graph_clock.py --lost --server).

Why: the search files by the offline clock, an event after every call. On a ~5 µs kernel that event
costs ~2 µs of GPU time and takes programmatic dependent launch's overlap away (H100 2026-12-06, run
123), so a kernel that ties cuBLAS there can win by 5-10% on CUDA-graph replays, PROTOCOL's other
clock and how an inference server runs small GEMMs. H100 run 148 (one timing): the best unfiled
kernels of the 13 small cuBLAS entries ran 1.011x best-cublas offline and 1.086x on graph replays
(worst 1.021), while dispatch served those shapes with cuBLAS at ~1.0x on both.

The rule. A cuBLAS entry becomes its best lost kernel (times.best_kernel_spec, the spec the rows
timed) where, in each of at least `min_timings` independent timings (graph_clock runs), every one
that timed it:
  - offline (medians, event per call) the kernel ran at least `offline_min` of best-cublas and of
    the call the entry dispatches (1.00: it does not lose there; the search's 1.01 filing margin
    is what it missed),
  - on graph replays at least `graph_margin` of both (1.03: run 151's two timings of the same 39
    shapes put a shape's graph ratio 0.16% apart at the median, 1.1% at the 90th percentile, 2.3%
    at most; H100, 2026-12-07), and
  - in server mode (cold L2, random gaps, means) at least `server_guard` of torch.matmul (0.97,
    add-timings' server guard: no dispatch slower than torch.matmul beyond noise).
Not where a guard re-filed that spec as cuBLAS (record.lost_cold: the later evidence stands).
The dispatched call is graph_clock's own column for it (cuBLASLt autotune's stored algorithm), or
for a call that is a baseline's (torch.matmul, cuBLAS, cuBLASLt's heuristic) that baseline's
column (`vs_dispatched`). A timing that did not time it (an autotune entry, before graph_clock
timed the stored algorithm: run 151) is no evidence either way and does not count; every timing
given that did must hold the rule. Pass every timing of the card: choosing a subset that passes
would be choosing the evidence.
The kernel entry's times are the latest timing's offline medians (the entry's speedup stays the
offline ratio, as for every entry), its graph and server ratios in times["graph_rule"] with every
timing's, and the cuBLAS record it replaces in times["graph_rule"]["was"]. Its check is pending:
graph_clock ran the checker's random check on the card; `cudal2 registry verify --gpu --render
--record` runs the full checker there before the index ships it as passed.
"""
from __future__ import annotations

import math

from ..problems import Problem
from .entry import Entry, RegistryError, target_for_key
from .index import Registry
from .record import lost_cold
from .timings import call_guard

OFFLINE_MIN, GRAPH_MARGIN, SERVER_GUARD, MIN_TIMINGS = 1.0, 1.03, 0.97, 2
NAME = "lost"        # graph_clock --lost's name for the kernel in its rows


def _ratio(row: dict, key: str) -> float | None:
    v = row.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 else None


def _canonical(text) -> str | None:
    """A spec's canonical text (a row or an entry may spell it shorter), None if it is not one."""
    from ..spec import KernelSpec, SpecError
    try:
        return KernelSpec.parse(str(text)).text if text else None
    except (SpecError, ValueError):
        return None


def timings_by_problem(docs: list[dict]) -> tuple[str, dict[str, list[tuple[int, dict]]]]:
    """The card the graph_clock --lost documents timed (all one) and {problem: [(doc index, row)]}
    of their timed rows (a row with a note failed: left out)."""
    if not docs:
        raise RegistryError("file-graph needs at least one graph_clock --lost JSON")
    keys = set()
    for i, d in enumerate(docs):
        if not isinstance(d, dict) or not isinstance(d.get("rows"), list):
            raise RegistryError(f"document {i + 1} is not a graph_clock JSON (no rows)")
        if not d.get("lost") and not any(f"{NAME} offline us" in r for r in d["rows"] if isinstance(r, dict)):
            raise RegistryError(f"document {i + 1} is not a --lost run: its rows time filed kernels, not lost ones")
        keys.add(d.get("device"))
    if None in keys or len(keys) != 1:
        raise RegistryError(f"the documents must all record the same card (device): {sorted(map(str, keys))}")
    seen: dict[str, list[tuple[int, dict]]] = {}
    for i, d in enumerate(docs):
        for r in d["rows"]:
            if isinstance(r, dict) and "note" not in r and r.get("problem"):
                seen.setdefault(Problem.parse(r["problem"]).text, []).append((i, r))
    return keys.pop(), seen


def verdict(entry: Entry | None, rows: list[tuple[int, dict]], offline_min: float, graph_margin: float,
            server_guard: float, min_timings: int) -> str | None:
    """None if the rule files the entry's lost kernel, else why not (one line)."""
    if entry is None:
        return "no entry on this card"
    if entry.backend != "cublas":
        return f"a {entry.backend} kernel is filed here already"
    spec = (entry.times or {}).get("best_kernel_spec")
    if not spec:
        return "the cuBLAS entry records no lost kernel"
    if _canonical(spec) is None:
        return f"the cuBLAS entry's lost kernel is no valid spec: {spec!r}"
    mine = [(i, r) for i, r in rows if _canonical(r.get("spec")) == _canonical(spec)]
    if len(mine) < len(rows):
        return "a timing is of another spec than the entry's lost kernel"
    if lost_cold(entry, spec):
        return f"a guard took this kernel out ({entry.times.get('refiled')})"
    target = (entry.dispatch or {}).get("target")
    # A timing that did not time the dispatched call (an autotune entry's stored algorithm, before
    # graph_clock timed it) is no evidence either way; every other timing given must hold the rule.
    ok = judged(mine, target)
    if len({i for i, _ in ok}) < min_timings:
        why = f"{len({i for i, _ in ok})} timing(s) of it, the rule asks {min_timings}"
        if len(ok) < len(mine):
            why += (f" ({len(mine) - len(ok)} more did not time the call the entry dispatches, "
                    f"{target}: graph_clock's autotune column tunes again, it is not the stored algorithm)")
        return why
    for i, r in ok:
        off = _ratio(r, f"{NAME} offline / best-cublas")
        gr = _ratio(r, f"{NAME} graph / best-cublas")
        srv = _ratio(r, f"{NAME} server / torch")
        if off is None or gr is None:
            return f"timing {i + 1} lacks the offline or graph ratio"
        if srv is None:
            return f"timing {i + 1} has no server-mode ratio (graph_clock --server)"
        d_off, d_gr = (vs_dispatched(r, c, target) for c in ("offline", "graph"))
        for clock, x, d, bar in (("offline", off, d_off, offline_min), ("graph", gr, d_gr, graph_margin)):
            if min(x, d) < bar:
                what = "best-cublas" if x <= d else "the dispatched call"
                return f"{clock} {min(x, d):.3f}x {what} in timing {i + 1}, under {bar}"
        if srv < server_guard:
            return f"server {srv:.3f}x of torch.matmul in timing {i + 1}, under the guard {server_guard}"
    return None


def vs_dispatched(row: dict, clock: str, target: str | None) -> float | None:
    """The lost kernel's speed over the call the cuBLAS entry dispatches, on `clock`: the row's own
    ratio (graph_clock times that call, cuBLASLt autotune's stored algorithm included), else, for
    a target that is one of the baselines' own calls (torch.matmul, cuBLAS, cuBLASLt's heuristic),
    that baseline's column. None where it was not timed: an autotune baseline tunes again in the
    timing's process and may run another algorithm than the one stored (run 151, 2026-12-07)."""
    x = _ratio(row, f"{NAME} {clock} / dispatched")
    if x is not None:
        return x
    call = row.get("dispatched call") or target
    if not call or call == "cublaslt-autotune":
        return None
    t, k = _ratio(row, f"{call} {clock} us"), _ratio(row, f"{NAME} {clock} us")
    return t / k if t and k else None


def judged(rows: list[tuple[int, dict]], target: str | None) -> list[tuple[int, dict]]:
    """The rows that timed the call an entry dispatching `target` runs, on both clocks the rule reads
    (a timing that did not is no evidence either way: see vs_dispatched)."""
    return [(i, r) for i, r in rows if None not in (vs_dispatched(r, c, target) for c in ("offline", "graph"))]


def _kernel_entry(old: Entry, rows: list[tuple[int, dict]], docs: list[dict], rule: dict) -> Entry:
    """The kernel entry that replaces cuBLAS entry `old`, timed as the latest row that judged it says."""
    from ..spec import KernelSpec
    target = (old.dispatch or {}).get("target")
    rows = judged(rows, target)
    i, last = rows[-1]
    spec = KernelSpec.parse(old.times["best_kernel_spec"])
    names = [k[:-len(" offline us")] for k in last if k.endswith(" offline us") and not k.startswith(NAME + " ")
             and not k.startswith("best-cublas ")]
    per = [{"timing": j + 1, **{c: _ratio(r, f"{NAME} {c} / best-cublas") for c in ("offline", "graph")},
            **{f"{c}_vs_dispatched": vs_dispatched(r, c, target) for c in ("offline", "graph")},
            "server_vs_torch": _ratio(r, f"{NAME} server / torch"), "commit": (docs[j].get("versions") or {}).get("commit")}
           for j, r in rows]
    was = {k: v for k, v in old.to_dict().items() if k in ("time_us", "best_cublas", "dispatch", "lt_algo", "times")}
    return Entry(
        problem=old.problem, device=old.device, backend=spec.backend, spec=spec.text,
        time_us=last[f"{NAME} offline us"], best_cublas_us=last["best-cublas offline us"],
        best_cublas=last["best-cublas offline"], baselines_us={n: last[f"{n} offline us"] for n in names},
        baselines=names,
        times={"graph_rule": {**rule, "timings": per, "was": was},
               "graph_vs_best": min(t["graph"] for t in per), "server_vs_torch": min(t["server_vs_torch"] for t in per)},
        check={"problem": old.problem, "passed": None, "checks_here": ["random"],
               "reason": f"filed by the graph-clock rule: graph_clock's random check passed on {old.device}; "
                         "the full checker pending (verify --gpu --render --record)"},
        versions=dict(docs[i].get("versions") or {}), run_id=None, ts=None)


def file_graph_winners(registry, docs: list[dict], offline_min: float = OFFLINE_MIN,
                       graph_margin: float = GRAPH_MARGIN, server_guard: float = SERVER_GUARD,
                       min_timings: int = MIN_TIMINGS, dry_run: bool = False
                       ) -> tuple[list[Entry], dict[str, str]]:
    """File into `registry` the lost kernels of its cuBLAS entries that the graph_clock --lost
    documents `docs` (one card, oldest first) show winning by the rule in the module doc. Returns
    (entries filed, {problem: why not} for the shapes timed and not filed). `dry_run`: the same
    verdicts and entries, nothing written."""
    if not (offline_min > 0 and graph_margin >= 1.0 and 0 < server_guard <= 1.0):
        raise RegistryError(f"offline_min > 0, graph_margin >= 1.0 and server_guard in (0, 1], got "
                            f"{offline_min}, {graph_margin}, {server_guard}")
    if not isinstance(min_timings, int) or min_timings < 1:
        raise RegistryError(f"min_timings must be a positive integer, got {min_timings!r}")
    from ..backends import get_backend
    from ..spec import KernelSpec, violations
    key, seen = timings_by_problem(docs)
    target = Registry.load(registry)
    held = target.entries.get(key, {})
    rule = {"offline_min": offline_min, "graph_margin": graph_margin, "server_guard": server_guard,
            "min_timings": min_timings}
    items, skipped = [], {}
    for p, rows in sorted(seen.items()):
        old = held.get(p)
        why = verdict(old, rows, offline_min, graph_margin, server_guard, min_timings)
        if why is not None:
            skipped[p] = why
            continue
        bad = violations(KernelSpec.parse(old.times["best_kernel_spec"]), old.prob, target_for_key(key))
        if bad:      # the one validity rule, as verify applies it to every kernel entry
            skipped[p] = f"the lost kernel's spec is invalid here: {bad[0][0]}: {bad[0][1]}"
            continue
        new = _kernel_entry(old, rows, docs, rule)
        text = get_backend(new.backend).render(KernelSpec.parse(new.spec), new.prob)
        items.append((new, text))
    if dry_run:
        return [e for e, _ in items], skipped
    filed = []
    for new, text in items:
        # one index write each (the rule files tens, not thousands); an entry another writer turned
        # into a kernel since it was read is kept
        if target.add(new, text, keep=lambda o: o is None or o.backend != "cublas") is None:
            skipped[new.problem] = "another writer filed a kernel here meanwhile"
        else:
            filed.append(new)
    return filed, skipped


def dispatch_guard(registry, docs: list[dict], guard: float = SERVER_GUARD, min_timings: int = MIN_TIMINGS,
                   dry_run: bool = False) -> list[tuple[Entry, str, float]]:
    """The other half of what the timings show: a cuBLAS entry whose dispatched call (the row's
    `dispatched call`; cuBLASLt autotune's stored algorithm as its own column) ran under `guard` of
    torch.matmul offline in every one of at least `min_timings` timings that timed it gets that
    call kept out of its choice (timings.call_guard, the reason saying "offline"), so it dispatches
    its next qualified call or torch.matmul; a next call timed as often and as slow goes too (each
    call at its kindest timing; autotune only as the stored algorithm). Why: H100 run 153 (2026-12-07, two timings) had
    2048x64x16384:nn's stored autotune algorithm at 0.847x of torch.matmul and 64x2048x12288:nn's
    cuBLASLt heuristic at 0.830x, where the compares that chose them had timed them faster.
    Returns (entry, call, ratio) per call kept out (with `dry_run`, what would be)."""
    if not 0.0 < guard <= 1.0:
        raise RegistryError(f"the guard is a ratio to torch.matmul in (0, 1], got {guard}")
    key, seen = timings_by_problem(docs)
    held = Registry.load(registry).entries.get(key, {})
    kindest: dict[str, dict] = {}     # per problem, each call's best time over torch.matmul's
    for p, rows in seen.items():
        e = held.get(p)
        if e is None or e.backend != "cublas" or e.dispatch is None or e.dispatch.get("target") in (None, "torch"):
            continue
        per_call: dict[str, list[float]] = {}
        for _, r in rows:
            t = _ratio(r, "torch offline us")
            # cuBLASLt autotune counts only as its stored algorithm (the row's dispatched column)
            cols = {n[:-len(" offline us")]: n for n in r if n.endswith(" offline us")}
            cols.pop("cublaslt-autotune", None)
            if r.get("dispatched call") == "cublaslt-autotune" and "dispatched" in cols:
                cols["cublaslt-autotune"] = cols.pop("dispatched")
            for call, col in cols.items():
                c = _ratio(r, col)
                if t and c and call not in ("torch", NAME, "best-cublas", "dispatched"):
                    per_call.setdefault(call, []).append(c / t)
        calls = {call: min(v) for call, v in per_call.items() if len(v) >= min_timings}
        if calls.get(e.dispatch["target"], 0.0) > 1.0 / guard:
            kindest[p] = {"torch": 1.0, **calls}
    # algos: the stored one for each (the dispatched column timed it), so call_guard counts it
    algos = {p: held[p].lt_algo for p in kindest if held[p].lt_algo}
    return call_guard(registry, key, kindest, guard, algos, mode="offline", dry_run=dry_run)
