"""The search loop: per problem, sample a group, evaluate, store, reward, GRPO update, checkpoint.

  Search(policy, evaluator, device, ...).run(problems, budget) -> list[ProblemResult]

`budget` counts distinct evaluated specs per problem (what costs GPU time). A sampled spec already
measured for the problem (in this search, or in the store with `resume`) is not evaluated again: it
reuses its measurement for the reward and costs nothing. A policy that keeps proposing only known
specs ends the problem after `patience` such groups, so the loop always terminates.

Checkpoints (policy weights + optimiser + the frozen reference) go beside the store, in
`<store>.ckpt/`, written to a temporary name and renamed, so a kill -9 leaves the previous one whole;
the store's `checkpoints` table records each. `--resume` reloads the latest and skips what is stored.

Baselines for the efficiency study use the same loop with update=False: `UniformPolicy` (random
search over the same masked space) and `FixedListPolicy` (a fixed autotune list, same budget).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from cudal2.device import DeviceInfo
from cudal2.measurement import Measurement
from cudal2.problems import Problem
from cudal2.spec import CHOICES, FAMILIES, PREFERRED, KernelSpec, is_valid, with_fields

from .grpo import GRPO, GRPOConfig
from .policy import Sample
from .reward import reward, speedup


@dataclass
class ProblemResult:
    problem: Problem
    evaluated: list[Measurement] = field(default_factory=list)    # distinct specs, in evaluation order
    rewards: list[float] = field(default_factory=list)            # of every trained-on sample
    eval_s: float = 0.0                                           # wall time inside the evaluator
    resumed: int = 0                                              # measurements taken from the store

    @property
    def best(self) -> Measurement | None:
        ok = [m for m in self.evaluated if m.status == "ok" and m.time_us]
        return min(ok, key=lambda m: m.time_us) if ok else None

    @property
    def failures(self) -> int:
        return sum(m.status not in ("ok", "slow") for m in self.evaluated)

    def best_within(self, k: int) -> float:
        """Best speedup over best-cuBLAS among the first k evaluations (0.0 if none was correct)."""
        return max((speedup(m) or 0.0 for m in self.evaluated[:k]), default=0.0)


class FixedListPolicy:
    """A fixed autotune list: each family's preferred specs (cudal2.spec's defaults, largest tile
    first), the families interleaved, then their stage / split-K / group-M variants; filtered to
    the valid ones. The same list for a problem whatever came before, as a hand-written autotune
    config list would be; `sample` hands out its next n entries."""

    trainable = False
    name = "fixed"

    def __init__(self):
        self._pos: dict[Problem, int] = {}

    @staticmethod
    def candidates(problem: Problem, device: DeviceInfo, backends: tuple | None = None) -> list[KernelSpec]:
        fams = [f for b, fs in FAMILIES.items() if not backends or b in backends for f in fs]
        base = []
        for i in range(max(len(v) for v in PREFERRED.values())):
            for f in fams:
                if i < len(PREFERRED[f]):
                    b = next(b for b, fs in FAMILIES.items() if f in fs)
                    base.append(KernelSpec.parse(f"backend={b} family={f} {PREFERRED[f][i]}"))
        variants = list(base)
        for knob, vals in (("stages", (3, 5, 4, 2, 6)), ("split_k", (2, 4, 8)), ("group_m", (4, 16, 1))):
            variants += [with_fields(s, **{knob: v}) for s in base for v in vals if v in CHOICES[knob]]
        out, seen = [], set()
        for s in variants:
            if s.text not in seen and is_valid(s, problem, device):
                seen.add(s.text)
                out.append(s)
        return out

    def sample(self, problem, device, n, *, generator=None, backends=None, temperature=1.0) -> list[Sample]:
        lst = self.candidates(problem, device, backends)
        i = self._pos.get(problem, 0)
        self._pos[problem] = i + n
        return [Sample(spec=s, tokens=[]) for s in lst[i:i + n]]


def _atomic_save(save: Callable[[Path], None], dest: Path) -> None:
    """Write to a temporary name, then rename over `dest` (a file, or the HF policy's directory)."""
    import shutil
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.is_dir():
        shutil.rmtree(tmp)
    save(tmp)
    if tmp.is_dir() and dest.is_dir():
        old = dest.with_name(dest.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        os.replace(dest, old)       # a kill between these two renames leaves .old for restore()
        os.replace(tmp, dest)
        shutil.rmtree(old)
    else:
        os.replace(tmp, dest)


class Search:
    def __init__(self, policy, evaluator, device: DeviceInfo, device_key: str | None = None, *,
                 store=None, run_id: int | None = None, group: int = 8, backends: tuple | None = None,
                 seed: int = 0, update: bool = True, grpo: GRPOConfig | None = None,
                 checkpoint_dir: str | Path | None = None, resume: bool = False, patience: int = 5,
                 temperatures: tuple = (1.0, 1.5, 2.0, 3.0),
                 on_event: Callable[..., None] | None = None, store_measurements: bool = True,
                 critic=None, critic_pool: int = 8):
        if group < 1:
            raise ValueError(f"--group must be >= 1, got {group}")
        if critic is not None and critic_pool < 1:
            raise ValueError(f"critic_pool must be >= 1, got {critic_pool}")
        # critic: a learned cost model (rl/costmodel.CostModel) that ranks critic_pool x group of the
        # policy's samples on the CPU; the group is its best `group` (see _critic_group).
        self.critic, self.critic_pool = critic, critic_pool
        self.policy, self.evaluator, self.device = policy, evaluator, device
        self.device_key = device_key or device.key
        self.store, self.run_id, self.group, self.backends = store, run_id, group, backends
        # False when the evaluator stores (rl/shared_eval.SharedEvaluator): the store then only gets
        # checkpoints from here, and a resumed problem's history comes from the evaluator's cache.
        self.store_measurements = store_measurements
        self.resume, self.patience, self.temperatures = resume, patience, temperatures
        self.on_event = on_event or (lambda kind, **kw: None)
        self.gen = torch.Generator().manual_seed(seed)
        self.trainer = GRPO(policy, grpo) if update and getattr(policy, "trainable", False) else None
        if checkpoint_dir is None and store is not None and trainable(self):
            checkpoint_dir = Path(str(store.path) + ".ckpt")
        self.ckdir = Path(checkpoint_dir) if checkpoint_dir else None
        if resume and self.ckdir and self.trainer:
            self.restore()

    # ---- checkpoints ------------------------------------------------------------------------------
    def checkpoint(self) -> None:
        if not (self.ckdir and self.trainer):
            return
        self.ckdir.mkdir(parents=True, exist_ok=True)
        pol = self.trainer.module
        _atomic_save(lambda p: pol.save(p), self.ckdir / "policy.pt")
        _atomic_save(lambda p: torch.save(self.trainer.state_dict(), p), self.ckdir / "trainer.pt")
        if self.store is not None:
            self.store.add_checkpoint(self.ckdir / "policy.pt", self.trainer.steps, self.run_id)

    def restore(self) -> bool:
        pol_path, tr_path = self.ckdir / "policy.pt", self.ckdir / "trainer.pt"
        if not pol_path.exists() and pol_path.with_name("policy.pt.old").is_dir():
            pol_path = pol_path.with_name("policy.pt.old")
        if not pol_path.exists():
            return False
        loaded = type(self.trainer.module).load(pol_path)
        self.trainer.module.load_state_dict(loaded.state_dict())
        if tr_path.exists():
            state = torch.load(tr_path, map_location="cpu", weights_only=False)
            old = getattr(loaded, "remapped_from", None)
            if old:     # saved under a smaller grammar: the reference and Adam's moments move too
                from .vocab import VOCAB, remap_vocab_tensors, rows_from
                fresh = loaded.state_dict()

                def fill(key, t):   # the reference's new rows as the policy's; moments start at zero
                    return fresh[key] if key in fresh else torch.zeros(len(VOCAB), t.shape[1], dtype=t.dtype)
                state = remap_vocab_tensors(state, rows_from(old), len(old), loaded.hparams["d_model"], fill)
            self.trainer.load_state_dict(state)
        self.on_event("restored", path=str(pol_path), steps=self.trainer.steps)
        return True

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self, problems: list[Problem], budget: int, interleave: bool = False) -> list[ProblemResult]:
        """All problems, one after the other; or with `interleave`, one group of each in turn
        (round robin), which trains a policy across shapes without it swinging to each shape's
        optimum in turn (used for training; generate keeps the order so shapes finish one by one)."""
        if not interleave:
            return [self.run_problem(p, budget) for p in problems]
        states = [self._start(p, budget) for p in problems]
        while any(not st["done"] for st in states):
            for st in states:
                if not st["done"]:
                    self._advance(st)
        return [st["res"] for st in states]

    def run_problem(self, problem: Problem, budget: int, seeds: list[KernelSpec] | None = None) -> ProblemResult:
        """`seeds`: specs evaluated first (e.g. the fixed list, so a policy that has not seen this
        kind of shape cannot leave it worse off than an autotune list would); they count against
        the budget and are not trained on (off-policy). They go in one evaluator call with the
        policy's first group: that group is sampled before any result of the shape either way, and
        one call times the baselines once and pays one batch's fixed costs instead of two."""
        st = self._start(problem, budget)
        first = [Sample(spec=s, tokens=[]) for s in seeds or ()]
        while not st["done"]:
            self._advance(st, first)
            first = []
        return st["res"]

    def _start(self, problem: Problem, budget: int) -> dict:
        res = ProblemResult(problem)
        known: dict[str, Measurement] = {}
        if self.resume and self.store is not None and self.store_measurements:
            for m in self.store.measurements(problem=problem.text, device=self.device_key):
                if m.spec not in known:
                    known[m.spec] = m
                    res.evaluated.append(m)
            res.resumed = len(known)
        elif self.resume and hasattr(self.evaluator, "measured"):
            for m in self.evaluator.measured(problem):
                known[m.spec] = m
                res.evaluated.append(m)
            res.resumed = len(known)
        self.on_event("problem_start", problem=problem, result=res, budget=budget)
        # alias: replay answers an asked spec with a measured neighbour; asked text -> measured text.
        st = {"problem": problem, "budget": budget, "res": res, "known": known, "alias": {}, "stale": 0,
              "done": False}
        self._check_done(st)
        return st

    def _check_done(self, st) -> None:
        if not st["done"] and (len(st["res"].evaluated) >= st["budget"] or st["stale"] >= self.patience):
            st["done"] = True
            self.on_event("problem_done", problem=st["problem"], result=st["res"])

    def _advance(self, st, first=()) -> None:
        unknown_first = {s.spec.text for s in first if s.spec is not None
                         and st["alias"].get(s.spec.text, s.spec.text) not in st["known"]}
        if first and len(unknown_first) >= st["budget"] - len(st["res"].evaluated):
            # The seeds alone fill the budget (e.g. generate --budget 2 with a lead and one cost
            # seed): a policy group would be sampled only to be cut off unevaluated.
            group, extra = [], []
        else:
            group, extra = self._propose(st["problem"], st["known"], st["alias"])
        if not group and not extra and not first:
            st["stale"] = self.patience      # a fixed list that ran out
        else:
            new = self._evaluate_group(st["problem"], group, extra, st["known"], st["alias"], st["res"],
                                       st["budget"], first)
            st["stale"] = 0 if new else st["stale"] + 1
        self._check_done(st)

    def _propose(self, problem, known, alias) -> tuple[list[Sample], list[Sample]]:
        """The training group (one on-policy draw of `group` samples at T = 1, duplicates and
        known specs included, so GRPO's estimate is unbiased) and extra exploration samples.
        A converged policy proposes mostly known specs, which cost nothing but find nothing: then
        draw again, hotter each time (T = 1.5, 2, 3), to fill the group's evaluations with new
        specs. Those hot draws are evaluated and stored but not trained on (they are off-policy)."""
        def unknown(s):
            return s.spec is not None and alias.get(s.spec.text, s.spec.text) not in known
        G, temps = self.group, self.temperatures
        if self.critic is not None and not isinstance(self.policy, FixedListPolicy):
            # The critic's pick of a large draw; if it holds too few new specs, hot draws fill it below.
            group, hot = self._critic_group(problem, unknown), None
        elif getattr(self.policy, "row_temperatures", False) and len(temps) > 1:
            # One batched call for the cold group and all hot draws: the cost is per forward, not per row.
            t = torch.tensor([x for x in temps for _ in range(G)])
            allrows = self.policy.sample(problem, self.device, len(t), generator=self.gen,
                                         backends=self.backends, temperature=t)
            group, hot = allrows[:G], [allrows[k * G:(k + 1) * G] for k in range(1, len(temps))]
        else:
            group = self.policy.sample(problem, self.device, G, generator=self.gen,
                                       backends=self.backends, temperature=temps[0])
            hot = None
        if isinstance(self.policy, FixedListPolicy):
            return group, []   # a fixed list hands out each entry once: drawing again skips entries
        new = {s.spec.text for s in group if unknown(s)}
        extra: list[Sample] = []
        for k, temp in enumerate(temps[1:]):
            if len(new) >= G:
                break
            draw = hot[k] if hot is not None else self.policy.sample(
                problem, self.device, G, generator=self.gen, backends=self.backends, temperature=temp)
            for s in draw:
                if unknown(s) and s.spec.text not in new and len(new) < G:
                    new.add(s.spec.text)
                    extra.append(s)
        return group, extra

    def _critic_group(self, problem, unknown) -> list[Sample]:
        """critic_pool x group samples of the policy at T = 1, the unknown distinct ones ranked by the
        critic; the best `group` of them, distinct in (family, bm, bn, split_k) first (a tile's stage
        and raster variants share the model's error on that tile). GRPO trains on this group: a
        filtered draw (best-of-n), so its advantages compare candidates the critic already liked."""
        from .costmodel import pick
        pool = self.policy.sample(problem, self.device, self.group * self.critic_pool, generator=self.gen,
                                  backends=self.backends, temperature=self.temperatures[0])
        by_text: dict[str, Sample] = {}
        for s in pool:
            if unknown(s) and s.spec.text not in by_text:
                by_text[s.spec.text] = s
        ranked = self.critic.rank(problem, [s.spec for s in by_text.values()])
        return [by_text[sp.text] for sp in pick(ranked, self.group)]

    def _evaluate_group(self, problem, group, extra, known, alias, res, budget, first=()) -> int:
        """Evaluate the unknown specs (`first`, then the group, then `extra`, up to the budget),
        store them, train on the group; returns how many new measurements it made."""
        todo: list[KernelSpec] = []
        for s in list(first) + group + extra:
            if s.spec is not None and alias.get(s.spec.text, s.spec.text) not in known and s.spec not in todo:
                todo.append(s.spec)
        todo = todo[:max(budget - len(res.evaluated), 0)]
        fresh: list[Measurement] = []
        if todo:
            t0 = time.perf_counter()
            out = self.evaluator.evaluate(problem, todo)
            res.eval_s += time.perf_counter() - t0
            for spec, m in zip(todo, out):
                if m is None:
                    continue      # replay: nothing measured near it
                # Replay may answer with a neighbour's row; key by what was really measured.
                alias[spec.text] = m.spec
                if m.spec not in known:
                    known[m.spec] = m
                    fresh.append(m)
                    res.evaluated.append(m)
        if fresh and self.store is not None and self.store_measurements:
            # One transaction per group: a kill -9 loses at most this group's results.
            self.store.add([_copy_for_run(m) for m in fresh], run_id=self.run_id)
        kept, rewards = [], []
        for s in group:
            if s.spec is None:
                # An HF answer that could not be made valid: it costs no evaluation; -1 like an invalid spec.
                if s.tokens:
                    kept.append(s)
                    rewards.append(-1.0)
                continue
            m = known.get(alias.get(s.spec.text, s.spec.text))
            if m is None:
                continue          # excluded by replay, or beyond the budget
            kept.append(s)
            rewards.append(reward(m))
        res.rewards += rewards
        stats = {}
        if self.trainer and len(kept) >= 2:
            stats = self.trainer.step(problem, self.device, kept, rewards)
            self.checkpoint()
        self.on_event("group_done", problem=problem, result=res, fresh=fresh, stats=stats, samples=group + extra)
        return len(fresh)


def trainable(search: Search) -> bool:
    return search.trainer is not None


def _copy_for_run(m: Measurement) -> Measurement:
    import copy
    c = copy.copy(m)
    c.meta = dict(m.meta)
    return c
