"""The search-efficiency study of issue 5: does a trained policy find fast kernels in fewer evaluations?

  1. train the default policy with GRPO on a subset of shapes (`train`), `train_budget` each;
  2. on held-out shapes (`test`), run three searches with `max(budgets)` evaluations each, all on
     the same evaluator and masked space: the trained policy (it keeps adapting on the shape, from
     the same trained weights for every shape), uniform random sampling, and the fixed autotune list;
  3. report per shape and method the best speedup over best-cuBLAS within each budget (8/16/32/64),
     the geomean over shapes, the fraction of shapes where the policy at 16 reaches 0.98 of the best
     any method found at 64, and the evaluator wall seconds per shape (GPU-seconds on a GPU).

Runs against a GPU evaluator (cudal2.evaluate) or a ReplayEvaluator on a store, on a CPU.
`synthetic_measurements` builds a store from a stub clock for tests and dry runs: it is a model
with a planted structure (so a test can tell learning from luck), never a result to report.
"""
from __future__ import annotations

import copy
import hashlib
import math
import random
import time

import torch

from cudal2.measurement import Measurement
from cudal2.problems import Problem

from .policy import SpecPolicy, UniformPolicy
from .search import FixedListPolicy, Search

BUDGETS = (8, 16, 32, 64)
METHODS = ("policy", "random", "fixed")


def split(problems: list[Problem], n_train: int, n_test: int, seed: int = 0) -> tuple[list, list]:
    """Disjoint seeded train / held-out subsets."""
    if n_train + n_test > len(problems):
        raise ValueError(f"{n_train} train + {n_test} test shapes asked for, only {len(problems)} given")
    p = list(problems)
    random.Random(seed).shuffle(p)
    return p[:n_train], p[n_train:n_train + n_test]


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else 0.0


def train_policy(train: list[Problem], evaluator, device, *, budget: int = 64, group: int = 8,
                 epochs: int = 1, seed: int = 0, policy=None, store=None, run_id=None, on_event=None):
    policy = policy or SpecPolicy(seed=seed)
    search = Search(policy, evaluator, device, getattr(evaluator, "device_key", None), store=store,
                    run_id=run_id, group=group, seed=seed, on_event=on_event, checkpoint_dir=None)
    for e in range(epochs):
        search.run(train, budget, interleave=True)
    return search.trainer.module


def study(train: list[Problem], test: list[Problem], evaluator, device, *, budgets=BUDGETS, group: int = 8,
          train_budget: int = 64, epochs: int = 1, seed: int = 0, backends=None, policy=None,
          on_event=None) -> dict:
    t0 = time.perf_counter()
    trained = train_policy(train, evaluator, device, budget=train_budget, group=group, epochs=epochs,
                           seed=seed, policy=policy, on_event=on_event)
    train_s = time.perf_counter() - t0
    top = max(budgets)
    key = getattr(evaluator, "device_key", None)
    rows = []
    for p in test:
        row = {"problem": p.text}
        for method in METHODS:
            pol = {"policy": lambda: copy.deepcopy(trained), "random": UniformPolicy,
                   "fixed": FixedListPolicy}[method]()
            s = Search(pol, evaluator, device, key, group=group, seed=seed, backends=backends,
                       update=method == "policy", checkpoint_dir=None)
            r = s.run_problem(p, top)
            row[method] = {str(b): r.best_within(b) for b in budgets}
            row[method]["evals"] = len(r.evaluated)
            row[method]["eval_s"] = r.eval_s
        row["best_any_at_max"] = max(row[m][str(top)] for m in METHODS)
        rows.append(row)
        if on_event:
            on_event("study_shape", row=row)
    summary = {m: {str(b): geomean([r[m][str(b)] for r in rows]) for b in budgets} for m in METHODS}
    hit = [r["policy"].get("16", 0.0) >= 0.98 * r["best_any_at_max"] for r in rows if r["best_any_at_max"] > 0]
    ahead = {str(b): sum(r["policy"][str(b)] > r["random"][str(b)] for r in rows) for b in budgets}
    return {
        "train": [p.text for p in train], "test": [p.text for p in test], "budgets": list(budgets),
        "group": group, "train_budget": train_budget, "epochs": epochs, "seed": seed,
        "device": key, "rows": rows, "geomean_best_speedup": summary,
        "policy16_reaches_098_of_best64": (sum(hit) / len(hit)) if hit else None,
        "policy_ahead_of_random_shapes": ahead,
        "eval_s_per_shape": {m: sum(r[m]["eval_s"] for r in rows) / max(len(rows), 1) for m in METHODS},
        "train_s": train_s,
    }


