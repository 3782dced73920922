"""`cudal2 generate`: the RL search over kernels for a set of shapes, winners filed in the registry.

  cudal2 generate --backend triton|cuda|both --shapes grid|grid:N|FILE|MxNxK,... [--layout nn|nt]
                  [--budget N] [--group G] [--policy default|hf:PATH] [--store PATH]
                  [--registry PATH] [--resume] [--replay STORE] [--cluster ray[:ADDR]] [--seed S]

Per shape: sample a group from the policy, evaluate (GPU evaluator, a Ray cluster, or --replay:
stored measurements, no GPU), store every result, reward, GRPO update, checkpoint the policy beside
the store; then the fastest correct kernel is filed in the registry with its rendered source.
--resume continues a killed run: measured (spec, problem, device) are not measured again and the
latest policy checkpoint is restored.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

_BACKENDS = {"triton": ("triton",), "cuda": ("cuda",), "both": ("triton", "cuda")}


def _replay_device(store, device_key: str):
    """DeviceInfo for masks and policy features: the one a GPU run recorded, else the arch's limits."""
    from .device import DeviceInfo
    from .registry import target_for_key
    for run in reversed(store.runs()):
        info = run["config"].get("device_info") if isinstance(run["config"], dict) else None
        if info and info.get("key") == device_key:
            return DeviceInfo.from_dict(info)
    return target_for_key(device_key)


def _make_policy(spec: str, seed: int):
    if spec == "default":
        from .rl.policy import SpecPolicy
        return SpecPolicy(seed=seed)
    if spec.startswith("hf:"):
        from .rl.hf_policy import HFPolicy
        return HFPolicy.load(spec[3:], seed=seed)
    raise ValueError(f"--policy {spec!r}: use 'default' or 'hf:PATH' (a local Hugging Face model directory)")


def _file_winner(registry: Optional[str], res, device_key: str) -> str:
    """File the problem's best ok measurement; returns what happened, for the summary table."""
    from .backends import get_backend
    from .registry import RegistryError, record_winner
    from .spec import KernelSpec
    best = res.best
    if best is None:
        return "no correct kernel"
    spec = KernelSpec.parse(best.spec)
    try:
        source = get_backend(spec.backend).render(spec, res.problem)
        entry = record_winner(registry, best, source, device_key)
    except (RegistryError, ImportError, ValueError) as e:
        return f"not filed: {str(e).splitlines()[0]}"
    if entry is None:
        return "kept (registry has faster)"
    return f"filed {entry.backend}"


