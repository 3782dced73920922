"""The staged search `cudal2 generate` runs per shape: seed, screen, re-check, file.

  1. seed    the first evaluations are the fixed autotune list (`--seed-list fixed:N`), or with
             `auto:N` the same with split-K seeds on shapes too narrow to fill the SMs;
  2. screen  with them in one evaluator call the policy's first group, then its further groups
             (GRPO on each), up to `--budget` evaluations in all; every one under the `screen`
             profile: the five checks at the shape itself (no `edges`) and `--screen-ms` of
             interleaved timing beside the baselines;
  3. recheck the `--recheck` fastest screened candidates go through the `full` profile (all six
             PROTOCOL checks, `--full-ms` of timing beside the baselines, one interleaved run); a
             candidate failing it is replaced by the next screened one, up to `rounds` times;
  4. file    the fastest fully checked candidate; it dispatches only if it beat best-cublas in that
             full run, else the entry says cuBLAS (cudal2.registry.record_winner).

Why staged: on the H200 (2026-12-02, NOTES.md) a full evaluation cost ~1.8 s, a screened one
0.17 s; the full pass then only runs on the few candidates that can be filed.

Measurements go through rl/shared_eval.SharedEvaluator, so a (profile, shape, spec) measured once -
in this run or an earlier one on the same store - is never measured again. A finished shape gets a
row in the store's `shapes` table (its log: evaluations, failures by reason, evaluator seconds per
phase, the winner, what was filed); `--resume` skips those shapes.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from itertools import zip_longest

from cudal2.measurement import Measurement
from cudal2.problems import Problem
from cudal2.spec import CHOICES, PINNED, KernelSpec, fits, is_valid, with_fields
from cudal2.tiles import cluster_overflow

from .reward import speedup
from .search import FixedListPolicy, Search
from .shared_eval import ALL_CHECKS, SCREEN_CHECKS, SharedEvaluator



class SeedListError(ValueError):
    pass


SEED_KINDS = ("fixed", "auto", "model", "cost")


def parse_seed_list(text: str) -> tuple[str, int]:
    """'none' -> ("fixed", 0); 'fixed:N' / 'auto:N' / 'model:N' / 'cost:N' -> (kind, N)."""
    t = text.strip().lower()
    if t in ("none", "0", ""):
        return "fixed", 0
    kind, _, num = t.partition(":")
    if kind in SEED_KINDS and num.isdigit():
        return kind, int(num)
    raise SeedListError(f"--seed-list {text!r}: use 'none', 'fixed:N', 'auto:N', 'model:N' or 'cost:N' (N >= 0)")


def _ctas(spec: KernelSpec, p: Problem) -> int:
    return math.ceil(p.M / spec.bm) * math.ceil(p.N / spec.bn) * spec.split_k


def starved(p: Problem, device) -> bool:
    """Output tiles that cannot fill the SMs, with a deep K: the class the first grid search lost
    worst (H200, 2026-12-03, bench/results/h200-sm90/grid_search: ceil(M/128)*ceil(N/128) < SMs and
    K >= 2048, 117 of 377 shapes, best kernel at 0.51x of best-cublas geomean, where cuBLAS splits K
    and the fixed list's seeds are all split_k=1). A target without a measured SM count (a CPU
    replay of an arch) is never starved: the rule needs the real count."""
    if not device.sm_count:
        return False
    return math.ceil(p.M / 128) * math.ceil(p.N / 128) < device.sm_count and p.K >= 2048


def split_k_variants(p: Problem, device, backends=None) -> list[KernelSpec]:
    """Split-K versions of the families that have it (tiled, mma): for each of their preferred
    tiles the largest split whose CTAs still fit in one wave of the SMs. One per (family, tile),
    closest to a full wave first, then the larger tile; the families alternate."""
    best: dict[tuple, KernelSpec] = {}
    splits = sorted((k for k in CHOICES["split_k"] if k > 1), reverse=True)
    for s in FixedListPolicy.candidates(p, device, backends):
        if PINNED[s.family].get("split_k") == 1 or s.split_k != 1:
            continue
        for k in splits:
            v = with_fields(s, split_k=k)
            if _ctas(v, p) <= device.sm_count and is_valid(v, p, device):
                best.setdefault((v.family, v.bm, v.bn), v)
                break
    rank = sorted(best.values(), key=lambda v: (device.sm_count - _ctas(v, p), -v.bm * v.bn))
    by_family: dict[str, list] = {}
    for v in rank:
        by_family.setdefault(v.family, []).append(v)
    out = []
    while any(by_family.values()):
        for fam in sorted(by_family, key=lambda f: rank.index(by_family[f][0]) if by_family[f] else len(rank)):
            if by_family[fam]:
                out.append(by_family[fam].pop(0))
    return out


def decode_lead(n: int, problem: Problem, device, backends=None) -> list[KernelSpec]:
    """The first seeds on a decode shape: the stream family's one-wave rule (cudal2.stream_tiles) and,
    half of them since 2026-12-05, the wave model's cluster-1 wgmma specs (`decode_wgmma`). How many,
    by what was measured on the H200: min(M, N) <= 16, three quarters of n (2026-12-04: the best
    one-wave stream spec beat best-cublas on 12 of 24 model projections, where wgmma then lost at
    0.65-0.95x; filed on 40 of 80 model-set shapes at 1.03-1.25x, run 42); 17..32, two (not
    measured as a lead); 33..64, none (the rule's best of 8 ran 0.38-0.70x of best-cublas geomean per
    class and layout over 90 grid small / skinny shapes with min(M, N) = 64, none won, decode/
    decode_h200-sm90_9963722). The wgmma half: with A's TMA box trimmed to M rows (wgmma.cu's A_TRIM,
    run 62) the wave model's best of 6 beat the stream rule's best of 2 on 31 of the 48 decode-set
    shapes at M 1-32 (1.053 vs 0.993 of best-cublas). None without the cuda backend."""
    from cudal2.stream_tiles import stream_candidates
    small = min(problem.M, problem.N)
    if n <= 0 or small > 32 or (backends and "cuda" not in backends):
        return []
    want = n - n // 4 if small <= 16 else min(n, 2)
    wg = decode_wgmma(want // 2, problem, device, backends)
    return stream_candidates(problem, device, want - len(wg)) + wg


def decode_wgmma(n: int, problem: Problem, device, backends=None) -> list[KernelSpec]:
    """The wave model's first n wgmma specs (valid, and without a 2-CTA cluster, as `candidates`
    makes them: so they trim A's box to M rows, wgmma.cu's A_TRIM), where the family runs (as
    `model_seeds`), else none."""
    from cudal2.tiles import candidates
    if n <= 0 or not _wgmma_runs(device, backends):
        return []
    return candidates(problem, device, n)[:n]


def _wgmma_runs(device, backends) -> bool:
    """The wgmma family's seeds need sm_90a, the cuda backend allowed and a measured SM count (the
    wave model counts waves over it)."""
    return not (backends and "cuda" not in backends) and device.cc == (9, 0) and bool(device.sm_count)


def seed_specs(n: int, problem: Problem, device, backends=None, kind: str = "fixed",
               ranker=None) -> list[KernelSpec]:
    """The first evaluations of a shape, known before anything is measured (so they compile ahead).
    fixed: the fixed autotune list's first n. auto: the fixed list with the tiles that fit the shape
    first (of the 377 winners of the first grid search, 4 were seed tiles larger than the shape),
    and on a starved shape (see `starved`) the second half split-K variants that fill the SMs.
    model: on a Hopper card with the cuda backend, half the seeds are the wgmma family's best
    modelled specs (cudal2.tiles: whole waves, split-K where tiles cannot fill the SMs, the deepest
    ring that fits), the rest as auto; elsewhere the same as auto. cost: the n best of a pool of
    candidates by the learned cost model `ranker` (rl/costrank.py; `cudal2 train` makes it).
    Every kind but fixed leads with `decode_lead` on a decode shape (min(M, N) <= 32)."""
    if n <= 0:
        return []
    if kind == "fixed":
        return FixedListPolicy.candidates(problem, device, backends)[:n]
    lead = decode_lead(n, problem, device, backends)
    out = lead + [s for s in kind_seeds(n - len(lead), problem, device, backends, kind, ranker, n)
                  if s not in lead]
    if len(out) < n:            # the kind's list repeated a lead seed: fill from its longer list
        out += [s for s in kind_seeds(n, problem, device, backends, kind, ranker, n) if s not in out]
    if device.cluster_ctas and any(cluster_overflow(s, problem, device) for s in out[:n]):
        # A cluster split-K whose clusters do not all fit at once runs a second wave the ranking
        # does not see (cudal2.cluster_fit): such seeds go behind the rest of a longer list.
        longer = out + [s for s in kind_seeds(2 * n, problem, device, backends, kind, ranker, 2 * n) if s not in out]
        out = sorted(longer, key=lambda s: cluster_overflow(s, problem, device))    # stable: order kept
    return out[:n]


def cost_extras(problem: Problem, device, backends) -> list[KernelSpec]:
    """What `cost:N` adds to the cost model's pool (rl/costrank.pool) beside the fixed list and the
    random draws: the wave model's 16 and, on a starved shape, the split-K variants."""
    extra = model_seeds(16, problem, device, backends)
    return extra + (split_k_variants(problem, device, backends) if starved(problem, device) else [])


