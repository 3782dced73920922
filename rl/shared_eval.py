"""The shared evaluation layer of the search-efficiency study (bench/efficiency.py): one evaluator, one
cache, every method.

`SharedEvaluator` wraps one inner evaluator (GPU, the FakeEvaluator stand-in, or a replay) with named
profiles - `screen` (SCREEN: the checks at the problem's own shape without `edges`, 10 ms of timing)
for every proposal and `full` (FULL: all six checks, 100 ms) for the re-check of winners - and caches
measurements by (profile, problem, spec), so a spec measured once, by any method or by an earlier run
on the same store, is not measured again; `view(tag, profile)` is the evaluator handed to one method,
with per-method accounting of proposals, new evaluations and seconds. `ProfiledReplay` answers both
profiles from a stored study. `StudyDeadline` is raised when the study's time limit comes before an
evaluation.
"""
from __future__ import annotations

import copy
import hashlib
import json
import time
from collections import defaultdict

from cudal2.measurement import Measurement
from cudal2.problems import Problem

SCREEN_CHECKS = ("random", "exact", "poison", "guard", "fresh")
ALL_CHECKS = ("random", "exact", "poison", "guard", "fresh", "edges")
# Profile defaults: the screen every method's proposals go through, and the full PROTOCOL pass of winners.
SCREEN = {"checks": SCREEN_CHECKS, "min_ms": 10.0, "min_calls": 30, "warmup": 3, "early_stop": None}
FULL = {"checks": ALL_CHECKS, "min_ms": 100.0, "min_calls": 30, "warmup": 3, "early_stop": None}


class StudyDeadline(Exception):
    """The study's time limit came before this evaluation (the store keeps everything before it)."""


COUNTS = ("proposals", "unique", "reused", "resumed")


def _blank() -> dict:
    return {"proposals": 0, "unique": 0, "reused": 0, "resumed": 0, "eval_s": 0.0, "modeled_s": 0.0,
            "phase_s": defaultdict(float)}


