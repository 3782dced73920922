"""A compare run's timings as registry evidence (`cudal2 registry add-timings`): its offline medians
join the cuBLAS entries' repeated timings (add_timings, compare_timings), and with a server guard
(cold L2) a kernel entry that ran slower than torch.matmul becomes a cuBLAS entry (server_guard;
offline_guard by the offline medians) and a cuBLASLt call that did is no longer dispatched there
(call_guard). The rules are evidence.py's."""
from __future__ import annotations

from ..problems import Problem
from . import evidence
from .entry import Entry, RegistryError
from .evidence import AUTOTUNE
from .index import Registry

STORED = "stored"


def autotune_algos(compare_json: dict) -> dict:
    """{problem text: what a compare's autotune column timed}: STORED where cudal2 dispatched the
    entry's own autotune call (its column stands in for the baseline, compare_timings), else the
    row's fresh pick {"data": words, "cublasLt": version} where the row records it (compares from
    2026-12-05 on); rows that do not are left out (unknown)."""
    version = (compare_json.get("versions") or {}).get("cublasLt")
    out = {}
    for r in compare_json.get("rows", []):
        if str(r.get("cudal2_via") or "") == AUTOTUNE:
            out[Problem.of_row(r).text] = STORED
        elif r.get(f"{AUTOTUNE}_algo"):
            out[Problem.of_row(r).text] = {"data": [int(w) for w in r[f"{AUTOTUNE}_algo"]], "cublasLt": version}
    return out


def other_algorithm(e: Entry, ran) -> bool:
    """Whether a compare's autotune column (`ran`, an autotune_algos value) timed another algorithm
    than the one entry `e` stores and dispatch runs: then it is no evidence for `e`'s call. Why: on
    the H100 (2026-12-06) 12288x64x1024:nt's stored algorithm beat torch.matmul by 1.058-1.064x in
    five offline timings, and run 132's compare, whose fresh autotune picked another algorithm,
    timed that one at 0.903x: counted against the stored call, it kept the entry on torch.matmul.
    Unknown (no algorithm recorded, or none stored) counts as before; add_timings adds the case of
    an entry that stores none (no_algorithm_stored)."""
    stored = e.lt_algo or {}
    if not isinstance(ran, dict) or not stored.get("data"):
        return False
    return [int(w) for w in ran["data"]] != [int(w) for w in stored["data"]] or \
        (ran.get("cublasLt") is not None and ran["cublasLt"] != stored.get("cublasLt"))


def no_algorithm_stored(e: Entry, ran) -> bool:
    """Whether a compare's autotune column (`ran` known: the row says what it timed) is evidence for
    a call that entry `e` cannot dispatch, having no algorithm stored. Why: four H100 entries filed
    on torch.matmul (file-cublas: the compares' fresh picks differed, 2026-12-06) were moved to
    autotune by later compares' columns and dispatched torch.matmul all the same (lt_dispatch blocks
    the call without its algorithm; on the card the compare's own autotune cache had served it)."""
    return ran is not None and AUTOTUNE in evidence.unrunnable_calls(e)