def kind_seeds(n: int, problem: Problem, device, backends, kind: str, ranker, total: int) -> list[KernelSpec]:
    """n seeds of one kind without the decode lead (the efficiency study's cost method is the cost
    model alone); `total` is the whole seed list's length (auto gives split-K half of it)."""
    if kind == "cost":
        if ranker is None:
            raise SeedListError("--seed-list cost:N needs a cost model (--cost-model PATH)")
        from .costrank import cost_seeds
        return cost_seeds(n, problem, device, backends, ranker, cost_extras(problem, device, backends))
    if kind == "model":
        lead = model_seeds(n - n // 2, problem, device, backends)
        rest = [s for s in kind_seeds(n, problem, device, backends, "auto", None, total) if s not in lead]
        return (lead + rest)[:n]
    fixed = FixedListPolicy.candidates(problem, device, backends)
    ordered = [s for s in fixed if fits(problem, s)] + [s for s in fixed if not fits(problem, s)]
    split = split_k_variants(problem, device, backends) if starved(problem, device) else []
    n_keep = n - (min(total // 2, len(split)) if split else 0)
    keep = [s for s in ordered if s.split_k == 1][:n_keep] if split else ordered[:n_keep]
    return (keep + [v for v in split if v not in keep])[:n]


def lite_seed_count(n: int, problem: Problem) -> int:
    """How many of model:N's n wgmma seeds are lite specs: a quarter (one at least) under 1 GFLOP,
    none above. Under 1 GFLOP the lite schedule (warp_spec 0) was the best spec of 89 of 304 grid
    shapes nn and 59 of 210 nt (H200, 2026-12-03, hopper/run36-37); elsewhere it lost (starved,
    skinny: run 36)."""
    return max(1, n // 4) if problem.flops < 1e9 else 0


def model_seeds(n: int, problem: Problem, device, backends=None) -> list[KernelSpec]:
    """n of the wgmma family's wave-model specs where it can run (sm_90a, cuda backend allowed, a
    measured SM count), else none: the cooperative list best first, then from 1 GFLOP a third of the
    seeds (one at least, from two seeds) for the half-wave and ping-pong specs, then under 1 GFLOP a
    quarter (one at least) lite ones. On the H200 (2026-12-03, bench/results/h200-sm90/hopper) the
    best of ~10 cooperative candidates reached 0.94-0.98x of best-cublas per class and beat it on
    20-40% of shapes, where the fixed list's best was 0.82x (1-100 GFLOP, median); under 1 GFLOP, with
    lite specs among them, 1.000x nn (all 304 grid shapes, 194 won) and 1.032x nt (210 shapes)."""
    from cudal2.tiles import candidate_groups
    if n <= 0 or not _wgmma_runs(device, backends):
        return []
    lite = lite_seed_count(n, problem)
    groups = {k: [s for s in v if is_valid(s, problem, device)]
              for k, v in candidate_groups(problem, device, n, lite=lite).items()}
    lites = groups["lite"][:lite]
    # The groups after the cooperative list, which the first n of `candidates` never reached (before
    # 2026-12-07): ping-pong 128x128 was the best spec of 86 of 147 large, 44 of 82 mid and 50 of
    # 148 shortK grid nt shapes (H100 runs 158, 163), the half-wave split gave 0.855 of best-cublas
    # on 40 deep-K starved ones where the cooperative list gave 0.769 (H100 run 167). Both measured
    # at 1 GFLOP and more only, so smaller shapes keep the lite seeds instead.
    extra = []
    if problem.flops >= 1e9 and n >= 2:
        hw, pp = groups["half_wave"], groups["pingpong"]
        paired = [s for pair in zip_longest(hw, pp) for s in pair if s is not None]
        extra = paired[:max(1, n // 3)]
    coop = groups["cooperative"][:n - len(lites) - len(extra)]
    return coop + extra + lites


def profiles(screen_ms: float, full_ms: float, screen_max_calls: int | None = None) -> tuple[dict, dict]:
    """The two profiles' settings (SharedEvaluator.add_profile keywords). Early stop is off in both:
    a kernel's status would otherwise depend on what was measured before it. `screen_max_calls`
    caps the screen's calls per function (tiny kernels: see cudal2.evaluate.worker.time_batch); the full pass
    has no cap, as the PROTOCOL asks.

    generate's default screen, 10 ms per function (>= 30 calls): in the H200 studies (runs 7-8,
    2026-12-02, 72 winners) the full pass's speedup was 1.004-1.007x the screened one (median), from
    0.96x to 1.13x; over the grid search (2026-12-03, 377 shapes) median 1.000x, within 3% on 89%:
    good enough to rank, not to claim. Claims come from the full pass."""
    if screen_ms <= 0 or full_ms <= 0:
        raise ValueError(f"--screen-ms and --full-ms must be > 0 (got {screen_ms}, {full_ms})")
    common = {"min_calls": 30, "warmup": 3, "early_stop": None}
    if screen_max_calls is not None and screen_max_calls < common["min_calls"]:
        raise ValueError(f"--screen-max-calls must be >= {common['min_calls']} (got {screen_max_calls})")
    cap = {"max_calls": int(screen_max_calls)} if screen_max_calls else {}
    return ({"checks": SCREEN_CHECKS, "min_ms": float(screen_ms), **common, **cap},
            {"checks": ALL_CHECKS, "min_ms": float(full_ms), **common})


def _ranked(ms: list[Measurement]) -> list[Measurement]:
    """ok screened measurements, fastest first (ties: earlier first)."""
    ok = [(i, m) for i, m in enumerate(ms) if m.status == "ok" and m.time_us]
    return [m for _, m in sorted(ok, key=lambda im: (im[1].time_us, im[0]))]


def recheck(view, problem: Problem, screened: list[Measurement], k: int,
            rounds: int = 3) -> tuple[list, Measurement | None]:
    """The full pass over the k fastest screened candidates; a failed one is replaced by the next
    fastest, up to `rounds` calls. Returns (every full measurement, the fastest ok one or None)."""
    queue = _ranked(screened)
    full: list[Measurement] = []
    for _ in range(max(1, rounds)):
        passed = [m for m in full if m.status == "ok" and m.time_us]
        want = k - len(passed)
        if want <= 0 or not queue:
            break
        todo, queue = queue[:want], queue[want:]
        got = view.evaluate(problem, [KernelSpec.parse(m.spec) for m in todo])
        full += [m for m in got if m is not None]
    passed = [m for m in full if m.status == "ok" and m.time_us]
    # A candidate that timed below best-cublas in the screen may not in the full run: whichever is
    # fastest here is filed, and record_winner files cuBLAS if it lost.
    return full, (min(passed, key=lambda m: m.time_us) if passed else None)


def failures(ms: list[Measurement]) -> dict[str, int]:
    """Failures by status and by the first words of the reason (what the search log counts)."""
    c: Counter = Counter()
    for m in ms:
        if m.status not in ("ok", "slow"):
            why = (m.reason or "").split(":")[0].split("(")[0].strip()[:60]
            c[f"{m.status}: {why}" if why else m.status] += 1
    return dict(c)


def search_shape(search: Search, shared: SharedEvaluator, problem: Problem, budget: int,
                 seeds: list[KernelSpec], k: int, rounds: int = 3) -> dict:
    """Seed + screen + recheck one shape. Returns the outcome (the log row, with the winner's
    Measurement under "winner" and the screened best under "screen_best")."""
    t0 = time.perf_counter()
    res = search.run_problem(problem, budget, seeds=seeds)
    full, winner = recheck(shared.view("recheck", "full"), problem, res.evaluated, k, rounds)
    tot = shared.totals(None, problem.text)
    best = _ranked(res.evaluated)
    return {
        "problem": problem.text,
        "evaluations": len(res.evaluated), "seeded": len(seeds), "full_evaluations": len(full),
        "new_evaluations": tot["unique"], "reused": tot["reused"] + tot["resumed"],
        "failures_screen": failures(res.evaluated), "failures_full": failures(full),
        "evaluator_s": tot["eval_s"], "phase_s": tot["phase_s"],
        "wall_s": round(time.perf_counter() - t0, 3),
        "screen_best": best[0] if best else None,
        "screen_speedup": speedup(best[0]) if best else None,
        "winner": winner,
        "full_speedup": speedup(winner) if winner else None,
    }


def log_row(outcome: dict, action: str) -> dict:
    """The JSON-able row the store's `shapes` table keeps."""
    w, s = outcome["winner"], outcome["screen_best"]
    row = {k: v for k, v in outcome.items() if k not in ("winner", "screen_best")}
    row.update(winner_spec=w.spec if w else None, winner_us=w.time_us if w else None,
               best_cublas_us=w.best_cublas_us if w else (s.best_cublas_us if s else None),
               screen_spec=s.spec if s else None, filed=action)
    return row
