"""`cudal2 registry list|show|verify|export` and `cudal2 problems`.

  cudal2 registry list   [--registry PATH] [--device KEY] [--json]
  cudal2 registry show   PROBLEM [--device KEY] [--registry PATH] [--json]
  cudal2 registry verify [--registry PATH] [--gpu/--no-gpu] [--render]   exit 1 naming each bad entry
  cudal2 registry export DIR [--registry PATH] [--device KEY]
  cudal2 registry rerender --registry PATH     re-render entries whose kernel family changed
  cudal2 problems --hf-config config.json --tokens 1,16,128,2048 [--layout nt] [--json]

--registry defaults to $CUDAL2_REGISTRY, else the registry shipped in the package.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

_REG_OPT = typer.Option(None, "--registry", help="registry root (default: $CUDAL2_REGISTRY, else the shipped one)")
_DEV_OPT = typer.Option(None, "--device", help="device key, e.g. h200-sm90 (default: every device)")


def _load(path):
    """The registry at `path`, which must exist and hold an index (only generate creates one);
    entries refused at load are named one per line on stderr, not as Python warnings."""
    import warnings
    from .errors import fail
    from ..registry import Registry, RegistryError
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reg = Registry.load(path)
    except RegistryError as e:
        fail(str(e))
    if not (reg.root / "index.json").is_file():
        fail(f"registry {reg.root} has no index.json: not a cudal2 registry (only `cudal2 generate` creates one)")
    for key, why in reg.bad:
        typer.echo(f"refused entry {key}: {why}", err=True)
    return reg


_QUIET = {"split_k=1", "subtile=1", "warp_spec=0", "cluster=1"}


def _fmt(x, spec="{:.2f}"):
    return "-" if x is None else spec.format(x)


def list_cmd(registry: Optional[str] = _REG_OPT, device: Optional[str] = _DEV_OPT,
             as_json: bool = typer.Option(False, "--json", help="print entries as JSON")) -> None:
    """List entries with their times and speedups over best-cuBLAS and torch."""
    reg = _load(registry)
    ents = reg.all(device)
    if as_json:
        typer.echo(json.dumps([e.to_dict() for e in ents], indent=1))
        return
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"cudal2 registry {reg.root}" + (" (shipped)" if reg.shipped else ""))
    for col in ("device", "problem", "backend", "spec", "kernel µs", "best cuBLAS", "vs best", "vs torch"):
        t.add_column(col, justify="right" if col in ("kernel µs", "vs best", "vs torch") else "left")
    for e in ents:
        # The backend has its own column, and knobs at their off value only widen the table.
        spec = " ".join(tok for tok in e.spec.split() if not tok.startswith("backend=") and tok not in _QUIET)
        t.add_row(e.device, e.problem, e.backend, spec, _fmt(e.time_us),
                  f"{e.best_cublas or '-'} {_fmt(e.best_cublas_us)}", _fmt(e.speedup(), "{:.3f}x"),
                  _fmt(e.speedup("torch"), "{:.3f}x"))
    Console().print(t)
    typer.echo(f"{len(ents)} entries" + (f"; {len(reg.bad)} refused at load" if reg.bad else ""))


def show_cmd(problem: str = typer.Argument(..., help="MxNxK[:layout], e.g. 4096x4096x4096:nt"),
             layout: str = typer.Option("nn", "--layout", help="layout when PROBLEM has none"),
             registry: Optional[str] = _REG_OPT, device: Optional[str] = _DEV_OPT,
             as_json: bool = typer.Option(False, "--json", help="print the entry as JSON")) -> None:
    """Show one entry and its source."""
    from .errors import fail
    from ..problems import Problem
    from ..registry import RegistryError
    reg = _load(registry)
    p = Problem.parse(problem, None if ":" in problem else layout)
    hits = [e for e in reg.all(device) if e.problem == p.text]
    refused = [k for k, _ in reg.bad if k.endswith(f"/{p.text}") and (device is None or k == f"{device}/{p.text}")]
    if refused and not hits:
        fail(f"the entry for {p} in {reg.root} was refused at load (above); `cudal2 registry verify` lists every "
             "bad entry", code=1)
    if not hits:
        fail(f"no entry for {p}" + (f" on {device}" if device else "") + f" in {reg.root}", code=1)
    refused = False
    for e in hits:
        try:
            src = None if e.backend == "cublas" else reg.read_source(e)
            err = None
        except RegistryError as x:
            src, err, refused = None, str(x), True
        if as_json:
            typer.echo(json.dumps({**e.to_dict(), "source_text": src, "error": err}, indent=1))
            continue
        from rich.console import Console
        from rich.syntax import Syntax
        con = Console()
        con.print(f"[bold]{e.key}[/bold]  backend={e.backend}")
        for k in ("spec", "source", "sha256", "time_us", "best_cublas", "best_cublas_us"):
            con.print(f"  {k}: {getattr(e, k)}")
        con.print(f"  speedup vs best-cublas: {_fmt(e.speedup(), '{:.3f}x')}")
        for name, us in sorted(e.baselines_us.items()):
            con.print(f"  baseline {name}: {_fmt(us)} µs ({_fmt(e.speedup(name), '{:.3f}x')})")
        if e.check:
            con.print(f"  check: passed={e.check.get('passed')} {e.check.get('reason', '')}")
        if e.versions:
            con.print("  versions: " + ", ".join(f"{k}={v}" for k, v in sorted(e.versions.items())))
        if err:
            con.print(f"[red]refused: {err}[/red]")
        elif src is not None:
            con.print(Syntax(src, "python" if e.backend == "triton" else "cpp", line_numbers=True))
    if refused:      # a refused entry is a failure even when shown
        raise typer.Exit(1)


def verify_cmd(registry: Optional[str] = _REG_OPT,
               gpu: Optional[bool] = typer.Option(None, "--gpu/--no-gpu", help="re-run the checker (default: if a GPU is visible)"),
               render: bool = typer.Option(False, "--render", help="also re-render each spec and compare hashes"),
               record: bool = typer.Option(False, "--record", help="write check.passed for pending (re-rendered) "
                                           "entries that the GPU checker just passed"),
               pending_only: bool = typer.Option(False, "--pending-only", help="with the GPU checker, re-check "
                                                 "only the pending (re-rendered) entries; the rest are "
                                                 "hashed (and rendered) only"),
               time_limit: Optional[float] = typer.Option(None, "--time-limit", help="with the GPU checker: start "
                                                          "no entry's check after this many seconds; the rest "
                                                          "are named not checked (run again), what passed is "
                                                          "still --record'ed"),
               warm: bool = typer.Option(True, "--warm/--no-warm", help="with the GPU checker: compile the "
                                         "kernels to check first, in parallel CPU processes")) -> None:
    """Re-hash every entry's source (and with a GPU re-run the checker); exit 1 naming any bad one."""
    from .errors import fail
    from ..registry import RegistryError
    reg = _load(registry)
    if record and reg.shipped:     # the package's files are not written in place, as for every edit
        fail("the shipped registry is read-only here: export it, verify --gpu --render --record the copy "
             "(--registry DIR), ship that", code=1)
        return
    try:
        res = reg.verify(gpu=gpu, render=render, pending_only=pending_only, time_limit=time_limit, warm=warm)
    except RegistryError as e:
        fail(str(e))
        return
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"verify {reg.root}")
    for col in ("entry", "result", "detail"):
        t.add_column(col)
    for r in res:
        t.add_row(r.entry, "[green]ok[/green]" if r.ok else "[red]BAD[/red]", r.reason)
    Console().print(t)
    bad = [r for r in res if not r.ok]
    for r in bad:
        typer.echo(f"bad entry {r.entry}: {r.reason}", err=True)
    from ..registry.upkeep import NOT_RUN
    left = sum(NOT_RUN in r.reason for r in res)
    typer.echo(f"{len(res) - len(bad)} ok, {len(bad)} bad"
               + (f"; {left} not checked by the GPU checker (--time-limit {time_limit:g} s): run again" if left else ""))
    if record:
        _record(reg, res)
    if bad:
        raise typer.Exit(1)