class SharedEvaluator:
    """Every method of the study evaluates through this: one inner evaluator (GPU, stub or replay),
    named profiles (`screen`, `full`), and one cache of measurements keyed by (profile, problem, spec).

    A spec already measured under that profile - by another method, in training, or by an earlier run
    on the same store (rows whose meta.profile.sig matches: same checks, timing knobs, baselines and
    seed) - comes from the cache and is not evaluated again; the method asking still spends one
    proposal of its budget on it. Accounting per (tag, problem): proposals, unique (inner
    evaluations: the GPU cost), reused (measured earlier in this run), resumed (from the store),
    evaluator wall seconds and their phases. `view(tag, profile)` is what a method is handed.
    `cost_model` (bench/study_model.py's CostModel, for dry runs) charges modelled device seconds per call,
    and `model_deadline` then stops before a call once that many modelled seconds are spent. Each new
    measurement's meta carries its tag and an equal share of its call's seconds (`eval_s`, `modeled_s`),
    so `spent(problem)` can say from the store alone what a shape cost across resumed runs."""

    def __init__(self, inner, *, store=None, run_id=None, device_key: str | None = None,
                 deadline: float | None = None, cost_model=None, on_new=None):
        self.inner, self.store, self.run_id = inner, store, run_id
        self.on_new = on_new        # called with each call's new measurements (generate's one-line reports)
        self.device_key = device_key or getattr(inner, "device_key", None) or inner.device.key
        self.deadline = deadline                   # time.monotonic() value
        self.model = cost_model
        self.profiles: dict[str, dict] = {}
        self.cache: dict[tuple[str, str, str], Measurement] = {}
        self._origin: dict[tuple[str, str, str], str] = {}      # key -> "run" | "store"
        self._loaded: set[tuple[str, str]] = set()
        self._ahead: set[tuple[str, str]] = set()               # (problem, spec) compiled ahead
        # (profile, problem, measured spec) in the store: a replay answering two asks with one
        # neighbour's row stores that row once.
        self._stored: set[tuple[str, str, str]] = set()
        self._last_problem: str | None = None
        self.acct: dict[tuple[str, str], dict] = defaultdict(_blank)
        self.model_s = {"start": cost_model.start_s if cost_model else 0.0}
        # With a cost model (a dry run on the stub clock): the time limit in modelled device seconds
        # since start, so a dry run stops where a device call would.
        self.model_deadline: float | None = None

    def modeled_elapsed(self) -> float:
        return self.model_s["start"] + sum(a["modeled_s"] for a in self.acct.values())

    # ---- profiles ---------------------------------------------------------------------------------
    def add_profile(self, name: str, **cfg) -> dict:
        if hasattr(self.inner, "add_profile"):
            conf = self.inner.add_profile(name, **cfg)
        else:   # replay: what was stored is what comes back
            conf = {"replay": name, **{k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}}
        sig = hashlib.sha256(json.dumps(conf, sort_keys=True, default=str).encode()).hexdigest()[:16]
        self.profiles[name] = {"config": conf, "sig": sig}
        return self.profiles[name]

    def view(self, tag: str, profile: str = "screen") -> "_View":
        if profile not in self.profiles:
            raise ValueError(f"unknown profile {profile!r}; add_profile first")
        return _View(self, tag, profile)

    # ---- the cache --------------------------------------------------------------------------------
    def _load(self, problem: Problem, profile: str) -> None:
        if self.store is None or (profile, problem.text) in self._loaded:
            return
        self._loaded.add((profile, problem.text))
        sig = self.profiles[profile]["sig"]
        for m in self.store.measurements(problem=problem.text, device=self.device_key):
            if (m.meta.get("profile") or {}).get("sig") == sig:
                self._stored.add((profile, problem.text, m.spec))
                # A replayed row answers the spec it was asked for too (a measured neighbour's row).
                asked = (m.meta.get("replay") or {}).get("asked")
                for text in {m.spec, asked} - {None}:
                    key = (profile, problem.text, text)
                    self.cache[key] = m           # the latest row of a key wins
                    self._origin[key] = "store"

    def known(self, problem: Problem, spec_text: str, profile: str = "screen") -> Measurement | None:
        self._load(problem, profile)
        return self.cache.get((profile, problem.text, spec_text))

    def prefetch(self, problem: Problem, specs, profile: str = "screen") -> int:
        """Compile ahead the specs not measured yet (where the inner evaluator can)."""
        fn = getattr(self.inner, "prefetch", None)
        if fn is None:
            return 0
        todo = [s for s in specs if self.known(problem, s.text, profile) is None]
        self._ahead |= {(problem.text, s.text) for s in todo}
        return fn(problem, todo)

    def evaluate(self, problem: Problem, specs, *, tag: str, profile: str) -> list[Measurement | None]:
        self._load(problem, profile)
        a = self.acct[(tag, problem.text)]
        texts = [s.text if hasattr(s, "text") else str(s) for s in specs]
        a["proposals"] += len(texts)
        todo, seen = [], set()
        for s, t in zip(specs, texts):
            key = (profile, problem.text, t)
            if key in self.cache:
                a["resumed" if self._origin.get(key) == "store" else "reused"] += 1
            elif t not in seen:
                seen.add(t)
                todo.append(s)
        if todo:
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise StudyDeadline(f"time limit reached before evaluating {len(todo)} specs on {problem}")
            if self.model_deadline is not None and self.modeled_elapsed() > self.model_deadline:
                raise StudyDeadline(f"modelled time limit reached before evaluating {len(todo)} specs on {problem}")
            phases0 = dict(getattr(self.inner, "phase_s", {}) or {})
            t0 = time.perf_counter()
            if hasattr(self.inner, "add_profile"):
                fresh = self.inner.evaluate(problem, todo, profile=profile)
            else:
                fresh = self.inner.evaluate(problem, todo)
            dt = time.perf_counter() - t0
            a["eval_s"] += dt
            for k, v in (getattr(self.inner, "phase_s", {}) or {}).items():
                a["phase_s"][k] += v - phases0.get(k, 0.0)
            prof = {"name": profile, "sig": self.profiles[profile]["sig"]}
            got = [(s, m) for s, m in zip(todo, fresh) if m is not None]    # None: replay, nothing near it
            modeled = 0.0
            if self.model is not None:
                ahead = sum((problem.text, m.spec) in self._ahead for _, m in got)
                modeled = self.model.call_s(problem, [m for _, m in got], self.profiles[profile]["config"],
                                            switched=problem.text != self._last_problem, ahead=ahead,
                                            group_step=tag in ("train", "policy"))
                a["modeled_s"] += modeled
            # Each new measurement carries an equal share of its call's seconds (and of the modelled
            # ones): what a shape or a method's first proposals cost is then known from the store
            # alone, across resumed runs.
            share = {"eval_s": round(dt / max(len(got), 1), 6)}
            if self.model is not None:
                share["modeled_s"] = round(modeled / max(len(got), 1), 6)
            for s, m in got:
                m.meta = {**m.meta, "profile": prof, "tag": tag, **share}
                key = (profile, problem.text, s.text if hasattr(s, "text") else str(s))
                self.cache[key] = m
                self._origin[key] = "run"
            rows = []
            for _, m in got:
                if (profile, problem.text, m.spec) not in self._stored:
                    self._stored.add((profile, problem.text, m.spec))
                    rows.append(_copy(m))
            # Measurements new to this store: a replay answers many asked specs with one stored row.
            a["unique"] += len(rows)
            if rows and self.store is not None:
                self.store.add(rows, run_id=self.run_id)   # one transaction per call
            if rows and self.on_new is not None:
                self.on_new(problem, rows)
            self._last_problem = problem.text
        return [_copy(self.cache[(profile, problem.text, t)]) if (profile, problem.text, t) in self.cache else None
                for t in texts]

    # ---- reports ----------------------------------------------------------------------------------
    def totals(self, tag: str | None = None, problem: str | None = None) -> dict:
        out = _blank()
        for (t, p), a in self.acct.items():
            if (tag is None or t == tag) and (problem is None or p == problem):
                for k in (*COUNTS, "eval_s", "modeled_s"):
                    out[k] += a[k]
                for k, v in a["phase_s"].items():
                    out["phase_s"][k] += v
        out["eval_s"] = round(out["eval_s"], 3)
        out["modeled_s"] = round(out["modeled_s"], 3)
        out["phase_s"] = {k: round(v, 3) for k, v in out["phase_s"].items()}
        return out

    def spent(self, problem: Problem) -> dict:
        """Seconds spent measuring `problem`, from each distinct measurement's share of its call
        (this run's and the store's): {"eval_s", "modeled_s", "n", "by": {(profile, tag): {...}}}."""
        for prof in self.profiles:
            self._load(problem, prof)
        seen: dict[tuple[str, str], Measurement] = {}
        for (prof, prob, _), m in self.cache.items():
            if prob == problem.text:
                seen.setdefault((prof, m.spec), m)
        out = {"eval_s": 0.0, "modeled_s": 0.0, "n": 0, "by": {}}
        for (prof, _), m in seen.items():
            b = out["by"].setdefault(f"{prof}:{m.meta.get('tag', '?')}", {"eval_s": 0.0, "modeled_s": 0.0, "n": 0})
            for d in (out, b):
                d["eval_s"] += float(m.meta.get("eval_s") or 0.0)
                d["modeled_s"] += float(m.meta.get("modeled_s") or 0.0)
                d["n"] += 1
        return out

    def close(self) -> None:
        self.inner.close()


