"""`cudal2 generate`: the RL search over kernels for a set of shapes, winners filed in the registry.

  cudal2 generate --backend triton|cuda|both --shapes grid|grid:N|FILE|MxNxK,... [--layout nn|nt]
                  [--budget N] [--group G] [--seed-list fixed:N|auto:N|model:N|cost:N|none]
                  [--lead-specs FILE] [--screen-ms MS]
                  [--screen-max-calls N] [--full-ms MS] [--recheck K] [--time-limit S] [--stride S]
                  [--policy default|hf:PATH] [--cost-model PATH [--critic-pool N]] [--store PATH]
                  [--registry PATH] [--resume] [--replay STORE]
                  [--cluster ray[:ADDR]] [--seed S] [--file-margin R] [--cublas-margin R] [--m-buckets]

Per shape (rl/staged.py): the shape's --lead-specs (rl/leads.py) and the --seed-list's specs, N in
all, then policy groups (GRPO on each) up to --budget evaluations, all screened (five checks at
the shape, --screen-ms of timing beside the baselines); the --recheck fastest go through the full PROTOCOL pass (six checks, --full-ms); the
fastest that passed is filed in the registry with its rendered source (as cuBLAS if it lost; a
cuBLAS entry records which cuBLAS call won every timing of the shape by --cublas-margin, else
torch.matmul). --m-buckets: a filed kernel is also timed at the bottom of its M bucket and, if it
wins there too, serves the whole bucket (cudal2.registry.evidence).
Every measurement is stored; each finished shape gets a row in the store's search log.
--resume continues a killed or time-limited run: finished shapes are skipped, measured
(profile, spec, shape) are not measured again, the latest policy checkpoint is restored.
--time-limit stops before a shape (or an evaluation) once the limit has passed; rerun with --resume.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import typer

from ..problems import Problem
from .generate_report import report_compile_errors, summary_table, totals_line

_BACKENDS = {"triton": ("triton",), "cuda": ("cuda",), "both": ("triton", "cuda")}
# Everything generate writes by default goes under this one directory (git-ignored), never into the
# current directory or the installed package's registry.
RUNS = "runs"
DEFAULT_STORE = f"{RUNS}/generate.sqlite"
DEFAULT_REGISTRY = f"{RUNS}/registry"


def _replayable(evaluator, problems, replay: str):
    """(shapes the replay store has measurements of, the texts of those it has none of). A shape
    without rows would be "searched" with every proposal unanswered and reported as nothing filed;
    none at all is a user error (exit 2), some are warned about here and fail the run at the end."""
    have = set(evaluator.table)
    absent = [p.text for p in problems if p.text not in have]
    if len(absent) == len(problems):
        raise ValueError(f"--replay {replay}: none of the {len(problems)} shapes asked for is in the store (it "
                         f"holds {len(have)} shapes of {evaluator.device_key}, e.g. {', '.join(sorted(have)[:2])})")
    if absent:
        typer.echo(f"warning: --replay {replay}: {len(absent)} of {len(problems)} shapes are not in the store "
                   f"and will not be searched ({', '.join(absent[:3])}{', ...' if len(absent) > 3 else ''})", err=True)
    return [p for p in problems if p.text in have], absent


def _cost_model(path, seed_kind: str, critic_pool: int = 0):
    """The model of --cost-model (None without one): it ranks the seeds of --seed-list cost:N and/or,
    with --critic-pool N, the policy's samples; each of those needs it, and it needs one of them."""
    from .errors import fail
    if critic_pool < 0:
        fail(f"--critic-pool must be >= 0 (0: no critic), got {critic_pool}")
    if (seed_kind == "cost" or critic_pool) and not path:
        fail(f"{'--seed-list cost:N' if seed_kind == 'cost' else '--critic-pool'} needs --cost-model PATH "
             "(train one: cudal2 train --store STORE --out PATH)")
    if path and seed_kind != "cost" and not critic_pool:
        fail("--cost-model ranks the seeds of --seed-list cost:N or, with --critic-pool N, the policy's "
             "samples; give one of those too")
    if not path:
        return None
    from ..rl.costmodel import CostModel
    try:
        return CostModel.load(path)
    except ValueError as e:
        fail(f"--cost-model {e}")


