"""Issue 19's measurement: the Hopper wgmma family's best spec per shape against best-cublas, per
class of ../shared/classes.py (cudal2.stats.shape_class) and layout.

Per shape: the cost model's candidates (cudal2.tiles.candidates) plus any --extra specs are built
(a build failure is a row, not an outage), given the checker's random check, then timed together
with the four baselines of the layout, interleaved (cudal2.timing.offline: GPU time, one run, so
the ratios are same-run ratios). Compiles happen first, for every shape, in a process pool (the
source depends only on spec and layout, so most shapes reuse a cubin). One CSV row per (shape,
layout, spec), rewritten after each shape (a cut run keeps what it measured), and a JSON with the
per-class summary, keyed by card and commit, with the command line:

  python3 bench/hopper_sweep.py --out $OUT [--classes shortK,starved,mid,large] [--layouts nn,nt]
      [--per-class 16] [--shapes MxNxK,...] [--n-cands 8] [--extra "spec;spec"] [--time-limit 400]
      [--fit-compare] [--bks 32,128] [--groups=-1,-8,16] [--pairs FILE --n-cands 0]

--pairs times, per problem of the file, its own specs (lines 'MxNxK:layout|spec'; e.g.
bench/nn_wgmma_gaps.txt, the nt search's best wgmma spec on nn shapes that never ran it), beside
--n-cands wave candidates (0: none).

--bks re-times the wave model's candidates with other k-tile depths (wgmma bk 32 / 128, each with
the deepest ring that fits: from "bk32" / "bk128"); the JSON's "bk_pairs" gives, per bk, each
variant's speed over its bk-64 parent (same tile, schedule and split) on the same shape.

--groups re-times the wave model's candidates (group_m 8) at other tile orders (group_m > 0: tile
rows grouped, walked down M; < 0: tile columns grouped, walked along N; spec.py); "group_pairs"
gives each order's speed over its group-8 parent on the same shape.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

BASELINES = {"nn": ("torch", "cublas-nn", "cublaslt-heuristic", "cublaslt-autotune"),
             "nt": ("torch", "cublas-tn", "cublaslt-heuristic", "cublaslt-autotune")}


def pick_shapes(classes: list[str], per_class: int, layouts: list[str]) -> list:
    """Grid shapes of each class; per_class > 0 takes that many spread evenly over the class sorted
    by FLOPs (both ends included), always with 4096^3 and 8192^3 in `large`."""
    from cudal2.problems import Problem, grid
    from cudal2.stats import shape_class
    out = []
    for cls in classes:
        members = sorted((p for p in grid() if shape_class(p.M, p.N, p.K) == cls), key=lambda p: (p.flops, p.shape))
        if per_class and len(members) > per_class:
            idx = sorted({round(i * (len(members) - 1) / (per_class - 1)) for i in range(per_class)})
            chosen = [members[i] for i in idx]
            if cls == "large":
                for cube in (Problem(4096, 4096, 4096), Problem(8192, 8192, 8192)):
                    if cube not in chosen:
                        chosen.append(cube)
            members = chosen
        out += [p.with_layout(lay) for lay in layouts for p in members]
    return out


def _compile(args):
    """Worker: compile one spec with its own backend (the binary lands in the shared disk cache:
    NVRTC's for CUDA, Triton's for a Triton extra)."""
    text, shape, layout, dev_dict = args
    from cudal2.device import DeviceInfo
    from cudal2.evaluate.procs import backend_compile
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    try:
        backend_compile(KernelSpec.parse(text), Problem.parse(shape, layout), DeviceInfo.from_dict(dev_dict))
        return text, layout, None
    except Exception as e:                                   # reported per row, not fatal
        return text, layout, (str(e).splitlines() or [type(e).__name__])[0][:200]


def extra_specs(extra: str, extra_file: str = "") -> list[str]:
    """--extra's ';'-separated texts, then --extra-file's lines (comments and blanks dropped), each
    parsed so a typo fails before any compile rather than as a row per shape."""
    from cudal2.spec import KernelSpec
    texts = [t.strip() for t in extra.split(";") if t.strip()]
    if extra_file:
        texts += [ln.split("#", 1)[0].strip() for ln in Path(extra_file).read_text().splitlines()]
    return [KernelSpec.parse(t).text for t in texts if t]


def read_pairs(path: str) -> dict:
    """--pairs: {Problem: [spec text, ...]} from 'MxNxK:layout|spec' lines ('#' starts a comment), in
    the file's order (cudal2.rl.leads.read_leads, the layout required); a malformed line fails before
    any compile, naming its number."""
    from cudal2.problems import Problem
    from cudal2.rl.leads import LeadError, read_leads
    try:
        leads = read_leads(path, layout=None, option="--pairs")
    except LeadError as e:
        raise SystemExit(f"error: {e}") from None
    if not leads:
        raise SystemExit(f"error: {path} has no pairs")
    return {Problem.parse(p): [s.text for s in specs] for p, specs in leads.items()}


def add_pairs(specs: dict, pairs: dict, dev) -> None:
    """Each --pairs problem's own specs into its plan (source "pair"), where valid there."""
    from cudal2.spec import KernelSpec, is_valid
    for p, texts in pairs.items():
        for t in texts:
            if is_valid(KernelSpec.parse(t), p, dev):
                specs.setdefault(p, {}).setdefault(t, "pair")


