"""`cudal2 train`: fit the cost model on stored measurements (CPU), validate it on held-out shapes, save it.

  cudal2 train --store PATH [--store PATH ...] --out PATH [--device KEY] [--holdout F]
               [--holdout-shapes SHAPES] [--epochs N] [--hidden H] [--members M] [--seed S]

A --store is a cudal2 SQLite store (gzip-compressed or not: the committed grid store is a .db.gz),
a sweep CSV (columns shape, layout, spec, status, us, best_cublas_us: bench/results/*/hopper/), or
a directory of those (its files in name order; CSVs without those columns are skipped). Later
stores win where two measured the same spec on the same shape. Rows of one device train one model:
--device picks it where the stores hold several, and names it for CSV rows (they record none).

The figure printed is measured on shapes the model never saw (--holdout, a fraction chosen by a
hash of the shape, or --holdout-shapes, e.g. a study's held-out set), beside the untrained model,
the wave model of cudal2.tiles, the fixed autotune list's order and a random order. The checkpoint
saved is the model trained without the held-out shapes, so the figure is its own;
--holdout 0 trains on every shape and reports none. Use it: `cudal2 generate --seed-list cost:N
--cost-model PATH` (rl/costrank.py).
"""
from __future__ import annotations

import csv
import time
from collections import Counter
from pathlib import Path
from typing import Optional

import typer

CSV_COLUMNS = ("shape", "layout", "spec", "status", "us", "best_cublas_us")
STORE_SUFFIXES = (".db", ".sqlite", ".db.gz", ".sqlite.gz")


def _say(msg: str) -> None:
    typer.echo(msg, err=True)


def _files(paths: list[str]) -> list[tuple[Path, bool]]:
    """(file, named by the user) for every --store; a directory gives its stores and CSVs."""
    from .errors import UserError
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and
                           (f.name.endswith(STORE_SUFFIXES) or f.suffix == ".csv"))
            if not found:
                raise UserError(f"--store {p}: a directory with no store (.db, .sqlite, .db.gz) or CSV in it")
            out += [(f, False) for f in found]
        elif p.is_file():
            out.append((p, True))
        else:
            raise UserError(f"--store {p}: no such file or directory")
    return out


def _csv_records(path: Path, named: bool) -> list[dict] | None:
    from .errors import UserError
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        missing = [c for c in CSV_COLUMNS if c not in (rd.fieldnames or ())]
        if missing:
            if named:
                raise UserError(f"--store {path}: a CSV without the columns {', '.join(missing)} "
                                f"(a sweep CSV has {', '.join(CSV_COLUMNS)})")
            return None
        num = lambda v: float(v) if v not in (None, "") else None  # noqa: E731
        return [{"problem": f"{r['shape']}:{r['layout']}", "spec": r["spec"], "status": r["status"],
                 "time_us": num(r["us"]), "best_cublas_us": num(r["best_cublas_us"]), "device": None}
                for r in rd]


def _store_records(path: Path) -> tuple[list[dict], dict]:
    """(records, {device key: DeviceInfo the store's runs recorded})."""
    import sqlite3

    from ..registry import RegistryError
    from ..store import Store, StoreError
    from .errors import UserError
    from .stores import replay_device, sqlite_copy
    try:
        db, tmp = sqlite_copy(path, always=True, option="--store")
    except ValueError as e:
        raise UserError(str(e)) from None
    try:
        st = Store(db)
        recs = st.records()
        devices = {}
        for key in sorted({r["device"] for r in recs}):
            try:
                devices[key] = replay_device(st, key)
            except RegistryError:   # a key without smXY: rows still train, features use DEFAULT_SMS
                devices[key] = None
        st.close()
    except (StoreError, sqlite3.DatabaseError) as e:
        raise UserError(f"--store {path}: not a cudal2 store ({str(e).splitlines()[0]})") from None
    finally:
        if tmp is not None:
            tmp.cleanup()
    return recs, devices


def _read(paths: list[str]):
    """[(name, records)], {device key: DeviceInfo | None}; prints a line per source."""
    sources, devices = [], {}
    for f, named in _files(paths):
        is_csv = f.suffix == ".csv"
        if is_csv:
            recs = _csv_records(f, named)
            if recs is None:
                _say(f"skipped {f}: not a sweep CSV")
                continue
        else:
            recs, devs = _store_records(f)
            for k, v in devs.items():
                if devices.get(k) is None:
                    devices[k] = v
        _say(f"read {f}: {len(recs)} measurements")
        sources.append((str(f), recs))
    return sources, devices


