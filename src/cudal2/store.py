"""The store: every measurement, every run, policy checkpoints; SQLite in WAL mode.

One writer (the driver process: the local search loop or the Ray driver) and any number of readers
(compare, registry, replay). WAL lets readers run while the writer commits. Each `add` is one
transaction, so a run killed at any moment loses at most the batch it was writing; everything
committed before stays (SQLite's journal guarantees it even under kill -9).

Spec, problem and device are stored as their canonical text keys (KernelSpec.text, Problem.text,
DeviceInfo.key), so any of those objects or their strings may be passed to the queries.
"""
from __future__ import annotations

import json
import math
import sqlite3
import sys
import time
from pathlib import Path
from typing import Iterable

from .measurement import Measurement

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started REAL NOT NULL,
    config TEXT NOT NULL,
    device TEXT NOT NULL,
    versions TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    spec TEXT NOT NULL,
    problem TEXT NOT NULL,
    device TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    time_us REAL,
    times TEXT NOT NULL,
    baselines_us TEXT NOT NULL,
    best_cublas_us REAL,
    check_result TEXT NOT NULL,
    binary_hash TEXT NOT NULL,
    versions TEXT NOT NULL,
    ratio REAL,
    meta TEXT NOT NULL,
    run_id INTEGER REFERENCES runs(id),
    ts REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS measurements_key ON measurements (problem, device, spec);
CREATE INDEX IF NOT EXISTS measurements_run ON measurements (run_id);
-- The fastest ok measurement per (problem, device), ties to the earliest row.
CREATE VIEW IF NOT EXISTS best AS
SELECT * FROM (
    SELECT m.*, ROW_NUMBER() OVER (PARTITION BY problem, device ORDER BY time_us ASC, id ASC) AS rk
    FROM measurements m WHERE status = 'ok' AND time_us IS NOT NULL
) WHERE rk = 1;
CREATE TABLE IF NOT EXISTS checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER REFERENCES runs(id),
    step INTEGER NOT NULL,
    path TEXT NOT NULL,
    ts REAL NOT NULL
);
-- One row per finished search of a shape (`cudal2 generate`): its log (evaluations, failures by
-- reason, evaluator seconds, the winner and what was filed), and the marker --resume skips on.
CREATE TABLE IF NOT EXISTS shapes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    problem TEXT NOT NULL,
    device TEXT NOT NULL,
    run_id INTEGER REFERENCES runs(id),
    outcome TEXT NOT NULL,
    ts REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS shapes_key ON shapes (problem, device);
