"""A learned cost model: predicted log speedup over best-cublas of a spec on a problem, no GPU.

`cudal2 train` fits it on stored measurements (rl/costtrain.py); `cudal2 generate --seed-list
cost:N --cost-model PATH` ranks a large pool of candidate specs by it before any GPU time is spent
(rl/staged.py `cost_seeds`).

Features (`features`): the problem's log2 sizes and layout, the spec's knobs (family one-hot, log2
tile sizes, warps, stages, split-K, schedule), and what decides speed on Hopper by KERNELS.md:
CTAs and waves over the SM count, the last wave's occupancy, padding waste of ragged tiles, K
iterations per CTA, a tile's arithmetic intensity, its shared-memory ring, accumulators per thread,
and the wave model of cudal2.tiles. The model is a small ensemble of MLPs over the standardised
features: an MLP learns the family x shape interactions a linear model cannot (held-out
figures in NOTES.md, 2026-12-03), and `score` ranks by the ensemble's mean minus its spread, so a
spec unlike anything trained on (where the members disagree) is not ranked first on one member's
optimism.

The model is tied to the device its rows were measured on (`device_key`); its SM count is the one
the wave features were computed with at training, and is used again when ranking.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from cudal2.problems import Problem
from cudal2.spec import CHOICES, KernelSpec
from cudal2.tiles import estimate

FORMAT = "cudal2-cost-model"
VERSION = 1
FAMILY_NAMES = CHOICES["family"]
# A compile target records no SM count; the H100 / H200 have 132, which the committed stores used.
DEFAULT_SMS = 132

NAMES = (
    "log2_m", "log2_n", "log2_k", "nt", "log2_flop", "log2_min_mn",
    *(f"fam_{f}" for f in FAMILY_NAMES),
    "log2_bm", "log2_bn", "log2_bk", "log2_warps", "stages", "log2_group_m", "log2_split_k", "subtile2",
    "ws0", "ws1", "ws2", "cluster2",
    "log2_ctas", "log2_waves", "last_wave", "log2_pad", "log2_kiter", "log2_intensity", "log2_ring_kb",
    "log2_acc", "log2_model", "fits",
)


def features(problem: Problem, spec: KernelSpec, sms: int = DEFAULT_SMS) -> list[float]:
    """One row of NAMES for (problem, spec) on a card of `sms` SMs."""
    M, N, K = problem.M, problem.N, problem.K
    bm, bn, bk, split = spec.bm, spec.bn, spec.bk, spec.split_k
    l2 = math.log2
    tm, tn = math.ceil(M / bm), math.ceil(N / bn)
    ctas = tm * tn * split
    waves = math.ceil(ctas / sms)
    kiter = math.ceil(K / (split * bk))
    ring_kb = (bm + bn) * bk * 2 * spec.stages / 1024
    # The wave model of cudal2.tiles, per MAC of the problem (its units are FMAs of one SM).
    model = estimate(problem, bm, bn, split, sms) / (M * N * K / sms)
    # log2 |group_m|: the trained models' feature vector has one slot for the group size, so the
    # direction (g < 0 groups tile columns, added 2026-12-07) is not a feature: a model ranks both
    # directions of a group alike and the measurement tells them apart.
    return [
        l2(M), l2(N), l2(K), float(problem.layout == "nt"), l2(2.0 * M * N * K), l2(min(M, N)),
        *(float(spec.family == f) for f in FAMILY_NAMES),
        l2(bm), l2(bn), l2(bk), l2(spec.warps), float(spec.stages), l2(abs(spec.group_m)), l2(split),
        float(spec.subtile == 2), *(float(spec.warp_spec == w) for w in (0, 1, 2)), float(spec.cluster == 2),
        l2(ctas), l2(waves), ctas / (waves * sms), l2(tm * bm * tn * bn / (M * N)), l2(kiter),
        l2(bm * bn / (bm + bn)), l2(ring_kb), l2(bm * bn / (spec.warps * 32)), l2(model),
        float(bm <= max(16, M) and bn <= max(16, N)),
    ]


def _mlp(n_in: int, hidden: int, layers: int) -> nn.Sequential:
    mods: list[nn.Module] = []
    d = n_in
    for _ in range(layers):
        mods += [nn.Linear(d, hidden), nn.SiLU()]
        d = hidden
    mods.append(nn.Linear(d, 1))
    return nn.Sequential(*mods)


class CostModel(nn.Module):
    """Ensemble of `members` MLPs on standardised features; forward gives [members, rows]."""

    def __init__(self, n_in: int = len(NAMES), hidden: int = 64, layers: int = 2, members: int = 4,
                 seed: int = 0, device_key: str = "", sms: int = DEFAULT_SMS):
        super().__init__()
        self.hparams = {"n_in": n_in, "hidden": hidden, "layers": layers, "members": members, "seed": seed}
        with torch.random.fork_rng(devices=[]):     # seeded initialisation without touching the caller's RNG
            torch.manual_seed(seed)
            self.nets = nn.ModuleList(_mlp(n_in, hidden, layers) for _ in range(members))
        self.register_buffer("mean", torch.zeros(n_in))
        self.register_buffer("std", torch.ones(n_in))
        self.device_key, self.sms = device_key, int(sms)
        self.info: dict = {}        # what training recorded: sources, rows, validation figures

    def set_norm(self, x: torch.Tensor) -> None:
        self.mean.copy_(x.mean(0))
        # A constant feature (one family only in the rows) stays at 0 rather than dividing by zero.
        self.std.copy_(x.std(0).clamp_min(1e-3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.mean) / self.std
        return torch.stack([net(z).squeeze(-1) for net in self.nets])

    def matrix(self, problem: Problem, specs: list[KernelSpec]) -> torch.Tensor:
        return torch.tensor([features(problem, s, self.sms) for s in specs], dtype=torch.float32)

    @torch.no_grad()
    def predict(self, problem: Problem, specs: list[KernelSpec]) -> list[float]:
        """The ensemble's mean predicted log speedup per spec."""
        if not specs:
            return []
        return self(self.matrix(problem, specs)).mean(0).tolist()

    @torch.no_grad()
    def score(self, problem: Problem, specs: list[KernelSpec]) -> list[float]:
        """Ranking score: mean minus the members' spread (a pessimistic estimate)."""
        if not specs:
            return []
        y = self(self.matrix(problem, specs))
        spread = y.std(0) if y.shape[0] > 1 else torch.zeros(y.shape[1])
        return (y.mean(0) - spread).tolist()

    def rank(self, problem: Problem, specs: list[KernelSpec]) -> list[KernelSpec]:
        """specs, best score first (ties keep the given order)."""
        s = self.score(problem, specs)
        return [specs[i] for i in sorted(range(len(specs)), key=lambda i: (-s[i], i))]

    # ---- checkpoint ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"format": FORMAT, "version": VERSION, "features": list(NAMES), "hparams": self.hparams,
                    "device_key": self.device_key, "sms": self.sms, "info": self.info,
                    "state": self.state_dict()}, str(path))

    @classmethod
    def load(cls, path: str | Path) -> "CostModel":
        """Raises ValueError (one line) for a file that is not a cost model of this feature set."""
        try:
            # weights_only: a checkpoint holds tensors and plain values only, so nothing in a file
            # someone hands over is unpickled as code.
            d = torch.load(str(path), map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise ValueError(f"{path}: no such cost model") from None
        except Exception as e:      # torch raises several types for a file that is not a checkpoint
            raise ValueError(f"{path}: not a cost model checkpoint ({type(e).__name__})") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"{path}: not a cost model checkpoint (write one with cudal2 train)")
        if d.get("version") != VERSION or d.get("features") != list(NAMES):
            raise ValueError(f"{path}: cost model of another feature set (version {d.get('version')}); "
                             "train it again with cudal2 train")
        m = cls(**d["hparams"], device_key=d["device_key"], sms=d["sms"])
        m.load_state_dict(d["state"])
        m.info = d.get("info", {})
        m.eval()
        return m


def pick(ranked: list[KernelSpec], n: int) -> list[KernelSpec]:
    """The first n of `ranked` with distinct (family, bm, bn, split_k); then the rest in order. Here,
    not in costrank, so the search (rl/search.py, the critic) can use it without an import cycle."""
    out, seen = [], set()
    for s in ranked:
        key = (s.family, s.bm, s.bn, s.split_k)
        if key not in seen:
            seen.add(key)
            out.append(s)
        if len(out) >= n:
            return out
    return out + [s for s in ranked if s not in out][: n - len(out)]
