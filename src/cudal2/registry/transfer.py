"""Another card's kernels filed for this one, on this card's measurements (`bench/transfer_registry.py`).

Two steps around one compare on the target card:
  for_timing   the source card's kernel entries as a registry of the target card's key, written to
               a new directory (no cuBLAS entries: their cuBLASLt algorithm and the timings that
               chose the call are the source card's; no `scope`: the off-grid box was measured
               there), for `cudal2 compare --registry DIR` to build, check and time on the target;
  file_winners from that compare's rows, a kernel entry for the target card where the rule below
               holds, with the target card's times; everything else stays without an entry, which
               dispatch serves with torch.matmul.

The filing rule is the search's, on the target card's numbers: the compare built the source
entry's spec (`cudal2_spec`) and its checks passed there (`status_cudal2` ok), offline it beat
best-cublas by `margin` (generate's --file-margin, 1.01), and in server mode (cold L2) it ran at
least `guard` of torch.matmul (the server guard of `add-timings`, 0.97). The entry's check is the
compare's five (random, exact, poison, guard, fresh) and is marked pending until
`cudal2 registry verify --gpu --render --record` runs the full checker (the edge shapes too) on
that card. Why a transfer at all: on an H100 (2026-12-05, runs 84-85) the H200's 633 kernel
entries, built from their H200 specs, ran 1.057x best-cublas geomean offline (537 won; server
1.040x) where their H200 filing measured 1.071x: the search's choices carry over between the two
Hopper cards, and a card with no search of its own gets them for the price of one compare (~560 s
of card time for 633 shapes). The 489 filed, timed again as dispatched (run 86): 1.089x offline.
"""
from __future__ import annotations

import dataclasses
import random
from itertools import zip_longest
from pathlib import Path

from ..problems import Problem
from ..stats import Stats
from .entry import Entry, RegistryError, check_margin
from .index import Registry
from .record import lost_cold

CHECKS = ("random", "exact", "poison", "guard", "fresh")     # what compare's kernel_source runs
STATS_FIELDS = tuple(f.name for f in dataclasses.fields(Stats))


def for_timing(src, from_key: str, to_key: str, dest, searched_only: bool = False,
               against=None) -> list[Entry]:
    """The kernel entries of `from_key` in registry `src`, filed under `to_key` in a new registry
    at `dest` with their sources (hash-checked), and dest/shapes.txt: their problems, layouts
    interleaved and each in a fixed shuffle, so a compare cut short has spread over both.
    `searched_only`: leave out the entries that came to `from_key` by a transfer themselves
    (`times.transferred_from`): timing them again on the card they came from teaches nothing.
    `against`: a registry whose `to_key` entries are the target's; an entry whose kernel it already
    files at that problem (same spec) is left out too. Why both: the H100s the device service lends
    search (grid_search.sh keeps their stores apart), and their new winners go to the H200 for the
    price of a compare (~0.9 s a shape) instead of an H200 search (~2 s a shape)."""
    reg = Registry.load(src)
    if from_key == to_key:
        raise RegistryError(f"--from and --to are both {from_key}: nothing to transfer")
    kernels = [e for e in reg.all(from_key) if e.backend != "cublas"]
    if not kernels:
        have = ", ".join(sorted(reg.entries)) or "none"
        raise RegistryError(f"registry {src} has no kernel entries for {from_key} (devices: {have})")
    if searched_only:
        kernels = [e for e in kernels if "transferred_from" not in (e.times or {})]
    if against is not None:
        held = Registry.load(against).entries.get(to_key, {})
        kernels = [e for e in kernels if not (e.problem in held and held[e.problem].spec == e.spec)]
    if not kernels:
        raise RegistryError(f"no kernel entry of {from_key} is left to time on {to_key} "
                            "(all came by transfer or are the target's own already)")
    dest = Path(dest)
    if (dest / "index.json").exists():
        raise RegistryError(f"{dest} already holds a registry; give a new directory")
    moved = [(dataclasses.replace(e, device=to_key, scope=None), reg.read_source(e)) for e in kernels]
    out = Registry.load(dest, create=True, read=False)
    out.add_many(moved)
    by_layout: dict[str, list[str]] = {}
    for e, _ in moved:
        by_layout.setdefault(e.problem.rsplit(":", 1)[1], []).append(e.problem)
    for group in by_layout.values():
        random.Random(0).shuffle(group)
    order = [p for group in zip_longest(*by_layout.values()) for p in group if p]
    (dest / "shapes.txt").write_text(
        f"# {len(order)} kernel entries of {from_key} in {src}, filed as {to_key} "
        "(layouts interleaved, each in a fixed shuffle)\n" + "\n".join(order) + "\n")
    return [e for e, _ in moved]


def _stats(row: dict, mode: str, name: str) -> dict:
    """A compare row's `<mode>_<name>_<stat>` columns back as one Stats dict (report.py's names)."""
    return {k: row[f"{mode}_{name}_{k}"] for k in STATS_FIELDS if row.get(f"{mode}_{name}_{k}") is not None}


