"""The filed wgmma kernels, their PDL builds and the cuBLAS baselines under both PROTOCOL clocks: the
offline loop (an event after every call) and CUDA-graph replays (cudal2.timing_graph: no event between
calls). Why: on a ~5 µs kernel the per-call event costs ~2 µs of GPU time and takes programmatic
dependent launch's overlap away (H100 2026-12-06, bench/pdl_probe.py); which ratios move, and does a
PDL build beat best-cublas where no event sits between calls?

  python3 bench/graph_clock.py --out $OUT [--classes small,skinny] [--layouts nt] [--per-class 16]
      [--variant PDL=1 --variant PDL=2 ...] [--families wgmma,mma,stream] [--max-us 12] [--max-seconds 300]

Per shape (the card's filed entries of the families (default wgmma) and classes asked, spread over their filed times, at
most --per-class a class and layout): the filed kernel, its builds with each --variant's template
macros (default PDL=1: wgmma.cu's programmatic dependent launch; for the Triton family tiled the
one variant is PDL=0 or PDL=1, the load's `pdl`, kernels_triton/tiled.py) and the baselines of the layout, each checked (random) and bound to one side stream (graph capture cannot
use the legacy default stream; the cuBLAS handle keeps the stream of its prepare); then timed
interleaved by the offline loop and by graph replays. Writes graph_clock_<card>_<commit>.csv (a row
per shape: each candidate's µs per clock, best-cublas per clock, filed and PDL over best-cublas per
clock) and .json (the command, versions, rows, the geomean per class and layout), after every shape.

--lost: the card's cuBLAS entries of those classes instead, each with the best kernel its search
measured and did not file (times.best_kernel_spec: it lost the offline filing, by the 1.01x margin or
outright), timed as "lost" beside the baselines on both clocks (no variant unless asked). Why: the
search files by the offline clock, whose event after every call costs a ~5 us kernel ~2 us (H100
2026-12-06, run 123) and takes PDL's overlap away; whether the shapes dispatched to cuBLAS hold
kernels that win where calls run back to back is this table (H100 run 127: the 48 small nt shapes
on torch.matmul were 0.983x best-cublas on either clock). H100 run 148 (2026-12-06): the 13 small
ones' lost kernels 1.011x best-cublas offline, 1.086x on the graph clock; the 26 skinny 0.983 / 1.003.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cta_timeline import build_variant, prefix  # noqa: E402
from variant_sweep import entries, parse_variant, variant_name, wanted  # noqa: E402

BASELINES = {"nn": ("torch", "cublas-nn", "cublaslt-heuristic", "cublaslt-autotune"),
             "nt": ("torch", "cublas-tn", "cublaslt-heuristic", "cublaslt-autotune")}


def pick(todo: list, per_class: int) -> list:
    """At most per_class entries a (class, layout), spread evenly over their filed times."""
    from cudal2.stats import shape_class
    groups: dict = {}
    for e in todo:
        groups.setdefault((shape_class(e.prob.M, e.prob.N, e.prob.K), e.prob.layout), []).append(e)
    out = []
    for g in groups.values():
        g.sort(key=lambda e: e.time_us or 0.0)
        step = max(1, math.ceil(len(g) / per_class))
        out += g[::step][:per_class]
    return out


def summarize(rows: list[dict]) -> dict:
    out: dict = {}
    for r in rows:
        for g in ("all", f"{r['class']}:{r['layout']}"):
            for k in [k for k in r if k.endswith(" / best-cublas")]:
                out.setdefault(g, {}).setdefault(k, []).append(r[k])
    from cudal2.stats import geomean
    return {g: {k: {"n": len(v), "geomean": round(geomean(v), 4),
                    "worst": min(v), "wins": sum(x > 1.0 for x in v)} for k, v in per.items()}
            for g, per in out.items()}


def resumed_rows(path: str, lost: bool) -> tuple[str | None, list[dict]]:
    """The card and the timed rows of an earlier run of this command (a failed shape's row is timed
    again)."""
    from cudal2.report import load_json
    doc = load_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError("not a graph_clock JSON (no rows)")
    if bool(doc.get("lost")) != lost:
        raise ValueError(f"it was {'' if doc.get('lost') else 'not '}a --lost run; this one is "
                         f"{'' if lost else 'not '}")
    return doc.get("device"), [r for r in doc["rows"] if "note" not in r]


def triton_variant(spec, p, dev, defines: dict):
    """The Triton kernel loaded with PDL on or off (its only variant here)."""
    from cudal2.backends import triton as tb
    if set(defines) != {"PDL"} or defines["PDL"] not in (0, 1):
        raise ValueError(f"a Triton variant is PDL=0 or PDL=1, not {defines}")
    return tb.load(tb.compile(spec, p, dev), pdl=bool(defines["PDL"]))


class Lost:
    """A cuBLAS entry seen as the kernel its search measured best and did not file (--lost)."""

    def __init__(self, e):
        self.problem, self.prob, self.spec = e.problem, e.prob, e.times["best_kernel_spec"]
        self.time_us = e.times.get("best_kernel_us")
        self.entry = e


def dispatched_call(e, p, a, b, c) -> tuple[str, object]:
    """The call a cuBLAS entry dispatches (lt_dispatch.choose, as cudal2.matmul runs it) and, where
    it is none of the baselines' own calls, a function running it: cuBLASLt autotune's *stored*
    algorithm. The autotune baseline tunes again in this process and may time another algorithm
    than the one dispatch runs, so it is no evidence of what the entry serves (H100 run 153, same
    run: 2048x64x16384:nn's stored algorithm 33.6 µs, the column 30.2-30.3; 4096x64x8192:nn's
    column 32.1-32.4 µs in run 151's processes, 30.1-30.2 in run 153's, its stored one 29.8)."""
    from cudal2 import lt_dispatch
    target, words, _ = lt_dispatch.choose(e, lt_dispatch.lt_version())
    if target != "cublaslt-autotune":
        return target, None
    k = lt_dispatch.LtKernel(p, words)
    return target, (lambda: k(a, b, c))


def lost_entries(registry, device_key: str, layouts, classes, families, min_ratio: float = 0.0) -> list:
    """--lost: the cuBLAS entries of the layouts and classes with a best lost kernel of the families,
    that kernel at least `min_ratio` of best-cublas in its own run (record.lost_ratio; 0: any)."""
    from cudal2.registry.record import lost_ratio
    return [Lost(e) for e in sorted(registry.all(device_key), key=lambda e: e.problem)
            if e.backend == "cublas" and wanted(e.prob, (e.times or {}).get("best_kernel_spec") or "", layouts,
                                                classes, families)
            and (not min_ratio or (lost_ratio(e) or 0.0) >= min_ratio)]


def bench_shape(e, dev, args, variants: dict[str, dict], first: str = "filed") -> dict:
    import torch

    from cudal2 import baselines, timing, timing_graph
    from cudal2.backends import build_kernel
    from cudal2.check import check_kernel, make_inputs
    from cudal2.spec import KernelSpec
    from cudal2.stats import shape_class
    p, spec = e.prob, KernelSpec.parse(e.spec)
    row = {"problem": p.text, "layout": p.layout, "class": shape_class(p.M, p.N, p.K), "spec": e.spec,
           "filed_at_us": e.time_us}
    ks = {first: build_kernel(spec, p, dev)}
    ks.update({n: (triton_variant(spec, p, dev, d) if spec.backend == "triton" else build_variant(spec, p, dev, prefix(d)))
               for n, d in variants.items()})
    for n, k in ks.items():
        rep = check_kernel(k, p, "cuda", checks=("random",))
        if not rep.passed:
            raise RuntimeError(f"{n} failed the check: {rep.reason}")
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(p.M + 3 * p.N + 7 * p.K))
    reasons: dict = {}
    outs = {n: torch.empty(p.M, p.N, dtype=torch.float16, device="cuda") for n in (*ks, "base")}
    fns = {n: (lambda k=k, c=outs[n]: k(a, b, c)) for n, k in ks.items()}
    fns.update(baselines.prepare(BASELINES[p.layout], p, a, b, outs["base"], reasons=reasons))
    if reasons:
        row["baselines_missing"] = "; ".join(f"{k}: {v[:60]}" for k, v in reasons.items())
    call = None
    if isinstance(e, Lost):      # what the cuBLAS entry serves today, the bar beside best-cublas
        call, fn = dispatched_call(e.entry, p, a, b, outs["base"])
        row["dispatched call"] = call
        if fn is not None:
            fns["dispatched"], call = fn, "dispatched"
    st = {"offline": timing.offline(fns, min_ms=args.min_ms),
          "graph": timing_graph.graph(fns, replays=args.replays)}
    if args.server:
        st["server"] = timing.server(fns, calls=args.server_calls)
    for clock, stats in st.items():
        # PROTOCOL: the offline and graph clocks report medians, server mode (cold L2) the mean
        us = {n: (s.mean_us if clock == "server" else s.median_us) for n, s in stats.items()}
        for n, t in us.items():
            row[f"{n} {clock} us"] = round(t, 3)
        best_name = min((n for n in us if n in baselines.NAMES), key=us.get)
        row[f"best-cublas {clock}"] = best_name
        row[f"best-cublas {clock} us"] = round(us[best_name], 3)
        for n in ks:
            row[f"{n} {clock} / best-cublas"] = round(us[best_name] / us[n], 4)
            if call in us:
                row[f"{n} {clock} / dispatched"] = round(us[call] / us[n], 4)
            if clock == "server" and "torch" in us:      # the server guard's ratio (add-timings)
                row[f"{n} server / torch"] = round(us["torch"] / us[n], 4)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes", default="small,skinny")
    ap.add_argument("--layouts", default="nt")
    ap.add_argument("--per-class", type=int, default=16, help="shapes a (class, layout), at most")
    ap.add_argument("--variant", action="append", metavar="'NAME=INT ...'",
                    help="one variant's template macros (repeat for more; default PDL=1)")
    ap.add_argument("--families", default="wgmma", help="families whose filed entries to time "
                    "(wgmma, mma, stream: each has a PDL template macro; tiled: Triton, PDL=0 or 1)")
    ap.add_argument("--max-us", type=float, default=0.0, help="only entries filed at most this many µs (0: any)")
    ap.add_argument("--min-ms", type=float, default=15.0, help="offline timing per candidate, at least")
    ap.add_argument("--replays", type=int, default=30, help="graph replays per candidate")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="start no shape after this many seconds")
    ap.add_argument("--lost", action="store_true", help="time the cuBLAS entries' best lost kernels instead "
                    "of the filed kernels (see the module's text)")
    ap.add_argument("--lost-min", type=float, default=0.0, help="--lost: only kernels that ran at least this "
                    "ratio of best-cublas where they were measured (file-graph files none under 1.00 offline; "
                    "0.97 keeps those noise could lift, H100 2026-12-07: 102 of 166 small)")
    ap.add_argument("--server", action="store_true", help="also time server mode (cold L2, random idle gaps; "
                    "PROTOCOL's mean): the ratio `cudal2 registry file-graph` guards with")
    ap.add_argument("--server-calls", type=int, default=50, help="server-mode calls per candidate")
    ap.add_argument("--tag", default="", help="appended to the output files' name: a second timing of the "
                    "same shapes at the same commit gets its own CSV / JSON")
    ap.add_argument("--resume", metavar="JSON", help="an earlier output of this command on this card "
                    "(.json or .json.gz): its rows are kept and their shapes not timed again")
    args = ap.parse_args(argv)
    from cudal2.stats import SHAPE_CLASSES
    layouts = [x for x in args.layouts.split(",") if x]
    classes = [x for x in args.classes.split(",") if x]
    families = [x for x in args.families.split(",") if x]
    if not set(layouts) <= {"nn", "nt"} or not set(classes) <= set(SHAPE_CLASSES) or args.per_class < 1 \
            or not families or not set(families) <= {"wgmma", "mma", "stream", "tiled"} or args.server_calls < 1:
        ap.error(f"--layouts from nn,nt; --classes from {','.join(SHAPE_CLASSES)}; --per-class >= 1; "
                 "--families from wgmma,mma,stream,tiled; --server-calls >= 1")
    if args.tag and not args.tag.replace("-", "").replace("_", "").isalnum():
        ap.error(f"--tag is letters, digits, - and _ (it names files), got {args.tag!r}")
    try:
        done_dev, done = resumed_rows(args.resume, args.lost) if args.resume else (None, [])
    except (OSError, ValueError) as ex:
        ap.error(f"--resume {args.resume}: {ex}")
    try:
        variants = {variant_name(d): d for d in map(parse_variant, args.variant or ([] if args.lost else ["PDL=1"]))}
    except ValueError as ex:
        ap.error(str(ex))
    t0 = time.monotonic()
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark times kernels on the GPU", file=sys.stderr)
        return 3
    from cudal2.device import current
    from cudal2.registry import Registry
    from cudal2.report import write_rows_csv
    from cudal2.versions import collect, source_commit
    dev = current()
    reg = Registry.load(None)
    found = lost_entries(reg, dev.key, layouts, classes, families, args.lost_min) if args.lost else \
        entries(reg, dev.key, layouts, classes, 1, families)
    todo = [e for e in found if not args.max_us or (e.time_us and e.time_us <= args.max_us)]
    todo = pick(todo, args.per_class)
    if done and done_dev != dev.key:
        ap.error(f"--resume {args.resume}: its rows were timed on another card than {dev.key}")
    seen = {r["problem"] for r in done}
    todo = [e for e in todo if e.problem not in seen]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"graph_clock{'_lost' if args.lost else ''}_{dev.key}_{source_commit()}{'_' + args.tag if args.tag else ''}"
    meta = {"command": " ".join([sys.executable, *sys.argv]), "device": dev.key, "versions": collect(),
            "lost": args.lost, "shapes": len(todo) + len(done), "resumed": len(done), "variants": variants}
    rows: list[dict] = list(done)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):           # capture needs a side stream; baselines bind to it
        for i, e in enumerate(todo):
            if time.monotonic() - t0 > args.max_seconds:
                meta["stopped_early"] = f"{i + len(done)} of {len(todo) + len(done)}"
                break
            try:
                row = bench_shape(e, dev, args, variants, "lost" if args.lost else "filed")
            except Exception as ex:          # one shape's failure is a row, not an outage
                row = {"problem": e.problem, "spec": e.spec, "note": f"{type(ex).__name__}: {str(ex)[:200]}"}
            rows.append(row)
            print(f"[{i + 1}/{len(todo)}] {e.problem}: " + "; ".join(
                f"{k} {v}" for k, v in row.items() if k.endswith("/ best-cublas") or k == "note"), flush=True)
            ok = [r for r in rows if "note" not in r]
            write_rows_csv(out / f"{tag}.csv", rows, (meta["command"], f"device {dev.key} commit {source_commit()}"))
            (out / f"{tag}.json").write_text(json.dumps({**meta, "summary": summarize(ok), "rows": rows}, indent=1))
    summary = summarize([r for r in rows if "note" not in r])
    for g, per in summary.items():
        print(g, "; ".join(f"{k}: {v['geomean']} (worst {v['worst']}, {v['wins']}/{v['n']} won)" for k, v in per.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
