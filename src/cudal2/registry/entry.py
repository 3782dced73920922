"""Registry entries: the index format constants, the RegistryError type, and Entry with its
structural validation (no file access). The on-disk layout is described in cudal2.registry."""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..problems import Problem, ProblemError
from .evidence import validate_dispatch, validate_scope

FORMAT = "cudal2-registry"
VERSION = 1
BACKENDS = ("triton", "cuda", "cublas")
SUFFIX = {"triton": ".py", "cuda": ".cu"}
_SAFE = re.compile(r"^[A-Za-z0-9_.\-/]+$")


class RegistryError(RuntimeError):
    """An index that cannot be read, or an entry that must be refused; the message names it."""


def check_margin(margin: float) -> None:
    """The filing margin is a ratio over best-cublas: at least 1.0 (1.0: any win files a kernel)."""
    if not margin >= 1.0:
        raise RegistryError(f"the filing margin must be >= 1.0 (a ratio over best-cublas), got {margin}")


def target_for_key(device_key: str):
    """The compile target behind a device key ("h200-sm90" -> sm_90a limits) for validity checks."""
    from ..device import DeviceInfo
    m = re.search(r"sm(\d)(\d)a?$", device_key)
    if not m:
        raise RegistryError(f"device key {device_key!r} does not end in smXY; cannot tell its limits")
    return DeviceInfo.target(f"sm_{m.group(1)}{m.group(2)}")