def _device(sources, devices: dict, device: Optional[str]) -> str:
    from .errors import UserError
    keys = sorted(devices)
    has_csv = any(r["device"] is None for _, recs in sources for r in recs[:1])
    if device:
        if keys and device not in keys:
            raise UserError(f"--device {device}: the stores hold {', '.join(keys)}")
        return device
    if len(keys) > 1:
        raise UserError(f"the stores hold measurements of {len(keys)} devices ({', '.join(keys)}); "
                        "name one with --device")
    if not keys:
        if has_csv:
            raise UserError("CSV rows record no device: name it with --device KEY (e.g. h200-sm90)")
        raise UserError("the stores hold no measurements")
    return keys[0]


def train_cmd(
    stores: list[str] = typer.Option(..., "--store", help="a store (SQLite, .db.gz), sweep CSV or directory; repeat"),
    out: str = typer.Option(..., "--out", help="where to save the model (a torch checkpoint)"),
    device: Optional[str] = typer.Option(None, "--device", help="device key of the rows to train on"),
    holdout: float = typer.Option(0.2, "--holdout", help="fraction of shapes held out for validation (0: none)"),
    holdout_shapes: Optional[str] = typer.Option(
        None, "--holdout-shapes", help="hold out exactly these shapes instead (as generate's --shapes; "
        "a shape's :nt suffix names its layout)"),
    epochs: int = typer.Option(400, "--epochs", help="full-batch training steps"),
    hidden: int = typer.Option(64, "--hidden", help="width of each MLP's two hidden layers"),
    members: int = typer.Option(4, "--members", help="MLPs in the ensemble (ranking uses mean - spread)"),
    seed: int = typer.Option(0, "--seed", help="seed of the initialisation, bootstrap and hash split"),
    policy_out: Optional[str] = typer.Option(
        None, "--policy-out", help="also pretrain the default policy on the same training shapes "
        "(reward-weighted likelihood, rl/pretrain.py) and save it here, for generate --init-policy"),
    policy_epochs: int = typer.Option(5, "--policy-epochs", help="passes over the shapes for --policy-out"),
) -> None:
    """Train the cost model (log speedup over best-cublas from shape + spec) on stored measurements."""
    from .errors import UserError, fail
    if not 0.0 <= holdout < 1.0:
        fail(f"--holdout must be in [0, 1) (a fraction of the shapes), got {holdout}")
    if epochs < 1 or hidden < 1 or members < 1:
        fail(f"--epochs, --hidden and --members must be >= 1 (got {epochs}, {hidden}, {members})")
    for opt, path in (("--out", out), ("--policy-out", policy_out)):
        if path and Path(path).is_dir():
            fail(f"{opt} {path} is a directory: name the checkpoint file, e.g. {Path(path) / 'cost.pt'}")
    if policy_epochs < 1:
        fail(f"--policy-epochs must be >= 1 (got {policy_epochs})")
    from ..problems import ProblemError, parse_shapes
    try:
        held = None if holdout_shapes is None else {p.text for p in parse_shapes(holdout_shapes)}
        sources, devices = _read(stores)
        key = _device(sources, devices, device)
    except (UserError, ProblemError) as e:
        fail(str(e))
        return
    train, val, info = _train(sources, devices, key, out, holdout, held, epochs, hidden, members, seed)
    if policy_out:
        _pretrain_policy(train, val, info, key, policy_out, policy_epochs, seed)


