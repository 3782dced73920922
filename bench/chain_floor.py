"""The chain floor per GEMM shape: the GPU time of reading A and B once and then writing C, with every
SM sharing the bytes, beside torch.matmul in the same run (issue 20: how far any kernel could beat
cuBLAS on small, skinny and decode shapes, by measurement).

bench/class_ceiling.py's floors overlap (it takes the largest of launch + first load, the read of A
and B, the write of C and the MMA time): on a shape where cuBLAS takes 5-8 µs none of them binds
alone, and the ceiling best-cublas / floor counts a kernel that reads, multiplies and writes in the
time of the slowest one part. No GEMM kernel can write a C element before the loads of its row of A
and column of B have landed, so a kernel that reads every byte of A and B once (its share per CTA)
and only then writes its share of C is a lower bound on any of them that is tighter than each part
alone: bench/stream_cuda.py's chain kernels (16-byte loads, U in flight per thread, XORed and
checked; a CTA barrier; 16-byte stores of a checked pattern), over a few grids (fewest CTAs for the
bytes, 1 / 2 / 4 per SM), the fastest per shape. A real GEMM reads more than this (a CTA reads its
tile's whole panels) and does the MMAs: the floor is generous to any kernel.

On the PROTOCOL clock (cudal2.timing: offline back to back, server with L2 wiped and an idle gap),
each shape's chain configs and torch.matmul (nt, the same bytes) interleaved in one run; every chain
config is checked once before it is timed.

With --panels also the tiled chain (bench/panel_cuda.py): each CTA reads its tile's whole A and B
panels for its K slice and then writes its tile, by 16-byte loads (kind "panel": H100 run 174 measured
real kernels faster than it) or by bulk copies into a shared-memory ring (kind "bulk": slower than the
16-byte kind on all 211 shapes of H100 runs 178-179, 1.28x on small ones), every tile of
16-128 (bulk 256 too) and split 1-16, each config checked per CTA; a 5-call screen keeps each kind's 4
fastest for the timing: the fastest per shape is the floor of a kernel that shares no operand tile
between CTAs, where no kernel beat it (class_ceiling.py drops it where one did). --resume keeps
an earlier run's shapes (a time-boxed run goes on in the next call).

  source bench/device_env.sh
  python3 bench/chain_floor.py --out $OUT --classes small,skinny --shapes bench/decode_set.txt --panels --time-limit 200

Writes chain_floor_<device>_<commit>.json (card, commit, command, a row per shape and mode) and .md
(geomean of torch.matmul / chain per class: its ceiling against torch.matmul by this floor), rewritten
as rows come in (a time-boxed run keeps what it measured). `class_ceiling.py --chain FILE` adds it as
a floor.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))      # stream_cuda (bench/ is not a package)

MODES = ("offline", "server")


def shapes_of(classes: list[str], files: list[str], every: int = 1) -> list[tuple[int, int, int]]:
    """(M, N, K) of the grid's shapes of `classes` (shared/classes.py's, in grid order), then of the
    --shapes files' (layout ignored: the chain moves the same bytes either way), each once; with
    `every` > 1 only each every-th of that list, from the first (a smaller set spread over the list;
    main measures any set in spread_order, so a run its time limit cuts is a sample too)."""
    from cudal2.problems import grid, read_shape_file
    from cudal2.stats import SHAPE_CLASSES, shape_class
    bad = set(classes) - set(SHAPE_CLASSES)
    if bad:
        raise ValueError(f"--classes {','.join(sorted(bad))}: choose from {', '.join(SHAPE_CLASSES)}")
    out = [(p.M, p.N, p.K) for p in grid("nt") if shape_class(p.M, p.N, p.K) in classes]
    for f in files:
        out += [(p.M, p.N, p.K) for p in read_shape_file(f, "nt")]
    if every < 1:
        raise ValueError(f"--every {every}: a positive count")
    return list(dict.fromkeys(out))[::every]


def spread_order(items: list) -> list:
    """`items` in bit-reversed index order: any prefix is spread over the whole list, so a run its time
    limit cuts measures a sample of every class and M rather than the list's first shapes (H100 run
    174: in list order its 22 shapes in 230 s were all M = 64)."""
    bits = max(1, (len(items) - 1).bit_length())
    return [items[i] for i in sorted(range(len(items)), key=lambda i: int(f"{i:0{bits}b}"[::-1], 2))]


def padded(elements: int) -> int:
    """fp16 elements rounded up to 16 bytes (the chain's accesses; at most 14 bytes more)."""
    return -(-elements // 8) * 8


def panel_fns(panels, a, b, m: int, n: int, k: int, kinds=None) -> tuple[dict, tuple]:
    """Every tiled-chain config of (m, n, k) (panel_cuda.configs: the `kinds`, default both), each checked once, as
    launches named "KIND BMxBN /SPLIT", and the buffers they write (the caller holds them while it
    launches: the launches keep only their addresses)."""
    import numpy as np
    import torch

    import panel_cuda
    cfgs = panel_cuda.configs(m, n, k, panels.sms, tuple(kinds or panel_cuda.KINDS))
    if not cfgs:                        # N or K off the 16-byte rule: no tiled chain for this shape
        return {}, ()
    grids = [-(-m // bm) * -(-n // bn) * s for _, bm, bn, s in cfgs]
    out = torch.empty(max(grids), device="cuda", dtype=torch.int32)
    ws = torch.empty(max([g * bm * bn for g, (_, bm, bn, s) in zip(grids, cfgs) if s > 1], default=4),
                     device="cuda", dtype=torch.float32)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    words = (a.cpu().numpy().view(np.uint32), b.cpu().numpy().view(np.uint32))
    fns, cache = {}, {}
    for kind, bm, bn, s in cfgs:
        name = f"{kind} {bm}x{bn} /{s}"
        if not panels.check_fn(a, b, c, ws, out, kind, bm, bn, s, words, cache):
            raise SystemExit(f"{name}: wrong XOR or unwritten words at {m}x{n}x{k}")
        fns[name] = panels.fn(a, b, c, ws, out, kind, bm, bn, s)
    return fns, (c, ws, out)


# The tiled chain's configs a shape keeps for the PROTOCOL timing beside the chains and torch.matmul:
# the fastest SCREEN_KEEP of each kind by a short screen (5 calls each). Timing all of them (60-80 of
# k_panel's alone) took ~10 s a shape (H100 run 174); the bulk kind has up to 125 more.
SCREEN_KEEP = 4


def screened(pfns: dict, keep: int = SCREEN_KEEP, clock=None) -> list[str]:
    """The names of `pfns` ("KIND ...") to time: each kind's `keep` fastest by a 5-call offline screen,
    every one where a kind has no more than `keep`."""
    from cudal2 import timing
    kinds: dict[str, list[str]] = {}
    for name in pfns:
        kinds.setdefault(name.split()[0], []).append(name)
    if all(len(v) <= keep for v in kinds.values()):
        return list(pfns)
    st = timing.offline(pfns, min_calls=5, min_ms=0.0, clock=clock)
    return [n for names in kinds.values() for n in sorted(names, key=lambda x: st[x].median_us)[:keep]]


def measure_shape(streams, m: int, n: int, k: int, modes, min_ms: float, server_calls: int,
                  panels=None, panel_kinds=None) -> list[dict]:
    """Rows (one a mode) for one shape: the fastest chain, torch.matmul, and with `panels` the fastest
    tiled chain (offline the screen's picks, `screened`; in server mode the offline run's 3 fastest)."""
    import torch

    import stream_cuda
    from cudal2 import timing
    from cudal2.report import primary
    inp = torch.randn(padded(m * k + n * k), device="cuda", dtype=torch.float16)
    a, b = inp[: m * k].view(m, k), inp[m * k: m * k + n * k].view(n, k)
    c = torch.empty(padded(m * n), device="cuda", dtype=torch.float16)
    cm = torch.empty(m, n, device="cuda", dtype=torch.float16)
    out = torch.empty(4 * streams.sms, device="cuda", dtype=torch.int32)
    want = stream_cuda.xor_all(inp.cpu().numpy().tobytes())
    fns = {}
    for name in stream_cuda.CHAINS:
        if not streams.check_chain(name, inp, c, out, want):
            raise SystemExit(f"chain {name}: wrong XOR or unwritten words at {m}x{n}x{k}")
        fns[name] = streams.chain_fn(name, inp, c, out)
    fns["torch"] = lambda: torch.matmul(a, b.t(), out=cm)
    pfns, held = panel_fns(panels, a, b, m, n, k, panel_kinds) if panels is not None else ({}, ())   # noqa: F841 (held: kept alive)
    configs = len(pfns)
    pfns = {name: pfns[name] for name in screened(pfns)}
    rows = []
    for mode in modes:
        if mode == "offline":
            st = timing.offline({**fns, **pfns}, min_calls=30, min_ms=min_ms)
        else:
            fastest = sorted(pfns, key=lambda p: rows[0]["panel_configs_us"].get(p, 1e9))[:3] if rows else list(pfns)
            st = timing.server({**fns, **{p: pfns[p] for p in fastest}}, calls=server_calls)
        key = primary(mode)
        t = {name: getattr(s, key) for name, s in st.items()}
        chains = {name: v for name, v in t.items() if name in stream_cuda.CHAINS}
        best = min(chains, key=chains.get)
        row = {"shape": f"{m}x{n}x{k}", "M": m, "N": n, "K": k, "mode": mode,
               "chain_us": round(chains[best], 3), "chain_config": best, "torch_us": round(t["torch"], 3),
               "torch_over_chain": round(t["torch"] / chains[best], 3),
               "configs_us": {name: round(v, 3) for name, v in chains.items()},
               "in_bytes": 2 * (m * k + n * k), "out_bytes": 2 * m * n}
        tiled = {name: v for name, v in t.items() if name in pfns}
        if tiled:
            pbest = min(tiled, key=tiled.get)
            row.update({"panel_us": round(tiled[pbest], 3), "panel_config": pbest,
                        "torch_over_panel": round(t["torch"] / tiled[pbest], 3), "panel_configs": configs,
                        "panel_configs_us": {p: round(v, 3) for p, v in sorted(tiled.items(), key=lambda x: x[1])}})
        rows.append(row)
    return rows


def kept_rows(earlier: dict, device: str, shapes, modes, panels: bool) -> list[dict]:
    """An earlier run's rows to keep: those of the shapes asked for, measured in every mode asked for
    (and where `panels`, with both kinds of the tiled chain: rows of runs before the bulk kind, which
    lack "panel_configs", are measured again); ValueError if it ran on another card."""
    if earlier.get("device") != device:
        raise ValueError(f"measured on {earlier.get('device')}, this card is {device}")
    asked = set(shapes)
    by: dict = {}
    for r in earlier.get("rows", []):
        if (r["M"], r["N"], r["K"]) in asked and r["mode"] in modes and (not panels or "panel_configs" in r):
            by.setdefault((r["M"], r["N"], r["K"]), {})[r["mode"]] = r
    return [r for s in shapes if len(by.get(s, {})) == len(modes) for r in by[s].values()]


def summary(rows: list[dict]) -> list[dict]:
    """Per mode and class: shapes, geomean torch.matmul / chain (its ceiling by this floor), the
    median chain time, and which config was fastest how often."""
    from collections import Counter

    from cudal2.stats import geomean, shape_class
    out = []
    for mode in MODES:
        rs = [r for r in rows if r["mode"] == mode]
        for cls in sorted({shape_class(r["M"], r["N"], r["K"]) for r in rs}) + ["all"]:
            cs = [r for r in rs if cls in ("all", shape_class(r["M"], r["N"], r["K"]))]
            ts = sorted(r["chain_us"] for r in cs)
            tiled = [r["torch_over_panel"] for r in cs if "torch_over_panel" in r]
            out.append({"mode": mode, "class": cls, "shapes": len(cs),
                        "torch_over_chain": round(geomean(r["torch_over_chain"] for r in cs), 3),
                        "torch_over_panel": round(geomean(tiled), 3) if tiled else None,
                        "chain_median_us": ts[len(ts) // 2],
                        "fastest": dict(Counter(r["chain_config"] for r in cs).most_common(3))})
    return out


def markdown(doc: dict) -> str:
    lines = [f"# The chain floor on {doc['card']} (commit {doc['commit']})", "", f"    {doc['command']}", "",
             "Per shape the fastest chain (read A and B once, then write C; bench/chain_floor.py) beside "
             "torch.matmul (nt) in the same run; torch / chain is torch.matmul's headroom by this floor "
             f"(geomean per class, shared/classes.py). {doc['shapes_done']} of {doc['shapes_asked']} shapes.", "",
             "| mode | class | shapes | torch.matmul / chain | torch.matmul / tiled chain | chain median µs | fastest configs |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in doc["summary"]:
        tiled = "-" if s.get("torch_over_panel") is None else f"{s['torch_over_panel']:.3f}"
        lines.append(f"| {s['mode']} | {s['class']} | {s['shapes']} | {s['torch_over_chain']:.3f} | {tiled} | "
                     f"{s['chain_median_us']:.2f} | " + ", ".join(f"{k} {v}" for k, v in s["fastest"].items()) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes", default="small,skinny", help="grid classes (shared/classes.py), comma separated; '' none")
    ap.add_argument("--shapes", action="append", default=[], help="a --shapes file (MxNxK[:layout] lines); repeatable")
    ap.add_argument("--modes", default="offline,server")
    ap.add_argument("--min-ms", type=float, default=5.0, help="offline: at least this much GPU time per function")
    ap.add_argument("--server-calls", type=int, default=20)
    ap.add_argument("--every", type=int, default=1,
                    help="measure each every-th shape of the list only (a smaller set; the tiled chain "
                         "checks and screens up to ~200 configs a shape)")
    ap.add_argument("--time-limit", type=float, default=0.0, help="seconds; stop before a shape past it (0: none)")
    ap.add_argument("--panels", action="store_true",
                    help="also the tiled chain (bench/panel_cuda.py: each CTA reads its tile's whole A and B panels), "
                         "every tile and split, checked; offline all of them, server the 3 fastest")
    ap.add_argument("--panel-kinds", default="panel,bulk",
                    help="with --panels, the tiled chain's kinds (bench/panel_cuda.py KINDS), comma separated: "
                         "'panel' alone halves its checks where the bulk kind is known to lose (it never won "
                         "on the 211 shapes of H100 runs 178-179)")
    ap.add_argument("--resume", metavar="JSON",
                    help="an earlier run's JSON on this card: its shapes' rows are kept and not measured again "
                         "(with --panels, only rows that have the tiled chain)")
    a = ap.parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        ap.error(f"--modes {a.modes!r}: a comma-separated list of {', '.join(MODES)}")
    import panel_cuda
    kinds = [x.strip() for x in a.panel_kinds.split(",") if x.strip()]
    if not kinds or set(kinds) - set(panel_cuda.KINDS):
        ap.error(f"--panel-kinds {a.panel_kinds!r}: a comma-separated list of {', '.join(panel_cuda.KINDS)}")
    try:
        shapes = shapes_of([c for c in a.classes.split(",") if c.strip()], a.shapes, a.every)
    except (ValueError, OSError) as e:
        ap.error(str(e))
    if not shapes:
        ap.error("no shapes: give --classes or --shapes")
    try:
        earlier = json.loads(Path(a.resume).read_text()) if a.resume else None
    except (OSError, ValueError) as e:
        ap.error(f"--resume {a.resume}: {e}")
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: chain_floor measures the card", file=sys.stderr)
        return 3
    import stream_cuda
    from cudal2.device import current
    from cudal2.versions import collect, source_commit
    dev = current()
    commit, card = source_commit(), torch.cuda.get_device_name()
    command = "python3 bench/chain_floor.py " + " ".join(argv if argv is not None else sys.argv[1:])
    streams = stream_cuda.Streams(stream_cuda.compile_streams(), dev.sm_count)
    panels = None
    if a.panels:
        panels = panel_cuda.Panels(dev.sm_count)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"chain_floor_{dev.key}_{commit}"
    doc = {"card": card, "device": dev.key, "commit": commit, "command": command, "versions": collect(),
           "shapes_asked": len(shapes), "shapes_done": 0, "rows": [], "summary": []}
    if a.panels:
        doc["panel_kinds"] = kinds
    if earlier is not None:
        try:
            doc["rows"] = kept_rows(earlier, dev.key, shapes, modes, a.panels)
        except ValueError as e:
            print(f"error: --resume {a.resume}: {e}", file=sys.stderr)
            return 2
    done = {(r["M"], r["N"], r["K"]) for r in doc["rows"]}
    todo = spread_order([s for s in shapes if s not in done])
    doc["shapes_done"] = len(done)
    t0 = time.monotonic()
    for i, (m, n, k) in enumerate(todo):
        if a.time_limit and time.monotonic() - t0 > a.time_limit:
            print(f"time limit: {i} of {len(todo)} shapes measured", flush=True)
            break
        doc["rows"] += measure_shape(streams, m, n, k, modes, a.min_ms, a.server_calls, panels, kinds)
        doc["shapes_done"] += 1
        if i % 25 == 24 or i == len(todo) - 1:
            doc["summary"] = summary(doc["rows"])
            stem.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
            print(f"{doc['shapes_done']}/{len(shapes)} shapes, {time.monotonic() - t0:.0f} s", flush=True)
        torch.cuda.empty_cache()
    doc["summary"] = summary(doc["rows"])
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(doc)
    stem.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
