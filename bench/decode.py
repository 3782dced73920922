"""Decode / skinny GEMMs: the CUDA `stream` family against best-cublas, with achieved bandwidth.

Sets (issue 20):
  decode   M in {1, 2, 4, 8, 16, 32, 64} x the projections (q, k/v, o, gate/up, down) of the models
           whose config.json files are under bench/configs/ (Llama-3-8B, Qwen2.5-7B), layout nt
           (nn.Linear); through cudal2.problems.problems_from_hf_config.
  skinny   the grid shapes of class `skinny` (../shared/classes.py: 1-100 GFLOP, min(M, N) <= 64),
           layouts nn and nt.
  small    the grid shapes of class `small` (< 1 GFLOP) with min(M, N) <= 64 (126 of 304 a layout).
Specs per shape (--space): few (two-wave picks, the first rounds), wide (every one-wave spec),
rule (cudal2.stream_tiles, what the search seeds with).
Per shape: a few stream specs (tiles and split-K picked so the CTAs cover the SMs; compiled ahead
in a process pool), each given the checker's random check, then all of them and the baselines
timed together, interleaved (cudal2.timing.offline), then the fastest stream spec and the baselines
again in server mode (cold L2, idle gaps). The run measures the device copy bandwidth itself (1 GiB
copy_, read + write) and reports achieved TB/s = 2(MK + KN + MN) / time beside each figure, and
that over the copy's.

  python3 bench/decode.py --out $OUT [--quick] [--max-seconds 500] [--sets decode,skinny]

Writes decode_<card>_<commit>.csv (one row per shape: best stream spec, times, speedups, TB/s)
and a side JSON (command line, versions, copy bandwidth, every timed spec per shape) under --out,
rewritten after every shape, so a run cut by --max-seconds keeps what it has.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from pathlib import Path

from cudal2.report import write_rows_csv

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "bench" / "configs"
TOKENS = (1, 2, 4, 8, 16, 32, 64)
BASELINES_NN = ("torch", "cublas-nn", "cublaslt-heuristic", "cublaslt-autotune")
BASELINES_NT = ("torch", "cublas-tn", "cublaslt-heuristic", "cublaslt-autotune")
SPLITS = (1, 2, 4, 8, 16)
# (bm, warps, stages) shapes of a CTA to try, best guess first; bn follows the token count.
TILES = ((64, 8, 4), (32, 8, 4), (128, 4, 4), (64, 4, 6), (16, 4, 8), (128, 8, 3))


def _shape_class(m: int, n: int, k: int) -> str:
    """The class of ../shared/classes.py, from the package's copy (cudal2.stats.shape_class): the
    device machine has no ../shared, where a local fallback had called every mid shape "other"."""
    from cudal2.stats import shape_class
    return shape_class(m, n, k)


def decode_set(configs: list[Path], tokens) -> list:
    from cudal2.problems import problems_from_hf_config
    out, seen = [], set()
    for cfg in configs:
        for p in problems_from_hf_config(cfg, list(tokens), "nt"):
            if p not in seen:
                seen.add(p)
                out.append(("decode", cfg.stem, p))
    return out


def skinny_set(layouts, stride: int = 1, cls: str = "skinny") -> list:
    """Grid shapes of class `cls` that the stream family serves (min(M, N) <= 64): all of skinny,
    126 of small's 304 per layout."""
    from cudal2.problems import grid
    out = []
    for layout in layouts:
        shapes = [p for p in grid(layout) if _shape_class(p.M, p.N, p.K) == cls and min(p.M, p.N) <= 64]
        out += [(cls, "grid", p) for p in shapes[::stride]]
    return out


