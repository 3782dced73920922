"""The registry's files on disk: atomic writes, the index's text, the writers' lock (index.py's
layout doc says what lives where). Every write goes to a temp file in the same directory, is
fsynced, then os.replace'd, so a crash leaves the old file intact."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)        # mkstemp makes 0600; a registry is meant to be shared and shipped
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # Make the rename itself durable.
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


# Every filing rewrites the whole index, and json's indented encoder is pure Python: ~0.2 s per
# write of 1,879 entries (2026-12-04, CPU) spent encoding the entries that did not change. So each
# entry's text is cached under its compact encoding (C-encoded, and it fixes the indented text).
_ENTRY_LEVEL = 4            # index -> "devices" -> device -> "entries" -> entry


def index_text(obj, level: int = 0) -> str:
    """The text of json.dumps(obj, indent=1): the objects above the entries laid out here, the
    rest (entries and scalars) through _indented. Keys are strings (the index's only kind)."""
    if level < _ENTRY_LEVEL and isinstance(obj, dict) and obj:
        pad = "\n" + " " * (level + 1)
        body = ("," + pad).join(f"{json.dumps(k)}: {index_text(v, level + 1)}" for k, v in obj.items())
        return "{" + pad + body + "\n" + " " * level + "}"
    return _indented(json.dumps(obj), level)


@functools.lru_cache(maxsize=1 << 14)     # ~8 KB each: 1,879 entries hold ~15 MB
def _indented(compact: str, level: int) -> str:
    """json.dumps(value, indent=1) of the value `compact` encodes, nested `level` deep. Decoding
    gives back the same value (floats round-trip by repr, key order is kept), so the same text."""
    return json.dumps(json.loads(compact), indent=1).replace("\n", "\n" + " " * level)


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a") as f:
        try:
            import fcntl
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        except ImportError:   # no flock (Windows): single writer assumed
            pass
        yield
