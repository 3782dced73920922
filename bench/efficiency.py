"""The search-efficiency study (issues 5, 21): does a trained policy find fast kernels in fewer evaluations?

  1. train the default policy with GRPO on a subset of shapes (`train`), `train_budget` each (from
     fresh weights, or from a checkpoint pretrained on the store: `cudal2 train --policy-out`);
  2. on held-out shapes (`test`), one search of `max(budgets)` proposals per method, on the same
     evaluator, profile and masked space: `policy` (the trained policy, still adapting by GRPO on the
     shape, from the same trained weights for every shape), `random` (uniform masked samples),
     `fixed` (the fixed autotune list) and `cost` (the learned cost model alone: the top of a ranked
     pool, rl/costrank.py, as `--seed-list cost:N` takes it);
  3. per shape, the winners of each method at each budget are re-checked by the full PROTOCOL checker
     and re-timed at the full timing budget beside the baselines (`recheck`); the reported speedups
     come from that re-measurement only;
  4. per shape the reference is the best kernel any method found at any budget; report per shape,
     method and budget the best-so-far speedup over best-cuBLAS and its ratio to the reference, and
     the cost: proposals (what a budget counts), new evaluations (what costs GPU time) and evaluator
     seconds (bench/study_report.py writes the tables, the CSV and the plot).

Where the time went (the partial H200 run, bench/results/h200-sm90/search/efficiency_partial.*,
commit b78e9f0: full checks, 100 ms timing, early stop 3x, torch the only baseline; 208 evaluations
in 376 s after 18.6 s of start-up; per-candidate check times are the gaps between the stored rows of a
batch, the rest from a least-squares fit over the 25 gaps between batches):
  checks  ~200 s (53%): candidates on shapes with a large operand 1.2 s median (the checker drew its
          inputs with a CPU randn: ~0.5 s per 67M elements, about seven draws per check); Triton
          candidates on small shapes 1.3 s median (edges: every edge-shape specialisation is a JIT
          compile in the GPU worker); CUDA candidates on small shapes 0.05 s.
  timing  ~85 s (23%): ~2.0M timed calls at ~42 us of host time each (launch from Python plus a CUDA
          event): 100 ms of a 6 us kernel is ~18,000 calls, ~0.8 s per function per batch.
  rest    ~90 s (24%): compile (8 specs per batch on 16 cores: ~2-4 s, +2.3 s with a Triton spec),
          problem preparation, policy steps (~0.2 s a group), IPC.
So the study screens (`screen` profile: the checks at the problem's own shape without `edges`,
10 ms of timing, no early stop, inputs drawn on the GPU) and re-checks only the winners in full
(`full` profile: all six checks, 100 ms); measurements are shared across methods (`SharedEvaluator`
in rl/shared_eval.py: a (spec, problem, profile) measured once, by any method or a previous run on
the same store, is reused, and still counts as one proposal of the method's budget); the random,
fixed and cost lists do not depend on results, so they are evaluated in batches of `baseline_group`
and compiled ahead (`prefetch`, the next `prefetch_ahead` shapes) in a lower-priority pool while the
GPU works on training and the other methods.

`CostModel` (bench/study_model.py) puts those figures into numbers; `--synthetic` runs the whole study
on a stub clock and charges the model for every evaluator call, which is how the study is sized
(bench/search_efficiency.py says the figures). Early stop is off in both
profiles: with it, whether a kernel is "slow" depends on what was measured before it, and a
measurement shared between methods would depend on the order they ran in.

Runs against a GPU evaluator (cudal2.evaluate), a replay of a store, or the stub clock on a CPU.
`synthetic_measurements` / `StubClock` (cudal2.testing.stub_clocks) are a model with a planted
structure (so a test can tell learning from luck), never a result to report.
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
from cudal2.rl.grpo import GRPOConfig
from cudal2.rl.policy import SpecPolicy, UniformPolicy
from cudal2.rl.reward import speedup
from cudal2.rl.search import FixedListPolicy, Search
from cudal2.rl.shared_eval import COUNTS, SharedEvaluator, StudyDeadline, shared_evaluator
from cudal2.spec import KernelSpec
from cudal2.stats import shape_class

BUDGETS = (8, 16, 32, 64)
METHODS = ("policy", "random", "fixed", "cost", "critic")
LISTS = ("random", "fixed", "cost")          # methods whose proposals are known before any result


def split(problems: list[Problem], n_train: int, n_test: int, seed: int = 0) -> tuple[list, list]:
    """Disjoint seeded train / held-out subsets; the held-out ones are drawn first, so they do not
    change with the number of training shapes."""
    if n_train + n_test > len(problems):
        raise ValueError(f"{n_train} train + {n_test} test shapes asked for, only {len(problems)} given")
    p = list(problems)
    random.Random(seed).shuffle(p)
    return p[n_test:n_test + n_train], p[:n_test]


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else 0.0


def _shape_seed(seed: int, problem: Problem) -> int:
    return int(hashlib.sha256(f"{seed}|{problem.text}".encode()).hexdigest()[:8], 16)


def random_list(problem: Problem, device, n: int, seed: int = 0, backends=None, rounds: int = 50) -> list:
    """The random method's proposals: uniform masked samples, distinct, in draw order. Seeded per
    shape, so the list is known before anything is measured (and can be compiled ahead)."""
    gen = torch.Generator().manual_seed(_shape_seed(seed, problem))
    out: dict = {}
    for _ in range(rounds):
        for s in UniformPolicy().sample(problem, device, n, generator=gen, backends=backends):
            out.setdefault(s.spec.text, s.spec)
            if len(out) == n:
                return list(out.values())
    return list(out.values())


def fixed_list(problem: Problem, device, n: int, backends=None) -> list:
    return FixedListPolicy.candidates(problem, device, backends)[:n]


def cost_list(problem: Problem, device, n: int, ranker, backends=None) -> list:
    """The cost method's proposals: the n best of the shape's pool by `ranker` (a CostModel, or
    anything with its `rank(problem, specs)`), as `--seed-list cost:N` (rl/staged.py) without its
    decode lead (the stream rule's seeds): the cost model alone."""
    from cudal2.rl.staged import kind_seeds
    return kind_seeds(n, problem, device, backends, "cost", ranker, n)


def method_lists(problem: Problem, device, n: int, methods, *, seed: int = 0, backends=None, ranker=None) -> dict:
    out = {}
    if "random" in methods:
        out["random"] = random_list(problem, device, n, seed, backends)
    if "fixed" in methods:
        out["fixed"] = fixed_list(problem, device, n, backends)
    if "cost" in methods:
        out["cost"] = cost_list(problem, device, n, ranker, backends)
    return out


# ---- the methods ----------------------------------------------------------------------------------------
def train_policy(train: list[Problem], evaluator, device, *, budget: int = 64, group: int = 8,
                 epochs: int = 1, seed: int = 0, policy=None, store=None, run_id=None, on_event=None,
                 backends=None):
    policy = policy or SpecPolicy(seed=seed)
    search = Search(policy, evaluator, device, getattr(evaluator, "device_key", None), store=store,
                    run_id=run_id, group=group, seed=seed, on_event=on_event, checkpoint_dir=None,
                    backends=backends, grpo=GRPOConfig(cpu=True))
    for _ in range(epochs if train else 0):
        search.run(train, budget, interleave=True)
    return search.trainer.module


def run_list(view, problem: Problem, specs: list, chunk: int) -> list[Measurement]:
    """Evaluate a fixed proposal list in order, `chunk` per evaluator call; distinct measured specs
    (a replay may answer two asks with one stored neighbour; it counts once)."""
    out, seen = [], set()
    for i in range(0, len(specs), max(1, chunk)):
        for m in view.evaluate(problem, specs[i:i + chunk]):
            if m is not None and m.spec not in seen:
                seen.add(m.spec)
                out.append(m)
    return out


def _ranked(ms: list[Measurement]) -> list[Measurement]:
    """ok measurements with a speedup, fastest first (ties: earlier first)."""
    ok = [(i, m) for i, m in enumerate(ms) if speedup(m)]
    return [m for _, m in sorted(ok, key=lambda im: (-speedup(im[1]), im[0]))]


def recheck(view, problem: Problem, evaluated: dict[str, list[Measurement]], budgets, rounds: int = 3) -> dict:
    """The full PROTOCOL check and full-budget timing of each method's winner at each budget.

    Round 1 takes, for every (method, budget), the best screened candidate among the method's first
    `budget` proposals and evaluates the distinct ones under the `full` profile in one call (checked,
    then timed in one interleaved run with the baselines). A candidate that fails the full check is
    replaced by the next best screened one of that (method, budget) in the next round, up to `rounds`.
    Reported: for (method, budget) the best full speedup among the verified candidates within the
    method's first `budget` proposals (so it never falls as the budget grows), its spec, and the
    screened speedup of the screen's winner beside it."""
    full: dict[str, Measurement | None] = {}
    firsts = {(m, b): evaluated[m][:b] for m in evaluated for b in budgets}
    ranked = {k: _ranked(v) for k, v in firsts.items()}
    done_rounds = 0
    for _ in range(max(1, rounds)):
        todo: list[str] = []
        for k, cands in ranked.items():
            for c in cands:
                if c.spec not in full:
                    if c.spec not in todo:
                        todo.append(c.spec)
                    break
                if full[c.spec] is not None and full[c.spec].ok:
                    break             # verified
        if not todo:
            break
        done_rounds += 1
        for spec, m in zip(todo, view.evaluate(problem, [KernelSpec.parse(t) for t in todo])):
            full[spec] = m
    out: dict = {"rounds": done_rounds, "rechecked": len(full),
                 "failed": sorted(s for s, m in full.items() if m is None or not m.ok), "by": {}}
    for (meth, b), cands in firsts.items():
        specs = {c.spec for c in cands}
        verified = [full[s] for s in specs if s in full and full[s] is not None and full[s].ok]
        best = max(verified, key=lambda m: speedup(m) or 0.0, default=None)
        top = ranked[(meth, b)][0] if ranked[(meth, b)] else None
        out["by"][(meth, b)] = {
            "speedup": (speedup(best) or 0.0) if best else 0.0,
            "spec": best.spec if best else None,
            "screen": speedup(top) if top else 0.0,
            "screen_spec": top.spec if top else None,
            "screen_winner_failed": bool(top and top.spec in out["failed"]),
        }
    return out


def _cost(shared: SharedEvaluator, tag: str, problem: str) -> dict:
    t = shared.totals(tag, problem)
    return {k: t[k] for k in (*COUNTS, "eval_s", "modeled_s")} | {"phase_s": t["phase_s"]}


def _secs(ms: list[Measurement], key: str) -> float:
    return round(sum(float(m.meta.get(key) or 0.0) for m in ms), 3)


def measure_shape(p: Problem, trained, shared: SharedEvaluator, device, lists: dict, *, budgets, group: int,
                  seed: int, backends, baseline_group: int, recheck_rounds: int, methods=METHODS[:3],
                  on_event=None, ranker=None, critic_pool: int = 8) -> dict:
    """One held-out shape: each method's `max(budgets)` proposals (the policy adapting from the
    trained weights; the list methods in order), then the full re-check of their winners; the row
    of the result, with its costs. Each budget's seconds (`gpu_s` / `modeled_s`) are the screen
    seconds of the method's first `budget` proposals (each measurement's share of its evaluator
    call, whichever method measured it first): what the method would have cost alone."""
    top = max(budgets)
    t0 = time.perf_counter()
    evaluated: dict[str, list[Measurement]] = {}
    for meth in methods:
        if meth in ("policy", "critic"):
            # critic: the same trained policy, each group the cost model's pick of its samples.
            s = Search(copy.deepcopy(trained), shared.view(meth, "screen"), device, shared.device_key,
                       group=group, seed=seed, backends=backends, update=True, checkpoint_dir=None,
                       grpo=GRPOConfig(cpu=True), critic=ranker if meth == "critic" else None,
                       critic_pool=critic_pool)
            evaluated[meth] = s.run_problem(p, top).evaluated
        else:
            evaluated[meth] = run_list(shared.view(meth, "screen"), p, lists[meth], baseline_group)
    rc = recheck(shared.view("recheck", "full"), p, evaluated, budgets, recheck_rounds)
    row: dict = {"problem": p.text, "layout": p.layout, "class": shape_class(p.M, p.N, p.K)}
    for meth in methods:
        by = {b: rc["by"][(meth, b)] for b in budgets}
        ev = evaluated[meth]
        curve, best = [], 0.0
        for m in ev:
            best = max(best, speedup(m) or 0.0)
            curve.append(round(best, 5))
        row[meth] = {str(b): by[b]["speedup"] for b in budgets}
        row[meth]["screen"] = {str(b): by[b]["screen"] for b in budgets}
        row[meth]["winner"] = {str(b): by[b]["spec"] for b in budgets}
        row[meth]["screen_winner_failed_full_check"] = [b for b in budgets if by[b]["screen_winner_failed"]]
        row[meth]["evals"] = len(ev)
        row[meth]["proposals"] = {str(b): min(b, len(ev)) for b in budgets}
        row[meth]["gpu_s"] = {str(b): _secs(ev[:b], "eval_s") for b in budgets}
        row[meth]["modeled_s"] = {str(b): _secs(ev[:b], "modeled_s") for b in budgets}
        row[meth]["curve"] = curve
        row[meth]["cost"] = _cost(shared, meth, p.text)
        row[meth]["eval_s"] = row[meth]["cost"]["eval_s"]
    row["recheck"] = {k: rc[k] for k in ("rounds", "rechecked", "failed")} | {"cost": _cost(shared, "recheck", p.text)}
    row["reference"] = row["best_any_at_max"] = max(row[m][str(top)] for m in methods)
    row["screen_reference"] = max((row[m]["curve"][-1] for m in methods if row[m]["curve"]), default=0.0)
    for meth in methods:
        ref = row["reference"]
        row[meth]["ratio"] = {str(b): (row[meth][str(b)] / ref if ref > 0 else None) for b in budgets}
    total = shared.totals(None, p.text)
    spent = shared.spent(p)        # every distinct measurement of the shape, this run's and the store's
    row["shape_cost"] = {"proposals": total["proposals"], "unique": total["unique"], "evaluator_s": total["eval_s"],
                   "modeled_s": total["modeled_s"], "phase_s": total["phase_s"],
                   "wall_s": round(time.perf_counter() - t0, 3),
                   "shape_gpu_s": round(spent["eval_s"], 3), "shape_modeled_s": round(spent["modeled_s"], 3),
                   "measurements": spent["n"]}
    if on_event:
        on_event("study_shape", row=row)
    return row


def study(train: list[Problem], test: list[Problem], evaluator, device, *, budgets=BUDGETS, group: int = 8,
          train_budget: int = 64, epochs: int = 1, seed: int = 0, backends=None, policy=None,
          baseline_group: int | None = None, recheck_rounds: int = 3, prefetch: bool = True,
          methods=None, ranker=None, critic_pool: int = 8, trained=None, train_info: dict | None = None,
          done: dict | None = None,
          prefetch_ahead: int = 2, on_event=None, on_progress=None, on_trained=None, on_row=None) -> dict:
    """The whole study; `evaluator` is a SharedEvaluator (any other evaluator is wrapped with the
    default profiles). `methods`: of METHODS (default: all, less `cost` and `critic` without a
    `ranker`; `critic` ranks critic_pool x group of the policy's samples per group by it).
    `trained` (with its `train_info`): a policy trained before (a resumed study), so no training.
    `done`: problem text -> a row finished before (a resumed study): kept, not measured again.
    Stops cleanly at the SharedEvaluator's deadline: the result then says complete=False and holds
    the shapes finished before it. Callbacks: `on_trained(policy, info)` after training,
    `on_row(row)` after each shape, `on_progress(result so far)` after both."""
    shared = shared_evaluator(evaluator)
    budgets = tuple(sorted(budgets))
    top = max(budgets)
    methods = tuple(methods or (METHODS if ranker is not None else METHODS[:3]))
    uses_policy = bool({"policy", "critic"} & set(methods))
    if unknown := [m for m in methods if m not in METHODS]:
        raise ValueError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    if {"cost", "critic"} & set(methods) and ranker is None:
        raise ValueError("the cost and critic methods need a cost model (ranker)")
    baseline_group = baseline_group or top
    done = dict(done or {})
    t_start = time.perf_counter()
    res = {"train": [p.text for p in train], "test": [p.text for p in test], "methods": list(methods),
           "budgets": list(budgets), "group": group, "train_budget": train_budget, "epochs": epochs, "seed": seed,
           "baseline_group": baseline_group, "recheck_rounds": recheck_rounds, "prefetched": 0,
           "resumed_rows": sum(p.text in done for p in test), "device": shared.device_key,
           "profiles": shared.profiles, "rows": [], "complete": False, "stopped": None}
    todo = [p for p in test if p.text not in done]
    lists: dict[Problem, dict] = {}

    def ahead(i: int) -> None:        # the list methods' proposals of todo[i .. i + prefetch_ahead], compiled ahead
        for p in todo[i:i + prefetch_ahead + 1]:
            if p not in lists:
                lists[p] = method_lists(p, device, top, methods, seed=seed, backends=backends, ranker=ranker)
                if prefetch:
                    res["prefetched"] += shared.prefetch(p, [s for v in lists[p].values() for s in v], "screen")

    ahead(0)
    if uses_policy and todo and trained is None:
        try:
            trained = train_policy(train, shared.view("train", "screen"), device, budget=train_budget, group=group,
                                   epochs=epochs, seed=seed, policy=policy, on_event=on_event, backends=backends)
        except StudyDeadline as e:
            res["stopped"] = f"during training: {e}"
            return _summarise(res, shared, t_start)
        train_info = {"train_s": round(time.perf_counter() - t_start, 3), "train_cost": shared.totals("train")}
        if on_trained:
            on_trained(trained, train_info)
    res.update(train_info or {})
    if on_progress:
        on_progress(_summarise(dict(res), shared, t_start))
    for p in test:
        if p.text in done:
            res["rows"].append(done[p.text])
            continue
        ahead(todo.index(p))
        try:
            row = measure_shape(p, trained, shared, device, lists[p], budgets=budgets, group=group, seed=seed,
                                backends=backends, baseline_group=baseline_group, recheck_rounds=recheck_rounds,
                                methods=methods, on_event=on_event, ranker=ranker, critic_pool=critic_pool)
        except StudyDeadline as e:
            res["stopped"] = f"at test shape {p}: {e}"
            break
        res["rows"].append(row)
        if on_row:
            on_row(row)
        if on_progress and len(res["rows"]) < len(test):
            on_progress(_summarise(dict(res), shared, t_start))
    else:
        res["complete"] = True
    return _summarise(res, shared, t_start)


def _summarise(res: dict, shared: SharedEvaluator, t_start: float) -> dict:
    rows, budgets, methods = res["rows"], res["budgets"], res["methods"]
    res["geomean_best_speedup"] = {m: {str(b): geomean([r[m][str(b)] for r in rows]) for b in budgets} for m in methods}
    res["geomean_screen_speedup"] = {m: {str(b): geomean([r[m]["screen"][str(b)] for r in rows]) for b in budgets}
                                     for m in methods}
    from study_report import summary
    res["summary"] = summary(rows, methods, budgets, "modeled_s" if shared.model is not None else "gpu_s")
    for learner in ("policy", "critic"):
        if learner in methods:
            hit = [r[learner].get("16", 0.0) >= 0.98 * r["reference"] for r in rows if r["reference"] > 0]
            res[f"{learner}16_reaches_098_of_best64"] = (sum(hit) / len(hit)) if hit else None
    n = max(len(rows), 1)
    res["eval_s_per_shape"] = {m: sum(r[m]["cost"]["eval_s"] for r in rows) / n for m in methods}
    res["per_shape"] = {
        "proposals": sum(r[m]["cost"]["proposals"] for r in rows for m in methods) / n,
        "rechecks": sum(r["recheck"]["cost"]["proposals"] for r in rows) / n,
        "new_evaluations": sum(r["shape_cost"]["unique"] for r in rows) / n,
        "evaluator_s": sum(r["shape_cost"]["evaluator_s"] for r in rows) / n,
        "modeled_s": sum(r["shape_cost"]["modeled_s"] for r in rows) / n,
        "wall_s": sum(r["shape_cost"]["wall_s"] for r in rows) / n,
        "recheck_s": sum(r["recheck"]["cost"]["eval_s"] for r in rows) / n,
        # every distinct measurement of the shape, whichever run made it (resumed studies included)
        "shape_gpu_s": sum(r["shape_cost"].get("shape_gpu_s", 0.0) for r in rows) / n,
        "shape_modeled_s": sum(r["shape_cost"].get("shape_modeled_s", 0.0) for r in rows) / n,
    }
    res["cost_by_method"] = {t: shared.totals(t) for t in ("train", *methods, "recheck")}
    total = shared.totals()
    res["cost_total"] = total
    if shared.model is not None:
        res["modeled_device_s"] = round(shared.model_s["start"] + total["modeled_s"] + shared.model.finish_s, 1)
    res["study_s"] = round(time.perf_counter() - t_start, 3)
    return res


def markdown(result: dict) -> str:
    from study_report import markdown as md
    return md(result)