def candidates(p, dev, n: int) -> list:
    """Up to n valid stream specs for p: for each CTA shape the smallest split whose CTAs make two
    waves (else the largest valid), the token tile the smallest that covers min(M, N) (and 16);
    stages lowered until the spec is valid (shared memory)."""
    from cudal2.spec import KernelSpec, is_valid
    small, big = min(p.M, p.N), max(p.M, p.N)
    sms = dev.sm_count or 132
    bn_fit = next((b for b in (16, 32, 48, 64) if b >= small), 64)
    out: list = []
    for bm, warps, stages in TILES:
        for bn in dict.fromkeys((bn_fit, 16)):
            tiles = math.ceil(big / bm) * math.ceil(small / bn)
            split = next((s for s in SPLITS if tiles * s >= 2 * sms), SPLITS[-1])
            for sp in (split, max(1, split // 2)):
                for st in range(stages, 1, -1):
                    spec = KernelSpec.parse(f"backend=cuda family=stream bm={bm} bn={bn} warps={warps} "
                                            f"stages={st} split_k={sp}")
                    while spec.split_k > 1 and not is_valid(spec, p, dev):
                        spec = KernelSpec.parse(spec.text.replace(f"split_k={spec.split_k}",
                                                                  f"split_k={spec.split_k // 2}"))
                    if is_valid(spec, p, dev):
                        if spec not in out:
                            out.append(spec)
                        break
    return out[:n]


def wide_candidates(p, dev, n: int) -> list:
    """Every valid stream spec for p whose CTAs fit in one wave by shared memory (the launch is
    latency-bound at decode: a second wave doubles it; run 30's two-wave picks lost 0.71-0.78x) and
    cover at least a quarter of the SMs, with no ring deeper than a warp's chunks need; up to n,
    fewest CTAs per SM first."""
    import itertools
    from cudal2.spec import KernelSpec, is_valid, stream_smem
    small, big = min(p.M, p.N), max(p.M, p.N)
    sms = dev.sm_count or 132
    bn_fit = next((b for b in (16, 32, 48, 64) if b >= small), 64)
    nch = math.ceil(p.K / 32)
    out: list = []
    for bm, bn, warps, sp in itertools.product((16, 32, 64, 128), sorted({bn_fit, 16}), (2, 4, 8), SPLITS):
        per_warp = math.ceil(math.ceil(nch / sp) / warps)
        ctas = math.ceil(big / bm) * math.ceil(small / bn) * sp
        for st in range(2, 9):
            if st > max(2, per_warp + 1):
                break
            spec = KernelSpec.parse(f"backend=cuda family=stream bm={bm} bn={bn} warps={warps} stages={st} split_k={sp}")
            if not is_valid(spec, p, dev):
                continue
            per_sm = dev.smem_per_sm // (stream_smem(spec.to_dict(), p.layout) + 1024)   # + the reserved 1 KB
            if sms // 4 <= ctas <= per_sm * sms:
                out.append((ctas / (per_sm * sms), spec))
    return [s for _, s in sorted(out, key=lambda x: x[0])][:n]


def _compile_one(args):
    text, shape, layout = args
    from cudal2.backends import get_backend
    from cudal2.device import DeviceInfo
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    try:
        get_backend("cuda").compile(KernelSpec.parse(text), Problem(*shape, layout), DeviceInfo.target("sm_90a"))
        return text, layout, None
    except Exception as e:                  # reported per shape later, when it is built
        return text, layout, str(e).splitlines()[0][:160]


def precompile(jobs: list, procs: int) -> None:
    """Compile every (spec, layout) once, in parallel; the CUDA backend's disk cache keeps them."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    uniq = {(s.text, l): (s.text, shape, l) for s, shape, l in jobs}
    if not uniq:
        return
    t0 = time.monotonic()
    # spawn: this process has a CUDA context by now; the workers only run NVRTC.
    with ProcessPoolExecutor(max(1, procs), mp_context=mp.get_context("spawn")) as ex:
        bad = [r for r in ex.map(_compile_one, uniq.values()) if r[2]]
    print(f"compiled {len(uniq)} (spec, layout) pairs in {time.monotonic() - t0:.1f} s ({len(bad)} failed)", flush=True)
    for t, l, why in bad[:5]:
        print(f"  compile failed: {l} {t}: {why}", flush=True)


def copy_bandwidth(min_ms: float) -> float:
    """Device copy bytes/s counting read + write (1 GiB copy_), PROTOCOL's BW, in this run."""
    import torch

    from cudal2 import timing
    src = torch.randn(1 << 29, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    st = timing.offline({"copy": lambda: dst.copy_(src)}, min_calls=20, min_ms=min_ms)["copy"]
    bw = 2.0 * src.numel() * 2 / (st.median_us * 1e-6)
    del src, dst
    torch.cuda.empty_cache()
    return bw


def bench_shape(setname: str, source: str, p, specs: list, dev, args, bw: float) -> tuple[dict, list]:
    import torch

    from cudal2 import timing
    from cudal2.backends import build_kernel
    from cudal2.baselines import best, prepare
    from cudal2.check import check_kernel, make_inputs
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(p.M * 7 + p.N * 3 + p.K))
    c0 = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    names = BASELINES_NN if p.layout == "nn" else BASELINES_NT
    reasons: dict = {}
    fns = dict(prepare(names, p, a, b, c0, reasons=reasons))
    one = torch.empty(1, dtype=torch.float16, device="cuda")
    fns["floor"] = lambda: one.fill_(0.0)      # the GPU time of a minimal kernel in this run
    status = {}
    for spec in specs:
        try:
            k = build_kernel(spec, p, dev)
        except Exception as e:
            status[spec.text] = f"build failed: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}"
            continue
        rep = check_kernel(k, p, "cuda", checks=("random",))
        if not rep.passed:
            status[spec.text] = f"check failed: {rep.reason}"
            continue
        c = torch.empty_like(c0)
        fns[spec.text] = lambda f=k.bind(p.M, p.N, p.K), c=c: f(a, b, c)      # the bound launch
        status[spec.text] = "ok"
    off = timing.offline(fns, min_ms=args.min_ms, max_calls=args.max_calls)
    base_name, base_us = best({n: s for n, s in off.items() if n in names})
    ok = [s for s, why in status.items() if why == "ok"]
    nbytes = p.min_bytes
    row = {"set": setname, "source": source, "shape": p.shape, "layout": p.layout, "M": p.M, "N": p.N, "K": p.K,
           "class": _shape_class(p.M, p.N, p.K), "mbytes": round(nbytes / 1e6, 3),
           "best_cublas": base_name, "cublas_us": round(base_us, 3),
           "floor_us": round(off["floor"].median_us, 3),
           "cublas_tbs": round(nbytes / base_us / 1e6, 3), "cublas_of_copy": round(nbytes / base_us / 1e6 / (bw / 1e12), 3)}
    per_spec = [{"spec": s, "status": why, "us": round(off[s].median_us, 3) if s in off else None,
                 "spread": round(off[s].spread, 4) if s in off else None} for s, why in status.items()]
    if not ok:
        row.update({"spec": "", "status": "; ".join(sorted(set(status.values())))[:200]})
        return row, per_spec
    top = min(ok, key=lambda s: off[s].median_us)
    t = off[top].median_us
    row.update({"spec": top.replace("backend=cuda family=stream ", ""), "status": "ok", "stream_us": round(t, 3),
                "speedup": round(base_us / t, 4), "stream_tbs": round(nbytes / t / 1e6, 3),
                "stream_of_copy": round(nbytes / t / 1e6 / (bw / 1e12), 3)})
    if args.server_calls > 0:
        # The --server-specs fastest offline specs go through server mode too (a decode layer meets
        # its weight cold in a server: the offline winner need not be the server one).
        cands = sorted(ok, key=lambda s: off[s].median_us)[:max(1, args.server_specs)]
        srv = timing.server({n: fns[n] for n in [*cands, *[n for n in names if n in fns]]}, calls=args.server_calls)
        s_name = min((n for n in srv if n in names), key=lambda n: srv[n].mean_us)
        s_top = min(cands, key=lambda n: srv[n].mean_us)
        s_us, s_t = srv[s_name].mean_us, srv[top].mean_us
        row.update({"server_best_cublas": s_name, "server_cublas_us": round(s_us, 3),
                    "server_stream_us": round(s_t, 3), "server_speedup": round(s_us / s_t, 4),
                    "server_stream_tbs": round(nbytes / s_t / 1e6, 3), "server_cublas_tbs": round(nbytes / s_us / 1e6, 3)})
        if len(cands) > 1:       # the offline winner's server figure above; the server winner's here
            row.update({"server_spec": s_top.replace("backend=cuda family=stream ", ""),
                        "server_best_us": round(srv[s_top].mean_us, 3),
                        "server_best_speedup": round(s_us / srv[s_top].mean_us, 4)})
        for x in per_spec:
            if x["spec"] in cands:
                x["server_us"] = round(srv[x["spec"]].mean_us, 3)
    for n, why in reasons.items():
        per_spec.append({"spec": n, "status": why})
    return row, per_spec


def write_specs_csv(path: Path, rows: list, details: dict) -> None:
    """Every timed spec of every shape as a sweep CSV (the columns `cudal2 train` reads: shape,
    layout, spec, status, us, best_cublas_us), so the cost model learns from these measurements.
    Only timed (ok) specs: this bench runs the random check alone, so a failure here is not the
    full checker's verdict (and the 48 KB launch failures of run 41 were the launcher's)."""
    best = {f"{r['shape']}:{r['layout']}": r.get("cublas_us") for r in rows}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["shape", "layout", "spec", "status", "us", "best_cublas_us"])
        for prob, per in details.items():
            shape, _, layout = prob.partition(":")
            for x in per:
                if str(x.get("spec", "")).startswith("backend=") and x.get("status") == "ok" and x.get("us"):
                    w.writerow([shape, layout or "nn", x["spec"], x["status"], x.get("us") or "", best.get(prob) or ""])


def geo(xs) -> float:
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summary(rows: list, bw: float) -> str:
    lines = [f"copy bandwidth {bw / 1e12:.2f} TB/s (read + write)",
             f"{'set':8s} {'layout':6s} {'n':>4s} {'offline geo':>11s} {'worst':>6s} {'server geo':>10s} "
             f"{'stream TB/s (M<=16)':>20s} {'cublas TB/s (M<=16)':>20s} {'of copy':>8s}"]
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["set"], r["layout"]), []).append(r)
    for (s, l), rs in sorted(groups.items()):
        ok = [r for r in rs if r.get("speedup")]
        small = [r for r in ok if min(r["M"], r["N"]) <= 16]
        med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")
        lines.append(f"{s:8s} {l:6s} {len(ok):4d} {geo(r['speedup'] for r in ok):11.3f} "
                     f"{min((r['speedup'] for r in ok), default=float('nan')):6.3f} "
                     f"{geo(r.get('server_speedup') for r in ok):10.3f} "
                     f"{med([r['stream_tbs'] for r in small]):20.2f} {med([r['cublas_tbs'] for r in small]):20.2f} "
                     f"{med([r['stream_of_copy'] for r in small]):8.2f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/h200-sm90")
    ap.add_argument("--sets", default="decode,skinny",
                    help="any of decode, skinny, small (grid small-class shapes with min(M, N) <= 64)")
    ap.add_argument("--layouts", default="nn,nt", help="layouts of the skinny set (decode is nt)")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--configs", default=",".join(sorted(str(p) for p in CONFIGS.glob("*.json"))))
    ap.add_argument("--specs-per-shape", type=int, default=6)
    ap.add_argument("--space", choices=("few", "wide", "rule"), default="few",
                    help="few: a handful of two-wave picks per shape; wide: every one-wave spec (up to "
                         "--specs-per-shape); rule: cudal2.stream_tiles' first --specs-per-shape (the search's seeds)")
    ap.add_argument("--min-ms", type=float, default=10.0, help="offline timing per function, at least")
    ap.add_argument("--max-calls", type=int, default=2000, help="offline calls per function, at most")
    ap.add_argument("--server-calls", type=int, default=20, help="server-mode calls per function (0: skip)")
    ap.add_argument("--server-specs", type=int, default=1,
                    help="time the N fastest offline specs in server mode too (default 1: the offline winner)")
    ap.add_argument("--skinny-stride", type=int, default=1, help="every N-th skinny grid shape")
    ap.add_argument("--max-seconds", type=float, default=540.0, help="start no shape after this many seconds")
    ap.add_argument("--procs", type=int, default=min(16, os.cpu_count() or 1), help="compile processes")
    ap.add_argument("--quick", action="store_true",
                    help="M in {1, 16, 64}, one model, every 4th skinny shape, 3 specs, 5 ms, 10 server calls")
    args = ap.parse_args()
    t_start = time.monotonic()
    import torch

    from cudal2.device import current
    from cudal2.versions import collect, source_commit
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark times kernels on the GPU", file=sys.stderr)
        return 3
    if args.quick:
        args.tokens, args.specs_per_shape, args.min_ms, args.server_calls = "1,16,64", 3, 5.0, 10
        args.configs = args.configs.split(",")[0]
        args.skinny_stride = max(args.skinny_stride, 4)
    dev = current()
    tokens = [int(t) for t in args.tokens.split(",") if t]
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    work = []
    if "decode" in sets:
        work += decode_set([Path(c) for c in args.configs.split(",") if c], tokens)
    for cls in ("skinny", "small"):
        if cls in sets:
            work += skinny_set([l for l in args.layouts.split(",") if l], args.skinny_stride, cls)
    from cudal2.stream_tiles import stream_candidates
    pick = {"wide": wide_candidates, "few": candidates, "rule": lambda p, d, n: stream_candidates(p, d, n)}[args.space]
    plan = [(s, src, p, pick(p, dev, args.specs_per_shape)) for s, src, p in work]
    precompile([(spec, (p.M, p.N, p.K), p.layout) for _, _, p, specs in plan for spec in specs], args.procs)
    bw = copy_bandwidth(50.0)
    print(f"{len(plan)} shapes; copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"decode_{dev.key}_{source_commit()}"
    meta = {"command": " ".join([sys.executable, *sys.argv]), "args": vars(args), "device": dev.key,
            "versions": collect(), "copy_bw_bytes_per_s": bw, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rows, details = [], {}
    for i, (setname, src, p, specs) in enumerate(plan):
        if time.monotonic() - t_start > args.max_seconds:
            print(f"--max-seconds {args.max_seconds:.0f}: stopped before {p} ({i} of {len(plan)} done)", flush=True)
            meta["stopped_early"] = f"{i} of {len(plan)}"
            break
        try:
            row, per = bench_shape(setname, src, p, specs, dev, args, bw)
        except Exception as e:                     # one shape's failure is a row, not an outage
            row, per = {"set": setname, "source": src, "shape": p.shape, "layout": p.layout, "M": p.M, "N": p.N,
                        "K": p.K, "status": f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}, []
        rows.append(row)
        details[p.text] = per
        print(f"[{i + 1}/{len(plan)}] {setname} {p}: " + (
            f"{row['speedup']:.3f}x best-cublas ({row['best_cublas']} {row['cublas_us']} us, {row['cublas_tbs']} TB/s) "
            f"stream {row['stream_us']} us {row['stream_tbs']} TB/s ({row['stream_of_copy']:.2f} of copy)"
            + (f"; server {row['server_speedup']:.3f}x" if "server_speedup" in row else "") + f" [{row['spec']}]"
            if row.get("status") == "ok" else row.get("status", "")), flush=True)
        # rewritten per shape: a cut run keeps it
        write_rows_csv(out / f"{tag}.csv", rows,
                       (meta["command"], f"device {dev.key} commit {source_commit()} copy_bw_TBs {bw / 1e12:.3f}"))
        (out / f"{tag}.json").write_text(json.dumps({**meta, "rows": rows, "specs": details}, indent=1))
        write_specs_csv(out / f"{tag}.specs.csv", rows, details)
    text = summary(rows, bw)
    print(text)
    (out / f"{tag}.summary.txt").write_text(text + "\n")
    print(f"{len(rows)} shapes in {time.monotonic() - t_start:.0f} s -> {out / tag}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
