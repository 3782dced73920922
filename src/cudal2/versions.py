"""Software, card and source versions recorded with every measurement and result file.

One place for it: the evaluator's GPU worker, `cudal2 compare` and the bench scripts all call
`collect()`. Every item is optional (a missing tool leaves its key out and never fails a run).
"""
from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

_DISTS = ("cudal2", "torch", "triton", "cuda-bindings", "cuda-python", "nvidia-cuda-nvrtc",
          "nvidia-cuda-nvrtc-cu12", "nvmath-python")
_SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
               "power.limit", "temperature.gpu")


def packages() -> dict[str, str]:
    """Installed distribution versions that change kernel times or results."""
    v = {"python": platform.python_version()}
    for dist in _DISTS:
        try:
            v[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return v


def source_commit(root: Path | None = None) -> str:
    """The git commit of the tree cudal2 runs from, else 'unknown'.

    The device machine runs a copy of the working tree beside a copy of .git taken when the session
    began (2026-12-03: its HEAD said eae8105 while the tree was 2729405), so `.commit` at the repo
    root (written before each device call) wins where this git does not know that commit; where it
    does, `.commit` is a stale file from an earlier call and HEAD is right."""
    root = Path(__file__).resolve().parents[2] if root is None else Path(root)
    f = root / ".commit"
    pinned = f.read_text().strip() if f.is_file() else ""

    def git(*args):
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None
    head = git("rev-parse", "--short", "HEAD")
    if pinned and pinned != head and git("cat-file", "-e", f"{pinned}^{{commit}}") is None:
        return pinned
    return head or pinned or "unknown"


def nvidia_smi() -> dict[str, str]:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    vals = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    return {f"smi.{k}": v for k, v in zip(_SMI_FIELDS, vals)}


def gpu() -> dict[str, str]:
    """CUDA runtime/driver and the card; empty without a GPU."""
    v: dict = {}
    try:
        import torch
        v["torch_cuda"] = str(torch.version.cuda)
        if torch.cuda.is_available():
            from .device import current
            v["card"] = torch.cuda.get_device_name()
            v["device_key"] = current().key
    except Exception:
        pass
    try:
        from cuda.bindings import driver
        err, ver = driver.cuDriverGetVersion()
        if int(err) == 0:
            v["driver_cuda"] = f"{ver // 1000}.{ver % 1000 // 10}"
    except Exception:
        pass
    return v


def collect(smi: bool = True) -> dict:
    v = {**packages(), **gpu(), "commit": source_commit()}
    try:
        from .baselines import library_versions
        v.update(library_versions())
    except Exception:
        pass
    if smi:
        v.update(nvidia_smi())
    return v