def add_timings(registry_path, device_key: str, timings: dict,
                margin: float | None = None, algos: dict | None = None) -> list[tuple[Entry, str, str]]:
    """Give the cuBLAS entries of `device_key` another independent timing of their shape
    ({problem text: {baseline: us}}, e.g. a `cudal2 compare` run's offline medians) and choose
    their call again by evidence.cublas_choice over every timing: a cuBLASLt call must still beat
    torch.matmul by the margin in all of them. Why: on the H200 model set (2026-12-04) a call that
    won by 1.2-1.7% in the three filing timings ran 0.954x of torch.matmul in the compare after.
    An entry filed before dispatch records counts its one recorded timing as the first.
    `margin`: None keeps each entry's own. `algos` ({problem: autotune_algos value}): a timing's
    autotune column counts only where it timed the entry's stored algorithm (other_algorithm); a
    timing already held with that column (added before this rule) is repaired in place, so adding
    the compares on record again corrects the evidence. Returns (entry, old target, new target) per
    changed entry."""
    if margin is not None and not margin >= 1.0:
        raise RegistryError(f"the cuBLAS margin must be >= 1.0, got {margin}")
    moved: list[tuple[Entry, str, str]] = []

    def add(e: Entry) -> bool:
        t = timings.get(e.problem)
        if e.backend != "cublas" or not t:
            return False
        old = e.dispatch or evidence.legacy_choice(e.baselines_us)
        reps = [dict(r) for r in old["repeats"] if r]
        raw, ev = dict(t), dict(t)
        ran = (algos or {}).get(e.problem)
        if other_algorithm(e, ran) or no_algorithm_stored(e, ran):
            ev.pop(AUTOTUNE, None)
        if raw != ev and raw in reps:     # held with another algorithm's column: repair it
            reps[reps.index(raw)] = ev
        elif any(_same_run(r, ev) for r in reps):
            return False                  # the same timing twice is not a second run
        else:
            reps.append(ev)
        e.dispatch = _chosen(e, reps, margin or old["margin"], old.get("cold"))
        moved.append((e, old["target"], e.dispatch["target"]))
        return True
    Registry.load(registry_path).update(device_key, add)
    return moved


def _same_run(a: dict, b: dict) -> bool:
    """Two timings of one run: equal but for autotune's column, which one of them may have dropped
    (file-cublas and add-timings keep it out where it timed another algorithm than the stored one).
    Independent runs agreeing to the nanosecond on every other call are taken as one (less evidence,
    never a timing counted twice)."""
    rest = lambda r: {k: v for k, v in r.items() if k != AUTOTUNE}   # noqa: E731
    return rest(a) == rest(b) and (AUTOTUNE not in a or AUTOTUNE not in b or a[AUTOTUNE] == b[AUTOTUNE])


def row_offline(row: dict, names) -> dict:
    """{baseline: offline median us} of one compare row, for the baselines `names` it timed."""
    return {n: row[f"offline_{n}_median_us"] for n in names if row.get(f"offline_{n}_median_us")}


def compare_timings(compare_json: dict) -> dict:
    """{problem text: {baseline: offline median us}} of a `cudal2 compare --json` file's rows. Where
    cudal2 dispatched to a cuBLASLt call (`cudal2_via`), cudal2's column timed that call as the
    entry runs it (its stored algorithm, lt_dispatch) and stands in for the baseline of the same
    name, whose own column is that baseline's fresh pick: the evidence must be of the call that is
    dispatched. Why: on the H200 (2026-12-05, runs 67-68) the stored autotune algorithm ran 0.843x
    (2x3584x18944:nt) and 0.864x (256x16384x1024:nt) of the compare's fresh autotune pick, over
    319 such rows 0.9985x geomean."""
    names = compare_json.get("config", {}).get("baselines") or []
    out = {}
    for r in compare_json.get("rows", []):
        t = row_offline(r, names)
        via, dispatched = str(r.get("cudal2_via") or ""), r.get("offline_cudal2_median_us")
        if via in t and via != "torch" and dispatched:
            t[via] = dispatched
        if t:
            out[Problem.of_row(r).text] = t
    return out


def server_timings(compare_json: dict) -> dict:
    """{problem text: {"cudal2": us, "torch": us}} of a compare's server-mode means, for the rows
    where cudal2 dispatched to a generated kernel (a cuBLAS entry's column is not the kernel's)."""
    return _kernel_rows(compare_json, "server", "mean")


def offline_kernel_timings(compare_json: dict) -> dict:
    """server_timings' rows by the offline medians (what --offline-guard judges)."""
    return _kernel_rows(compare_json, "offline", "median")


def _kernel_rows(compare_json: dict, mode: str, stat: str) -> dict:
    out = {}
    for r in compare_json.get("rows", []):
        k, t = r.get(f"{mode}_cudal2_{stat}_us"), r.get(f"{mode}_torch_{stat}_us")
        if r.get("cudal2_via") == "kernel" and k and t:
            out[Problem.of_row(r).text] = {"cudal2": k, "torch": t}
    return out


