"""Two registries filed on the same cards, joined into one (`cudal2 registry merge SRC --registry DEST`).

Why: a card session's search files into an export (`run/registry`), while the tree's registry moves
on between the session's calls (a transfer's filings copied in, re-checks recorded). A warm card
keeps `run/` from its previous call, so the next search there files beside the older registry:
2026-12-06 (H100), run 137's sweep filed into run 135's `run/registry`, which lacked the 95 entries
run 136's transfer had filed into the tree, and adopting run 137's registry as it came would have
dropped them (they were joined by hand). grid_search.sh now merges the tree's registry into a `run/`
it did not just build, so either side's filings survive.

The rule, per problem both registries file with different entries:
  0. a cuBLAS entry re-filed from the other side's kernel (`times.refiled`, `times.best_kernel_spec`
     the kernel's spec: apply-margin, a server or offline guard took it out) wins: the later
     verdict on the same measurement; of two entries of one spec with different sources, the one
     the backend renders today wins (the other is from before a template edit: `registry
     rerender` made the new one, pending until a card re-checks it);
  0'. of two cuBLAS entries, the one whose call was chosen on more timings (`dispatch.repeats`:
     add-timings only adds to them, so more is later);
  1. an entry that passed its check (or a cuBLAS entry: nothing to check) beats one pending
     (re-rendered, `check.passed` None) or failed;
  2. then the higher speedup over best-cublas (`Entry.speedup`: the entry's offline time against the
     best cuBLAS baseline timed in the same run; 1.0 for a cuBLAS entry), a ratio from one run
     rather than two runs' absolute times: two runs on one card drift by a few per cent (the first
     merge of run 135's registry with the tree, 2026-12-06, H100: by absolute times, 5 cuBLAS
     entries timed in an earlier run at 1-3% under a kernel's time would have kept out kernels
     their own run measured >= 1.01x faster than every cuBLAS baseline);
  3. then the lower `time_us`; otherwise DEST's stays.
A problem only SRC files is added with its source (hash-checked). Nothing is removed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .entry import Entry, RegistryError
from .index import Registry
from .upkeep import check_render


def _check_rank(e: Entry) -> int:
    if e.backend == "cublas":
        return 2
    return {True: 2, None: 1, False: 0}.get(e.check.get("passed"), 0)


def _refiled_from(a: Entry, b: Entry) -> bool:
    """a is b's kernel re-filed as cuBLAS (Entry.refile_as_cublas)."""
    return (a.backend == "cublas" and b.backend != "cublas" and "refiled" in (a.times or {})
            and a.times.get("best_kernel_spec") == b.spec)


def _renders(e: Entry) -> bool:
    try:
        check_render(e)
        return True
    except RegistryError:
        return False


def _repeats(e: Entry) -> int:
    return len((e.dispatch or {}).get("repeats") or [])


def _rerender_pair(a: Entry, b: Entry) -> bool:
    return a.backend == b.backend != "cublas" and a.spec == b.spec and a.sha256 != b.sha256


def decide(dest: Entry, src: Entry) -> tuple[Entry, str]:
    """The entry a merge keeps of two for one problem (the module doc's rule), and why."""
    if _refiled_from(dest, src) or _refiled_from(src, dest):
        won = dest if _refiled_from(dest, src) else src
        return won, f"re-filed as cuBLAS from that kernel ({won.times['refiled']})"
    if _rerender_pair(dest, src) and (ok := _renders(dest)) != _renders(src):
        return (dest if ok else src), "the backend renders this source today, not the other"
    if dest.backend == src.backend == "cublas" and (nd := _repeats(dest)) != (ns := _repeats(src)):
        return (dest if nd > ns else src), f"its call chosen on {max(nd, ns)} timings, the other's on {min(nd, ns)}"
    rd, rs = _check_rank(dest), _check_rank(src)
    if rd != rs:
        won, lost = (dest, src) if rd > rs else (src, dest)
        return won, f"check {won.check.get('passed', 'n/a')} over {lost.check.get('passed')}"
    sd, ss = dest.speedup(), src.speedup()
    if sd and ss and abs(ss - sd) > 1e-9:
        won, lost = (src, dest) if ss > sd else (dest, src)
        return won, f"{won.speedup():.3f}x best-cublas vs {lost.speedup():.3f}x"
    if dest.time_us and src.time_us and src.time_us < dest.time_us:
        return src, f"{src.time_us:.2f} us vs {dest.time_us:.2f} us"
    return dest, "no difference the rule sees: the destination's stays"


@dataclass
class MergeResult:
    added: list[str] = field(default_factory=list)          # problems only SRC filed
    replaced: list[tuple[str, str]] = field(default_factory=list)   # (key, why) SRC's won
    kept: list[tuple[str, str]] = field(default_factory=list)       # (key, why) DEST's stayed


def merge(dest_root, src_root, device_keys=None, dry_run: bool = False) -> MergeResult:
    """Join SRC's entries into the registry at `dest_root` (one index write); `device_keys` limits
    the cards (default: every card SRC files). The shipped registry is never written."""
    dest, src = Registry.load(dest_root), Registry.load(src_root)
    if dest.shipped and not dry_run:
        raise RegistryError("the shipped registry is read-only here: `cudal2 registry export DIR`, merge "
                            "into DIR, and ship that")
    keys = sorted(src.entries) if device_keys is None else list(device_keys)
    unknown = [k for k in keys if k not in src.entries]
    if unknown:
        raise RegistryError(f"registry {src.root} files nothing for {', '.join(unknown)} "
                            f"(it has: {', '.join(sorted(src.entries)) or 'none'})")
    res, items = MergeResult(), []
    for key in keys:
        for problem, e in sorted(src.entries[key].items()):
            d = dest.entries.get(key, {}).get(problem)
            if d is not None and d.to_dict() == e.to_dict():
                continue
            if d is None:
                res.added.append(e.key)
            else:
                won, why = decide(d, e)
                if won is d:
                    res.kept.append((e.key, why))
                    continue
                res.replaced.append((e.key, why))
            items.append((e, None if e.backend == "cublas" else src.read_source(e)))
    if items and not dry_run:
        dest.add_many(items)
    return res
