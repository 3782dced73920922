"""The kernel registry: per device, the winning kernel of each problem, with its source and proof.

Layout of a registry root (a directory):

  index.json                                   {"format": "cudal2-registry", "version": 1,
                                                "devices": {"h200-sm90": {"entries": {"MxNxK:nt": {...}}}}}
  kernels_triton/generated/<device>/<sha>.py   generated Triton sources, named by their content's
  kernels_cuda/generated/<device>/<sha>.cu     sha256 (entries with the same source share a file;
                                               <device> is where the text was first filed: an
                                               entry moved to another card by registry.transfer
                                               keeps the path, so it is no claim about the entry)

Path resolution: an entry's `source` is always the relative POSIX path above
(`kernels_<backend>/generated/<device>/<file>`). In a user registry (`--registry PATH`,
env CUDAL2_REGISTRY) it is resolved against the registry root. In the shipped registry (the
package's `cudal2/registry/`, which holds only index.json) the first component names the installed
package `cudal2.kernels_triton` / `cudal2.kernels_cuda`, whose `generated/` trees ship with the
wheel. The same relative text thus works in both, and `export` is a plain copy. Absolute paths and
`..` are refused (a tampered index must not make us read or hash files elsewhere).

A user registry replaces the shipped one rather than layering over it, so what runs is exactly what
one index lists; `cudal2 registry export DIR` copies the shipped one to start from.

Every write (source or index) goes to a temp file in the same directory, is fsynced, then
os.replace'd: a crash leaves the old file intact. add() holds an flock on `<root>/.lock` so two
writers cannot lose each other's update.
"""
from __future__ import annotations

import functools
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

from ..problems import Problem
from . import evidence, upkeep
from .disk import atomic_write, index_text, locked
from .entry import (BACKENDS, FORMAT, SUFFIX, VERSION, Entry, RegistryError, check_margin, sha256_text,
                    target_for_key)

ENV = "CUDAL2_REGISTRY"


def _package_dir(name: str) -> Path:
    """Directory of an installed package (regular or namespace, editable or not)."""
    import importlib.util
    spec = importlib.util.find_spec(name)
    locs = [p for p in (spec.submodule_search_locations or []) if os.path.isdir(p)] if spec else []
    if not locs:
        raise RegistryError(f"package {name} is not installed as a directory; cannot resolve shipped sources")
    return Path(locs[0])


def shipped_root() -> Path:
    return _package_dir("cudal2") / "registry"


def default_root() -> Path:
    env = os.environ.get(ENV)
    return Path(env) if env else shipped_root()


@functools.lru_cache(maxsize=4096)
def _parse_spec(text: str):
    """Parsed once per text: nearest() scans every entry on each new shape's first call."""
    from ..spec import KernelSpec
    return KernelSpec.parse(text)


def log_distance(p: Problem, q: Problem) -> float:
    """Euclidean distance of (log2 M, log2 N, log2 K): a factor 2 on one axis is distance 1."""
    return math.sqrt(sum((math.log2(x) - math.log2(y)) ** 2 for x, y in ((p.M, q.M), (p.N, q.N), (p.K, q.K))))


def _name_source(entry: Entry, source_text: str | None) -> None:
    """Point a kernel entry at its source by content (a cuBLAS entry at none) and validate it."""
    if entry.backend != "cublas":
        if not source_text:
            raise RegistryError(f"{entry.key}: a {entry.backend} entry needs its source text")
        entry.sha256 = sha256_text(source_text)
        # Content-addressed: problems whose winners render the same text share one file (in the
        # first H200 grid registry 33 kernel entries had 14 distinct sources, one of them 18 times).
        name = f"{entry.sha256[:16]}{SUFFIX[entry.backend]}"
        entry.source = f"kernels_{entry.backend}/generated/{entry.device}/{name}"
    else:
        entry.source = entry.sha256 = None
        entry.spec = ""
    entry.validate()