def plan(problems, dev, n_cands: int, extra: list[str], clusters: int = 0, lite: int = 0,
         cost_model=None, n_cost: int = 0, fit_compare: bool = False, bks: tuple = (),
         groups: tuple = ()) -> dict:
    """Per problem {spec text: where it came from}: the wave model's candidates ("wave", lite ones
    included), the first `clusters` of them again on a 2-CTA cluster ("cluster"), the learned cost
    model's best `n_cost` CUDA specs of its pool (rl/costrank.py; "cost"), then the extra specs
    valid there ("extra"), then each wave candidate at every bk of `bks` with the deepest ring that
    fits ("bk32" / "bk128"), then each wave candidate at every tile order of `groups` ("group-8",
    "group16", ...). A spec two sources name keeps the first."""
    import dataclasses

    from cudal2.spec import KernelSpec, is_valid
    from cudal2.tiles import candidates, lite_ring, max_stages
    out = {}
    for p in problems:
        cands = candidates(p, dev, n_cands, lite=lite)
        specs = {s.text: "wave" for s in cands}
        if fit_compare and dev.cluster_ctas:
            # The same list without the card's cluster counts (cudal2.cluster_fit): "wave" specs
            # are in both lists, "wave-fit" only with them, "wave-nofit" only without.
            old = candidates(p, dataclasses.replace(dev, cluster_ctas=None), n_cands, lite=lite)
            old_t = {s.text for s in old}
            specs = {s.text: ("wave" if s.text in old_t else "wave-fit") for s in cands}
            for s in old:
                specs.setdefault(s.text, "wave-nofit")
        for s in cands[:clusters]:
            c = dataclasses.replace(s, cluster=2)
            if is_valid(c, p, dev):
                specs.setdefault(c.text, "cluster")
        if cost_model is not None and n_cost > 0:
            from cudal2.rl.costrank import cost_seeds
            for s in cost_seeds(n_cost, p, dev, ("cuda",), cost_model, extra=cands):
                specs.setdefault(s.text, "cost")
        for t in extra:
            s = KernelSpec.parse(t)
            if is_valid(s, p, dev):
                specs.setdefault(s.text, "extra")
        for s in cands:
            for bk in bks:
                v = max_stages(dataclasses.replace(s, bk=bk), p, dev) if bk != s.bk else None
                if v is not None and v.warp_spec == 0:      # lite: no deeper than a unit's k-tiles
                    v = lite_ring(v, p)
                if v is not None:
                    specs.setdefault(v.text, f"bk{bk}")
            for g in groups:
                v = dataclasses.replace(s, group_m=g)
                if g != s.group_m and is_valid(v, p, dev):
                    specs.setdefault(v.text, f"group{g}")
        out[p] = specs
    return out


def compiled_in_order(problems, specs, dev_dict: dict, ex, compile_fn=_compile):
    """Every distinct (spec, layout) compile submitted to `ex` at once; yields (problem, its
    compile errors) in problem order as soon as that problem's own compiles are done, so timing one
    shape overlaps the compiles of the later ones. Compiling all first (before 2026-12-06) counted
    the compiles of every shape against the time box before the first was timed: run 134 (H100)
    timed 22 of 77 small shapes in 110 s and 19 of 48 in 70 s (~5 s a shape; how much of it was
    compiling was not logged: each shape's line now says when it was timed)."""
    futs = {}
    for p in problems:
        for t in specs[p]:
            if (t, p.layout) not in futs:
                futs[(t, p.layout)] = ex.submit(compile_fn, (t, p.shape, p.layout, dev_dict))
    for p in problems:
        errors = {}
        for t in specs[p]:
            text, layout, err = futs[(t, p.layout)].result()
            if err:
                errors[(text, layout)] = err
        yield p, errors


