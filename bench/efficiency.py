"""The search-efficiency study of issue 5: does a trained policy find fast kernels in fewer evaluations?

  1. train the default policy with GRPO on a subset of shapes (`train`), `train_budget` each;
  2. on held-out shapes (`test`), three searches of `max(budgets)` proposals each, on the same
     evaluator, profile and masked space: the trained policy (it keeps adapting on the shape, from the
     same trained weights for every shape), uniform random sampling, and the fixed autotune list;
  3. per shape, the winners of each method at each budget are re-checked by the full PROTOCOL checker
     and re-timed at the full timing budget beside the baselines (`recheck`); the reported speedups
     come from that re-measurement only;
  4. report per shape and method the best speedup over best-cuBLAS within each budget (8/16/32/64),
     the geomean over shapes, the fraction of shapes where the policy at 16 reaches 0.98 of the best
     any method found at 64, whether the policy is ahead of random at each budget, and the cost:
     proposals (what a budget counts), new evaluations (what costs GPU time) and evaluator seconds.

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
the same store, is reused, and still counts as one proposal of the method's budget); the random and
fixed lists do not depend on results, so they are evaluated in batches of `baseline_group` and
compiled ahead (`prefetch`) in a lower-priority pool while the GPU works on training and the other
methods.

`CostModel` (bench/study_model.py) puts those figures into numbers; `--synthetic` runs the whole study
on a stub clock and charges the model for every evaluator call, which is how the default study was
sized to one 420 s call (bench/search_efficiency.py says the figures). Early stop is off in both
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

BUDGETS = (8, 16, 32, 64)
METHODS = ("policy", "random", "fixed")


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


# ---- the methods ----------------------------------------------------------------------------------------
def train_policy(train: list[Problem], evaluator, device, *, budget: int = 64, group: int = 8,
                 epochs: int = 1, seed: int = 0, policy=None, store=None, run_id=None, on_event=None,
                 backends=None):
    policy = policy or SpecPolicy(seed=seed)
    search = Search(policy, evaluator, device, getattr(evaluator, "device_key", None), store=store,
                    run_id=run_id, group=group, seed=seed, on_event=on_event, checkpoint_dir=None,
                    backends=backends, grpo=GRPOConfig(cpu=True))
    for _ in range(epochs):
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


def measure_shape(p: Problem, trained, shared: SharedEvaluator, device, lists: dict, *, budgets, group: int,
                  seed: int, backends, baseline_group: int, recheck_rounds: int, on_event=None) -> dict:
    """One held-out shape: the policy (adapting from the trained weights), random, fixed, then the
    full re-check of their winners; the row of the result, with its costs."""
    top = max(budgets)
    t0 = time.perf_counter()
    evaluated: dict[str, list[Measurement]] = {}
    s = Search(copy.deepcopy(trained), shared.view("policy", "screen"), device, shared.device_key, group=group,
               seed=seed, backends=backends, update=True, checkpoint_dir=None, grpo=GRPOConfig(cpu=True))
    evaluated["policy"] = s.run_problem(p, top).evaluated
    for meth in ("random", "fixed"):
        evaluated[meth] = run_list(shared.view(meth, "screen"), p, lists[meth], baseline_group)
    rc = recheck(shared.view("recheck", "full"), p, evaluated, budgets, recheck_rounds)
    row: dict = {"problem": p.text}
    for meth in METHODS:
        by = {b: rc["by"][(meth, b)] for b in budgets}
        row[meth] = {str(b): by[b]["speedup"] for b in budgets}
        row[meth]["screen"] = {str(b): by[b]["screen"] for b in budgets}
        row[meth]["winner"] = {str(b): by[b]["spec"] for b in budgets}
        row[meth]["screen_winner_failed_full_check"] = [b for b in budgets if by[b]["screen_winner_failed"]]
        row[meth]["evals"] = len(evaluated[meth])
        row[meth]["cost"] = _cost(shared, meth, p.text)
        row[meth]["eval_s"] = row[meth]["cost"]["eval_s"]
    row["recheck"] = {k: rc[k] for k in ("rounds", "rechecked", "failed")} | {"cost": _cost(shared, "recheck", p.text)}
    row["best_any_at_max"] = max(row[m][str(top)] for m in METHODS)
    total = shared.totals(None, p.text)
    row["cost"] = {"proposals": total["proposals"], "unique": total["unique"], "evaluator_s": total["eval_s"],
                   "modeled_s": total["modeled_s"], "phase_s": total["phase_s"],
                   "wall_s": round(time.perf_counter() - t0, 3)}
    if on_event:
        on_event("study_shape", row=row)
    return row


def study(train: list[Problem], test: list[Problem], evaluator, device, *, budgets=BUDGETS, group: int = 8,
          train_budget: int = 64, epochs: int = 1, seed: int = 0, backends=None, policy=None,
          baseline_group: int | None = None, recheck_rounds: int = 3, prefetch: bool = True,
          on_event=None, on_progress=None) -> dict:
    """The whole study; `evaluator` is a SharedEvaluator (any other evaluator is wrapped with the
    default profiles). Stops cleanly at the SharedEvaluator's deadline: the result then says
    complete=False and holds the shapes finished before it. `on_progress(result)` is called after
    training and after each test shape with the result so far."""
    shared = shared_evaluator(evaluator)
    budgets = tuple(sorted(budgets))
    top = max(budgets)
    baseline_group = baseline_group or top
    t_start = time.perf_counter()
    lists = {p: {"random": random_list(p, device, top, seed, backends), "fixed": fixed_list(p, device, top, backends)}
             for p in test}
    ahead = 0
    if prefetch:
        for p in test:
            ahead += shared.prefetch(p, lists[p]["random"] + lists[p]["fixed"], "screen")
    res = {"train": [p.text for p in train], "test": [p.text for p in test], "budgets": list(budgets),
           "group": group, "train_budget": train_budget, "epochs": epochs, "seed": seed,
           "baseline_group": baseline_group, "recheck_rounds": recheck_rounds, "prefetched": ahead,
           "device": shared.device_key, "profiles": shared.profiles, "rows": [], "complete": False,
           "stopped": None}
    try:
        trained = train_policy(train, shared.view("train", "screen"), device, budget=train_budget, group=group,
                               epochs=epochs, seed=seed, policy=policy, on_event=on_event, backends=backends)
    except StudyDeadline as e:
        res["stopped"] = f"during training: {e}"
        return _summarise(res, shared, t_start)
    res["train_s"] = round(time.perf_counter() - t_start, 3)
    res["train_cost"] = {k: v for k, v in shared.totals("train").items()}
    if on_progress:
        on_progress(_summarise(dict(res), shared, t_start))
    for p in test:
        try:
            res["rows"].append(measure_shape(p, trained, shared, device, lists[p], budgets=budgets, group=group,
                                             seed=seed, backends=backends, baseline_group=baseline_group,
                                             recheck_rounds=recheck_rounds, on_event=on_event))
        except StudyDeadline as e:
            res["stopped"] = f"at test shape {p}: {e}"
            break
        if on_progress and len(res["rows"]) < len(test):
            on_progress(_summarise(dict(res), shared, t_start))
    else:
        res["complete"] = True
    return _summarise(res, shared, t_start)


def _summarise(res: dict, shared: SharedEvaluator, t_start: float) -> dict:
    rows, budgets = res["rows"], res["budgets"]
    top = max(budgets)
    res["geomean_best_speedup"] = {m: {str(b): geomean([r[m][str(b)] for r in rows]) for b in budgets} for m in METHODS}
    res["geomean_screen_speedup"] = {m: {str(b): geomean([r[m]["screen"][str(b)] for r in rows]) for b in budgets}
                                     for m in METHODS}
    hit = [r["policy"].get("16", 0.0) >= 0.98 * r["best_any_at_max"] for r in rows if r["best_any_at_max"] > 0]
    res["policy16_reaches_098_of_best64"] = (sum(hit) / len(hit)) if hit else None
    res["policy_ahead_of_random_shapes"] = {str(b): sum(r["policy"][str(b)] > r["random"][str(b)] for r in rows)
                                            for b in budgets}
    g = res["geomean_best_speedup"]
    res["policy_ahead_of_random_geomean"] = {str(b): g["policy"][str(b)] > g["random"][str(b)] for b in budgets}
    n = max(len(rows), 1)
    res["eval_s_per_shape"] = {m: sum(r[m]["cost"]["eval_s"] for r in rows) / n for m in METHODS}
    res["per_shape"] = {
        "proposals": sum(r[m]["cost"]["proposals"] for r in rows for m in METHODS) / n,
        "rechecks": sum(r["recheck"]["cost"]["proposals"] for r in rows) / n,
        "new_evaluations": sum(r["cost"]["unique"] for r in rows) / n,
        "evaluator_s": sum(r["cost"]["evaluator_s"] for r in rows) / n,
        "modeled_s": sum(r["cost"]["modeled_s"] for r in rows) / n,
        "wall_s": sum(r["cost"]["wall_s"] for r in rows) / n,
        "recheck_s": sum(r["recheck"]["cost"]["eval_s"] for r in rows) / n,
    }
    res["cost_by_method"] = {t: shared.totals(t) for t in ("train", *METHODS, "recheck")}
    total = shared.totals()
    res["cost_total"] = total
    if shared.model is not None:
        res["modeled_device_s"] = round(shared.model_s["start"] + total["modeled_s"] + shared.model.finish_s, 1)
    res["study_s"] = round(time.perf_counter() - t_start, 3)
    return res


def markdown(result: dict) -> str:
    b = result["budgets"]
    rows = result["rows"]
    model = "modeled_device_s" in result      # the stub clock: seconds come from the cost model
    sec, key = ("modeled device s", "modeled_s") if model else ("evaluator s", "eval_s")
    lines = ["| method | " + " | ".join(f"best speedup @{x}" for x in b)
             + f" | proposals / shape | new evaluations / shape | {sec} / shape |",
             "| --- | " + " | ".join("---" for _ in b) + " | --- | --- | --- |"]
    n = max(len(rows), 1)
    for m in METHODS:
        g = result["geomean_best_speedup"][m]
        prop = sum(r[m]["cost"]["proposals"] for r in rows) / n
        uniq = sum(r[m]["cost"]["unique"] for r in rows) / n
        secs = sum(r[m]["cost"][key] for r in rows) / n
        lines.append(f"| {m} | " + " | ".join(f"{g[str(x)]:.3f}" for x in b)
                     + f" | {prop:.1f} | {uniq:.1f} | {secs:.1f} |")
    lines.append("")
    lines.append(f"Speedup over best-cuBLAS, geomean over {len(rows)} held-out shapes ({result['device']}), from the "
                 "full PROTOCOL re-check and full-budget re-timing of each method's screened winners; policy "
                 f"trained on {len(result['train'])} shapes x {result['train_budget']} proposals.")
    lines.append("Screened (before the re-check): " + "; ".join(
        f"{m} " + "/".join(f"{result['geomean_screen_speedup'][m][str(x)]:.3f}" for x in b) for m in METHODS) + ".")
    frac = result["policy16_reaches_098_of_best64"]
    if frac is not None:
        lines.append(f"Policy @16 >= 0.98 x best of any method @{max(b)}: {100 * frac:.0f}% of shapes. "
                     "Policy ahead of random (shapes, geomean): " + ", ".join(
                         f"@{x} {result['policy_ahead_of_random_shapes'][str(x)]}/{len(rows)} "
                         f"{'yes' if result['policy_ahead_of_random_geomean'][str(x)] else 'no'}" for x in b) + ".")
    ps = result["per_shape"]
    secs = f"{ps['modeled_s']:.1f} modeled device s" if model else \
        f"{ps['evaluator_s']:.1f} evaluator s (re-check {ps['recheck_s']:.1f} s), {ps['wall_s']:.1f} s wall"
    lines.append(f"Per test shape: {ps['proposals']:.0f} proposals + {ps['rechecks']:.0f} full re-checks, "
                 f"{ps['new_evaluations']:.0f} new evaluations, {secs}. Training: "
                 f"{result.get('train_cost', {}).get('unique', 0)} new evaluations.")
    if "modeled_device_s" in result:
        lines.append(f"Cost model: {result['modeled_device_s']:.0f} s of device wall time for this study (a model).")
    if not result.get("complete", True):
        lines.append(f"INCOMPLETE: {result.get('stopped')}; re-run with the same --store to continue.")
    if rows:
        lo, hi = str(min(b)), str(max(b))
        lo = "16" if "16" in map(str, b) else lo
        lines += ["", "| shape | " + " | ".join(f"{m} @{lo} / @{hi}" for m in METHODS)
                  + f" | new evals | {sec} |", "| --- | " + " | ".join("---" for _ in METHODS) + " | --- | --- |"]
        for r in rows:
            lines.append(f"| {r['problem']} | " + " | ".join(f"{r[m][lo]:.3f} / {r[m][hi]:.3f}" for m in METHODS)
                         + f" | {r['cost']['unique']} | {r['cost']['modeled_s' if model else 'evaluator_s']:.1f} |")
    return "\n".join(lines)