class Registry:
    def __init__(self, root: Path, shipped: bool = False):
        self.root = Path(root)
        self.shipped = shipped
        self.entries: dict[str, dict[str, Entry]] = {}     # device -> problem text -> Entry
        self.bad: list[tuple[str, str]] = []               # (entry key, reason) refused at load
        self._raw_bad: dict[tuple[str, str], Any] = {}     # kept verbatim so a rewrite loses nothing

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike | None = None, create: bool = False, read: bool = True) -> "Registry":
        """Load `path` (a root directory or its index.json); None: $CUDAL2_REGISTRY, else shipped.
        `read=False`: the root only, its index not read (for add(), which reads it under its lock).

        A root that does not exist raises RegistryError unless `create` (what filing does: add()
        then makes it), so a mistyped path is never read as an empty registry. An existing
        directory without an index is an empty registry. An index that is not valid JSON or not a
        cudal2 registry raises RegistryError; single malformed entries are refused with a warning
        naming them (listed in `.bad`).
        """
        root = Path(path) if path is not None else default_root()
        if root.name == "index.json":
            root = root.parent
        elif root.is_file():
            raise RegistryError(f"registry {root} is a file; give the registry directory (or its index.json)")
        if not create and not root.is_dir():
            raise RegistryError(f"registry {root} does not exist (only `cudal2 generate` creates one; "
                                "`cudal2 registry export DIR` copies the shipped one)")
        shipped = root.resolve() == shipped_root().resolve()
        reg = cls(root, shipped)
        idx = root / "index.json"
        if not read or not idx.exists():
            return reg
        try:
            data = json.loads(idx.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RegistryError(f"registry index {idx} is not valid JSON: {e}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RegistryError(f"registry index {idx} is not a cudal2 registry (no \"format\": \"{FORMAT}\")")
        if data.get("version") != VERSION:
            raise RegistryError(f"registry index {idx} has version {data.get('version')!r}; this cudal2 reads {VERSION}")
        devices = data.get("devices")
        if not isinstance(devices, dict):
            raise RegistryError(f"registry index {idx}: \"devices\" must be an object")
        for dev, sect in devices.items():
            ents = sect.get("entries") if isinstance(sect, dict) else None
            if not isinstance(ents, dict):
                raise RegistryError(f"registry index {idx}: device {dev!r} has no \"entries\" object")
            for ptext, d in ents.items():
                try:
                    e = Entry.from_dict(d)
                    if e.device != dev or e.problem != ptext:
                        raise RegistryError(f"filed under {dev}/{ptext} but says {e.key}")
                except (RegistryError, TypeError) as err:
                    reason = str(err)
                    reg.bad.append((f"{dev}/{ptext}", reason))
                    reg._raw_bad[(dev, ptext)] = d
                    warnings.warn(f"cudal2 registry {idx}: refusing entry {dev}/{ptext}: {reason}", stacklevel=2)
                    continue
                reg.entries.setdefault(dev, {})[ptext] = e
        return reg

    def to_json(self) -> str:
        devices: dict[str, dict] = {}
        for (dev, ptext), raw in self._raw_bad.items():       # refused entries stay for inspection
            devices.setdefault(dev, {}).setdefault("entries", {})[ptext] = raw
        for dev, ents in self.entries.items():
            devices.setdefault(dev, {}).setdefault("entries", {}).update(
                {p: e.to_dict(deep=False) for p, e in ents.items()})
        devices = {d: {"entries": dict(sorted(v["entries"].items()))} for d, v in sorted(devices.items())}
        return index_text({"format": FORMAT, "version": VERSION, "devices": devices}) + "\n"

    # ---- queries -------------------------------------------------------------------------------
    def all(self, device_key: str | None = None) -> list[Entry]:
        devs = [device_key] if device_key else sorted(self.entries)
        return [e for d in devs for _, e in sorted(self.entries.get(d, {}).items())]

    def lookup(self, problem: Problem, device_key: str) -> Entry | None:
        return self.entries.get(device_key, {}).get(problem.text)

    def refused(self, problem: Problem, device_key: str) -> str | None:
        """Why the index's entry for `problem` was refused at load, or None."""
        key = f"{device_key}/{problem.text}"
        return next((why for k, why in self.bad if k == key), None)

    def candidates(self, problem: Problem, device_key: str, device=None,
                   max_distance: float | None = None) -> list[Entry]:
        """Entries that may serve `problem`, best first: the exact entry, then same-layout entries
        whose spec is valid for `problem` (kernels mask their edges, so validity is correctness)
        by log-space distance. cuBLAS entries always qualify: a nearby problem where nothing beat
        cuBLAS is evidence for cuBLAS here too."""
        from ..spec import is_valid
        ents = self.entries.get(device_key, {})
        exact = ents.get(problem.text)
        out = [exact] if exact else []
        if device is None:
            device = target_for_key(device_key)
        scored = []
        for e in ents.values():
            if e is exact:
                continue
            q = e.prob
            if q.layout != problem.layout:
                continue
            d = log_distance(problem, q)
            if max_distance is not None and d > max_distance:
                continue
            if e.backend != "cublas" and not is_valid(_parse_spec(e.spec), problem, device):
                continue
            scored.append((d, e.problem, e))
        out += [e for _, _, e in sorted(scored, key=lambda t: t[:2])]
        return out

    def serving(self, problem: Problem, device_key: str, device=None) -> list[Entry]:
        """The entries dispatch may serve `problem` from, in order (evidence.py, rule 2): its own
        entry, then kernel entries of its layout whose measured scope holds it and whose spec is
        valid for it - the one with the strongest weakest point first, then the tightest box.
        [] means cuBLAS (torch.matmul): no entry here is evidence that a kernel wins at this size.
        Unlike `candidates`, a neighbour without a scope never serves."""
        from ..spec import is_valid
        ents = self.entries.get(device_key, {})
        exact = ents.get(problem.text)
        out = [exact] if exact else []
        if device is None:
            device = target_for_key(device_key)
        scoped = []
        for e in ents.values():
            if e is exact or e.scope is None:
                continue
            q = e.prob
            if q.layout != problem.layout or not evidence.contains(evidence.box(e.scope, q), problem):
                continue
            if not is_valid(_parse_spec(e.spec), problem, device):
                continue
            scoped.append((-evidence.scope_worst(e.scope), evidence.scope_size(e.scope, q), e.problem, e))
        return out + [e for *_, e in sorted(scoped, key=lambda t: t[:3])]

    def nearest(self, problem: Problem, device_key: str, device=None,
                max_distance: float | None = None) -> Entry | None:
        """The entry of the nearest other problem that qualifies (see candidates), or None. A query
        (what is close to a shape); dispatch does not serve from it, see `serving`."""
        c = [e for e in self.candidates(problem, device_key, device, max_distance) if e.problem != problem.text]
        return c[0] if c else None

    # ---- sources -------------------------------------------------------------------------------
    def source_path(self, entry: Entry) -> Path:
        entry.validate()
        if self.shipped:
            pkg, rest = entry.source.split("/", 1)
            return _package_dir(f"cudal2.{pkg}") / rest
        return self.root / entry.source

    def read_source(self, entry: Entry) -> str:
        """The entry's source text, after checking it hashes to the recorded sha256."""
        if entry.backend == "cublas":
            raise RegistryError(f"{entry.key}: a cublas entry has no source")
        path = self.source_path(entry)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise RegistryError(f"{entry.key}: source file {path} is missing") from None
        except (OSError, UnicodeDecodeError) as e:
            raise RegistryError(f"{entry.key}: source file {path} is unreadable: {e}") from None
        got = sha256_text(text)
        if got != entry.sha256:
            raise RegistryError(f"{entry.key}: source file {path} hashes to {got[:12]}..., "
                                f"the index records {str(entry.sha256)[:12]}... (edited or corrupt)")
        return text

    # ---- writing -------------------------------------------------------------------------------
    def add(self, entry: Entry, source_text: str | None, keep=None) -> Entry | None:
        """File `entry` (replacing the problem's old one): write the source, then the index.
        `keep(old)`: given the index's entry of the problem as it is under the lock (or None), True
        keeps that one and writes nothing (returns None); a cuBLAS Entry of the same problem keeps
        the old verdict amended (record.py: a losing kernel's evidence), written and returned as
        None too. The filing rules decide here rather than on a load of their own: one read of the
        index per filing, not two (~0.15 s each at 1,879 entries, 2026-12-04), and no writer can
        slip in between the verdict and the write."""
        with locked(self.root):
            # Re-read under the lock so a concurrent writer's entries are kept (no index yet: empty).
            fresh = Registry.load(self.root)
            verdict = keep(fresh.entries.get(entry.device, {}).get(entry.problem)) if keep is not None else False
            if isinstance(verdict, Entry):
                if verdict.backend != "cublas" or verdict.key != entry.key:
                    raise RegistryError(f"{entry.key}: an amended entry must be the same problem's cuBLAS entry")
                verdict.validate()
                fresh.entries[entry.device][entry.problem] = verdict
                atomic_write(self.root / "index.json", fresh.to_json())
                self.entries = fresh.entries
                return None
            if verdict:
                self.entries = fresh.entries
                return None
            _name_source(entry, source_text)
            if entry.backend != "cublas":
                atomic_write(self.source_path(entry), source_text)
            fresh.entries.setdefault(entry.device, {})[entry.problem] = entry
            fresh._raw_bad.pop((entry.device, entry.problem), None)     # replaced by a good one
            atomic_write(self.root / "index.json", fresh.to_json())
            self.entries = fresh.entries
        return entry

    def add_many(self, items: list[tuple[Entry, str | None]], only_new: bool = False) -> list[Entry]:
        """File entries in one index write: kernel entries that already name their source (a
        transfer keeps the source card's content-addressed path rather than copying ~40 KB per
        kernel under another device's folder), each source written only where missing after its
        text is checked against the entry's sha256; cuBLAS entries with None for the text
        (registry/fill.py files ~1,500 at once, where `add` would write the 8 MB index each time).
        `only_new`: an entry the index holds by the time the lock is taken (another process filed
        it since the caller looked) is kept, not replaced. Returns the entries filed."""
        filed = []
        with locked(self.root):
            fresh = Registry.load(self.root)
            for e, text in items:
                e.validate()
                if only_new and e.problem in fresh.entries.get(e.device, {}):
                    continue
                if e.backend == "cublas":
                    if text is not None:
                        raise RegistryError(f"{e.key}: a cublas entry has no source text")
                elif text is None or sha256_text(text) != e.sha256:
                    raise RegistryError(f"{e.key}: add_many takes kernel entries with their own source text")
                else:
                    path = fresh.source_path(e)
                    if not path.exists():
                        atomic_write(path, text)
                    elif sha256_text(path.read_text()) != e.sha256:
                        raise RegistryError(f"{e.key}: {path} exists with other text than the entry's source")
                fresh.entries.setdefault(e.device, {})[e.problem] = e
                fresh._raw_bad.pop((e.device, e.problem), None)
                filed.append(e)
            if filed:
                atomic_write(self.root / "index.json", fresh.to_json())
            self.entries = fresh.entries
        return filed

    def set_lt_algos(self, device_key: str, algos: dict) -> int:
        """Attach cuBLASLt autotune's algorithms ({problem text: lt_algo}) to this device's cublas
        entries, in one index write; returns how many entries changed. An entry whose dispatch
        record does not qualify cuBLASLt autotune's call never runs the algorithm (dispatch reads the
        record first: lt_dispatch.choose), so it is left alone: attaching one there changed only the
        index's text, not what runs (22 such in run 73's pack)."""
        def attach(e: Entry) -> bool:
            a = algos.get(e.problem)
            if e.backend != "cublas" or a is None or e.lt_algo == a:
                return False
            if e.dispatch is not None and "cublaslt-autotune" not in evidence.qualified_calls(e.dispatch):
                return False
            e.lt_algo = a
            return True
        return len(self.update(device_key, attach))

    def update(self, device_key: str, fn) -> list[Entry]:
        """Apply `fn(entry) -> bool` (True: it changed the entry in place) to every entry of
        `device_key` under the registry's lock, validate the changed ones, one index write."""
        with locked(self.root):
            fresh = Registry.load(self.root)
            changed = [e for e in fresh.entries.get(device_key, {}).values() if fn(e)]
            for e in changed:
                e.validate()
            if changed:
                atomic_write(self.root / "index.json", fresh.to_json())
            self.entries = fresh.entries
        return changed

    def record_rechecks(self, keys: set[str], reason: str) -> list[Entry]:
        """Mark the entries of `keys` whose check is pending (`check.passed` None, left by `rerender`
        or a filing that ran fewer checks) as passed: `verify --gpu --render --record` calls this
        only with the keys whose kernel it has just rebuilt and passed through the full checker
        (check.CHECKS, edges included) on their device's card, so `checks_here` says those."""
        from ..check import CHECKS

        def mark(e: Entry) -> bool:
            if e.key not in keys or e.check.get("passed") is not None:
                return False
            e.check = {**e.check, "passed": True, "reason": reason}
            if "checks_here" in e.check:
                e.check["checks_here"] = list(CHECKS)
            return True
        devices = sorted({e.device for e in self.all() if e.key in keys})
        return [e for dev in devices for e in self.update(dev, mark)]

    def apply_margin(self, device_key: str, margin: float) -> list[Entry]:
        """Re-file as cuBLAS every kernel entry of `device_key` whose recorded win over best-cublas
        is under `margin` (the filing rule of `cudal2 generate --file-margin`, applied to entries
        filed before it); the kernel's time and spec stay in `times`. One index write; returns the
        re-filed entries. Their sources stay on disk: `export` copies only the sources still named."""
        check_margin(margin)

        def refile(e: Entry) -> bool:
            win = e.speedup()
            if e.backend == "cublas" or win is None or win >= margin:
                return False
            e.refile_as_cublas(f"win {win:.4f}x under margin {margin}")
            return True
        return self.update(device_key, refile)

    def export(self, dest: str | os.PathLike, device_key: str | None = None) -> Path:
        """A standalone user registry in `dest`: index.json plus every source it names (verified)."""
        dest = Path(dest)
        out = Registry(dest)
        for e in self.all(device_key):
            if e.backend != "cublas":
                text = self.read_source(e)      # refuses tampered sources rather than copying them
                atomic_write(out.source_path(e), text)
            out.entries.setdefault(e.device, {})[e.problem] = e
        atomic_write(dest / "index.json", out.to_json())
        return dest

    # ---- upkeep (upkeep.py) --------------------------------------------------------------------
    def rerender(self, compare_sass: bool = True) -> list[Entry]:
        """upkeep.rerender: new sources for entries whose backend renders their spec otherwise."""
        return upkeep.rerender(self, compare_sass)

    def verify(self, gpu: bool | None = None, render: bool = False, pending_only: bool = False,
               time_limit: float | None = None, warm: bool = True) -> list[upkeep.VerifyResult]:
        """upkeep.verify: re-hash, re-render and (on the entry's card) re-check every entry (or
        only the pending ones; none started after `time_limit` seconds; compiled ahead if `warm`)."""
        return upkeep.verify(self, gpu, render, pending_only, time_limit, warm)
