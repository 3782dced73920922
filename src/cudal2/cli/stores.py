"""Reading stores a user points at: the committed gzip stores, plain SQLite ones, sweep CSVs.

`sqlite_copy` gives a path Store can open: a gzip-compressed store (the committed `.db.gz`) is
decompressed into a temp dir; with `always`, a plain SQLite file is copied too, because opening a
Store switches the file to WAL mode and writes its schema, which must not touch a committed result.
`replay_device` is the DeviceInfo a stored GPU run recorded (masks and policy features on a CPU).
"""
from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path


def is_gzip(path: str | Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def sqlite_copy(path: str | Path, always: bool = False, option: str = "--replay"):
    """(SQLite path, temp dir or None); the caller cleans the temp dir up. ValueError (one line,
    naming the `option` that gave the path) for a path that is not a file or a gzip file that does
    not decompress."""
    if not Path(path).is_file():
        raise ValueError(f"{option} {path}: no such file")
    gz = is_gzip(path)
    if not gz and not always:
        return str(path), None
    tmp = tempfile.TemporaryDirectory(prefix="cudal2-store-")
    out = Path(tmp.name) / "store.sqlite"
    try:
        if gz:
            with gzip.open(path, "rb") as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(path, out)
    except (OSError, EOFError) as e:
        tmp.cleanup()
        what = "not a readable gzip file" if gz else "cannot be copied"
        raise ValueError(f"{option} {path}: {what} ({e})") from None
    return str(out), tmp


def replay_device(store, device_key: str):
    """DeviceInfo for masks and policy features: the one a GPU run recorded, else the arch's limits."""
    from ..device import DeviceInfo
    from ..registry import target_for_key
    for run in reversed(store.runs()):
        info = run["config"].get("device_info") if isinstance(run["config"], dict) else None
        if info and info.get("key") == device_key:
            return DeviceInfo.from_dict(info)
    return target_for_key(device_key)
