"""What a resumed efficiency study keeps besides the measurements: the trained policy and each finished
shape's row, in the study's own store (table `study_state`), so one returned study.db carries all of it.

Keys are signatures of everything the value depends on (`sig`): a row is reused only by a study with
the same methods, budgets, training, profiles and models; anything else measures the shape again
(from the shared cache: the measurements themselves are reused whenever their profile matches).
The trained policy is kept so a resumed call adapts from the very weights the first call trained,
and does not replay training; each row so a finished shape is neither re-run nor re-costed.
"""
from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import time
from pathlib import Path

SCHEMA = """CREATE TABLE IF NOT EXISTS study_state (
    sig TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, data BLOB NOT NULL, ts REAL NOT NULL,
    PRIMARY KEY (sig, kind, key))"""


def sig(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_sig(path: str | None) -> str | None:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16] if path else None


class StudyState:
    def __init__(self, store_path: str | Path):
        self.db = sqlite3.connect(str(store_path), timeout=30)
        self.db.execute(SCHEMA)
        self.db.commit()

    def _put(self, s: str, kind: str, key: str, data: bytes) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO study_state VALUES (?, ?, ?, ?, ?)", (s, kind, key, data, time.time()))

    def _get(self, s: str, kind: str) -> dict[str, bytes]:
        return {k: d for k, d in self.db.execute("SELECT key, data FROM study_state WHERE sig = ? AND kind = ?", (s, kind))}

    # ---- finished shapes ------------------------------------------------------------------------
    def add_row(self, s: str, row: dict) -> None:
        self._put(s, "row", row["problem"], json.dumps(row, default=str).encode())

    def rows(self, s: str) -> dict[str, dict]:
        return {k: json.loads(d) for k, d in self._get(s, "row").items()}

    # ---- the trained policy ---------------------------------------------------------------------
    def save_policy(self, s: str, policy, info: dict) -> None:
        buf = io.BytesIO()
        policy.save(buf)
        self._put(s, "policy", "weights", buf.getvalue())
        self._put(s, "policy", "info", json.dumps(info, default=str).encode())

    def policy(self, s: str):
        """(policy, info) saved under `s`, or (None, None)."""
        got = self._get(s, "policy")
        if "weights" not in got:
            return None, None
        from cudal2.rl.policy import SpecPolicy
        return SpecPolicy.load(io.BytesIO(got["weights"])), json.loads(got.get("info", b"{}"))

    def close(self) -> None:
        self.db.close()