def _record(reg, res) -> None:
    """--record: the pending entries the checker passed just now get check.passed True, with the
    date (the entry's key names the card), so a re-rendered registry can ship without hand edits."""
    import datetime
    keys = {r.entry for r in res if r.checked}
    if not keys:
        typer.echo("--record: the GPU checker passed no entry here, nothing recorded")
        return
    day = datetime.date.today().isoformat()
    done = reg.record_rechecks(keys, f"re-checked by verify --gpu --render, {day}")
    typer.echo(f"recorded {len(done)} pending check(s) as passed" + "".join(f"\n  {e.key}" for e in done))


def export_cmd(dest: str = typer.Argument(..., help="directory to write (index.json + sources)"),
               registry: Optional[str] = _REG_OPT, device: Optional[str] = _DEV_OPT) -> None:
    """Export a standalone registry directory (usable as --registry / $CUDAL2_REGISTRY)."""
    from .errors import fail
    from ..registry import Registry, RegistryError
    reg = _load(registry)
    try:
        out = reg.export(dest, device)
    except RegistryError as e:
        fail(str(e), code=1)
        return
    except OSError as e:        # a destination that cannot be written (read-only, /proc, a file)
        fail(f"cannot export to {dest}: {e.strerror or e}", code=1)
        return
    typer.echo(f"exported {len(Registry.load(out).all())} entries to {out}")