def _make_policy(spec: str, seed: int, init: str | None = None):
    if init and spec != "default":
        raise ValueError("--init-policy starts the default policy; --policy hf:PATH loads its own weights")
    if spec == "default":
        from ..rl.policy import SpecPolicy
        if not init:
            return SpecPolicy(seed=seed)
        if not Path(init).is_file():
            raise ValueError(f"--init-policy {init}: no such file")
        try:
            return SpecPolicy.load(init)
        except Exception as e:      # torch raises several types for a file that is not a checkpoint
            raise ValueError(f"--init-policy {init}: not a policy checkpoint ({type(e).__name__})") from None
    if spec.startswith("hf:"):
        from ..rl.hf_policy import HFPolicy
        return HFPolicy.load(spec[3:], seed=seed)
    raise ValueError(f"--policy {spec!r}: use 'default' or 'hf:PATH' (a local Hugging Face model directory)")


def generate_cmd(
    shapes: str = typer.Option(..., "--shapes", help="grid | grid:N (every N-th) | FILE | MxNxK,MxNxK,..."),
    backend: str = typer.Option("both", "--backend", help="triton, cuda or both"),
    layout: str = typer.Option("nn", "--layout", help="nn (B is [K,N]) or nt (B is [N,K])"),
    budget: int = typer.Option(32, "--budget", help="evaluations (distinct specs) per shape"),
    group: int = typer.Option(8, "--group", help="GRPO group size: candidates sampled per update"),
    policy: str = typer.Option("default", "--policy", help="default (tiny transformer) or hf:PATH"),
    store_path: str = typer.Option(DEFAULT_STORE, "--store", help="SQLite store of every measurement (its policy "
                                   f"checkpoints go to STORE.ckpt/); default under {RUNS}/, which git ignores"),
    registry: Optional[str] = typer.Option(None, "--registry", help="registry directory the winners are filed in "
                                           f"(default: $CUDAL2_REGISTRY, else {DEFAULT_REGISTRY}; the shipped one "
                                           "is never written)"),
    resume: bool = typer.Option(False, "--resume", help="continue a killed run: skip what the store has, restore the policy"),
    replay: Optional[str] = typer.Option(None, "--replay", help="a store to replay measurements from (no GPU); "
                                         "SQLite or gzip-compressed SQLite (the committed .db.gz)"),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="ray or ray:ADDRESS to evaluate on a Ray cluster"),
    seed: int = typer.Option(0, "--seed", help="seed of the policy's initialisation and sampling"),
    workers: Optional[int] = typer.Option(None, "--workers", help="CPU compile workers (default: all cores)"),
    seed_list: str = typer.Option(
        "fixed:8", "--seed-list", help="evaluate first, per shape: fixed:N (the fixed autotune list's first N), "
        "auto:N (the same, with split-K seeds where the tiles cannot fill the SMs and K is deep), "
        "model:N (half from the Hopper wgmma family's cost model, cudal2.tiles, the rest as auto), "
        "cost:N (the best N of a pool of ~1000 candidates by the learned model of --cost-model) or none"),
    init_policy: Optional[str] = typer.Option(
        None, "--init-policy", help="start the default policy from this checkpoint (cudal2 train --policy-out: "
        "pretrained on stored measurements) instead of fresh weights; --resume's checkpoint still wins"),
    cost_model: Optional[str] = typer.Option(
        None, "--cost-model", help="a model from `cudal2 train` (for --seed-list cost:N and --critic-pool): "
        "ranks candidates on the CPU before any GPU time"),
    critic_pool: int = typer.Option(
        0, "--critic-pool", help="N > 0: each policy group is the --cost-model's best of N x --group of the "
        "policy's samples (the policy with a critic; 32 measured best on the H200 study, run 54: 0.982 of the "
        "reference at 16 proposals vs 0.972 with 8); 0: the policy's own draw"),
    screen_ms: float = typer.Option(10.0, "--screen-ms", help="timing per function in the screen of each proposal (ms)"),
    full_ms: float = typer.Option(100.0, "--full-ms", help="timing per function in the full re-check (ms)"),
    screen_max_calls: Optional[int] = typer.Option(
        None, "--screen-max-calls", help="cap on the screen's timed calls per function (default none)"),
    recheck_k: int = typer.Option(2, "--recheck", help="screened candidates per shape that get the full re-check"),
    # 1.01: on the H200 grid (2026-12-03) kernels filed on a full-pass win under 1% lost to
    # best-cublas in the next run on 7 of 12 shapes offline (geomean 1.000x) and 8 of 12 server
    # (0.975x); wins of 1-2% held offline on 6 of 6 (grid_search/report.md, "Filed kernels by their win").
    file_margin: float = typer.Option(
        1.01, "--file-margin", help="file a kernel only if best-cublas / its full-pass time is at least this "
        "(1.0: any win); below it the shape is filed as cuBLAS"),
    # 1.01: cudal2.registry.evidence (CUBLAS_MARGIN) says why.
    cublas_margin: float = typer.Option(
        1.01, "--cublas-margin", help="a cuBLAS entry runs a cuBLASLt call only if it beat torch.matmul by at "
        "least this in every timing of the shape (at least two), else torch.matmul"),
    m_buckets: bool = typer.Option(
        False, "--m-buckets", help="after filing a kernel, time its spec (full check) at the bottom of its M "
        "bucket: one above the next smaller M of the same N, K, layout in --shapes; if it wins there by "
        "--file-margin too, the entry serves every M of the bucket (its scope)"),
    time_limit: Optional[float] = typer.Option(
        None, "--time-limit", help="seconds; stop cleanly after that (resume later)"),
    baselines_arg: Optional[str] = typer.Option(
        None, "--baselines", help="the baselines best-cublas is formed from: all (the default; generate refuses "
        "to run when one cannot be built, e.g. nvmath-python missing) or a comma list, e.g. torch, to run "
        "on those alone"),
    lead_specs: Optional[str] = typer.Option(
        None, "--lead-specs", help="a file of 'MxNxK:layout|spec' lines: per shape, specs evaluated before the "
        "--seed-list seeds and counted in its N (e.g. the other layout's winner: bench/search_order.py --leads-out)"),
    stride: int = typer.Option(
        1, "--stride", help="visit shape i*STRIDE mod n (coprime to n, e.g. 7): a time-limited run then covers "
        "the whole range of shapes, not the smallest first"),
) -> None:
    """Search kernels with the RL policy and file the fastest correct one per shape in the registry."""
    from .errors import fail
    from ..problems import ProblemError, parse_shapes

    if backend not in _BACKENDS:
        fail(f"--backend {backend!r}: choose triton, cuda or both")
    if not file_margin >= 1.0 or not cublas_margin >= 1.0:
        fail(f"--file-margin and --cublas-margin must be >= 1.0 (ratios), got {file_margin}, {cublas_margin}")
    if budget < 1 or group < 1 or recheck_k < 1:
        fail(f"--budget, --group and --recheck must be >= 1 (got {budget}, {group}, {recheck_k})")
    from ..rl.staged import SeedListError, parse_seed_list, profiles
    try:
        seed_kind, n_seed = parse_seed_list(seed_list)
        prof = profiles(screen_ms, full_ms, screen_max_calls)
    except (SeedListError, ValueError) as e:
        fail(str(e))
    if time_limit is not None and time_limit <= 0:
        fail(f"--time-limit must be > 0 seconds (got {time_limit})")
    from ..rl.leads import LeadError, read_leads
    try:
        leads = read_leads(lead_specs) if lead_specs else {}
    except LeadError as e:
        fail(str(e))
    ranker = _cost_model(cost_model, seed_kind, critic_pool)
    from .compare import parse_baselines
    from .errors import UserError
    try:
        names = parse_baselines(baselines_arg or "all")
    except UserError as e:
        fail(str(e))
    strict = baselines_arg is None     # all five by default: none may drop out of the bar silently
    t_start = time.monotonic()
    try:
        problems = parse_shapes(shapes, layout)
    except ProblemError as e:
        fail(str(e))
    if not problems:
        fail(f"--shapes {shapes!r} names no shapes")
    import math
    if stride < 1 or math.gcd(stride, len(problems)) != 1:
        fail(f"--stride {stride} must be >= 1 and coprime to the number of shapes ({len(problems)})")
    problems = [problems[(i * stride) % len(problems)] for i in range(len(problems))]
    if replay and cluster:
        fail("--replay and --cluster exclude each other: a replay needs no GPU")
    if replay and Path(replay).resolve() == Path(store_path).resolve():
        fail("--replay and --store are the same file: write the replayed run to a different store")

    if registry is None:
        import os
        from ..registry import ENV
        registry = os.environ.get(ENV) or DEFAULT_REGISTRY
    from ..registry import shipped_root
    if Path(registry).resolve() == shipped_root().resolve():
        fail(f"--registry {registry} is the shipped registry, which generate does not write: export it "
             "(cudal2 registry export DIR) and file into the copy")

    from ..device import gpu_available
    from ..store import Store, StoreError
    evaluator = replay_tmp = None
    absent: list = []
    try:
        if replay:
            if not Path(replay).is_file():
                fail(f"--replay {replay}: no such store")
            from ..rl.replay import ReplayEvaluator
            from .stores import replay_device, sqlite_copy
            replay_db, replay_tmp = sqlite_copy(replay)
            src = Store(replay_db)
            evaluator = ReplayEvaluator(src)
            device_key = evaluator.device_key
            device = replay_device(src, device_key)
            versions = {"replay": str(replay)}
            problems, absent = _replayable(evaluator, problems, replay)
        else:
            if not gpu_available() and not cluster:
                fail("no CUDA GPU visible: run on a GPU machine, --cluster ray[:ADDR], "
                     "or --replay STORE to search over stored measurements", code=3)
            from ..evaluate import make_evaluator
            kw = {"workers": workers} if workers else {}
            evaluator = make_evaluator(cluster, baselines=names, strict_baselines=strict, **kw)
            check = getattr(evaluator, "unbuildable_baselines", None)
            missing = check() if strict and check is not None else {}
            if missing:          # before any GPU work: the evaluator's worker has not started
                evaluator.close()
                from ..baselines import refusal
                fail(refusal(missing))
            device = evaluator.device
            device_key = device.key
            versions = dict(getattr(evaluator, "versions", {}) or {})
        if ranker is not None and ranker.device_key != device_key:
            raise ValueError(f"--cost-model {cost_model} was trained on {ranker.device_key} measurements; "
                             f"this run is on {device_key}")
        store = Store(store_path)
        pol = _make_policy(policy, seed, init_policy)
    except (StoreError, ValueError, OSError) as e:
        if evaluator is not None:
            evaluator.close()
        if replay_tmp is not None:
            replay_tmp.cleanup()
        fail(str(e).splitlines()[0])
        return

    config = {"command": "generate", "backend": backend, "shapes": shapes, "layout": layout, "budget": budget,
              "group": group, "policy": policy, "replay": replay, "cluster": cluster, "seed": seed,
              "resume": resume, "device_info": device.to_dict(), "seed_list": seed_list, "screen_ms": screen_ms,
              "full_ms": full_ms, "screen_max_calls": screen_max_calls, "recheck": recheck_k,
              "time_limit": time_limit, "stride": stride, "file_margin": file_margin,
              "cublas_margin": cublas_margin, "m_buckets": m_buckets, "cost_model": cost_model,
              "init_policy": init_policy, "critic_pool": critic_pool, "lead_specs": lead_specs,
              # the baselines best-cublas is formed from, and whether the user named them
              "baselines": None if replay else list(names), "baselines_named": baselines_arg is not None}
    run_id = store.new_run(config, device=device_key, versions=versions)
    from ..rl.shared_eval import SharedEvaluator
    from .filing import bucket_floors
    deadline = t_start + time_limit if time_limit else None
    shared = SharedEvaluator(evaluator, store=store, run_id=run_id, device_key=device_key, deadline=deadline,
                             on_new=lambda problem, ms: report_compile_errors(problem, ms, store_path))
    shared.add_profile("screen", **prof[0])
    shared.add_profile("full", **prof[1])
    opts = {"budget": budget, "group": group, "backends": _BACKENDS[backend], "seed": seed, "resume": resume,
            "registry": registry, "n_seed": n_seed, "seed_kind": seed_kind, "recheck": recheck_k, "deadline": deadline,
            "file_margin": file_margin, "baselines": None if replay else list(names),
            "cublas_margin": cublas_margin, "buckets": bucket_floors(problems) if m_buckets else {}, "ranker": ranker,
            "critic_pool": critic_pool, "leads": leads}
    from ..evaluate.procs import EvaluatorError
    try:
        results, left = _search(pol, shared, device, device_key, store, run_id, problems, opts)
    except (ValueError, EvaluatorError) as e:   # e.g. no valid spec for a shape; a baseline that failed
        fail(str(e).splitlines()[0])
        return
    finally:
        evaluator.close()
        if replay_tmp is not None:
            replay_tmp.cleanup()
    summary_table(results, device_key, store_path)
    totals_line(results, shared, time.monotonic() - t_start, replayed=bool(replay))
    store.close()
    if results:
        typer.echo(f"registry: {registry} (serve it: CUDAL2_REGISTRY={registry}); store: {store_path}")
    if left:
        typer.echo(f"stopped at the time limit: {left} of {len(problems)} shapes not finished; "
                   "run the same command with --resume to go on")
    if absent:      # searched what the store has; a script must still see that the rest was not
        fail(f"--replay {replay}: {len(absent)} of the shapes asked for are not in the store and were not searched "
             f"({', '.join(absent[:3])}{', ...' if len(absent) > 3 else ''})", code=1)