def verdict(row: dict, src_entry: Entry | None, margin: float, guard: float) -> str | None:
    """None if the row files its kernel by the rule in the module doc, else why not."""
    if src_entry is None or src_entry.backend == "cublas":
        return "no kernel entry on the source card"
    if row.get("cudal2_via") != "kernel" or row.get("cudal2_spec") != src_entry.spec:
        return f"the compare timed {row.get('cudal2_spec') or row.get('cudal2_via')!r}, not the source entry's spec"
    if row.get("status_cudal2") != "ok":
        return f"not checked here: {row.get('status_cudal2')}"
    off = row.get("offline_cudal2_vs_best")
    if not off or off < margin:
        return f"offline {off:.3f}x best-cublas, under the margin {margin}" if off else "no offline time"
    k, t = row.get("server_cudal2_mean_us"), row.get("server_torch_mean_us")
    if not k or not t:
        return "no server-mode time (the compare needs --mode both)"
    if t / k < guard:
        return f"server {t / k:.3f}x of torch.matmul, under the guard {guard}"
    return None


def file_winners(registry, src, from_key: str, compare: dict, margin: float = 1.01,
                 guard: float = 0.97, dry_run: bool = False) -> tuple[list[Entry], dict[str, str]]:
    """File into `registry` the kernels of `from_key` (registry `src`) that the compare `compare`
    (a `cudal2 compare --json` document, one card, --mode both) shows winning on its card.
    Returns (entries filed, {problem: why not} for the rows not filed). An entry the target
    registry already holds for that card is replaced only by a faster win, and never by the kernel
    a server guard re-filed as cuBLAS there. `dry_run`: the same verdicts, nothing written."""
    check_margin(margin)
    if not 0.0 < guard <= 1.0:
        raise RegistryError(f"the server guard is a ratio to torch.matmul in (0, 1], got {guard}")
    vers = compare.get("versions") or {}
    to_key = vers.get("device_key")
    if not to_key:
        raise RegistryError("the compare records no device_key (versions): cannot tell which card it timed")
    if to_key == from_key:
        raise RegistryError(f"the compare ran on {from_key} itself: nothing to transfer")
    names = (compare.get("config") or {}).get("baselines") or []
    source = Registry.load(src)
    target = Registry.load(registry)
    held = target.entries.get(to_key, {})
    items, skipped = [], {}
    for row in compare.get("rows", []):
        prob = Problem.of_row(row)
        p = prob.text
        e = source.lookup(prob, from_key)
        why = verdict(row, e, margin, guard)
        old = held.get(p)
        if why is None and old is not None and old.backend != "cublas" and \
                (old.speedup() or 0) >= row["offline_cudal2_vs_best"]:
            why = f"{to_key} already holds a kernel at {old.speedup():.3f}x"
        if why is None and old is not None and lost_cold(old, e.spec):
            # two cold timings that disagree about the guard: the one that failed it stands, as
            # for a re-search (record.lost_cold)
            why = f"a guard took this kernel out on {to_key} ({old.times.get('refiled')})"
        if why is not None:
            skipped[p] = why
            continue
        srv_t = row["server_torch_mean_us"] / row["server_cudal2_mean_us"]
        new = dataclasses.replace(
            e, device=to_key, scope=None,
            time_us=row["offline_cudal2_median_us"], best_cublas_us=row["offline_best_cublas_us"],
            best_cublas=row["offline_best_cublas"],
            baselines_us={n: row[f"offline_{n}_median_us"] for n in names if row.get(f"offline_{n}_median_us")},
            baselines=[n for n in names if row.get(f"offline_{n}_median_us")],
            times={"offline": _stats(row, "offline", "cudal2"), "server": _stats(row, "server", "cudal2"),
                   "server_vs_torch": srv_t, "transferred_from": {"device": from_key, "time_us": e.time_us,
                                                                   "best_cublas_us": e.best_cublas_us}},
            check={"problem": p, "passed": None, "checks_here": list(CHECKS),
                   "reason": f"transferred from {from_key}: compare's {len(CHECKS)} checks passed on {to_key}; "
                             "the full checker pending (verify --gpu --render --record)"},
            versions=vers, run_id=None, ts=row.get("ts") or (compare.get("runs") or [{}])[-1].get("ts"))
        items.append((new, source.read_source(e)))
    if not dry_run:
        target.add_many(items)
    return [e for e, _ in items], skipped


# What file_winners' reasons say, for a one-line count of the rows kept out.
KINDS = ("under the margin", "under the guard", "already holds", "server guard took", "not checked here",
         "not the source entry's spec", "no kernel entry", "no server-mode time", "no offline time")


def skip_kinds(skipped: dict[str, str]) -> str:
    """"134 under the margin, 10 under the guard" for file_winners' {problem: why not}."""
    from collections import Counter
    kinds = Counter(next((k for k in KINDS if k in why), why) for why in skipped.values())
    return ", ".join(f"{n} {k}" for k, n in kinds.most_common())
