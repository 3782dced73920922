"""The filed wgmma kernels against template-macro variants of themselves, class by class: whether an
experiment (wgmma.cu's template macros: EARLY_LOAD, EPI_DIRECT off in every filed kernel; RED_CHUNK,
EXIT_RELAXED, A_TRIM on since run 62, 2026-12-05, so "RED_CHUNK=1 EXIT_RELAXED=0 A_TRIM=0" is the old
code) would pay on the kernels that dispatch serves, before it becomes a default.

  python3 bench/variant_sweep.py --out $OUT --variant "RED_CHUNK=1 EXIT_RELAXED=0 A_TRIM=0" --variant EARLY_LOAD=1 \
      [--registry DIR] [--layouts nt] [--classes skinny,starved] [--stride 1] [--max-seconds 300] [--alone]
      [--shapes bench/decode_set.txt] [--lost] [--torch]

--lost adds the cuBLAS entries' best lost wgmma kernels (the kernel a search measured best there and
did not file: graph_clock.py's Lost) as if filed, so a variant can be tried where dispatch serves
cuBLAS; --torch times torch.matmul in the same interleaved run (each kernel's "vs torch" ratio):
whether a variant would take a shape from cuBLAS, not only whether it beats its parent.

Per filed wgmma entry (the shipped registry, or --registry): the filed kernel and each variant (the
same spec rendered behind the variant's #defines), each given the checker's random check, timed
together, interleaved (cudal2.timing.offline). Every pair is compiled first in parallel and its SASS
compared with the filed kernel's: a variant that compiles to the same machine code there (RED_CHUNK
on a spec without the cluster split-K, say) is not timed, and one that does not apply (A_TRIM on a
2-CTA cluster: a compile-time #error) is that row's note. Writes variant_sweep_<card>_<commit>.csv
(a row per entry: filed µs, each variant's µs and filed / variant) and .json (the command, versions,
the rows, the summary per class and layout: geomean of filed / variant, wins and losses past 1%),
rewritten after every entry.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from cudal2.report import write_rows_csv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cta_timeline import build_variant, parse_defines, prefix  # noqa: E402


def parse_variant(text: str) -> dict[str, int]:
    """'NAME=INT [NAME=INT ...]' -> the #defines of one variant (at least one)."""
    out = parse_defines(text, f"--variant {text!r}")
    if not out:
        raise ValueError(f"--variant {text!r}: no NAME=INTEGER in it")
    return out


def variant_name(defines: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in defines.items())


def entries(registry, device_key: str, layouts, classes, stride: int, families=("wgmma",)) -> list:
    """The registry's kernel entries of the families (wgmma; a Triton family such as tiled for
    bench/graph_clock.py), layouts and shape classes asked for, every stride-th."""
    return [e for e in sorted(registry.all(device_key), key=lambda e: e.problem)
            if e.backend in ("cuda", "triton") and wanted(e.prob, e.spec, layouts, classes, families)][::stride]


def wanted(prob, spec: str, layouts, classes, families) -> bool:
    """A kernel spec of one of `families` at a problem of `layouts` and shape `classes` (all if empty)."""
    from cudal2.stats import shape_class
    return any(f" family={f} " in f" {spec} " for f in families) and prob.layout in layouts and \
        (not classes or shape_class(prob.M, prob.N, prob.K) in classes)


def summarize(rows: list[dict], names: list[str], suffix: str = " ratio") -> dict:
    """Per (class:layout) and all, per variant: n, geomean of filed / variant, wins / losses past 1%
    (suffix " vs torch": of torch.matmul / the kernel, with --torch)."""
    groups: dict[str, list] = {"all": rows}
    for r in rows:
        groups.setdefault(f"{r['class']}:{r['layout']}", []).append(r)
    out = {}
    for g, rs in groups.items():
        out[g] = {}
        for n in names:
            xs = [r[f"{n}{suffix}"] for r in rs if r.get(f"{n}{suffix}")]
            out[g][n] = {"n": len(xs), "geomean": math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None,
                         "wins": sum(x > 1.01 for x in xs), "losses": sum(x < 0.99 for x in xs)}
    return out


def _compile_pair(job):
    """(problem text, spec text, variant name, its #defines) -> (problem, variant, same SASS as the
    filed kernel: True / False / None (no cuobjdump), error or None). A worker process: NVRTC only;
    both cubins land in the CUDA backend's disk cache, so the main process's builds hit it."""
    ptext, spec_text, name, defines = job
    from cudal2.backends.cuda import BACKEND
    from cudal2.backends.sass import cuobjdump, sass_lines
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    p, spec = Problem.parse(ptext), KernelSpec.parse(spec_text)
    try:
        src = BACKEND.render(spec, p)
        plain = BACKEND.compile_source(spec, src, "sm_90a", p.layout).binary
        var = BACKEND.compile_source(spec, prefix(defines) + src, "sm_90a", p.layout).binary
        tool = cuobjdump()
        return ptext, name, (sass_lines(plain, tool) == sass_lines(var, tool)) if tool else None, None
    except Exception as ex:         # NVRTC's own error line where there is one (a variant's #error)
        log = getattr(ex, "log", "") or ""
        lines = [l for l in log.splitlines() if "error" in l] or str(ex).splitlines()
        msg = lines[0].strip()[:240] if lines else type(ex).__name__
        return ptext, name, None, msg