def generate_cmd(
    shapes: str = typer.Option(..., "--shapes", help="grid | grid:N (every N-th) | FILE | MxNxK,MxNxK,..."),
    backend: str = typer.Option("both", "--backend", help="triton, cuda or both"),
    layout: str = typer.Option("nn", "--layout", help="nn (B is [K,N]) or nt (B is [N,K])"),
    budget: int = typer.Option(32, "--budget", help="evaluations (distinct specs) per shape"),
    group: int = typer.Option(8, "--group", help="GRPO group size: candidates sampled per update"),
    policy: str = typer.Option("default", "--policy", help="default (tiny transformer) or hf:PATH"),
    store_path: str = typer.Option("cudal2_runs.db", "--store", help="SQLite store of every measurement"),
    registry: Optional[str] = typer.Option(None, "--registry", help="registry directory (default: $CUDAL2_REGISTRY or the shipped one)"),
    resume: bool = typer.Option(False, "--resume", help="continue a killed run: skip what the store has, restore the policy"),
    replay: Optional[str] = typer.Option(None, "--replay", help="a store to replay measurements from (no GPU)"),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="ray or ray:ADDRESS to evaluate on a Ray cluster"),
    seed: int = typer.Option(0, "--seed", help="seed of the policy's initialisation and sampling"),
    workers: Optional[int] = typer.Option(None, "--workers", help="CPU compile workers (default: all cores)"),
) -> None:
    """Search kernels with the RL policy and file the fastest correct one per shape in the registry."""
    from .cli import fail
    from .problems import ProblemError, parse_shapes

    if backend not in _BACKENDS:
        fail(f"--backend {backend!r}: choose triton, cuda or both")
    if budget < 1 or group < 1:
        fail(f"--budget and --group must be >= 1 (got {budget}, {group})")
    try:
        problems = parse_shapes(shapes, layout)
    except ProblemError as e:
        fail(str(e))
    if not problems:
        fail(f"--shapes {shapes!r} names no shapes")
    if replay and cluster:
        fail("--replay and --cluster exclude each other: a replay needs no GPU")
    if replay and Path(replay).resolve() == Path(store_path).resolve():
        fail("--replay and --store are the same file: write the replayed run to a different store")

    from .device import gpu_available
    from .store import Store, StoreError
    evaluator = None
    try:
        if replay:
            if not Path(replay).is_file():
                fail(f"--replay {replay}: no such store")
            from .rl.replay import ReplayEvaluator
            src = Store(replay)
            evaluator = ReplayEvaluator(src)
            device_key = evaluator.device_key
            device = _replay_device(src, device_key)
            versions = {"replay": str(replay)}
        else:
            if not gpu_available() and not cluster:
                fail("no CUDA GPU visible: run on a GPU machine, --cluster ray[:ADDR], "
                     "or --replay STORE to search over stored measurements", code=3)
            from .evaluate import make_evaluator
            kw = {"workers": workers} if workers else {}
            evaluator = make_evaluator(cluster, **kw)
            device = evaluator.device
            device_key = device.key
            versions = dict(getattr(evaluator, "versions", {}) or {})
        store = Store(store_path)
        pol = _make_policy(policy, seed)
    except (StoreError, ValueError, OSError) as e:
        if evaluator is not None:
            evaluator.close()
        fail(str(e).splitlines()[0])
        return

    config = {"command": "generate", "backend": backend, "shapes": shapes, "layout": layout, "budget": budget,
              "group": group, "policy": policy, "replay": replay, "cluster": cluster, "seed": seed,
              "resume": resume, "device_info": device.to_dict()}
    run_id = store.new_run(config, device=device_key, versions=versions)
    try:
        results = _search(pol, evaluator, device, device_key, store, run_id, problems, budget, group,
                          _BACKENDS[backend], seed, resume, registry)
    except ValueError as e:          # e.g. no valid spec of the backend for a shape
        fail(str(e).splitlines()[0])
        return
    finally:
        evaluator.close()
    _summary(results, device_key, store_path)
    phases = getattr(evaluator, "phase_s", None)
    if phases:
        typer.echo("evaluator wall seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    store.close()


def _search(pol, evaluator, device, device_key, store, run_id, problems, budget, group, backends, seed,
            resume, registry):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .rl.search import Search
    console = Console(stderr=True)
    totals = {"evals": 0, "fail": 0, "best": None}
    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("evals {task.fields[evals]}  failures {task.fields[fail]}  "
                               "best speedup {task.fields[best]}"), TimeElapsedColumn(), console=console)
    task = prog.add_task("shapes", total=len(problems), evals=0, fail=0, best="-")
    results = []

    def on_event(kind, **kw):
        if kind == "restored":
            console.print(f"restored policy checkpoint {kw['path']} (step {kw['steps']})")
        elif kind == "problem_start" and kw["result"].resumed:
            console.print(f"{kw['problem']}: {kw['result'].resumed} measurements already in the store")
        elif kind == "group_done":
            rejected = [x.reason for x in kw.get("samples", []) if x.reason]
            if rejected and not totals.get("rejected"):
                console.print(f"note: the LM's answer was corrected: {rejected[0]}")
            totals["rejected"] = totals.get("rejected", 0) + len(rejected)
            totals["evals"] += len(kw["fresh"])
            totals["fail"] += sum(m.status not in ("ok", "slow") for m in kw["fresh"])
            for m in kw["fresh"]:
                if m.speedup and (totals["best"] is None or m.speedup > totals["best"]):
                    totals["best"] = m.speedup
            prog.update(task, evals=totals["evals"], fail=totals["fail"],
                        best=f"{totals['best']:.3f}x" if totals["best"] else "-")

    search = Search(pol, evaluator, device, device_key, store=store, run_id=run_id, group=group,
                    backends=backends, seed=seed, resume=resume, on_event=on_event)
    with prog:
        for p in problems:
            prog.update(task, description=f"{p}")
            res = search.run_problem(p, budget)
            results.append((res, _file_winner(registry, res, device_key)))
            prog.advance(task)
        prog.update(task, description="shapes")
    if totals.get("rejected"):
        console.print(f"{totals['rejected']} LM answers were rejected (unparseable or invalid) and corrected "
                      "by constrained decoding; none was executed as written")
    return results


def _summary(results, device_key: str, store_path: str) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"cudal2 generate on {device_key} (store {store_path})")
    for col in ("problem", "evals", "failures", "best spec", "kernel us", "best-cuBLAS us", "speedup", "registry"):
        t.add_column(col, justify="right" if col in ("evals", "failures", "kernel us", "best-cuBLAS us", "speedup") else "left")
    for res, action in results:
        b = res.best
        t.add_row(res.problem.text, str(len(res.evaluated)), str(res.failures), b.spec if b else "-",
                  f"{b.time_us:.2f}" if b else "-", f"{b.best_cublas_us:.2f}" if b and b.best_cublas_us else "-",
                  f"{b.speedup:.3f}x" if b and b.speedup else "-", action)
    con = Console()
    # Piped (a log, a test): do not squeeze the spec column into the 80-column default.
    (con if con.is_terminal else Console(width=240)).print(t)


def register(app) -> None:
    app.command("generate")(generate_cmd)
