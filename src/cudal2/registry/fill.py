"""cuBLAS entries for the shapes a card has no entry for, from compares run on that card
(`cudal2 registry file-cublas`).

A card whose kernels came by transfer (registry/transfer.py) has no cuBLAS entries: the source
card's cuBLASLt algorithms and the timings that chose its calls are the source card's. Without an
entry, dispatch runs torch.matmul, which on an H100 ran 0.965x of best-cublas geomean over the 825
grid nn shapes with no kernel (2026-12-05, runs 87-90; shortK 0.937). `fill_cublas` files, for each
shape the compares timed and the registry holds nothing for on their card, a cuBLAS entry whose call
is chosen by evidence.cublas_choice over the compares' offline medians, one independent timing per
compare: a cuBLASLt call is dispatched only where it beat torch.matmul by the margin in at least
`min_repeats` of them, every one it was timed in; else torch.matmul (the entry then holds the
timings, so a later compare's `add-timings` can choose again).

cuBLASLt autotune's column counts only where the row records the algorithm it timed
(`cublaslt-autotune_algo`, compares from 2026-12-05 on) and that is the algorithm the entry stores:
without the cache carried to the card each compare tunes again and may time another algorithm than
the one dispatch would run. The algorithm filed is the latest compare's (the one the card's cache
holds after it). cuBLASLt's heuristic and torch.matmul are the same call in every run.
"""
from __future__ import annotations

from ..problems import Problem
from . import evidence
from .entry import Entry, RegistryError, check_margin
from .evidence import AUTOTUNE
from .index import Registry
from .timings import row_offline


def fill_cublas(registry, compares: list[dict], margin: float = evidence.CUBLAS_MARGIN,
                min_repeats: int = evidence.MIN_REPEATS, dry_run: bool = False
                ) -> tuple[list[Entry], dict[str, str]]:
    """File cuBLAS entries into `registry` from `compares` (`cudal2 compare --json` documents of
    one card, oldest first). Returns (entries filed, {problem: why not} for shapes left alone).
    `dry_run`: the same entries built, nothing written."""
    check_margin(margin)
    if not isinstance(min_repeats, int) or min_repeats < 1:
        raise RegistryError(f"min_repeats must be a positive integer, got {min_repeats!r}")
    if not compares:
        raise RegistryError("file-cublas needs at least one compare")
    keys = {(c.get("versions") or {}).get("device_key") for c in compares}
    if None in keys or len(keys) != 1:
        raise RegistryError(f"the compares must all record the same card (versions.device_key): {sorted(map(str, keys))}")
    key = keys.pop()
    target = Registry.load(registry, create=True)
    held = target.entries.get(key, {})
    # {problem: [(compare index, row)]}, compares in the order given
    seen: dict[str, list[tuple[int, dict]]] = {}
    for i, doc in enumerate(compares):
        for row in doc.get("rows", []):
            p = Problem.of_row(row).text
            seen.setdefault(p, []).append((i, row))
    filed, skipped = [], {}
    for p, rows in seen.items():
        if p in held:
            skipped[p] = f"{key} already holds a {held[p].backend} entry"
            continue
        timings, algo = [], None
        for i, row in rows:
            names = (compares[i].get("config") or {}).get("baselines") or []
            t = row_offline(row, names)
            if "torch" in t:
                timings.append((i, row, t))
        if not timings:
            skipped[p] = "no offline torch.matmul time in any compare"
            continue
        for i, row, _ in reversed(timings):       # the latest recorded algorithm is the one filed
            if row.get(f"{AUTOTUNE}_algo"):
                algo = ([int(w) for w in row[f"{AUTOTUNE}_algo"]], (compares[i].get("versions") or {}).get("cublasLt"))
                break
        repeats = []
        for i, row, t in timings:
            t = dict(t)
            ran = row.get(f"{AUTOTUNE}_algo")
            if AUTOTUNE in t and (algo is None or ran is None or [int(w) for w in ran] != algo[0]
                                  or (compares[i].get("versions") or {}).get("cublasLt") != algo[1]):
                del t[AUTOTUNE]       # not the algorithm the entry would store: no evidence for it
            if t not in repeats:      # the same timing twice (one file given twice) is one run
                repeats.append(t)
        last_i, last_row, last = timings[-1]
        best = min(last, key=last.get)
        rec = evidence.cublas_choice(repeats, margin, min_repeats)
        lt_algo = {"data": algo[0], "cublasLt": int(algo[1])} if algo and algo[1] and \
            AUTOTUNE in rec["qualified"] else None
        names = (compares[last_i].get("config") or {}).get("baselines") or []
        e = Entry(problem=p, device=key, backend="cublas", time_us=last[best], best_cublas_us=last[best],
                  best_cublas=best, baselines_us=dict(last), baselines=[n for n in names if n in last],
                  versions=dict(compares[last_i].get("versions") or {}), lt_algo=lt_algo, dispatch=rec,
                  ts=last_row.get("ts"))
        e.validate()
        filed.append(e)
    if filed and not dry_run:
        kept = {e.problem for e in target.add_many([(e, None) for e in filed], only_new=True)}
        for e in filed:
            if e.problem not in kept:
                skipped[e.problem] = f"{key} already holds an entry (filed while this ran)"
        filed = [e for e in filed if e.problem in kept]
    return filed, skipped
