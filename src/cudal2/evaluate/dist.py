"""The evaluator on Ray: one actor per GPU, compiles as Ray tasks, results back to one driver.

  RayEvaluator(address=None, gpus=None, device_key=None, inflight=2, **evaluator options)
    .evaluate(problem, specs)             -> list[Measurement]           (as Evaluator)
    .evaluate_many([(problem, specs), ...], store=None, run_id=None, on_result=None)
                                          -> list[list[Measurement]], in input order

Each actor (num_gpus=1) holds a local Evaluator, so it owns a GPU worker *process* with the same
crash isolation and restarts as a local run; the actor never touches the store. The driver validates
specs, submits their compiles as Ray tasks (num_cpus=1 each, anywhere in the cluster) and hands the
compile results to an actor by reference, so compiles of the next batches overlap GPU work on this
one: each actor has up to `inflight` batches queued, more than the GPUs can run at once. Finished
batches stream back in completion order; the driver alone writes them to the store, one transaction
per batch. An actor that dies (node lost, ray.kill) fails its queued batches, which go to the other
actors (the compile results are reused); the run stops only if every actor is gone.

Results are keyed by device: every actor reports its GPU's DeviceInfo.key, and one RayEvaluator uses
actors of one key only (device_key picks it on a mixed cluster), so no measurement mixes GPU models.

Ray is imported here only (the `dist` extra); local runs never import this module.
"""
from __future__ import annotations

import collections
import os
from typing import Callable, Iterable

from ..device import DeviceInfo
from ..measurement import Measurement
from ..problems import Problem
from .evaluator import Evaluator, parse_and_validate
from .procs import EvaluatorError, backend_compile, compile_one

__all__ = ["RayEvaluator", "GpuActor"]


def _ray():
    try:
        import ray
    except ImportError:
        raise EvaluatorError("--cluster ray needs Ray: pip install 'cudal2[dist]'") from None
    return ray


class GpuActor:
    """Body of the per-GPU actor: a local Evaluator whose compiles arrive ready-made."""

    def __init__(self, evaluator_kw: dict):
        self.ev = Evaluator(**{**evaluator_kw, "workers": 0})

    def info(self) -> dict:
        return {"device": self.ev.device.to_dict(), "versions": self.ev.versions, "pid": os.getpid(),
                "node": os.uname().nodename}

    def run(self, problem_text: str, best_us: float | None, items: list, *compiled) -> tuple[list[dict], float | None]:
        problem = Problem.parse(problem_text)
        self.ev.best_known(problem, best_us)
        it = iter(compiled)
        full = [(t, spec, r if spec is None else next(it)) for t, spec, r in items]
        ms = self.ev.run_compiled(problem, full)
        return [m.to_dict() for m in ms], self.ev.best_known(problem)

    def restarts(self) -> int:
        return self.ev.restarts

    def close(self) -> None:
        self.ev.close()