def attach_lt_cmd(cache: str = typer.Argument(..., help="cuBLASLt autotune cache, lt-autotune-<device>.json "
                                                        "(~/.cache/cudal2 on the GPU machine)"),
                  registry: Optional[str] = _REG_OPT) -> None:
    """Record cuBLASLt autotune's algorithms on the registry's cuBLAS entries (dispatch runs them)."""
    from .errors import fail
    from ..lt_dispatch import read_tune_cache
    from ..registry import RegistryError
    try:
        device, algos = read_tune_cache(cache)
        reg = _load(registry)
        n = reg.set_lt_algos(device, algos)
    except (ValueError, RegistryError) as e:
        fail(str(e), code=1)
        return
    cub = sum(e.backend == "cublas" for e in reg.all(device))
    typer.echo(f"{device}: {len(algos)} tuned problems in {cache}; {n} cublas entries updated, "
               f"{sum(e.backend == 'cublas' and e.lt_algo is not None for e in reg.all(device))} of {cub} now carry one")


def problems_cmd(hf_config: str = typer.Option(..., "--hf-config", help="a Hugging Face config.json (read locally)"),
                 tokens: str = typer.Option("1,16,128,2048", "--tokens", help="comma-separated token counts (M)"),
                 layout: str = typer.Option("nt", "--layout", help="nt (nn.Linear weights) or nn"),
                 as_json: bool = typer.Option(False, "--json", help="print a JSON list")) -> None:
    """List the GEMM problems of a model's linear layers, one MxNxK:layout per line (a --shapes file)."""
    from .errors import fail
    from ..problems import ProblemError, problems_from_hf_config
    try:
        toks = [int(t) for t in tokens.split(",") if t.strip()]
    except ValueError:
        fail(f"--tokens {tokens!r}: give comma-separated integers, e.g. 1,16,128")
        return
    if not toks or min(toks) < 1:
        fail(f"--tokens {tokens!r}: give at least one token count >= 1")
    try:
        probs = problems_from_hf_config(hf_config, toks, layout)
    except FileNotFoundError:
        fail(f"--hf-config {hf_config}: no such file")
        return
    except json.JSONDecodeError as e:
        fail(f"--hf-config {hf_config}: not valid JSON: {e}")
        return
    except (ProblemError, ValueError, TypeError) as e:
        fail(f"--hf-config {hf_config}: {e}")
        return
    if as_json:
        typer.echo(json.dumps([p.text for p in probs]))
    else:
        for p in probs:
            typer.echo(p.text)


def apply_margin_cmd(margin: float = typer.Option(..., "--margin", help="a kernel entry must beat best-cublas by this "
                                                     "ratio (e.g. 1.01) or it is re-filed as cuBLAS"),
                     registry: Optional[str] = _REG_OPT, device: Optional[str] = _DEV_OPT,
                     lt_cache: Optional[str] = typer.Option(None, "--lt-cache", help="cuBLASLt autotune cache: "
                                                            "attach its algorithms to the re-filed entries")) -> None:
    """Apply generate's --file-margin to entries filed before it: thin wins become cuBLAS entries."""
    from .errors import fail
    from ..registry import RegistryError
    reg = _load(registry)
    if reg.shipped:
        fail("the shipped registry is read-only here: export it, apply the margin to the copy, ship that", code=1)
        return
    devices = [device] if device else sorted(reg.entries)
    try:
        cache_dev, algos = (None, {})
        if lt_cache:        # read before anything changes: a bad cache leaves the registry as it was
            from ..lt_dispatch import read_tune_cache
            cache_dev, algos = read_tune_cache(lt_cache)
        for dev in devices:
            changed = reg.apply_margin(dev, margin)
            for e in changed:
                typer.echo(f"re-filed {e.key} as cublas ({e.times['refiled']})")
            if lt_cache and changed and cache_dev != dev:
                typer.echo(f"{dev}: {lt_cache} is {cache_dev}'s autotune cache; no algorithm attached")
            elif lt_cache and changed:
                n = reg.set_lt_algos(dev, {e.problem: algos[e.problem] for e in changed if e.problem in algos})
                typer.echo(f"{dev}: {n} of them carry cuBLASLt autotune's algorithm")
            typer.echo(f"{dev}: {len(changed)} entries re-filed as cublas at margin {margin}")
    except (ValueError, RegistryError) as e:
        fail(str(e), code=1)