class CachedEvaluator:
    """A GPU evaluator behind a store: specs already measured there (exact key) come back from the
    store, the rest are evaluated and stored at once. A study killed by a time limit and started
    again with the same seed makes the same choices on the same results, so it replays up to where
    it stopped and goes on; `eval_s` of the replayed part is then not GPU time (see `cached`)."""

    def __init__(self, evaluator, store, run_id=None, device_key: str | None = None):
        self.inner, self.store, self.run_id = evaluator, store, run_id
        self.device_key = device_key or evaluator.device.key
        self.cached = 0

    def evaluate(self, problem, specs):
        have = {m.spec: m for m in self.store.measurements(problem=problem.text, device=self.device_key)}
        out = [have.get(s.text) for s in specs]
        todo = [s for s, m in zip(specs, out) if m is None]
        self.cached += len(specs) - len(todo)
        if todo:
            fresh = self.inner.evaluate(problem, todo)
            self.store.add(fresh, run_id=self.run_id)
            it = iter(fresh)
            out = [m if m is not None else next(it) for m in out]
        return out

    def close(self) -> None:
        self.inner.close()


def markdown(result: dict) -> str:
    b = result["budgets"]
    lines = ["| method | " + " | ".join(f"best speedup @{x}" for x in b) + " | eval s / shape |",
             "| --- | " + " | ".join("---" for _ in b) + " | --- |"]
    for m in METHODS:
        g = result["geomean_best_speedup"][m]
        lines.append(f"| {m} | " + " | ".join(f"{g[str(x)]:.3f}" for x in b)
                     + f" | {result['eval_s_per_shape'][m]:.2f} |")
    frac = result["policy16_reaches_098_of_best64"]
    lines.append("")
    lines.append(f"geomean over {len(result['rows'])} held-out shapes ({result['device']}); policy trained on "
                 f"{len(result['train'])} shapes x {result['train_budget']} evaluations.")
    if frac is not None:
        lines.append(f"policy @16 >= 0.98 x best of any method @{max(b)}: {100 * frac:.0f}% of shapes")
    return "\n".join(lines)


# ---- a stub clock with planted structure (tests and dry runs only) -----------------------------------
def _jitter(text: str) -> float:
    h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return 1.0 + 0.04 * (h - 0.5)        # +-2%, a deterministic function of (spec, problem)


class StubClock:
    """A FakeEvaluator clock with planted structure: small problems (M*N <= 2^18) favour cuda/mma
    with small tiles; large ones cuda/wgmma and triton/persistent with large tiles; tile waste on
    ragged edges costs; stages near 4 are best; mma with split_k = 8 computes wrong results;
    rings of 6 stages of 128x256 tiles fail to compile. best-cuBLAS is 1.05x the ideal time."""

    def __call__(self, spec, p: Problem) -> float:
        from cudal2.backends.base import CompileError
        from cudal2.measurement import WrongResult
        if spec.family == "mma" and spec.split_k == 8:
            raise WrongResult("stub clock: planted split-K race")
        if spec.stages >= 6 and spec.bm * spec.bn >= 128 * 256:
            raise CompileError("stub clock: planted ptxas failure")
        small = p.M * p.N <= 1 << 18
        fam = ({"mma": 1.0, "tiled": 1.25, "persistent": 1.5, "wgmma": 1.7} if small
               else {"wgmma": 1.0, "persistent": 1.05, "tiled": 1.3, "mma": 1.6})[spec.family]
        waste = (math.ceil(p.M / spec.bm) * spec.bm * math.ceil(p.N / spec.bn) * spec.bn) / (p.M * p.N)
        size = (spec.bm * spec.bn / (128 * 128)) ** (0.15 if small else -0.15)
        return self.ideal(p) * fam * waste * size * (1 + 0.05 * abs(spec.stages - 4)) * _jitter(spec.text + p.text)

    @staticmethod
    def ideal(p: Problem) -> float:
        return p.flops / 7e8 + 3.0                      # ~700 TFLOP/s plus a 3 us launch

    def baselines(self, p: Problem) -> dict[str, float]:
        return {"torch": 1.08 * self.ideal(p), "cublas-nn": 1.05 * self.ideal(p)}


def synthetic_measurements(problems: list[Problem], device, n_specs: int = 200, seed: int = 0,
                           clock=None) -> list[Measurement]:
    """n_specs uniformly sampled valid specs per problem, measured by a FakeEvaluator on `clock`
    (StubClock by default); early stop is off so every correct spec gets its time."""
    from cudal2.evaluate import FakeEvaluator
    ev = FakeEvaluator(clock or StubClock(), device, early_stop=None)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for p in problems:
        specs = list({x.spec.text: x.spec for x in UniformPolicy().sample(p, device, n_specs, generator=gen)}.values())
        out += ev.evaluate(p, specs)
    return out