class _View:
    """The evaluator interface (evaluate, device_key) for one method (tag) under one profile."""

    def __init__(self, shared: SharedEvaluator, tag: str, profile: str):
        self.shared, self.tag, self.profile = shared, tag, profile
        self.device_key = shared.device_key

    def evaluate(self, problem: Problem, specs) -> list[Measurement | None]:
        return self.shared.evaluate(problem, specs, tag=self.tag, profile=self.profile)

    def measured(self, problem: Problem) -> list[Measurement]:
        """What this profile has measured on `problem` (this run and the store), one per measured
        spec, in measurement order: a resumed search starts from it, so its budget spans both runs."""
        self.shared._load(problem, self.profile)
        out = {}
        for (prof, prob, _), m in self.shared.cache.items():
            if prof == self.profile and prob == problem.text:
                out.setdefault(m.spec, m)
        return [_copy(m) for m in sorted(out.values(), key=lambda m: m.ts or 0.0)]


def _copy(m: Measurement) -> Measurement:
    c = copy.copy(m)
    c.meta = dict(m.meta)
    return c


class ProfiledReplay:
    """Replay for the study: `full` answers from the rows a study stored under its full profile
    (falling back to every row), the other profiles from the rest."""

    replay = True

    def __init__(self, rows: list[Measurement], device_key: str | None = None):
        from .replay import ReplayEvaluator
        full = [m for m in rows if (m.meta.get("profile") or {}).get("name") == "full"]
        rest = [m for m in rows if (m.meta.get("profile") or {}).get("name") != "full"] or rows
        self.screen = ReplayEvaluator(rest, device_key=device_key)
        self.full = ReplayEvaluator(full, device_key=self.screen.device_key) if full else self.screen
        self.device_key = self.screen.device_key

    def add_profile(self, name: str, **cfg) -> dict:
        return {"replay": name, **{k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}}

    def evaluate(self, problem, specs, profile: str = "screen"):
        return (self.full if profile == "full" else self.screen).evaluate(problem, specs)

    def close(self) -> None:
        pass


def shared_evaluator(evaluator, *, screen: dict | None = None, full: dict | None = None, **kw) -> SharedEvaluator:
    """Wrap an evaluator with the study's two profiles (defaults SCREEN and FULL)."""
    if isinstance(evaluator, SharedEvaluator):
        return evaluator
    ev = SharedEvaluator(evaluator, **kw)
    ev.add_profile("screen", **(screen or SCREEN))
    ev.add_profile("full", **(full or FULL))
    return ev