def compile_pairs(jobs: list, procs: int) -> dict:
    """Each (problem text, spec text, variant name, #defines) compiled plain and as the variant, in
    parallel processes: {(problem, variant): (same SASS, error)} (bench/decode_trim.py's too)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max(1, procs), mp_context=mp.get_context("spawn")) as ex:
        return {(pt, n): (same, err) for pt, n, same, err in ex.map(_compile_pair, jobs)}


def precompile(todo: list, variants: dict[str, dict], procs: int) -> dict:
    """Every (entry, variant) compiled: a variant whose SASS equals the filed kernel's is not timed
    (its figure would be noise around 1.000)."""
    return compile_pairs([(e.problem, e.spec, n, d) for e in todo for n, d in variants.items()], procs)


def shape_filter(todo: list, path: str | None) -> list:
    """The entries of `todo` whose problem is listed in the --shapes file (MxNxK[:layout] lines; a
    line without a layout takes both), all where no file is given."""
    if not path:
        return todo
    from cudal2.problems import read_shape_file
    want = {p.text for lay in ("nn", "nt") for p in read_shape_file(path, lay)}   # a line's own layout wins
    return [e for e in todo if e.problem in want]


def bench_entry(e, variants: dict[str, dict], dev, args, pre: dict | None = None) -> dict:
    import torch

    from cudal2 import timing
    from cudal2.backends import build_kernel
    from cudal2.check import check_kernel, make_inputs
    from cudal2.spec import KernelSpec
    from cudal2.stats import shape_class
    p, spec = e.prob, KernelSpec.parse(e.spec)
    row = {"problem": p.text, "layout": p.layout, "class": shape_class(p.M, p.N, p.K), "spec": e.spec,
           "filed_at_us": e.time_us}
    kernels = {"filed": build_kernel(spec, p, dev)}
    for name, defines in variants.items():
        same, err = (pre or {}).get((p.text, name), (None, None))
        if err or same:
            row[f"{name} note"] = f"build failed: {err}" if err else "same SASS as the filed kernel: not timed"
            continue
        try:
            kernels[name] = build_variant(spec, p, dev, prefix(defines))
        except Exception as ex:         # e.g. A_TRIM on a 2-CTA cluster: refused at compile time
            row[f"{name} note"] = f"build failed: {str(ex).splitlines()[0][:120] if str(ex) else type(ex).__name__}"
    for name, k in list(kernels.items()):
        rep = check_kernel(k, p, "cuda", checks=("random",))
        if not rep.passed:
            if name == "filed":
                row["note"] = f"the filed kernel failed the check: {rep.reason}"
                return row
            row[f"{name} note"] = f"check failed: {rep.reason}"
            del kernels[name]
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(p.M + 3 * p.N + 7 * p.K))
    cs = {n: torch.empty(p.M, p.N, dtype=torch.float16, device="cuda") for n in kernels}
    fns = {n: (lambda k=k, c=cs[n]: k(a, b, c)) for n, k in kernels.items()}
    if getattr(args, "torch", False):
        from cudal2 import baselines
        fns["torch"] = baselines.prepare(["torch"], p, a, b, torch.empty(p.M, p.N, dtype=torch.float16,
                                                                       device="cuda"))["torch"]
    stats = timing.offline(fns, min_ms=args.min_ms)
    row["filed_us"] = round(stats["filed"].median_us, 3)
    for name in variants:
        if name in stats:
            row[f"{name} us"] = round(stats[name].median_us, 3)
            row[f"{name} ratio"] = round(stats["filed"].median_us / stats[name].median_us, 4)
    if "torch" in stats:
        row["torch_us"] = round(stats["torch"].median_us, 3)
        for name in ["filed", *variants]:
            if name in stats:
                row[f"{name} vs torch"] = round(stats["torch"].median_us / stats[name].median_us, 4)
    if args.alone:
        # Each kernel again in a run of its own (the same kernel back to back): what a variant that
        # acts between consecutive launches (PDL) gives a chain of its own launches, where the
        # interleaved run above puts a different kernel before every call.
        alone = {n: timing.offline({n: (lambda k=k, c=cs[n]: k(a, b, c))}, min_ms=args.min_ms)[n].median_us
                 for n, k in kernels.items()}
        row["filed alone us"] = round(alone["filed"], 3)
        for name in variants:
            if name in alone:
                row[f"{name} alone us"] = round(alone[name], 3)
                row[f"{name} alone ratio"] = round(alone["filed"] / alone[name], 4)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", action="append", required=True, metavar="'NAME=INT ...'",
                    help="one variant's template macros (repeat for more variants)")
    ap.add_argument("--registry", help="a registry directory (default: the shipped one)")
    ap.add_argument("--layouts", default="nn,nt")
    ap.add_argument("--classes", default="", help="shape classes of ../shared/classes.py (default: all)")
    ap.add_argument("--stride", type=int, default=1, help="every N-th entry")
    ap.add_argument("--min-ms", type=float, default=20.0, help="offline timing per function, at least")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="start no entry after this many seconds")
    ap.add_argument("--alone", action="store_true",
                    help="also time each kernel in a run of its own (back to back with itself)")
    ap.add_argument("--shapes", help="only the problems of this file (MxNxK[:layout] lines, e.g. bench/decode_set.txt)")
    ap.add_argument("--lost", action="store_true",
                    help="also the cuBLAS entries' best lost wgmma kernels (their search measured them and filed cuBLAS)")
    ap.add_argument("--torch", action="store_true", help="time torch.matmul in the same run (each kernel's vs torch)")
    ap.add_argument("--procs", type=int, default=min(16, os.cpu_count() or 1), help="compile processes")
    args = ap.parse_args(argv)
    from cudal2.stats import SHAPE_CLASSES
    try:
        variants = {variant_name(d): d for d in map(parse_variant, args.variant)}
    except ValueError as ex:
        ap.error(str(ex))
    layouts = [x for x in args.layouts.split(",") if x]
    classes = [x for x in args.classes.split(",") if x]
    if not set(layouts) <= {"nn", "nt"} or not set(classes) <= set(SHAPE_CLASSES) or args.stride < 1:
        ap.error(f"--layouts from nn,nt; --classes from {','.join(SHAPE_CLASSES)}; --stride >= 1")
    if args.shapes:
        from cudal2.problems import ProblemError
        try:
            shape_filter([], args.shapes)
        except (OSError, ProblemError) as ex:
            ap.error(f"--shapes {args.shapes}: {ex}")
    t0 = time.monotonic()
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark times kernels on the GPU", file=sys.stderr)
        return 3
    from cudal2.device import current
    from cudal2.registry import Registry
    from cudal2.versions import collect, source_commit
    dev = current()
    reg = Registry.load(args.registry)
    todo = entries(reg, dev.key, layouts, classes, args.stride)
    if args.lost:
        from graph_clock import lost_entries
        todo += lost_entries(reg, dev.key, layouts, classes, ("wgmma",))[::args.stride]
    todo = shape_filter(todo, args.shapes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"variant_sweep_{dev.key}_{source_commit()}"
    meta = {"command": " ".join([sys.executable, *sys.argv]), "device": dev.key, "versions": collect(),
            "variants": variants, "entries": len(todo)}
    t1 = time.monotonic()
    names = list(variants) + ([f"{n} alone" for n in variants] if args.alone else [])
    pre = precompile(todo, variants, args.procs)
    same = sum(1 for v, _ in pre.values() if v)
    print(f"compiled {len(pre)} (entry, variant) pairs in {time.monotonic() - t1:.0f} s; {same} with the filed "
          "kernel's SASS (not timed)", flush=True)
    rows: list[dict] = []
    for i, e in enumerate(todo):
        if time.monotonic() - t0 > args.max_seconds:
            meta["stopped_early"] = f"{i} of {len(todo)}"
            print(f"--max-seconds: stopped before {e.problem} ({i} of {len(todo)})", flush=True)
            break
        try:
            row = bench_entry(e, variants, dev, args, pre)
        except Exception as ex:                       # one entry's failure is a row, not an outage
            row = {"problem": e.problem, "spec": e.spec, "note": f"error: {type(ex).__name__}: {str(ex)[:160]}"}
        rows.append(row)
        print(f"[{i + 1}/{len(todo)}] {e.problem}: filed {row.get('filed_us')} µs; "
              + "; ".join(f"{n} {row.get(n + ' ratio', row.get(n + ' note'))}" for n in variants), flush=True)
        ok = [r for r in rows if "filed_us" in r]
        write_rows_csv(out / f"{tag}.csv", rows, (meta["command"], f"device {dev.key} commit {source_commit()}"))
        vs_torch = {"summary_vs_torch": summarize(ok, ["filed", *variants], " vs torch")} if args.torch else {}
        (out / f"{tag}.json").write_text(json.dumps({**meta, "summary": summarize(ok, names), **vs_torch,
                                                     "rows": rows}, indent=1))
    summary = summarize([r for r in rows if "filed_us" in r], names)
    for g, per in summary.items():
        print(g, "; ".join(f"{n}: {v['geomean'] and round(v['geomean'], 4)} over {v['n']} "
                           f"({v['wins']} won, {v['losses']} lost)" for n, v in per.items()))
    if args.torch:
        for g, per in summarize([r for r in rows if "filed_us" in r], ["filed", *variants], " vs torch").items():
            print(g, "vs torch.matmul:", "; ".join(f"{n} {v['geomean'] and round(v['geomean'], 4)} over {v['n']}"
                                                   for n, v in per.items()))
    print(f"{len(rows)} entries in {time.monotonic() - t0:.0f} s -> {out / tag}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