class RayEvaluator:
    def __init__(self, address: str | None = None, gpus: int | None = None, device_key: str | None = None,
                 inflight: int = 2, compile_fn: Callable | None = None,
                 max_retries: int = 3, ray_init: dict | None = None, **evaluator_kw):
        ray = _ray()
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, **(ray_init or {}))
        if inflight < 1:
            raise ValueError(f"inflight must be >= 1 (batches queued per GPU), got {inflight}")
        self.inflight, self.max_retries = int(inflight), int(max_retries)
        have = int(ray.cluster_resources().get("GPU", 0))
        n = have if gpus is None else int(gpus)
        if n < 1 or n > have:
            raise EvaluatorError(f"the Ray cluster has {have} GPU(s); asked for {gpus if gpus is not None else 'all'}")
        self.compile_fn = compile_fn or backend_compile
        # Compiles are Ray tasks (one CPU each); a `workers` option (the local compile pool) reaches
        # the actors in evaluator_kw, where GpuActor sets it to 0.
        self._compile = ray.remote(num_cpus=1, max_retries=1)(compile_one)
        actor_cls = ray.remote(num_gpus=1, num_cpus=0, max_restarts=0, max_concurrency=1)(GpuActor)
        actors = [actor_cls.remote(evaluator_kw) for _ in range(n)]
        try:
            infos = ray.get([a.info.remote() for a in actors])
        except ray.exceptions.RayError as e:
            for a in actors:
                ray.kill(a)
            cause = getattr(e, "cause", None) or e
            raise EvaluatorError(f"a GPU actor could not start its worker: {cause}".splitlines()[0]) from None
        keys = collections.Counter(DeviceInfo.from_dict(i["device"]).key for i in infos)
        if device_key is None and len(keys) > 1:
            for a in actors:
                ray.kill(a)
            raise EvaluatorError("the cluster has GPUs of several models (" +
                                 ", ".join(f"{k} x{c}" for k, c in sorted(keys.items())) +
                                 "): pick one with device_key, results are never mixed across models")
        key = device_key or next(iter(keys))
        self.actors, self.infos = [], []
        for a, i in zip(actors, infos):
            if DeviceInfo.from_dict(i["device"]).key == key:
                self.actors.append(a)
                self.infos.append(i)
            else:
                ray.kill(a)
        if not self.actors:
            raise EvaluatorError(f"no GPU of the cluster is a {key} (found {dict(keys)})")
        self.device = DeviceInfo.from_dict(self.infos[0]["device"])
        self.versions = self.infos[0]["versions"]
        self.alive = set(range(len(self.actors)))
        self.batches_per_actor: collections.Counter = collections.Counter()
        self.actor_deaths = 0
        self.retried = 0          # batches sent again after their actor died
        self._best: dict[str, float] = {}

    # ---- scheduling -------------------------------------------------------------------------------
    def _prepare(self, problem, specs) -> dict:
        problem = problem if isinstance(problem, Problem) else Problem.parse(problem)
        items, refs = [], []
        for s in specs:
            text, spec, reason = parse_and_validate(s, problem, self.device)
            items.append((text, spec, reason))
            if spec is not None:
                refs.append(self._compile.remote(self.compile_fn, spec, problem, self.device))
        return {"problem": problem, "items": items, "refs": refs, "attempts": 0}

    def evaluate_many(self, batches: Iterable[tuple], store=None, run_id: int | None = None,
                      on_result: Callable | None = None) -> list[list[Measurement]]:
        ray = self._ray
        todo = collections.deque((k, p, s) for k, (p, s) in enumerate(batches))
        results: dict[int, list[Measurement]] = {}
        retry: collections.deque = collections.deque()
        flying: dict = {}                              # ref -> (k, actor index, job)
        load = collections.Counter()
        while todo or retry or flying:
            while (todo or retry) and self.alive:
                free = [i for i in self.alive if load[i] < self.inflight]
                if not free:
                    break
                i = min(free, key=lambda a: (load[a], a))
                k, job = retry.popleft() if retry else (todo[0][0], self._prepare(*todo.popleft()[1:]))
                p = job["problem"].text
                ref = self.actors[i].run.remote(p, self._best.get(p), job["items"], *job["refs"])
                flying[ref] = (k, i, job)
                load[i] += 1
            if not flying:
                raise EvaluatorError(f"every GPU actor died ({self.actor_deaths} deaths); "
                                     f"{len(todo) + len(retry)} batch(es) left unevaluated")
            (ref,), _ = ray.wait(list(flying), num_returns=1)
            k, i, job = flying.pop(ref)
            load[i] -= 1
            try:
                dicts, best = ray.get(ref)
            except ray.exceptions.RayActorError:
                if i in self.alive:
                    self.alive.discard(i)
                    self.actor_deaths += 1
                job["attempts"] += 1
                if job["attempts"] > self.max_retries:
                    raise EvaluatorError(f"batch {k} ({job['problem']}) lost its actor {job['attempts']} times")
                retry.append((k, job))
                self.retried += 1
                continue
            except ray.exceptions.RayError as e:
                # A compile task whose process died fails the batch that waits on it: charge it to
                # its spec (as a local run does) and send the batch again.
                if not self._charge_dead_compiles(job):
                    cause = getattr(e, "cause", None) or e
                    raise EvaluatorError(f"GPU actor {i} failed on {job['problem']}: {cause!r}") from None
                retry.append((k, job))
                continue
            ms = [Measurement.from_dict(d) for d in dicts]
            bad = {m.device for m in ms} - {self.device.key}
            if bad:   # the filter at start makes this impossible; a mixed result must never be stored
                raise EvaluatorError(f"actor {i} reported device {bad}, this run is {self.device.key}")
            if best is not None:
                p = job["problem"].text
                self._best[p] = min(best, self._best.get(p, best))
            self.batches_per_actor[i] += 1
            if store is not None:
                store.add(ms, run_id)
            if on_result is not None:
                on_result(k, ms)
            results[k] = ms
        return [results[k] for k in sorted(results)]

    def _charge_dead_compiles(self, job: dict) -> int:
        ray, n = self._ray, 0
        for j, ref in enumerate(job["refs"]):
            try:
                ray.get(ref, timeout=60)
            except ray.exceptions.RayError as e:
                why = type(e).__name__
                job["refs"][j] = ray.put(("error", f"the compile task's process died ({why})"))
                n += 1
        return n

    def evaluate(self, problem, specs) -> list[Measurement]:
        return self.evaluate_many([(problem, list(specs))])[0]

    def restarts(self) -> int:
        """GPU worker restarts summed over the live actors."""
        ray = self._ray
        return sum(ray.get([self.actors[i].restarts.remote() for i in sorted(self.alive)]))

    def close(self) -> None:
        ray = self._ray
        for i in sorted(self.alive):
            try:
                ray.get(self.actors[i].close.remote(), timeout=30)
            except Exception:   # a dying actor need not close cleanly; it is killed below
                pass
            ray.kill(self.actors[i])
        self.alive.clear()
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