def sweep_shape(p, specs, dev, min_ms: float, compile_errors: dict) -> list[dict]:
    import torch

    from cudal2 import timing
    from cudal2.backends import build_kernel
    from cudal2.baselines import best, prepare
    from cudal2.check import check_kernel, make_inputs
    from cudal2.spec import KernelSpec
    from cudal2.stats import shape_class
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(p.M * 7 + p.N * 3 + p.K))
    c0 = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    reasons: dict = {}
    fns = dict(prepare(BASELINES[p.layout], p, a, b, c0, reasons=reasons))
    status, ctas = {}, {}
    for text in specs:
        if (text, p.layout) in compile_errors:
            status[text] = f"compile failed: {compile_errors[(text, p.layout)]}"
            continue
        try:
            k = build_kernel(KernelSpec.parse(text), p, dev)
        except Exception as e:
            status[text] = f"build failed: {(str(e).splitlines() or [type(e).__name__])[0][:160]}"
            continue
        rep = check_kernel(k, p, "cuda", checks=("random",))
        if not rep.passed:
            status[text] = f"check failed: {rep.reason}"
            continue
        c = torch.empty_like(c0)
        fns[text] = lambda k=k, c=c: k(a, b, c)
        status[text] = "ok"
        ctas[text] = getattr(k, "cluster_ctas", None)
    stats = timing.offline(fns, min_ms=min_ms)
    base_name, base_us = best({n: s for n, s in stats.items() if n in BASELINES[p.layout]})
    cls = shape_class(p.M, p.N, p.K)
    rows = []
    for text, st in status.items():
        s = stats.get(text) if st == "ok" else None
        rows.append({"shape": p.shape, "layout": p.layout, "class": cls, "spec": text, "status": st,
                     "best_cublas": base_name, "best_cublas_us": round(base_us, 3),
                     "us": round(s.median_us, 3) if s else None, "spread": round(s.spread, 4) if s else None,
                     "vs_best_cublas": round(base_us / s.median_us, 4) if s else None,
                     "tflops": round(p.flops / s.median_us / 1e6, 1) if s else None,
                     "cluster_ctas": ctas.get(text), "from": specs.get(text) if isinstance(specs, dict) else None,
                     "baselines_missing": ";".join(f"{n}: {r}" for n, r in reasons.items())})
    return rows


def summarize(rows: list[dict], source: str | None = None) -> dict:
    """Per (class, layout): the best spec per shape vs best-cublas, geomean / worst / wins; with
    `source`, over the specs that source proposed only (the row's "from")."""
    best: dict = {}
    for r in rows:
        if r["vs_best_cublas"] and (source is None or r.get("from") == source):
            key = (r["class"], r["layout"], r["shape"])
            best[key] = max(best.get(key, 0.0), r["vs_best_cublas"])
    groups: dict = {}
    for (cls, lay, _), v in best.items():
        groups.setdefault(f"{cls}/{lay}", []).append(v)
    return {g: {"shapes": len(v), "geomean": round(math.exp(sum(map(math.log, v)) / len(v)), 4),
                "worst": round(min(v), 4), "best": round(max(v), 4), "wins": sum(x > 1.0 for x in v)}
            for g, v in sorted(groups.items())}


def pair_summary(v: list[float]) -> dict:
    """Parent / variant time ratios: pairs, geomean, worst, best, faster (> 1.01) and slower (< 0.99)."""
    return {"pairs": len(v), "geomean": round(math.exp(sum(map(math.log, v)) / len(v)), 4),
            "worst": round(min(v), 4), "best": round(max(v), 4),
            "faster": sum(x > 1.01 for x in v), "slower": sum(x < 0.99 for x in v)}


def bk_pairs(rows: list[dict]) -> dict:
    """Per bk variant ("bk32", "bk128"): over every shape where it and its bk-64 parent (the same
    spec but bk and stages) both ran, the parent's time over the variant's (> 1: the variant is
    faster): pairs, geomean, worst, best, faster (> 1.01) and slower (< 0.99) counts."""
    def key(r):
        d = dict(kv.split("=") for kv in r["spec"].split())
        return (r["shape"], r["layout"], tuple((k, v) for k, v in d.items() if k not in ("bk", "stages"))), d["bk"]
    us = {key(r): r["us"] for r in rows if r["us"]}
    ratios: dict = {}
    for r in rows:
        src = r.get("from") or ""
        parent = us.get((key(r)[0], "64"))
        if src.startswith("bk") and r["us"] and parent:
            ratios.setdefault(src, []).append(parent / r["us"])
    return {src: pair_summary(v) for src, v in sorted(ratios.items())}


