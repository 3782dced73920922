"""Measurement: the record of one evaluation of one spec on one problem and device.

Every evaluation ends in exactly one Measurement, whatever happened (ARCHITECTURE.md, "Evaluation
and the store"); the store keeps them all, the reward reads them, the registry takes the best `ok` one.
The exception classes below let a stub clock (FakeEvaluator, the CPU stand-in worker) say how a
candidate failed; the real evaluator gets the same statuses from the compiler, checker and worker.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

STATUSES = ("ok", "compile_error", "invalid", "wrong", "crash", "timeout", "slow")


class WrongResult(Exception):
    """A stub clock's way to say: the kernel runs but fails the checker (status `wrong`)."""


class KernelCrash(Exception):
    """A stub clock's way to say: the kernel kills its process (status `crash`).

    In the CPU stand-in worker this is turned into a real process death (os._exit), so the
    evaluator's restart path runs exactly as for an illegal address on a GPU.
    """


class KernelHang(Exception):
    """A stub clock's way to say: the kernel never finishes (status `timeout`); the stand-in
    worker then really blocks until the evaluator kills it."""


@dataclass
class Measurement:
    spec: str                      # canonical KernelSpec text (or the raw text if it did not parse)
    problem: str                   # Problem.text, e.g. "4096x4096x4096:nn"
    device: str                    # DeviceInfo.key, e.g. "h200-sm90"
    status: str                    # one of STATUSES
    reason: str = ""               # why it is not ok (or a note, e.g. "duplicate binary of ...")
    time_us: float | None = None   # offline median; None unless ok
    times: dict[str, Any] = field(default_factory=dict)          # mode -> Stats dict
    baselines_us: dict[str, float] = field(default_factory=dict)  # baseline -> offline median, same run
    best_cublas_us: float | None = None
    check: dict[str, Any] = field(default_factory=dict)          # CheckReport.to_dict()
    binary_hash: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    run_id: int | None = None
    ts: float = field(default_factory=time.time)
    ratio: float | None = None     # slow: early median / best time known at that moment
    meta: dict[str, Any] = field(default_factory=dict)           # Artifact.meta (registers, spills ...)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def speedup(self) -> float | None:
        """best-cuBLAS time / kernel time (PROTOCOL.md's speedup); None unless ok with a baseline."""
        if self.ok and self.time_us and self.best_cublas_us:
            return self.best_cublas_us / self.time_us
        return None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Measurement":
        # Unknown keys are ignored so a store written by a newer cudal2 still reads.
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def key(self) -> tuple[str, str, str]:
        return (self.spec, self.problem, self.device)