def server_guard(registry_path, device_key: str, timings: dict, guard: float) -> list[tuple[Entry, float]]:
    """Re-file as cuBLAS every kernel entry of `device_key` that ran slower than torch.matmul by more
    than `guard` in a server-mode compare (`server_timings`: torch_us / kernel_us < guard). Why: on
    the H200 (2026-12-04, run 43) stream kernels whose 8-32 MB weight stays in L2 between offline
    calls won 1.06-1.19x offline and ran 0.90-0.92x of torch.matmul with L2 wiped, which is how a
    decode layer meets its weight in a server. The kernel's times stay in `times`, with the server
    figure; the entry then dispatches as a cuBLAS entry (torch.matmul without two cuBLASLt wins).
    Returns (entry, server ratio) per re-filed entry. The compare must be of this registry."""
    return kernel_guard(registry_path, device_key, timings, guard, "server")


def offline_guard(registry_path, device_key: str, timings: dict, guard: float) -> list[tuple[Entry, float]]:
    """server_guard's rule by a compare's offline medians (`offline_kernel_timings`): a kernel entry
    that a later, independent offline timing saw run under `guard` of torch.matmul is re-filed as
    cuBLAS. Why: the search files a kernel on its own timings of one run; on the H200 grid nn
    compare (2026-12-05, commit 4bbf039) the wgmma split-K filed at 2048x256x16384 ran 0.858x of
    torch.matmul offline (39.5 vs 33.9 us), the one dispatch under issue 22's 0.97 bar there. Set
    the guard below the compare's run-to-run noise (bench/device_run.sh retime times each row in
    independent passes); a kernel it re-files keeps its times, the compare's figure among them."""
    return kernel_guard(registry_path, device_key, timings, guard, "offline")


def kernel_guard(registry_path, device_key: str, timings: dict, guard: float,
                 mode: str) -> list[tuple[Entry, float]]:
    """server_guard / offline_guard: `timings` {problem: {"cudal2": us, "torch": us}} of `mode`."""
    if not 0.0 < guard <= 1.0:
        raise RegistryError(f"the {mode} guard is a ratio to torch.matmul in (0, 1], got {guard}")
    out: list[tuple[Entry, float]] = []

    def refile(e: Entry) -> bool:
        t = timings.get(e.problem)
        if e.backend == "cublas" or not t:
            return False
        ratio = t["torch"] / t["cudal2"]
        if ratio >= guard:
            return False
        e.refile_as_cublas(f"{mode} {ratio:.4f}x of torch.matmul under guard {guard}",
                           **{f"{mode}_us": {"kernel": t["cudal2"], "torch": t["torch"]}})
        out.append((e, ratio))
        return True
    Registry.load(registry_path).update(device_key, refile)
    return out


def rechoose(registry_path, device_key: str) -> list[tuple[Entry, str, str]]:
    """Choose every cuBLAS entry's call of `device_key` again over the timings it already holds, by
    today's rule (`_chosen`: the calls that lost cold and, where no algorithm is stored, autotune
    kept out), with its own margin. Why: a rule added after an entry was last timed reaches it
    only when a compare of its shape is added; on the H200 (2026-12-06) 256x512x256:nn and
    64x1024x256:nn kept records naming cuBLASLt autotune with no algorithm stored, so dispatch ran
    torch.matmul under a record that said otherwise, and no H200 compare on record timed them
    again. Entries with no dispatch record (filed before records) are left as they are: their one
    timing has no repeats to choose over. Returns (entry, old target, new target) per entry whose
    record changed."""
    moved: list[tuple[Entry, str, str]] = []

    def again(e: Entry) -> bool:
        old = e.dispatch
        if e.backend != "cublas" or not old or not old.get("repeats"):
            return False
        new = _chosen(e, [dict(r) for r in old["repeats"] if r], old["margin"], old.get("cold"))
        if all(new.get(k) == old.get(k) for k in ("target", "qualified")):
            return False
        e.dispatch = new
        moved.append((e, old["target"], new["target"]))
        return True
    Registry.load(registry_path).update(device_key, again)
    return moved