def rerender_cmd(registry: Optional[str] = _REG_OPT,
                 compare_sass: bool = typer.Option(
                     True, "--compare-sass/--no-compare-sass",
                     help="keep the check and timings of a CUDA entry whose new source compiles to the same "
                     "SASS as the filed one (NVRTC + cuobjdump, no GPU)")) -> None:
    """Re-render kernel entries whose family changed since filing (new sources; checks marked not re-run
    unless the machine code is unchanged)."""
    from .errors import fail
    from ..registry import RegistryError
    reg = _load(registry)
    if reg.shipped:
        fail("the shipped registry is read-only here: export it, re-render the copy, verify it with --gpu "
             "on a card, ship that", code=1)
        return
    try:
        changed = reg.rerender(compare_sass=compare_sass)
    except (RegistryError, ValueError, OSError) as e:
        fail(str(e).splitlines()[0] if str(e) else type(e).__name__, code=1)
        return
    pending = [e for e in changed if e.check.get("passed") is None]
    same = [e for e in changed if e not in pending]
    for e in changed:
        typer.echo(f"re-rendered {e.key}: {e.source}" + (" (same SASS: check and timings kept)" if e in same else ""))
    typer.echo(f"{len(changed)} entries re-rendered" + (f", {len(same)} to the same SASS" if compare_sass and changed else "")
               + (f"; re-check the other {len(pending)} on a card: cudal2 registry verify --gpu --render "
                  f"--registry {reg.root}" if pending else ""))


def add_timings_cmd(compares: List[str] = typer.Argument(..., help="`cudal2 compare --json` files of this device "
                                                                       "(gzipped or not), applied in the order given"),
                    registry: Optional[str] = _REG_OPT,
                    margin: Optional[float] = typer.Option(None, "--margin", help="the cuBLAS margin (default: "
                                                           "each entry's own, 1.01)"),
                    guard: Optional[float] = typer.Option(
                        None, "--server-guard", help="also re-file as cuBLAS each kernel entry, and stop dispatching "
                        "each cuBLASLt call, that ran under this ratio of torch.matmul in the compare's server "
                        "mode (cold L2; e.g. 0.97 for a decode server); off by default: the registry is chosen "
                        "by offline time"),
                    oguard: Optional[float] = typer.Option(
                        None, "--offline-guard", help="also re-file as cuBLAS each kernel entry that ran under this "
                        "ratio of torch.matmul in the compare's offline medians (e.g. 0.97: issue 22's bar)")) -> None:
    """Add compare runs' timings to the cuBLAS entries' evidence and choose their calls again.

    Several compares (every timing of a set: run 154-156's seven, 2026-12-07) are all read before
    any is applied, so a bad file changes nothing; each then counts as one timing, in order."""
    from .errors import fail, load_jsons
    from ..registry import RegistryError
    reg = _load(registry)
    if reg.shipped:
        fail("the shipped registry is read-only here: export it, add the timings to the copy, ship that", code=1)
        return
    loaded = []
    for compare, data in zip(compares, load_jsons(compares, "cudal2 compare JSON")):
        try:
            loaded.append((compare, data["versions"]["device_key"], _timings_of(data)))
        except (KeyError, TypeError) as e:
            fail(f"{compare}: not a cudal2 compare JSON ({type(e).__name__}: {e})", code=1)
            return
        if guard is not None and not (loaded[-1][2]["server"] or "server" in data.get("config", {}).get("modes", [])):
            fail(f"{compare}: --server-guard needs a compare with server mode (--mode both)", code=1)
            return
    for compare, device, t in loaded:
        if len(loaded) > 1:
            typer.echo(f"== {compare}")
        try:
            _add_one(reg, t, device, margin, guard, oguard)
        except RegistryError as e:
            fail(str(e), code=1)
            return


def _timings_of(data: dict) -> dict:
    """What add-timings reads from one compare, read before anything is applied (a malformed row
    fails here, with the registry untouched)."""
    from ..registry import (autotune_algos, call_timings, compare_timings, offline_kernel_timings,
                            server_timings)
    return {"server": server_timings(data), "offline_kernels": offline_kernel_timings(data),
            "algos": autotune_algos(data), "offline": compare_timings(data), "calls": call_timings(data)}


