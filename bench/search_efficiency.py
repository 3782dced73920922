"""Search efficiency (issue 5): best speedup over best-cuBLAS within 8/16/32/64 proposals on held-out
shapes, for the trained policy vs uniform random sampling vs a fixed autotune list (bench/efficiency.py
says how: screened evaluations shared between methods, winners re-checked and re-timed in full).

  # one H200 device call (after `source bench/device_env.sh`); the defaults fit ~420 s:
  python3 bench/search_efficiency.py --out $OUT/eff
  # the same study on the stub clock, with the cost model's prediction of the device time (a model):
  python3 bench/search_efficiency.py --synthetic --out /tmp/eff-model
  # on a CPU, replaying the store of a GPU run:
  python3 bench/search_efficiency.py --replay runs/eff.db --out /tmp/eff-replay

Writes four files into --out: study.json (every knob, shape, method, budget, cost), study.md (the
tables), study.log (progress) and, for GPU and synthetic runs, study.db (a snapshot of --store, taken
after training, after each test shape and at the end). The live store is --store (SQLite in WAL
mode: it has -wal/-shm companions while open, so keep it out of --out). Resume: run the same command
with the same --store (on a fresh machine: copy a returned study.db somewhere writable and pass it as
--store); measurements of the same profiles come from it and the study continues where it stopped.

Sizing (CostModel in bench/study_model.py, fitted to the partial H200 run; `--synthetic` prints its
figure for any setting): all 11 shapes of bench/efficiency_shapes.txt, 3 held out and 8 to train on
(one GRPO group of 8 proposals each), 3 methods x 64 proposals per held-out shape, a 5 ms screen with
the five checks at the shape itself, the full re-check of winners. The model puts that at ~316 s of
device wall time (start 30, training 41, held-out shapes 66 + 90 + 85 with ~20 s of re-check each,
finish 5); per held-out shape the policy's 8 groups cost ~38 s, random and fixed ~11 s each (compiled
ahead, one evaluator call each). --time-limit (380 s) stops before an evaluation that would start
after it (so the call ends by ~410 s), and SIGTERM does the same; the outputs are written either way.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

T0 = time.monotonic()
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))    # the study's modules beside this script: efficiency.py, study_model.py
DEFAULT_STORE = "/tmp/cudal2-efficiency/study.db"


class Log:
    """Progress lines to stdout and to study.log (flushed per line, so a killed run keeps them)."""

    def __init__(self, path: Path | None):
        self.f = open(path, "a", buffering=1) if path else None

    def __call__(self, msg: str) -> None:
        line = f"[{time.monotonic() - T0:7.1f} s] {msg}"
        print(line, flush=True)
        if self.f:
            self.f.write(line + "\n")

    def close(self) -> None:
        if self.f:
            self.f.close()


def snapshot(store_path: Path, dest: Path) -> None:
    """A consistent one-file copy of the WAL store (sqlite backup), written under a temporary name."""
    if store_path.resolve() == dest.resolve():
        return
    tmp = dest.with_name(dest.name + ".tmp")
    src = sqlite3.connect(str(store_path))
    dst = sqlite3.connect(str(tmp))
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    os.replace(tmp, dest)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="bench/efficiency_shapes.txt",
                    help="grid | grid:N | FILE | MxNxK,... (train and test are drawn from these)")
    ap.add_argument("--layout", default="nn", choices=("nn", "nt"))
    ap.add_argument("--train", type=int, default=8, help="shapes to train on")
    ap.add_argument("--test", type=int, default=3, help="held-out shapes to measure on")
    ap.add_argument("--budgets", default="8,16,32,64", help="proposal budgets to report")
    ap.add_argument("--train-budget", type=int, default=8, help="proposals per training shape")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the training shapes")
    ap.add_argument("--group", type=int, default=8, help="GRPO group: proposals per policy step")
    ap.add_argument("--baseline-group", type=int, default=64,
                    help="proposals per evaluator call for random / fixed (their lists do not depend on results)")
    ap.add_argument("--backend", default="both", choices=("triton", "cuda", "both"))
    ap.add_argument("--seed", type=int, default=0)
    g = ap.add_argument_group("evaluation profiles (early stop is off in both)")
    g.add_argument("--screen-checks", default="random,exact,poison,guard,fresh",
                   help="checks of every proposal (PROTOCOL names)")
    g.add_argument("--screen-min-ms", type=float, default=5.0, help="timing floor per function, screen")
    g.add_argument("--screen-min-calls", type=int, default=30)
    g.add_argument("--full-checks", default="random,exact,poison,guard,fresh,edges",
                   help="checks of re-checked winners")
    g.add_argument("--full-min-ms", type=float, default=100.0, help="timing floor per function, re-check (PROTOCOL)")
    g.add_argument("--full-min-calls", type=int, default=30)
    g.add_argument("--warmup", type=int, default=3, help="warm-up calls per function before timing")
    g.add_argument("--recheck-rounds", type=int, default=3,
                   help="rounds of replacing a winner that fails the full check by the next screened one")
    e = ap.add_argument_group("evaluator")
    e.add_argument("--workers", type=int, default=None,
                   help="compile processes (default: the CPU cores this process may use)")
    e.add_argument("--prefetch-workers", type=int, default=None,
                   help="compile-ahead processes at lower priority (default: half of --workers; 0: off)")
    e.add_argument("--timeout-s", type=float, default=120.0, help="per candidate check / timing limit")
    e.add_argument("--time-limit", type=float, default=380.0,
                   help="seconds from start after which no new evaluation starts (0: none); outputs are written")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--replay", help="a store of this study's measurements to replay (CPU)")
    src.add_argument("--synthetic", action="store_true",
                     help="stub clock + cost model: tests the machinery and predicts device time (a model)")
    ap.add_argument("--store", default=DEFAULT_STORE, help="the live store of every evaluation (resume: same path)")
    ap.add_argument("--out", default=None, help="output directory (default bench/results/search_efficiency_<device>)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    from cudal2.problems import ProblemError, parse_shapes
    import efficiency as eff
    import study_model
    from cudal2.rl import shared_eval
    try:
        problems = parse_shapes(a.shapes, a.layout)
        budgets = tuple(int(x) for x in a.budgets.split(","))
        train, test = eff.split(problems, a.train, a.test, a.seed)
        screen = {"checks": tuple(a.screen_checks.split(",")), "min_ms": a.screen_min_ms,
                  "min_calls": a.screen_min_calls, "warmup": a.warmup, "early_stop": None}
        full = {"checks": tuple(a.full_checks.split(",")), "min_ms": a.full_min_ms,
                "min_calls": a.full_min_calls, "warmup": a.warmup, "early_stop": None}
    except (ProblemError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    backends = None if a.backend == "both" else (a.backend,)
    deadline = T0 + a.time_limit if a.time_limit > 0 else None
    model, store, run, inner = None, None, None, None
    if a.synthetic:
        from cudal2.device import DeviceInfo
        from cudal2.testing.fake_evaluator import FakeEvaluator
        from cudal2.testing.stub_clocks import StudyStubClock
        device = DeviceInfo.target("sm_90a")
        inner = FakeEvaluator(StudyStubClock(), device, early_stop=None)
        model = study_model.CostModel(workers=a.workers or 16)
        label, kind = "synthetic stub clock + cost model (a model, not a measurement)", "model"
        deadline = None      # the stub's seconds are not device seconds
    elif a.replay:
        from cudal2.registry import target_for_key
        from cudal2.store import Store
        with Store(a.replay) as st:
            inner = shared_eval.ProfiledReplay(st.measurements())
        device = target_for_key(inner.device_key)
        label, kind = f"replay of {a.replay} (stored GPU measurements)", "replay"
    else:
        from cudal2.device import gpu_available
        if not gpu_available():
            print("error: no CUDA GPU visible: run on a GPU, or use --replay STORE / --synthetic", file=sys.stderr)
            return 3
        from cudal2.evaluate import Evaluator
        inner = Evaluator(workers=a.workers, prefetch_workers=a.prefetch_workers, timeout_s=a.timeout_s,
                          early_stop=None)
        device = inner.device
        label, kind = f"GPU evaluator on {device.name}", "measurement"
    out = Path(a.out or f"bench/results/search_efficiency_{device.key}")
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "study.log")
    store_path = Path(a.store)
    if a.replay is None:
        from cudal2.store import Store
        if store_path.resolve().parent == out.resolve():
            log(f"warning: --store {store_path} is inside --out: its -wal/-shm files will be returned too")
        store = Store(store_path)
        run = store.new_run({"command": "search_efficiency", **vars(a)}, device=device.key,
                            versions=getattr(inner, "versions", {}))
    shared = shared_eval.SharedEvaluator(inner, store=store, run_id=run, device_key=device.key,
                                         deadline=deadline, cost_model=model)
    shared.add_profile("screen", **screen)
    shared.add_profile("full", **full)
    log(f"{label}: train {len(train)} x {a.train_budget}, test {len(test)} x {len(eff.METHODS)} methods x "
        f"{max(budgets)}; store {store_path if store else a.replay}; time limit {a.time_limit:g} s")
    log("train: " + " ".join(p.text for p in train))
    log("test:  " + " ".join(p.text for p in test))
    if store is not None:
        have = store.count()
        if have:
            log(f"resuming: the store holds {have} measurements (reused where the profile matches)")

    def write(res: dict, final: bool) -> None:
        res = {**res, "source": label, "results_are": kind, "args": vars(a),
               "wall_s": round(time.monotonic() - T0, 1), "final": final}
        ev = {"phase_s": getattr(inner, "phase_s", None), "restarts": getattr(inner, "restarts", None),
              "workers": getattr(inner, "workers", None), "prefetch_workers": getattr(inner, "prefetch_workers", None),
              "compiled_ahead": getattr(inner, "compiled_ahead", None),
              "baselines_left_out": getattr(inner, "baselines_left_out", None)}
        res["evaluator"] = ev
        if model is not None:
            res["cost_model"] = model.to_dict()
        tmp = out / "study.json.tmp"
        tmp.write_text(json.dumps(res, indent=1, default=str))
        os.replace(tmp, out / "study.json")
        (out / "study.md").write_text(f"# Search efficiency ({label})\n\n" + eff.markdown(res) + "\n")
        if store is not None:
            snapshot(store_path, out / "study.db")

    def on_event(kind_, **kw):
        if kind_ == "study_shape":
            r = kw["row"]
            log(f"{r['problem']:>20}  " + "  ".join(
                f"{m} " + "/".join(f"{r[m][str(b)]:.3f}" for b in budgets) for m in eff.METHODS)
                + f"  | {r['cost']['unique']} new evals, {r['cost']['evaluator_s']:.1f} s evaluator, "
                f"{r['cost']['wall_s']:.1f} s wall; re-check {r['recheck']['rechecked']} specs, "
                f"{len(r['recheck']['failed'])} failed")
        elif kind_ == "problem_done" and "result" in kw:
            res = kw["result"]
            log(f"  trained on {kw['problem']}: {len(res.evaluated)} proposals")

    def on_progress(res):
        write(res, final=False)
        log(f"progress written: {len(res['rows'])} test shapes done")

    def on_term(signum, frame):   # `timeout` sends SIGTERM: stop like at the time limit, write what there is
        raise shared_eval.StudyDeadline(f"signal {signum}")
    old_term = signal.signal(signal.SIGTERM, on_term)

    res = None
    try:
        res = eff.study(train, test, shared, device, budgets=budgets, group=a.group, train_budget=a.train_budget,
                        epochs=a.epochs, seed=a.seed, backends=backends, baseline_group=a.baseline_group,
                        recheck_rounds=a.recheck_rounds, prefetch=True, on_event=on_event, on_progress=on_progress)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        t_close = time.monotonic()
        shared.close()
        if res is not None:
            write(res, final=True)
            log(f"closed the evaluator in {time.monotonic() - t_close:.1f} s")
            md = (out / "study.md").read_text()
            print(md)
        if store is not None:
            store.close()
        log(f"done: {'complete' if res and res['complete'] else 'INCOMPLETE'}; files in {out}: "
            + ", ".join(sorted(p.name for p in out.iterdir())))
        log.close()
    return (0 if res["complete"] else 4) if res is not None else 1


if __name__ == "__main__":
    sys.exit(main())