def group_pairs(rows: list[dict]) -> dict:
    """Per tile order ("group-8", "group16", ...): over every shape where it and its wave-model
    parent (the same spec at the parent's group_m) both ran, the parent's time over the variant's
    (> 1: the order is faster), summarised as bk_pairs does."""
    def rest(r):
        return (r["shape"], r["layout"], " ".join(kv for kv in r["spec"].split() if not kv.startswith("group_m=")))
    parent = {rest(r): r["us"] for r in rows if r.get("from") == "wave" and r["us"]}
    ratios: dict = {}
    for r in rows:
        src = r.get("from") or ""
        if src.startswith("group") and r["us"] and rest(r) in parent:
            ratios.setdefault(src, []).append(parent[rest(r)] / r["us"])
    return {src: pair_summary(v) for src, v in sorted(ratios.items(), key=lambda kv: int(kv[0][5:]))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/h200-sm90")
    ap.add_argument("--classes", default="shortK,starved,mid,large")
    ap.add_argument("--layouts", default="nn,nt")
    ap.add_argument("--per-class", type=int, default=16, help="shapes per class (0: all of the class)")
    ap.add_argument("--shapes", default="", help="comma-separated MxNxK instead of the grid classes")
    ap.add_argument("--n-cands", type=int, default=8, help="cost-model candidates per shape")
    ap.add_argument("--extra", default="", help="';'-separated spec texts tried where valid")
    ap.add_argument("--pairs", default="", help="a file of 'MxNxK:layout|spec' lines: those problems, each "
                    "with its own specs (from \"pair\"), instead of the grid classes / --shapes")
    ap.add_argument("--extra-file", default="", help="a file of spec texts, one a line ('#' starts a comment), "
                    "tried where valid as --extra's (bench/small_extra.txt: the non-wgmma families)")
    ap.add_argument("--clusters", type=int, default=0, help="also try the first N candidates on a 2-CTA cluster")
    ap.add_argument("--lite", type=int, default=0, help="also try the lite schedule (warp_spec 0) of the N best tiles")
    ap.add_argument("--fit-compare", action="store_true",
                    help="also time the candidates ranked without the card's cluster counts (from: wave-fit / wave-nofit)")
    ap.add_argument("--cost-model", default="", help="a `cudal2 train` checkpoint: also time its best --n-cost specs")
    ap.add_argument("--n-cost", type=int, default=4, help="the cost model's specs per shape (with --cost-model)")
    ap.add_argument("--bks", default="", help="comma-separated wgmma bk (32, 128): the wave candidates again at each")
    # A value that starts with '-' must follow '=' (--groups=-1,-8): argparse reads "--groups -1,-8" as
    # an option missing its argument (run 157, H100, 2026-12-07: the raster stage stopped there).
    ap.add_argument("--groups", default="", help="comma-separated group_m (e.g. --groups=-1,-8,16): the wave "
                    "candidates again at each tile order")
    ap.add_argument("--min-ms", type=float, default=10.0, help="offline timing per function, at least")
    ap.add_argument("--time-limit", type=float, default=400.0, help="start no shape after this many seconds")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2), help="compile processes")
    ap.add_argument("--tag", default="hopper_sweep")
    ap.add_argument("--torch-only", action="store_true",
                    help="run when the cuBLAS baselines cannot be built (best-cublas is then torch.matmul)")
    args = ap.parse_args(argv)
    import torch

    from cudal2.device import current
    from cudal2.problems import parse_shapes
    from cudal2.baselines import refusal, unbuildable
    from cudal2.versions import collect, source_commit
    # The bar must not drop silently (issue 21): on 2026-12-04 a sweep ran against torch.matmul
    # alone because the carried nvmath-python wheel did not import.
    missing = unbuildable({n for names in BASELINES.values() for n in names})
    if missing and not args.torch_only:
        print(f"error: {refusal(missing).replace('--baselines torch', '--torch-only')}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark times kernels on the GPU", file=sys.stderr)
        return 3
    dev, out, t0 = current(), Path(args.out), time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    layouts = args.layouts.split(",")
    pairs = read_pairs(args.pairs) if args.pairs else {}
    problems = (list(pairs) if pairs else
                [q.with_layout(l) for l in layouts for q in parse_shapes(args.shapes)] if args.shapes
                else pick_shapes(args.classes.split(","), args.per_class, layouts))
    model = None
    if args.cost_model:
        from cudal2.rl.costmodel import CostModel
        model = CostModel.load(args.cost_model)
    specs = plan(problems, dev, args.n_cands, extra_specs(args.extra, args.extra_file), args.clusters,
                 args.lite, model, args.n_cost, args.fit_compare,
                 tuple(int(x) for x in args.bks.split(",") if x.strip()),
                 tuple(int(x) for x in args.groups.split(",") if x.strip()))
    add_pairs(specs, pairs, dev)
    print(f"cluster CTAs resident at once (cudal2.cluster_fit), (size, CTAs): {dev.cluster_ctas}", flush=True)
    n_jobs = len({(t, p.layout) for p in problems for t in specs[p]})
    print(f"{len(problems)} problems, {n_jobs} distinct (spec, layout) to compile ({args.jobs} processes, "
          f"ahead of the timing)", flush=True)
    tag = f"{args.tag}_{source_commit()}"
    meta = {"device": dev.key, "command": " ".join(sys.argv), "versions": collect(), "min_ms": args.min_ms,
            "cluster_ctas": dev.cluster_ctas}
    rows: list[dict] = []
    n_failed = 0
    from cudal2.evaluate.procs import end_pool
    # niced as the search's compile-ahead pool is (cudal2.evaluate.procs): the shapes are timed
    # while the later ones compile, and the timing process's launches come first
    ex = ProcessPoolExecutor(args.jobs, initializer=os.nice, initargs=(10,))
    try:
        for i, (p, errors) in enumerate(compiled_in_order(problems, specs, dev.to_dict(), ex)):
            if time.monotonic() - t0 > args.time_limit:
                print(f"time limit: stopped before {p} ({i} of {len(problems)} done)", flush=True)
                break
            n_failed += len(errors)
            got = sweep_shape(p, specs[p], dev, args.min_ms, errors)
            rows += got
            top = max((r for r in got if r["vs_best_cublas"]), key=lambda r: r["vs_best_cublas"], default=None)
            print(f"[{time.monotonic() - t0:.0f} s] {p} [{got[0]['class']}] best-cublas {got[0]['best_cublas_us']} us ({got[0]['best_cublas']}); "
                  + (f"best {top['vs_best_cublas']}x {top['spec'].split(' ', 2)[2][:70]}" if top else "no kernel ran"),
                  flush=True)
            with open(out / f"{tag}.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
            by_source = {src: summarize(rows, src) for src in sorted({r["from"] for r in rows if r["from"]})}
            (out / f"{tag}.json").write_text(json.dumps({**meta, "summary": summarize(rows), "by_source": by_source,
                                                         "bk_pairs": bk_pairs(rows), "group_pairs": group_pairs(rows)},
                                                        indent=1))
    finally:
        # The compiles of shapes the time box left out: cancelled, the running ones killed, the
        # manager thread joined (one left behind kept the interpreter from exiting: 2026-12-06 on
        # the CPU, and the CI of stop 59 on 2026-12-07, where the kill came after shutdown had
        # dropped the process list and so killed nothing).
        end_pool(ex)
    print(f"{n_failed} compiles of the timed shapes failed (reported in their rows)", flush=True)
    for g, s in summarize(rows).items():
        print(f"{g:14s} {s['shapes']:3d} shapes  geomean {s['geomean']:.3f}x  worst {s['worst']:.3f}x  "
              f"best {s['best']:.3f}x  wins {s['wins']}")
    for src, s in bk_pairs(rows).items():
        print(f"{src:6s} vs bk 64: {s['pairs']} pairs, geomean {s['geomean']:.3f}x, worst {s['worst']:.3f}x, "
              f"best {s['best']:.3f}x, faster {s['faster']}, slower {s['slower']}")
    for src, s in group_pairs(rows).items():
        print(f"{src:8s} vs group 8: {s['pairs']} pairs, geomean {s['geomean']:.3f}x, worst {s['worst']:.3f}x, "
              f"best {s['best']:.3f}x, faster {s['faster']}, slower {s['slower']}")
    print(f"done in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
