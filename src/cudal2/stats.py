"""Distributions of timings and their aggregation over shapes (PROTOCOL.md: geomean first).

Pure Python (no torch, no GPU), so every figure the reports print can be checked on synthetic data.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

# Shape classes by work, as the PROTOCOL reference figures quote them (<1, 1-100, >100 GFLOP).
CLASSES = ("<1GF", "1-100GF", ">100GF")


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on an already sorted list."""
    if not sorted_xs:
        raise ValueError("quantile of no samples")
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Stats:
    """One candidate's timing distribution, in microseconds. `spread` is IQR / median."""
    median_us: float
    mean_us: float
    p50_us: float
    p99_us: float
    min_us: float
    spread: float
    n: int

    @classmethod
    def from_samples(cls, samples_us: Iterable[float]) -> "Stats":
        xs = sorted(float(x) for x in samples_us)
        if not xs:
            raise ValueError("Stats of no samples")
        if any(not math.isfinite(x) or x < 0 for x in xs):
            raise ValueError("timings must be finite and non-negative")
        med = quantile(xs, 0.5)
        iqr = quantile(xs, 0.75) - quantile(xs, 0.25)
        return cls(median_us=med, mean_us=sum(xs) / len(xs), p50_us=med, p99_us=quantile(xs, 0.99),
                   min_us=xs[0], spread=(iqr / med) if med > 0 else 0.0, n=len(xs))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "Stats":
        return cls(**{k: (int(d[k]) if k == "n" else float(d[k])) for k in cls.__dataclass_fields__})


def flop_class(flops: float) -> str:
    g = flops / 1e9
    return CLASSES[0] if g < 1 else CLASSES[1] if g <= 100 else CLASSES[2]


# The six classes every target uses; the project's definition is ../shared/classes.py (outside the
# package, so not on the device). This copy must agree with it: tests/test_shape_class.py checks.
SHAPE_CLASSES = ("small", "skinny", "starved", "shortK", "mid", "large")


def shape_class(m: int, n: int, k: int, sms: int = 132) -> str:
    """small < 1 GFLOP; large >= 100; else skinny (min(M, N) <= 64), starved (128x128 tiles < SMs),
    shortK (K <= 512), mid."""
    gflop = 2.0 * m * n * k / 1e9
    if gflop < 1:
        return "small"
    if gflop >= 100:
        return "large"
    if min(m, n) <= 64:
        return "skinny"
    if -(-m // 128) * -(-n // 128) < sms:
        return "starved"
    if k <= 512:
        return "shortK"
    return "mid"


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two equal-length sequences, tied values sharing their mean
    rank (0.0 where either has no spread)."""
    def ranks(x):
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        i = 0
        while i < len(order):          # ties share their mean rank
            j = i
            while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
                j += 1
            for t in range(i, j + 1):
                r[order[t]] = (i + j) / 2
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return cov / math.sqrt(va * vb) if va > 0 and vb > 0 else 0.0


def geomean(xs: Iterable[float]) -> float:
    xs = list(xs)
    if not xs:
        return float("nan")
    if any(x <= 0 for x in xs):
        raise ValueError("geomean needs positive values")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def floor_us(flops: float, nbytes: float, peak_flops: float, bw_bytes: float, launch_us: float) -> float:
    """PROTOCOL roofline: t_floor = max(2MNK / P, bytes / BW, t_launch), P in FLOP/s, BW in B/s."""
    return max(flops / peak_flops * 1e6, nbytes / bw_bytes * 1e6, launch_us)


@dataclass(frozen=True)
class Summary:
    """Speedups (t_other / t_this: > 1 means `this` is faster) of one comparison over shapes."""
    n: int
    geomean: float
    mean: float
    worst: float
    worst_shape: str
    best: float
    best_shape: str
    share_faster: float      # fraction of shapes with speedup > 1
    share_not_slower: float  # speedup >= 1: for a baseline against best-cublas, how often it *is* the best

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self, label: str) -> str:
        return (f"{label}: geomean {self.geomean:.3f}x, mean {self.mean:.3f}x, worst {self.worst:.3f}x "
                f"({self.worst_shape}), best {self.best:.3f}x ({self.best_shape}), "
                f"faster on {100 * self.share_faster:.0f}%, not slower on {100 * self.share_not_slower:.0f}% "
                f"of {self.n} shapes")


def summarize(speedups: Mapping[str, float]) -> Summary | None:
    """`speedups`: shape text -> speedup. Shapes with no figure (None/NaN) are left out; None if empty."""
    items = [(k, float(v)) for k, v in speedups.items() if v is not None and math.isfinite(float(v))]
    if not items:
        return None
    vals = [v for _, v in items]
    worst = min(items, key=lambda kv: kv[1])
    best = max(items, key=lambda kv: kv[1])
    return Summary(n=len(vals), geomean=geomean(vals), mean=sum(vals) / len(vals), worst=worst[1],
                   worst_shape=worst[0], best=best[1], best_shape=best[0],
                   share_faster=sum(v > 1.0 for v in vals) / len(vals),
                   share_not_slower=sum(v >= 1.0 for v in vals) / len(vals))


def summarize_by_class(speedups: Mapping[str, float], flops: Mapping[str, float]) -> dict[str, Summary | None]:
    """The summary for all shapes (key 'all') and for each work class of CLASSES."""
    out: dict[str, Summary | None] = {"all": summarize(speedups)}
    for cls in CLASSES:
        out[cls] = summarize({k: v for k, v in speedups.items() if flop_class(flops[k]) == cls})
    return out
