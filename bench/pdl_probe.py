"""Does programmatic dependent launch (wgmma.cu's PDL experiment) shorten back-to-back launches at all,
and under which clock? H100 run 122 (bench/variant_sweep.py --variant PDL=1 --alone): on the PROTOCOL
clock (a CUDA event recorded after every call) the PDL build ran 0.997-0.999x of the filed kernel over
163 entries, alone or interleaved. This probe times the same pairs without the per-call events:

  events   the PROTOCOL offline clock, each kernel in a run of its own (cudal2.timing.offline)
  batch    N launches of the kernel between two events, behind a queued sleep: GPU µs / N
  mixed    N x (a one-element torch add, the launch) between two events: what a kernel pays after a
           non-PDL kernel, as after an elementwise op in a model; the add alone is timed the same
           way and subtracted

  python3 bench/pdl_probe.py --out $OUT [--classes small,skinny] [--max-entries 12] [--calls 400] [--pdl 1]

Per filed wgmma entry (the shipped registry, this card, every k-th of the classes asked, fastest
first up to --max-entries): builds without PDL (PDL=0; the filed kernel itself until PDL=3 became
wgmma's default, 2026-12-06) and with it (--pdl: the trigger, wgmma.cu's PDL value; run 123 used 1,
the only one then), each checked (random), then each regime. Writes pdl_probe_<card>_<commit>.json
and .csv (a row per entry: µs per regime and kernel, plain / PDL).
Medians of --repeats batches. Not PROTOCOL's figure (batch and mixed are means of N back-to-back
calls): what a chain of launches without events between them would see.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cta_timeline import build_variant  # noqa: E402
from variant_sweep import entries  # noqa: E402


def batch_us(fn, calls: int, repeats: int, clock, before=None) -> float:
    """Median over `repeats` of (GPU µs of `calls` x [before(); fn()] between two events) / calls."""
    out = []
    for _ in range(repeats):
        clock.sleep_us(calls * 30.0 + 200.0)          # the host enqueues at < 30 µs a call
        a = clock.mark()
        for _ in range(calls):
            if before is not None:
                before()
            fn()
        b = clock.mark()
        clock.sync()
        out.append(clock.elapsed_us(a, b) / calls)
    return statistics.median(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes", default="small,skinny")
    ap.add_argument("--layouts", default="nt")
    ap.add_argument("--max-entries", type=int, default=12)
    ap.add_argument("--max-us", type=float, default=12.0, help="entries filed at most this many µs")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--pdl", type=int, default=1, choices=(1, 2, 3), help="wgmma.cu's PDL value (the trigger)")
    args = ap.parse_args(argv)
    if args.max_entries < 1 or args.calls < 1 or args.repeats < 1:
        ap.error("--max-entries, --calls and --repeats must be >= 1")
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this probe times kernels on the GPU", file=sys.stderr)
        return 3
    from cudal2 import timing
    from cudal2.check import check_kernel, make_inputs
    from cudal2.device import current
    from cudal2.registry import Registry
    from cudal2.report import write_rows_csv
    from cudal2.spec import KernelSpec
    from cudal2.versions import collect, source_commit
    t0 = time.monotonic()
    dev, clock = current(), timing.default_clock()
    todo = [e for e in entries(Registry.load(None), dev.key, args.layouts.split(","), args.classes.split(","), 1)
            if e.time_us and e.time_us <= args.max_us]
    step = max(1, len(todo) // args.max_entries)
    todo = sorted(todo, key=lambda e: e.time_us)[::step][:args.max_entries]
    tick = torch.zeros(1, device="cuda")
    add = lambda: tick.add_(1.0)                  # noqa: E731  (a non-PDL kernel before each launch)
    add_us = batch_us(add, args.calls, args.repeats, clock)
    rows = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"pdl_probe_{dev.key}_{source_commit()}"
    meta = {"command": " ".join([sys.executable, *sys.argv]), "device": dev.key, "versions": collect(),
            "add_alone_us": round(add_us, 3), "pdl": args.pdl}
    for e in todo:
        if time.monotonic() - t0 > args.max_seconds:
            meta["stopped_early"] = f"before {e.problem}"
            break
        p, spec = e.prob, KernelSpec.parse(e.spec)
        row = {"problem": p.text, "spec": e.spec, "filed_at_us": e.time_us}
        try:
            ks = {"plain": build_variant(spec, p, dev, "#define PDL 0\n"),
                  "pdl": build_variant(spec, p, dev, f"#define PDL {args.pdl}\n")}
            assert ks["pdl"].pdl and not ks["plain"].pdl
            for n, k in ks.items():
                rep = check_kernel(k, p, "cuda", checks=("random",))
                if not rep.passed:
                    raise RuntimeError(f"{n} failed the check: {rep.reason}")
            a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(1))
            c = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
            fns = {n: (lambda k=k: k(a, b, c)) for n, k in ks.items()}
            for n, f in fns.items():
                row[f"{n} events"] = round(timing.offline({n: f}, min_ms=15)[n].median_us, 3)
                row[f"{n} batch"] = round(batch_us(f, args.calls, args.repeats, clock), 3)
                row[f"{n} mixed"] = round(batch_us(f, args.calls, args.repeats, clock, before=add) - add_us, 3)
            for r in ("events", "batch", "mixed"):
                row[f"{r} ratio"] = round(row[f"plain {r}"] / row[f"pdl {r}"], 4)
        except Exception as ex:                      # one entry's failure is a row, not an outage
            row["note"] = f"{type(ex).__name__}: {str(ex)[:160]}"
        rows.append(row)
        print(row, flush=True)
        write_rows_csv(out / f"{tag}.csv", rows, (meta["command"], f"device {dev.key} commit {source_commit()}"))
        (out / f"{tag}.json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    ok = [r for r in rows if "events ratio" in r]
    for r in ("events", "batch", "mixed"):
        xs = [x[f"{r} ratio"] for x in ok]
        if xs:
            print(f"{r}: plain / PDL median {statistics.median(xs):.4f} over {len(xs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