def _chosen(e: Entry, repeats: list, margin: float, cold: dict | None) -> dict:
    """evidence.cublas_choice over `repeats`, the calls that lost cold (`cold`, {call: why}, from
    call_guard) kept out and kept in the record, so a later timing does not bring them back; and
    autotune's call kept out where `e` stores no algorithm, so the record names the call dispatch
    runs (evidence.unrunnable_calls, which lt_dispatch blocks too)."""
    rec = evidence.cublas_choice(repeats, margin, blocked={**evidence.unrunnable_calls(e), **(cold or {})})
    if cold:
        rec["cold"] = dict(cold)
    return rec


def call_timings(compare_json: dict) -> dict:
    """{problem text: {"torch": us, call: us per cuBLASLt call}} of a compare's server-mode means.
    Where cudal2 dispatched to a cuBLASLt call, cudal2's column timed that call as the entry runs it
    (its stored algorithm) and stands for it; the other calls are the baselines' own columns (for
    autotune, its fresh pick: the stored one ran 0.9985x of it geomean offline over 319 rows of
    runs 67-68)."""
    calls = [c for c in evidence.DISPATCH_TARGETS if c != "torch"]
    out = {}
    for r in compare_json.get("rows", []):
        t = r.get("server_torch_mean_us")
        if not t:
            continue
        got = {c: r[f"server_{c}_mean_us"] for c in calls if r.get(f"server_{c}_mean_us")}
        via, k = str(r.get("cudal2_via") or ""), r.get("server_cudal2_mean_us")
        if via in calls and k:
            got[via] = k
        if got:
            out[Problem.of_row(r).text] = {"torch": t, **got}
    return out


def call_guard(registry_path, device_key: str, timings: dict, guard: float,
               algos: dict | None = None, mode: str = "server",
               dry_run: bool = False) -> list[tuple[Entry, str, float]]:
    """server_guard's rule for cuBLAS entries: the cuBLASLt call an entry dispatches, where it ran
    slower than torch.matmul by more than `guard` in a server-mode compare (`call_timings`), is kept
    out of its choice from then on (the record's "cold"); the entry then dispatches its next
    qualified call, if that one held up in the same compare, else torch.matmul. Why: on the H200
    (2026-12-05, runs 67-68) cuBLASLt calls that had beaten torch.matmul offline by >= 1.01x in
    every timing ran 0.905-0.968x of it with L2 wiped (256x2048x4096:nt, 128x4096x4096:nt,
    4096x256x2048:nt, 4096x256x4096:nt, ...): the bar is that no dispatch measures slower than
    torch.matmul, and a server meets its weights cold. `algos` as in add_timings: an autotune column
    that timed another algorithm than the stored one is no evidence against it. Returns (entry,
    call, ratio) per call kept out. `mode` names the clock the timings are of in the record's
    reason ("offline": graph_rule.dispatch_guard's repeated graph_clock timings). `dry_run`: the
    same rule on copies of the entries (those returned), nothing written."""
    if not 0.0 < guard <= 1.0:
        raise RegistryError(f"the server guard is a ratio to torch.matmul in (0, 1], got {guard}")
    out: list[tuple[Entry, str, float]] = []

    def block(e: Entry) -> bool:
        t = timings.get(e.problem)
        if e.backend != "cublas" or not t or e.dispatch is None:
            return False
        if other_algorithm(e, (algos or {}).get(e.problem)):
            t = {k: v for k, v in t.items() if k != AUTOTUNE}
        changed = False
        while (call := e.dispatch.get("target")) not in (None, "torch") and t.get(call) \
                and t["torch"] / t[call] < guard:
            ratio = t["torch"] / t[call]
            cold = {**e.dispatch.get("cold", {}), call: f"{mode} {ratio:.4f}x of torch.matmul under guard {guard}"}
            e.dispatch = _chosen(e, e.dispatch["repeats"], e.dispatch["margin"], cold)
            out.append((e, call, ratio))
            changed = True
        return changed
    if dry_run:
        import copy
        for e in Registry.load(registry_path).all(device_key):
            block(copy.deepcopy(e))
    else:
        Registry.load(registry_path).update(device_key, block)
    return out

