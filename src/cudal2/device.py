"""What a kernel may use on a device: read from the running GPU, or a named compile target.

Limits are read off the device (torch + driver attributes), never hard-coded per card. A compile
target (`DeviceInfo.target("sm_90a")`) carries only the architecture's per-block limits, which are
fixed by the compute capability (CUDA programming guide, "Technical Specifications per Compute
Capability"); it has no SM count or L2 size, because those vary between cards of one architecture.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from dataclasses import dataclass

# Per-architecture limits by compute capability (CUDA C++ Programming Guide, table
# "Technical Specifications per Compute Capability"): max dynamic shared memory per block (opt-in),
# shared memory per SM, 32-bit registers per SM.
_ARCH_LIMITS = {
    (8, 0): (163 * 1024, 164 * 1024, 65536),
    (8, 6): (99 * 1024, 100 * 1024, 65536),
    (8, 9): (99 * 1024, 100 * 1024, 65536),
    (9, 0): (227 * 1024, 228 * 1024, 65536),
}


@dataclass(frozen=True)
class DeviceInfo:
    name: str                     # e.g. "NVIDIA H200"
    cc: tuple[int, int]           # compute capability
    smem_per_block: int           # opt-in max dynamic shared memory per block, bytes
    smem_per_sm: int
    regs_per_sm: int
    sm_count: int | None = None   # None for a compile target (no card)
    l2_bytes: int | None = None
    max_regs_per_thread: int = 255
    # ((cluster size, CTAs resident at once at one CTA per SM), ...), measured on the card
    # (cudal2.cluster_fit); None for a compile target or where the probe failed.
    cluster_ctas: tuple[tuple[int, int], ...] | None = None

    @property
    def key(self) -> str:
        """Registry / store key: a short card name plus the capability, e.g. `h200-sm90`."""
        if self.is_target_only:
            return self.arch.replace("_", "")
        up = self.name.upper()
        m = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", up)
        short = m.group(1).lower() if m else re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        # The PCIe and NVL boards of a chip are other cards for timing (an H100 PCIe has 114 SMs
        # to the SXM's 132, and lower clocks and bandwidth): their own key, so they are never
        # served entries measured on the SXM board (whose names, "NVIDIA H100 80GB HBM3" and
        # "NVIDIA H200", keep the keys every registry and store already uses).
        if m:
            short += "".join(f"-{v.lower()}" for v in ("PCIE", "NVL") if re.search(rf"\b{v}\b", up))
        return f"{short}-sm{self.cc[0]}{self.cc[1]}"

    @property
    def arch(self) -> str:
        """NVRTC / ptxas architecture; Hopper gets the `a` variant for wgmma and setmaxnreg."""
        suffix = "a" if self.cc == (9, 0) else ""
        return f"sm_{self.cc[0]}{self.cc[1]}{suffix}"

    @property
    def is_target_only(self) -> bool:
        return self.sm_count is None

    def features(self) -> dict[str, float]:
        """Context features for the policy; a target-only device reports zeros for unknowns."""
        return {
            "sm_count": float(self.sm_count or 0),
            "smem_kb": self.smem_per_block / 1024.0,
            "l2_mb": (self.l2_bytes or 0) / 2**20,
            "cc": self.cc[0] + self.cc[1] / 10.0,
        }

    @classmethod
    def target(cls, arch: str = "sm_90a") -> "DeviceInfo":
        m = re.fullmatch(r"sm_(\d)(\d)a?", arch)
        if not m:
            raise ValueError(f"arch {arch!r} is not of the form sm_XY or sm_XYa (e.g. sm_90a)")
        cc = (int(m.group(1)), int(m.group(2)))
        if cc not in _ARCH_LIMITS:
            raise ValueError(f"arch {arch!r}: no limits known for compute capability {cc}; known: "
                             + ", ".join(f"sm_{a}{b}" for a, b in _ARCH_LIMITS))
        smem_blk, smem_sm, regs = _ARCH_LIMITS[cc]
        return cls(name=f"target {arch}", cc=cc, smem_per_block=smem_blk, smem_per_sm=smem_sm, regs_per_sm=regs)

    def to_dict(self) -> dict:
        d = {"name": self.name, "cc": list(self.cc), "smem_per_block": self.smem_per_block,
             "smem_per_sm": self.smem_per_sm, "regs_per_sm": self.regs_per_sm,
             "sm_count": self.sm_count, "l2_bytes": self.l2_bytes, "key": self.key}
        if self.cluster_ctas is not None:      # absent, not null: older records stay byte-identical
            d["cluster_ctas"] = [list(p) for p in self.cluster_ctas]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceInfo":
        return cls(name=d["name"], cc=tuple(d["cc"]), smem_per_block=d["smem_per_block"],
                   smem_per_sm=d["smem_per_sm"], regs_per_sm=d["regs_per_sm"],
                   sm_count=d.get("sm_count"), l2_bytes=d.get("l2_bytes"),
                   cluster_ctas=tuple((int(a), int(b)) for a, b in d["cluster_ctas"]) if d.get("cluster_ctas") else None)


def gpu_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


@functools.lru_cache(maxsize=None)
def current(index: int | None = None) -> DeviceInfo:
    """The running GPU's limits. Raises RuntimeError without a GPU."""
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU is visible (torch.cuda.is_available() is False)")
    idx = torch.cuda.current_device() if index is None else index
    p = torch.cuda.get_device_properties(idx)
    cc = (p.major, p.minor)
    smem_blk = getattr(p, "shared_memory_per_block_optin", 0) or _ARCH_LIMITS.get(cc, (48 * 1024,))[0]
    smem_sm = getattr(p, "shared_memory_per_multiprocessor", 0) or _ARCH_LIMITS.get(cc, (0, smem_blk))[1]
    regs = getattr(p, "regs_per_multiprocessor", 0) or 65536
    info = DeviceInfo(name=p.name, cc=cc, smem_per_block=int(smem_blk), smem_per_sm=int(smem_sm),
                      regs_per_sm=int(regs), sm_count=int(p.multi_processor_count),
                      l2_bytes=int(getattr(p, "L2_cache_size", 0)) or None)
    if cc >= (9, 0):          # thread-block clusters: Hopper and later
        try:
            from .cluster_fit import measure
            info = dataclasses.replace(info, cluster_ctas=measure(idx, info.arch, info.smem_per_block, info.sm_count))
        except Exception as e:        # the rules then assume every SM fits (the old behaviour)
            warnings.warn(f"cluster probe failed on {p.name}: {e}; cluster rules assume every SM fits")
    return info


def current_or_target(arch: str = "sm_90a") -> DeviceInfo:
    return current() if gpu_available() else DeviceInfo.target(arch)