def _search(pol, shared, device, device_key, store, run_id, problems, o):
    """The shapes in order; returns ([(outcome, registry action)], shapes left at the time limit)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..rl.search import Search
    from ..rl.shared_eval import StudyDeadline
    from ..rl.leads import valid_leads, with_leads
    from ..rl.staged import log_row, search_shape, seed_specs
    from .filing import file_outcome, scope_bucket
    console = Console(stderr=True)
    totals = {"evals": 0, "fail": 0, "won": 0, "rejected": 0, "sampled": 0}
    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("evals {task.fields[evals]}  failures {task.fields[fail]}  "
                               "kernel beats best-cuBLAS on {task.fields[won]}"), TimeElapsedColumn(),
                    console=console)
    task = prog.add_task("shapes", total=len(problems), evals=0, fail=0, won=0)
    done = store.shapes(device_key) if o["resume"] else {}
    results: list = []

    def on_event(kind, **kw):
        if kind == "restored":
            console.print(f"restored policy checkpoint {kw['path']} (step {kw['steps']})")
        elif kind == "group_done":
            rejected = [x.reason for x in kw.get("samples", []) if x.reason]
            totals["sampled"] += len(kw.get("samples", []))
            if rejected and not totals["rejected"]:
                console.print(f"note: the LM's answer was corrected: {rejected[0]}")
            totals["rejected"] += len(rejected)

    ckdir = Path(str(store.path) + ".ckpt")
    search = Search(pol, shared.view("generate", "screen"), device, device_key, store=store, run_id=run_id,
                    group=o["group"], backends=o["backends"], seed=o["seed"], resume=o["resume"],
                    checkpoint_dir=ckdir, on_event=on_event, store_measurements=False,
                    critic=o["ranker"] if o["critic_pool"] else None, critic_pool=max(o["critic_pool"], 1))
    todo = [p for p in problems if p.text not in done]
    if done:
        console.print(f"--resume: {len(problems) - len(todo)} shapes already finished in the store, skipped")
        prog.update(task, completed=len(problems) - len(todo))
    dropped = []

    def seeds(p):
        """(the shape's seed list, its lead specs dropped as invalid)"""
        lead, n_bad = valid_leads(o["leads"], p, device, o["backends"])
        return with_leads(lead, seed_specs(o["n_seed"], p, device, o["backends"], o["seed_kind"], o["ranker"]),
                          o["n_seed"]), n_bad
    if o["leads"]:
        named = sum(p.text in o["leads"] for p in todo)
        console.print(f"--lead-specs: {named} of the {len(todo)} shapes to search have lead specs")
    left = 0
    # Seeds are a pure function of the shape (the pool's draws are seeded by the shape's text, the
    # cost model is fixed), so a thread computes them two shapes ahead while this one is measured:
    # 0.07-0.15 s of host time per shape with cost:4 that the GPU otherwise waits for (a CPU replay
    # of 8 grid shapes with a sleeping evaluator, 2 cores, 2026-12-05: the main thread then waited
    # 0.04 s for the first shape's and 0 for the others). Same seeds, same order, same registry
    # (30-shape replays before / after, budget 8 cost:4 and budget 2 with leads).
    with prog, ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudal2-seeds") as ahead:
        fut = {j: ahead.submit(seeds, todo[j]) for j in range(min(2, len(todo)))}
        nxt = fut.pop(0).result() if todo else ([], 0)
        for i, p in enumerate(todo):
            if o["deadline"] is not None and time.monotonic() > o["deadline"]:
                left = len(todo) - i
                break
            prog.update(task, description=f"{p}")
            (here, n_bad), nxt = nxt, fut.pop(i + 1).result() if i + 1 < len(todo) else ([], 0)
            dropped.append(n_bad)
            if i + 2 < len(todo):
                fut[i + 2] = ahead.submit(seeds, todo[i + 2])
            if nxt[0]:     # the CPU compiles the next shape's seeds while the GPU works here
                shared.prefetch(todo[i + 1], nxt[0])
            try:
                out = search_shape(search, shared, p, o["budget"], here, o["recheck"])
            except StudyDeadline:
                left = len(todo) - i
                break
            action = file_outcome(o["registry"], out, device_key, o["file_margin"], o["baselines"], store,
                                  o["cublas_margin"])
            lo = o["buckets"].get(p.text)
            if lo is not None and action.startswith(("filed triton", "filed cuda")):
                action += "; " + scope_bucket(shared, o["registry"], p, lo, device_key, o["file_margin"])
            store.add_shape(p, device_key, log_row(out, action), run_id=run_id)
            results.append((out, action))
            totals["evals"] += out["evaluations"] + out["full_evaluations"]
            totals["fail"] += sum(out["failures_screen"].values()) + sum(out["failures_full"].values())
            # A kernel that beat best-cublas in the full pass, whether or not it cleared the filing margin.
            totals["won"] += bool(out["winner"] is not None and (out["full_speedup"] or 0) > 1.0)
            prog.update(task, evals=totals["evals"], fail=totals["fail"], won=totals["won"])
            prog.advance(task)
        prog.update(task, description="shapes")
        for f in fut.values():      # stopped early: the seeds computed ahead are not needed
            f.cancel()
    if sum(dropped):
        console.print(f"--lead-specs: {sum(dropped)} lead specs dropped (invalid for their shape or backend)")
    if totals["rejected"]:
        console.print(f"{totals['rejected']} of {totals['sampled']} LM answers were rejected (unparseable or invalid) and corrected "
                      "by constrained decoding; none was executed as written")
    return results, left


def register(app) -> None:
    app.command("generate")(generate_cmd)
