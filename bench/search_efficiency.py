"""Search efficiency (issues 5, 21): best speedup over best-cuBLAS within 8/16/32/64 proposals on
held-out shapes, for the policy vs uniform random sampling vs the fixed autotune list vs the learned
cost model alone (bench/efficiency.py says how: screened evaluations shared between methods, winners
re-checked and re-timed in full; bench/study_report.py the outputs; bench/study_shapes.py the shapes).

  # one H200 device call, carry [".runpack", ".whl", ".commit"]; repeat (with the returned
  # study.db.gz copied to .runpack/) until the log's last line says "complete":
  source bench/device_env.sh && timeout 570 python3 bench/search_efficiency.py --out $OUT/eff \
      --store /tmp/eff/study.db --resume-from .runpack/study.db.gz [--limit 30] [--init-policy P]
  # the same study on the stub clock, with the time model's prediction of the device time (a model):
  python3 bench/search_efficiency.py --synthetic --time-limit 0 --out /tmp/eff-model     # the sizing
  # on a CPU, replaying the store of a GPU run:
  python3 bench/search_efficiency.py --replay eff/study.db.gz --out /tmp/eff-replay

Shapes: the held-out ones of --held-out (default bench/efficiency_heldout.txt: 54 shapes, every one
held out by the committed cost model's hash split; its first 30 lines are the issue's minimum set:
--limit 30, and dropping --limit later goes on to all 54 with the same policy and finished rows),
and --train training shapes from the grid in both layouts on the other side of that
split. Methods (--methods): policy (GRPO from fresh weights or --init-policy, a `cudal2 train
--policy-out` checkpoint), random, fixed, cost (--cost-model, default the committed
bench/results/h200-sm90/costmodel/cost_h200_9583f7e.pt, which held these shapes out), critic (the
same trained policy, each group the cost model's best of --critic-pool x --group of its samples:
the policy with the cost model as its critic, issue 21 item 1). A method added to a study with
finished rows re-runs those shapes: the store answers every earlier measurement, so only the new
method's evaluations cost GPU time.

Writes into --out: study.csv (one row per shape x method x budget), study.json (everything),
study.md (the tables per layout and class), best_so_far.png, study.log and, for GPU and synthetic
runs, study.db.gz (a packed snapshot of --store after training, after each shape and at the end).
The live store is --store (SQLite in WAL mode: keep it out of --out). Resume: the same command with
the same --store; on a fresh machine --resume-from a returned study.db.gz (used only where --store
does not exist yet). Each (shape, spec, profile) is measured once and shared by every method; the
store also keeps the trained policy and every finished shape's row (bench/study_state.py), so a
resumed call neither re-trains nor re-runs a finished shape.

Sizing (the time model CostModel of bench/study_model.py, fitted to the partial H200 run;
`--synthetic --time-limit 0` prints it for any setting; NOTES.md 2026-12-04): the defaults (54
held-out shapes, 4 methods x 64 proposals, 12 training shapes x 8, a 5 ms screen, the full re-check
of winners) model at ~69 s of device time per held-out shape (54-92 s; by first proposer: the
policy's 8 groups ~25 s, each list method ~9-11 s compiled ahead, the re-check ~13 s, at most 32 s),
training ~56 s, ~4,100 s in all: 9 calls of --time-limit 480 (the first trains and does ~5 shapes,
the others ~6), 3 sessions of 30 device minutes at 3 calls each (a cold start costs ~85 s); the
30-shape minimum set (--limit 30) ~2,300 s, 5 calls, 2 sessions. --time-limit (480 s) stops before
an evaluation that would start after it, so the script ends by ~520 s (the longest evaluator call,
a re-check, ~30 s; device_env.sh's installs come before it); SIGTERM does the same; outputs are
written either way. On the stub clock --time-limit counts modelled device seconds, so a synthetic
run stops where a device call would.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import sqlite3
import sys
import time
from pathlib import Path

T0 = time.monotonic()
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))    # the study's modules beside this script
DEFAULT_STORE = "/tmp/cudal2-efficiency/study.db"
DEFAULT_COST_MODEL = "bench/results/h200-sm90/costmodel/cost_h200_9583f7e.pt"
TIME_LIMIT = 480.0


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
    """A consistent one-file copy of the WAL store (sqlite backup), gzip-compressed (a device call
    returns files of at most 16 MiB; the whole study's store is ~20-40 MB, ~10x less packed),
    written under a temporary name."""
    tmp = dest.with_name(dest.name + ".tmp")
    src = sqlite3.connect(str(store_path))
    dst = sqlite3.connect(str(tmp))
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    with open(tmp, "rb") as f, gzip.open(str(tmp) + ".gz", "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g)
    os.replace(str(tmp) + ".gz", dest)
    tmp.unlink()


def unpack(src: str, dest: Path) -> None:
    """--resume-from: a returned study.db.gz (or a plain study.db) becomes the live store."""
    from cudal2.cli.stores import sqlite_copy
    path, tmp = sqlite_copy(src, always=True, option="--resume-from")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    finally:
        if tmp is not None:
            tmp.cleanup()


def load_cost_model(path: str):
    """The ranker of the cost method (a test swaps in a stand-in)."""
    from cudal2.rl.costmodel import CostModel
    return CostModel.load(path)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--held-out", default=str(HERE / "efficiency_heldout.txt"),
                    help="held-out shapes: FILE (MxNxK:layout per line) or MxNxK[:nt],...")
    ap.add_argument("--limit", type=int, default=0, help="only the first N held-out shapes (0: all)")
    ap.add_argument("--train-shapes", default="grid",
                    help="'grid' (both layouts, the training side of the hash split) or FILE / MxNxK,...")
    ap.add_argument("--train", type=int, default=12, help="training shapes (one per class and layout in turn)")
    ap.add_argument("--methods", default="policy,random,fixed,cost,critic",
                    help="of policy, random, fixed, cost, critic")
    # 32: run 54 (H200, 2026-12-04) put the critic at 0.982 / 73% of shapes within 0.98 at 16
    # proposals with 32, against 0.972 / 67% with 8 (run 49), for ~the same device seconds.
    ap.add_argument("--critic-pool", type=int, default=32,
                    help="critic: the cost model ranks this many x --group of the policy's samples per group")
    ap.add_argument("--init-policy", default=None, help="start the policy from this `cudal2 train --policy-out` checkpoint")
    ap.add_argument("--cost-model", default=DEFAULT_COST_MODEL, help="the cost method's model (`cudal2 train`)")
    ap.add_argument("--budgets", default="8,16,32,64", help="proposal budgets to report")
    ap.add_argument("--train-budget", type=int, default=8, help="proposals per training shape")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the training shapes")
    ap.add_argument("--group", type=int, default=8, help="GRPO group: proposals per policy step")
    ap.add_argument("--baseline-group", type=int, default=64,
                    help="proposals per evaluator call for the list methods (their lists do not depend on results)")
    ap.add_argument("--prefetch-ahead", type=int, default=2, help="compile the next N shapes' lists ahead")
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
    e.add_argument("--time-limit", type=float, default=TIME_LIMIT,
                   help="seconds from start after which no new evaluation starts (0: none); outputs are "
                        "written. On the stub clock: modelled device seconds")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--replay", help="a store of this study's measurements to replay (CPU)")
    src.add_argument("--synthetic", action="store_true",
                     help="stub clock + cost model: tests the machinery and predicts device time (a model)")
    ap.add_argument("--store", default=DEFAULT_STORE, help="the live store of every evaluation (resume: same path)")
    ap.add_argument("--resume-from", default=None,
                    help="where --store does not exist yet: start it from this returned study.db.gz (or .db)")
    ap.add_argument("--out", default=None, help="output directory (default bench/results/search_efficiency_<device>)")
    return ap.parse_args(argv)


def shapes(a):
    """(train, test) problems."""
    from cudal2.problems import parse_shapes
    import study_shapes
    test = parse_shapes(a.held_out, "nn")
    test = test[:a.limit] if a.limit else test
    if a.train_shapes == "grid":
        train = study_shapes.train_split(a.train, test, a.seed)
    else:
        held = {p.text for p in test}
        train = [p for p in parse_shapes(a.train_shapes, "nn") if p.text not in held][:a.train]
    return train, test


def main(argv=None) -> int:
    a = parse_args(argv)
    from cudal2.problems import ProblemError
    import efficiency as eff
    import study_model
    import study_report
    import study_state
    from cudal2.rl import shared_eval
    try:
        train, test = shapes(a)
        methods = tuple(m.strip() for m in a.methods.split(",") if m.strip())
        if bad := [m for m in methods if m not in eff.METHODS]:
            raise ValueError(f"--methods: unknown {bad}; choose from {', '.join(eff.METHODS)}")
        budgets = tuple(sorted(int(x) for x in a.budgets.split(",")))
        screen = {"checks": tuple(a.screen_checks.split(",")), "min_ms": a.screen_min_ms,
                  "min_calls": a.screen_min_calls, "warmup": a.warmup, "early_stop": None}
        full = {"checks": tuple(a.full_checks.split(",")), "min_ms": a.full_min_ms,
                "min_calls": a.full_min_calls, "warmup": a.warmup, "early_stop": None}
        ranker = load_cost_model(a.cost_model) if {"cost", "critic"} & set(methods) else None
        init = None
        if a.init_policy and {"policy", "critic"} & set(methods):
            from cudal2.rl.policy import SpecPolicy
            init = SpecPolicy.load(a.init_policy)
    except (ProblemError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    backends = None if a.backend == "both" else (a.backend,)
    deadline = T0 + a.time_limit if a.time_limit > 0 else None
    model, store, run, inner, state = None, None, None, None, None
    if a.synthetic:
        import dataclasses
        from cudal2.device import DeviceInfo
        from cudal2.testing.fake_evaluator import FakeEvaluator
        from cudal2.testing.stub_clocks import StudyStubClock
        # The H200's SM count, so the cost method's pool has the wave-model and split-K seeds it has there.
        device = dataclasses.replace(DeviceInfo.target("sm_90a"), sm_count=132)
        inner = FakeEvaluator(StudyStubClock(), device, early_stop=None)
        model = study_model.CostModel(workers=a.workers or 16)
        label, kind = "synthetic stub clock + cost model (a model, not a measurement)", "model"
        deadline = None      # the stub's seconds are not device seconds: the limit counts modelled ones
    elif a.replay:
        from cudal2.cli.stores import sqlite_copy
        from cudal2.registry import target_for_key
        from cudal2.store import Store
        path, tmp = sqlite_copy(a.replay, always=True)      # opening a Store writes to it: read a copy
        with Store(path) as st:
            inner = shared_eval.ProfiledReplay(st.measurements())
        if tmp is not None:
            tmp.cleanup()
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
        store_path.parent.mkdir(parents=True, exist_ok=True)
        if a.resume_from and not store_path.exists() and not Path(a.resume_from).exists():
            log(f"warning: no --resume-from {a.resume_from}: a new study (right for the first call only)")
        elif a.resume_from and not store_path.exists():
            try:
                unpack(a.resume_from, store_path)
            except ValueError as e:
                log(f"error: {e}")
                return 2
            log(f"resuming from {a.resume_from}")
        elif a.resume_from:
            log(f"--store {store_path} exists: it is used, not --resume-from {a.resume_from}")
        store = Store(store_path)
        state = study_state.StudyState(store_path)
        run = store.new_run({"command": "search_efficiency", **vars(a)}, device=device.key,
                            versions=getattr(inner, "versions", {}))
    shared = shared_eval.SharedEvaluator(inner, store=store, run_id=run, device_key=device.key,
                                         deadline=deadline, cost_model=model)
    if model is not None and a.time_limit > 0:
        shared.model_deadline = a.time_limit
    shared.add_profile("screen", **screen)
    shared.add_profile("full", **full)
    # What a stored policy / row depends on (bench/study_state.py).
    common = {"device": device.key, "seed": a.seed, "backend": a.backend, "screen": shared.profiles["screen"]["sig"]}
    train_sig = study_state.sig({**common, "train": [p.text for p in train], "train_budget": a.train_budget,
                                 "group": a.group, "epochs": a.epochs, "init": study_state.file_sig(init and a.init_policy)})
    uses_policy = bool({"policy", "critic"} & set(methods))
    row_sig = study_state.sig({**common, "train": train_sig if uses_policy else None, "methods": methods,
                               "critic_pool": a.critic_pool if "critic" in methods else None,
                               "budgets": budgets, "baseline_group": a.baseline_group, "group": a.group,
                               "recheck_rounds": a.recheck_rounds, "full": shared.profiles["full"]["sig"],
                               "cost_model": study_state.file_sig(a.cost_model if ranker is not None else None)})
    trained, train_info, done = None, None, {}
    if state is not None:
        done = {k: v for k, v in state.rows(row_sig).items() if k in {p.text for p in test}}
        if uses_policy:
            trained, train_info = state.policy(train_sig)
    log(f"{label}: {len(test)} held-out shapes x {len(methods)} methods ({', '.join(methods)}) x {max(budgets)}; "
        f"train {len(train)} x {a.train_budget}"
        + (f" from {a.init_policy}" if init is not None else "") + f"; store {store_path if store else a.replay}; "
        f"time limit {a.time_limit:g} s{' (modelled)' if model else ''}")
    log("train: " + " ".join(p.text for p in train))
    log("test:  " + " ".join(p.text for p in test))
    if store is not None and store.count():
        log(f"resuming: the store holds {store.count()} measurements, {len(done)} finished shapes"
            + (", the trained policy" if trained is not None else ""))

    def write(res: dict, final: bool) -> None:
        res = {**res, "source": label, "results_are": kind, "args": vars(a), "init_policy": a.init_policy,
               "cost_model": a.cost_model if ranker is not None else None,
               "wall_s": round(time.monotonic() - T0, 1), "final": final}
        res["evaluator"] = {k: getattr(inner, k, None) for k in ("phase_s", "restarts", "workers", "prefetch_workers",
                                                                 "compiled_ahead", "baselines_left_out")}
        if model is not None:
            res["time_model"] = model.to_dict()
            res["plan"] = study_report.plan_calls(res, model, a.time_limit or TIME_LIMIT)
        tmp = out / "study.json.tmp"
        tmp.write_text(json.dumps(res, indent=1, default=str))
        os.replace(tmp, out / "study.json")
        (out / "study.md").write_text(f"# Search efficiency ({label})\n\n" + study_report.markdown(res) + "\n")
        study_report.write_csv(res, out / "study.csv")
        if final or len(res["rows"]) % 5 == 0:
            study_report.plot(res, out / "best_so_far.png")
        if store is not None:
            snapshot(store_path, out / "study.db.gz")

    def on_event(kind_, **kw):
        if kind_ == "study_shape":
            r = kw["row"]
            sk = "shape_modeled_s" if model else "shape_gpu_s"
            log(f"{r['problem']:>20} {r['class']:>7}  ref {r['reference']:.3f}  " + "  ".join(
                f"{m} " + "/".join(f"{(r[m]['ratio'][str(b)] or 0):.2f}" for b in budgets) for m in methods)
                + f"  | {r['shape_cost']['unique']} new evals, {r['shape_cost'][sk]:.1f} s; re-check {r['recheck']['rechecked']} "
                f"specs, {len(r['recheck']['failed'])} failed")
        elif kind_ == "problem_done" and "result" in kw:
            log(f"  trained on {kw['problem']}: {len(kw['result'].evaluated)} proposals")

    def on_trained(policy, info):
        if state is not None:
            state.save_policy(train_sig, policy, info)

    def on_row(row):
        if state is not None:
            state.add_row(row_sig, row)

    def on_progress(res):
        write(res, final=False)
        log(f"progress written: {len(res['rows'])} of {len(test)} held-out shapes done")

    def on_term(signum, frame):   # `timeout` sends SIGTERM: stop like at the time limit, write what there is
        raise shared_eval.StudyDeadline(f"signal {signum}")
    old_term = signal.signal(signal.SIGTERM, on_term)

    res = None
    try:
        res = eff.study(train, test, shared, device, budgets=budgets, group=a.group, train_budget=a.train_budget,
                        epochs=a.epochs, seed=a.seed, backends=backends, baseline_group=a.baseline_group,
                        recheck_rounds=a.recheck_rounds, prefetch=True, methods=methods, ranker=ranker,
                        critic_pool=a.critic_pool, policy=init, trained=trained, train_info=train_info, done=done,
                        prefetch_ahead=a.prefetch_ahead, on_event=on_event, on_progress=on_progress,
                        on_trained=on_trained, on_row=on_row)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        t_close = time.monotonic()
        shared.close()
        if res is not None:
            write(res, final=True)
            log(f"closed the evaluator in {time.monotonic() - t_close:.1f} s")
            print((out / "study.md").read_text())
        if state is not None:
            state.close()
        if store is not None:
            store.close()
        log(f"done: {'complete' if res and res['complete'] else 'INCOMPLETE'}; files in {out}: "
            + ", ".join(sorted(p.name for p in out.iterdir())))
        log.close()
    return (0 if res["complete"] else 4) if res is not None else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        # Everything is written by main's finally. After an exception the interpreter's exit hung
        # for ~400 s on the card (2026-12-04, H200: pool threads waiting on their workers) and the
        # call ran into its timeout: leave at once, so a crash costs no more device time.
        import traceback
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