def _time_ok(x) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Entry:
    problem: str                      # canonical "MxNxK:layout"
    device: str                       # DeviceInfo.key, e.g. "h200-sm90"
    backend: str                      # triton | cuda | cublas (no generated kernel beat best-cublas)
    spec: str = ""                    # canonical KernelSpec text; "" for cublas
    source: str | None = None         # relative path (see module doc); None for cublas
    sha256: str | None = None         # of the source text
    time_us: float | None = None      # kernel offline median (for cublas: the best-cublas time)
    best_cublas_us: float | None = None
    best_cublas: str | None = None    # which baseline was best
    baselines_us: dict = field(default_factory=dict)
    # cublas entries: the algorithm cuBLASLt autotune chose, {"data": [8 words of the
    # cublasLtMatmulAlgo_t], "cublasLt": version that chose it}; cudal2.lt_dispatch runs it.
    lt_algo: dict | None = None
    times: dict = field(default_factory=dict)       # per clock mode, Stats dicts
    check: dict = field(default_factory=dict)       # CheckReport.to_dict()
    versions: dict = field(default_factory=dict)
    run_id: Any = None
    ts: Any = None
    # The baselines best-cublas was formed from (the run's --baselines; those that ran are
    # baselines_us's keys); [] in entries filed before this was recorded.
    baselines: list = field(default_factory=list)
    # cublas entries: which cuBLAS call dispatch runs and the repeated timings that chose it
    # (evidence.cublas_choice); None in entries filed before it (evidence.legacy_choice applies).
    dispatch: dict | None = None
    # kernel entries: the box of other problems this kernel was measured not to lose on, with
    # the measurements (evidence.validate_scope); None: it serves its own problem only.
    scope: dict | None = None

    @property
    def key(self) -> str:
        return f"{self.device}/{self.problem}"

    @property
    def prob(self) -> Problem:
        return Problem.parse(self.problem)

    def speedup(self, baseline: str | None = None) -> float | None:
        """t_baseline / t_kernel; baseline None means best-cublas."""
        base = self.best_cublas_us if baseline is None else self.baselines_us.get(baseline)
        if not base or not self.time_us:
            return None
        return base / self.time_us

    def refile_as_cublas(self, why: str, **record) -> None:
        """Turn this kernel entry into a cuBLAS one in place: the kernel's time and spec (and
        `record`) stay in `times` with `why`; source, hash and scope go (the measured range was the
        kernel's). Dispatch then chooses its call from the baselines' evidence."""
        self.times = {**self.times, "best_kernel_us": self.time_us, "best_kernel_spec": self.spec,
                      **record, "refiled": why}
        self.backend, self.spec, self.source, self.sha256 = "cublas", "", None, None
        self.scope = None
        self.time_us = self.best_cublas_us

    def to_dict(self, deep: bool = True) -> dict:
        """The index's form. deep=False shares the nested dicts and lists with the entry (for a
        reader that only serialises it: the index writer, where asdict's deep copy of every entry
        was ~0.3 s per filing into a registry of 1,879 entries, 2026-12-04)."""
        d = asdict(self) if deep else {f.name: getattr(self, f.name) for f in fields(self)}
        # Fields added in registry v2 are written only when set: an index of v1 entries round-trips
        # byte for byte, and an older cudal2 (which ignores unknown keys) still reads a v2 index.
        for name in ("dispatch", "scope"):
            if d[name] is None:
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Entry":
        if not isinstance(d, dict):
            raise RegistryError(f"entry is a {type(d).__name__}, not an object")
        names = {f.name for f in fields(cls)}
        missing = [k for k in ("problem", "device", "backend") if k not in d]
        if missing:
            raise RegistryError(f"entry lacks {', '.join(missing)}")
        e = cls(**{k: v for k, v in d.items() if k in names})
        e.validate()
        return e

    def _validate_types(self) -> None:
        """Field types an index edited by hand can break: a time that is not a positive number, a
        dict that is not one; list, show and dispatch read these without further checks."""
        for name in ("time_us", "best_cublas_us"):
            if not _time_ok(getattr(self, name)):
                raise RegistryError(f"{self.key}: {name} must be a positive number or null, got {getattr(self, name)!r}")
        for name in ("baselines_us", "times", "check", "versions"):
            if not isinstance(getattr(self, name), dict):
                raise RegistryError(f"{self.key}: {name} must be an object, got {getattr(self, name)!r}")
        if not isinstance(self.baselines, list) or not all(isinstance(n, str) for n in self.baselines):
            raise RegistryError(f"{self.key}: baselines must be a list of names, got {self.baselines!r}")
        bad = {k: v for k, v in self.baselines_us.items() if not isinstance(k, str) or not _time_ok(v)}
        if bad:
            raise RegistryError(f"{self.key}: baselines_us must map names to positive numbers, got {bad!r}")
        for name in ("spec", "best_cublas", "source", "sha256"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise RegistryError(f"{self.key}: {name} must be a string, got {v!r}")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise RegistryError(f"{self.key}: sha256 must be 64 lowercase hex digits, got {self.sha256!r}")

    def validate(self) -> None:
        """Structural checks (no file access): backend, problem text, spec, source path form."""
        if self.backend not in BACKENDS:
            raise RegistryError(f"{self.key}: backend {self.backend!r} is not one of {BACKENDS}")
        try:
            p = Problem.parse(self.problem)
        except ProblemError as e:
            raise RegistryError(f"{self.key}: bad problem: {e}") from None
        if p.text != self.problem:
            raise RegistryError(f"{self.key}: problem text is not canonical (expected {p.text})")
        self._validate_types()
        if self.lt_algo is not None:
            a = self.lt_algo
            words = a.get("data") if isinstance(a, dict) else None
            if (self.backend != "cublas" or not isinstance(words, list) or len(words) != 8
                    or not all(isinstance(w, int) and 0 <= w < 2**64 for w in words)
                    or not isinstance(a.get("cublasLt"), int)):
                raise RegistryError(f"{self.key}: lt_algo must be {{'data': 8 uint64 words, 'cublasLt': "
                                    f"version}} on a cublas entry")
        try:
            if self.dispatch is not None:
                if self.backend != "cublas":
                    raise ValueError("dispatch is a cublas entry's record")
                validate_dispatch(self.dispatch, self.key)
            if self.scope is not None:
                if self.backend == "cublas":
                    raise ValueError("a cublas entry has no kernel to serve a scope")
                validate_scope(self.scope, p, self.key)
        except ValueError as e:
            msg = str(e)
            raise RegistryError(msg if msg.startswith(self.key) else f"{self.key}: {msg}") from None
        if self.backend == "cublas":
            return
        from ..spec import KernelSpec, SpecError
        try:
            s = KernelSpec.parse(self.spec or "")
        except SpecError as e:
            raise RegistryError(f"{self.key}: bad spec: {e}") from None
        if s.backend != self.backend:
            raise RegistryError(f"{self.key}: spec says backend={s.backend} but entry says {self.backend}")
        if not self.source or not self.sha256:
            raise RegistryError(f"{self.key}: a {self.backend} entry needs a source path and its sha256")
        # The prefix must match the backend: in the shipped registry it names the package the
        # source is read from, so a mismatch would load one backend's file as another's kernel.
        parts = self.source.split("/")
        if (not _SAFE.match(self.source) or self.source.startswith("/") or ".." in parts
                or len(parts) != 4 or parts[0] != f"kernels_{self.backend}" or parts[1] != "generated"):
            raise RegistryError(f"{self.key}: source path {self.source!r} is not of the form "
                                f"kernels_{self.backend}/generated/<device>/<file>")