"""

_COLS = ("spec", "problem", "device", "status", "reason", "time_us", "times", "baselines_us",
         "best_cublas_us", "check_result", "binary_hash", "versions", "ratio", "meta", "run_id", "ts")
_JSON = {"times": "times", "baselines_us": "baselines_us", "check_result": "check", "versions": "versions",
         "meta": "meta"}


def _key(x) -> str:
    """Canonical text of a spec / problem / device object or string."""
    if x is None or isinstance(x, str):
        return x
    for attr in ("text", "key"):
        if hasattr(x, attr):
            return getattr(x, attr)
    return str(x)


def _spec_key(x) -> str:
    # A spec given as text may be in any field order; the store holds the canonical form.
    if isinstance(x, str):
        from .spec import KernelSpec, SpecError
        try:
            return KernelSpec.parse(x).text
        except SpecError:
            return x
    return _key(x)


def _finite(x, path: str, bad: list):
    """x with every non-finite float replaced by None; the paths replaced are appended to bad."""
    if isinstance(x, float) and not math.isfinite(x):
        bad.append(path)
        return None
    if isinstance(x, dict):
        return {k: _finite(v, f"{path}.{k}", bad) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v, f"{path}[{i}]", bad) for i, v in enumerate(x)]
    return x


_warned: set = set()


def _warn_nonfinite(d: dict, bad: list) -> None:
    key = tuple(sorted(bad))
    if key not in _warned:
        _warned.add(key)
        print(f"warning: store: non-finite values stored as null ({', '.join(bad[:4])}) in the measurement of "
              f"{d.get('spec')} at {d.get('problem')} (status {d.get('status')})", file=sys.stderr)


class StoreError(RuntimeError):
    """The file is not a cudal2 store, or a newer one."""


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # isolation_level=None: we open transactions ourselves (BEGIN ... COMMIT in `_tx`).
            self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not an SQLite store ({e})") from None
        if mode.lower() != "wal":
            raise StoreError(f"{self.path}: could not switch to WAL journal mode (got {mode})")
        # NORMAL is durable against a killed process in WAL mode (only a power cut can lose the
        # last commits), and much faster than FULL.
        self._db.execute("PRAGMA synchronous=NORMAL")
        ver = self._db.execute("PRAGMA user_version").fetchone()[0]
        if ver > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: store schema {ver} is newer than this cudal2 ({SCHEMA_VERSION})")
        with self._tx():
            for stmt in _SCHEMA.split(";"):   # the schema has no ';' inside a statement
                if stmt.strip():
                    self._db.execute(stmt)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # ---- transactions -----------------------------------------------------------------------------
    class _Tx:
        def __init__(self, db):
            self.db = db

        def __enter__(self):
            self.db.execute("BEGIN IMMEDIATE")

        def __exit__(self, exc_type, exc, tb):
            self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
            return False

    def _tx(self):
        return Store._Tx(self._db)

    @property
    def journal_mode(self) -> str:
        return self._db.execute("PRAGMA journal_mode").fetchone()[0]

    # ---- runs -------------------------------------------------------------------------------------
    def new_run(self, config: dict, device: str = "", versions: dict | None = None) -> int:
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO runs (started, config, device, versions) VALUES (?, ?, ?, ?)",
                (time.time(), json.dumps(config, sort_keys=True, default=str), _key(device) or "",
                 json.dumps(versions or {}, sort_keys=True)))
        return int(cur.lastrowid)

    def runs(self) -> list[dict]:
        out = []
        for r in self._db.execute("SELECT * FROM runs ORDER BY id"):
            d = dict(r)
            d["config"] = json.loads(d["config"])
            d["versions"] = json.loads(d["versions"])
            out.append(d)
        return out

    def last_run(self) -> dict | None:
        runs = self.runs()
        return runs[-1] if runs else None

    # ---- measurements -----------------------------------------------------------------------------
    def add(self, measurements: Iterable[Measurement], run_id: int | None = None) -> int:
        """Insert a batch in one transaction (all or nothing); returns how many rows were added.
        `run_id` (if given) is written into each measurement."""
        rows = []
        for m in measurements:
            if run_id is not None:
                m.run_id = run_id
            rows.append(self._row(m))
        if not rows:
            return 0
        with self._tx():
            self._db.executemany(
                f"INSERT INTO measurements ({', '.join(_COLS)}) VALUES ({', '.join('?' * len(_COLS))})", rows)
        return len(rows)

    @staticmethod
    def _row(m: Measurement) -> tuple:
        # A non-finite float (NaN, inf) would not round-trip through JSON and marks a bug upstream,
        # but refusing the row lost whole device runs (2026-12-04, H200: a search and the study died
        # on one). It is stored as null, its path named in meta["nonfinite"] and warned about once.
        bad: list[str] = []
        d = {k: (v if k == "meta" else _finite(v, k, bad)) for k, v in m.to_dict().items()}
        if bad:
            d["meta"] = {**(d.get("meta") or {}), "nonfinite": bad}
            _warn_nonfinite(d, bad)
        d["meta"] = _finite(d.get("meta"), "meta", [])
        vals = []
        for col in _COLS:
            if col == "spec":
                vals.append(_spec_key(d["spec"]))
            elif col in _JSON:
                vals.append(json.dumps(d[_JSON[col]], sort_keys=True, allow_nan=False))
            else:
                vals.append(d[col])
        return tuple(vals)

    @staticmethod
    def _measurement(r: sqlite3.Row) -> Measurement:
        d = {col: r[col] for col in _COLS}
        for col, name in _JSON.items():
            d[name] = json.loads(d.pop(col))
        return Measurement.from_dict(d)

    def measurements(self, problem=None, device=None, status: str | None = None,
                     run_id: int | None = None, spec=None) -> list[Measurement]:
        where, args = [], []
        for col, val in (("problem", _key(problem)), ("device", _key(device)), ("status", status),
                         ("run_id", run_id), ("spec", None if spec is None else _spec_key(spec))):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        sql = "SELECT * FROM measurements" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        return [self._measurement(r) for r in self._db.execute(sql, args)]

    def records(self) -> list[dict]:
        """Every measurement's key, status and times as plain dicts, without decoding the JSON
        columns: what the cost model trains on (`cudal2 train`), ~10x faster than measurements()."""
        cols = ("spec", "problem", "device", "status", "time_us", "best_cublas_us", "ratio")
        return [dict(zip(cols, r)) for r in self._db.execute(
            f"SELECT {', '.join(cols)} FROM measurements ORDER BY id")]

    def count(self, run_id: int | None = None) -> int:
        if run_id is None:
            return self._db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
        return self._db.execute("SELECT COUNT(*) FROM measurements WHERE run_id = ?", (run_id,)).fetchone()[0]

    def best(self, problem, device) -> Measurement | None:
        r = self._db.execute("SELECT * FROM best WHERE problem = ? AND device = ?",
                             (_key(problem), _key(device))).fetchone()
        return None if r is None else self._measurement(r)

    def best_all(self, device=None) -> list[Measurement]:
        """The best ok measurement of every (problem, device), optionally for one device."""
        if device is None:
            rows = self._db.execute("SELECT * FROM best ORDER BY problem, device")
        else:
            rows = self._db.execute("SELECT * FROM best WHERE device = ? ORDER BY problem", (_key(device),))
        return [self._measurement(r) for r in rows]

    def has(self, spec, problem, device) -> bool:
        """Whether this spec was measured on this problem and device, with any status (for --resume:
        a compile error or a crash is a result too, and measuring it again would cost the same)."""
        r = self._db.execute("SELECT 1 FROM measurements WHERE problem = ? AND device = ? AND spec = ? LIMIT 1",
                             (_key(problem), _key(device), _spec_key(spec))).fetchone()
        return r is not None

    def measured_specs(self, problem, device) -> set[str]:
        return {r[0] for r in self._db.execute(
            "SELECT DISTINCT spec FROM measurements WHERE problem = ? AND device = ?", (_key(problem), _key(device)))}

    def problems_done(self, run_id: int | None = None) -> set[str]:
        """Problem texts with at least one stored measurement (in one run, or in any)."""
        if run_id is None:
            rows = self._db.execute("SELECT DISTINCT problem FROM measurements")
        else:
            rows = self._db.execute("SELECT DISTINCT problem FROM measurements WHERE run_id = ?", (run_id,))
        return {r[0] for r in rows}

    # ---- finished shapes (the search log) -------------------------------------------------------
    def add_shape(self, problem, device, outcome: dict, run_id: int | None = None) -> int:
        with self._tx():
            cur = self._db.execute("INSERT INTO shapes (problem, device, run_id, outcome, ts) VALUES (?, ?, ?, ?, ?)",
                                   (_key(problem), _key(device), run_id,
                                    json.dumps(outcome, sort_keys=True, default=str), time.time()))
        return int(cur.lastrowid)

    def shapes(self, device=None, run_id: int | None = None) -> dict[str, dict]:
        """problem text -> its latest finished-search outcome (with run_id and ts added)."""
        q, args = "SELECT * FROM shapes WHERE 1=1", []
        if device is not None:
            q, args = q + " AND device = ?", args + [_key(device)]
        if run_id is not None:
            q, args = q + " AND run_id = ?", args + [run_id]
        out = {}
        for r in self._db.execute(q + " ORDER BY id", args):
            out[r["problem"]] = {**json.loads(r["outcome"]), "run_id": r["run_id"], "ts": r["ts"]}
        return out

    # ---- policy checkpoints -----------------------------------------------------------------------
    def add_checkpoint(self, path: str | Path, step: int, run_id: int | None = None) -> int:
        with self._tx():
            cur = self._db.execute("INSERT INTO checkpoints (run_id, step, path, ts) VALUES (?, ?, ?, ?)",
                                   (run_id, int(step), str(path), time.time()))
        return int(cur.lastrowid)

    def checkpoints(self, run_id: int | None = None) -> list[dict]:
        if run_id is None:
            rows = self._db.execute("SELECT * FROM checkpoints ORDER BY id")
        else:
            rows = self._db.execute("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY id", (run_id,))
        return [dict(r) for r in rows]

    def latest_checkpoint(self, run_id: int | None = None) -> dict | None:
        cps = self.checkpoints(run_id)
        return max(cps, key=lambda c: (c["step"], c["id"])) if cps else None

    # ---- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