def _add_one(reg, t: dict, device: str, margin, guard, oguard) -> None:
    """One compare's timings (_timings_of) into the registry, what moved echoed."""
    from ..registry import add_timings, call_guard, offline_guard, server_guard
    # the server guard first: the entries it re-files take this compare's timings below
    guarded = server_guard(reg.root, device, t["server"], guard) if guard is not None else []
    oguarded = offline_guard(reg.root, device, t["offline_kernels"], oguard) if oguard is not None else []
    moved = add_timings(reg.root, device, t["offline"], margin, t["algos"])
    calls = call_guard(reg.root, device, t["calls"], guard, t["algos"]) if guard is not None else []
    for e, ratio in guarded:
        typer.echo(f"{e.key}: kernel -> cuBLAS (server mode {ratio:.3f}x of torch.matmul, guard {guard})")
    if guard is not None:
        typer.echo(f"{device}: --server-guard {guard}: {len(guarded)} kernel entries re-filed as cuBLAS")
    for e, ratio in oguarded:
        typer.echo(f"{e.key}: kernel -> cuBLAS (offline {ratio:.3f}x of torch.matmul, guard {oguard})")
    if oguard is not None:
        typer.echo(f"{device}: --offline-guard {oguard}: {len(oguarded)} kernel entries re-filed as cuBLAS")
    for e, old, new in moved:
        if old != new:
            typer.echo(f"{e.key}: {old} -> {new} ({e.dispatch['why']})")
    typer.echo(f"{device}: {len(moved)} cuBLAS entries got a timing; "
               f"{sum(o != n for _, o, n in moved)} now dispatch to another call")
    for e, call, ratio in calls:
        typer.echo(f"{e.key}: {call} kept out (server mode {ratio:.3f}x of torch.matmul, guard {guard}); "
                   f"dispatches {e.dispatch['target']}")
    if guard is not None:
        typer.echo(f"{device}: --server-guard {guard}: {len(calls)} cuBLASLt calls no longer dispatched")


def rechoose_cmd(registry: Optional[str] = _REG_OPT, device: Optional[str] = _DEV_OPT) -> None:
    """Choose each cuBLAS entry's call again over the timings it holds, by today's rule (no new
    timing): repairs records a later rule would judge otherwise, e.g. autotune with no algorithm."""
    from .errors import fail
    from ..registry import RegistryError, rechoose
    reg = _load(registry)
    if reg.shipped:
        fail("the shipped registry is read-only here: export it, rechoose the copy, ship that", code=1)
        return
    if device and device not in reg.entries:
        fail(f"no entries for device {device!r} in {reg.root} (it has: {', '.join(sorted(reg.entries)) or 'none'})",
             code=1)
        return
    try:
        for dev in [device] if device else sorted(reg.entries):
            moved = rechoose(reg.root, dev)
            for e, old, new in moved:
                typer.echo(f"{e.key}: {old} -> {new} ({e.dispatch['why']})")
            typer.echo(f"{dev}: {len(moved)} cuBLAS entries chosen otherwise")
    except RegistryError as e:
        fail(str(e), code=1)


def register(app) -> None:
    reg_app = typer.Typer(no_args_is_help=True, help="Inspect, verify and export the kernel registry.")
    reg_app.command("list")(list_cmd)
    reg_app.command("show")(show_cmd)
    reg_app.command("verify")(verify_cmd)
    reg_app.command("export")(export_cmd)
    reg_app.command("attach-lt")(attach_lt_cmd)
    reg_app.command("apply-margin")(apply_margin_cmd)
    reg_app.command("rerender")(rerender_cmd)
    reg_app.command("add-timings")(add_timings_cmd)
    reg_app.command("rechoose")(rechoose_cmd)
    from .transfer import transfer_cmd
    reg_app.command("transfer")(transfer_cmd)
    from .file_cublas import file_cublas_cmd
    reg_app.command("file-cublas")(file_cublas_cmd)
    from .file_graph import file_graph_cmd
    reg_app.command("file-graph")(file_graph_cmd)
    from .keep_lost import keep_lost_cmd
    reg_app.command("keep-lost")(keep_lost_cmd)
    from .merge import merge_cmd
    reg_app.command("merge")(merge_cmd)
    app.add_typer(reg_app, name="registry")
    app.command("problems")(problems_cmd)