def _train(sources, devices, key, out, holdout, held, epochs, hidden, members, seed) -> None:
    from ..rl.costmodel import DEFAULT_SMS, CostModel
    from ..rl.costtrain import by_shape, fit, merge, rows_from, split
    from .errors import fail
    t0 = time.monotonic()
    skipped: Counter = Counter()
    rows = merge([rows_from([r for r in recs if r["device"] in (key, None)], skipped) for _, recs in sources])
    info = devices.get(key)
    sms = (info.sm_count if info is not None else None) or DEFAULT_SMS
    if skipped:
        _say("not trained on: " + ", ".join(f"{k} x{v}" for k, v in skipped.most_common()))
    train, val = split(rows, holdout, seed, held)
    if len(by_shape(train)) < 2:
        fail(f"{len(train)} usable rows over {len(by_shape(train))} shapes of {key}: too few to train on")
    if held is not None and not val:
        _say("note: none of the --holdout-shapes is in the stores: no validation figure")
    elif not val:
        _say("note: no shape held out (--holdout 0 or too few shapes): no validation figure")
    _say(f"rows: {len(rows)} over {len(by_shape(rows))} shapes of {key} ({sms} SMs); training on "
         f"{len(by_shape(train))} shapes ({len(train)} rows), holding out {len(by_shape(val))} ({len(val)} rows)")
    model = CostModel(hidden=hidden, members=members, seed=seed, device_key=key, sms=sms)
    untrained = CostModel(hidden=hidden, members=members, seed=seed, device_key=key, sms=sms)
    fit(model, train, epochs=epochs, report=lambda ep, loss: _say(
        f"epoch {ep}/{epochs}: loss {loss:.4f} ({time.monotonic() - t0:.0f} s)"), every=max(1, epochs // 5))
    untrained.load_state_dict({**untrained.state_dict(), "mean": model.mean, "std": model.std})
    figs = _validate(model, untrained, val, info, sms) if val else {}
    model.info = {"sources": [name for name, _ in sources], "rows": len(rows), "train_rows": len(train),
                  "train_shapes": sorted(by_shape(train)), "holdout_shapes": sorted(by_shape(val)),
                  "validation": figs, "epochs": epochs, "ts": time.time()}
    model.save(out)
    _say(f"saved {out} ({time.monotonic() - t0:.0f} s)")
    return train, val, info


def _validate(model, untrained, val, info, sms) -> dict:
    from ..rl.costtrain import figures, list_scorer, wave_scorer
    from ..rl.search import FixedListPolicy
    from ..registry import target_for_key
    dev = info if info is not None else target_for_key(model.device_key)
    rankers = {"cost model": model.score, "untrained": untrained.score, "wave model": wave_scorer(sms),
               "fixed list": list_scorer(lambda p: FixedListPolicy.candidates(p, dev)), "random": None}
    figs = {name: figures(val, scorer) for name, scorer in rankers.items()}
    n = figs["cost model"]["shapes"]
    if not n:
        typer.echo("held-out validation: no held-out shape has two or more measured specs")
        return figs
    typer.echo(f"held-out validation over {n} shapes never trained on (top1: measured speedup of the first "
               "pick / the shape's best stored, geomean; rho: Spearman of score and speedup, mean)")
    for name, f in figs.items():
        typer.echo(f"  {name:<11} top1 {f['top1']:.3f}  rho {f['rho']:+.3f}")
    return figs


def _pretrain_policy(train, val, info, key, out, epochs, seed) -> None:
    """The default policy trained by reward-weighted likelihood on the training shapes; its
    held-out figure ranks the held-out rows by the policy's log-probability, before and after."""
    from ..registry import target_for_key
    from ..rl.costtrain import figures
    from ..rl.policy import SpecPolicy
    from ..rl.pretrain import policy_scorer, pretrain
    t0 = time.monotonic()
    dev = info if info is not None else target_for_key(key)
    pol = SpecPolicy(seed=seed)
    before = figures(val, policy_scorer(pol, dev)) if val else None
    used = pretrain(pol, train, dev, epochs=epochs, seed=seed, report=lambda ep, loss: _say(
        f"policy epoch {ep}/{epochs}: loss {loss:.3f} ({time.monotonic() - t0:.0f} s)"))
    if not used:
        _say("note: no training shape has two specs valid under today's rules: the policy is untrained")
    if before and before["shapes"]:
        after = figures(val, policy_scorer(pol, dev))
        typer.echo(f"policy by likelihood on the held-out shapes: top1 {before['top1']:.3f} -> {after['top1']:.3f}, "
                   f"rho {before['rho']:+.3f} -> {after['rho']:+.3f}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    pol.save(out)
    _say(f"saved policy {out} ({used} rows; {time.monotonic() - t0:.0f} s)")


def register(app) -> None:
    app.command("train")(train_cmd)
