"""Decode with the wgmma family's A_TRIM (A's TMA box M rows tall when M < BM; kernels_cuda/wgmma.cu):
does it make wgmma the decode winner? One run per shape times, interleaved, the wave model's wgmma
specs built plain (A_TRIM=0, the code before 2026-12-05) and trimmed (the default since, where
CLUSTER == 1), the stream family's rule picks, the cuBLAS baselines and a
minimal kernel (the clock's floor), after the checker's random check of every kernel.

  python3 bench/decode_trim.py --out $OUT [--tokens 1,2,4,8,16,32] [--wgmma 6] [--stream 2] [--max-seconds 300]

The set is issue 20's decode set (M x the projections of Llama-3-8B and Qwen2.5-7B, nt; bench/decode.py's). Writes
decode_trim_<card>_<commit>.csv (one row per shape: the best of each kind, its µs, TB/s and speedup
over best-cublas; the geomean of plain / trimmed time over the specs built both ways) and .json
(every timed function per shape, the command, versions, copy bandwidth), rewritten after every shape.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from cudal2.report import write_rows_csv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cta_timeline import build_variant, prefix  # noqa: E402
from decode import BASELINES_NT, CONFIGS, copy_bandwidth, decode_set, geo  # noqa: E402
from variant_sweep import compile_pairs  # noqa: E402

UNTRIM = {"A_TRIM": 0}     # trimming is wgmma.cu's default for cluster 1 since 2026-12-05 (run 62)
TOKENS = (1, 2, 4, 8, 16, 32)
DECODE_MODELS = ("llama-3-8b", "qwen2.5-7b")     # the decode set's (registry_v2/decode/decode_set.md)


def plan(p, dev, n_wgmma: int, n_stream: int) -> dict[str, list]:
    """The specs of one shape: the wave model's first n wgmma specs that may trim (no 2-CTA cluster)
    and the stream rule's first n: the two halves of the search's decode lead (rl/staged.py)."""
    from cudal2.rl.staged import decode_wgmma
    from cudal2.stream_tiles import stream_candidates
    return {"wgmma": decode_wgmma(n_wgmma, p, dev), "stream": stream_candidates(p, dev, n_stream)}


def build(spec, p, dev, trim: bool):
    from cudal2.backends import build_kernel
    if not trim:
        return build_variant(spec, p, dev, prefix(UNTRIM))
    k = build_kernel(spec, p, dev)
    if not k.a_trim:
        raise RuntimeError("the default wgmma module has no cudal2_a_trim symbol")
    return k


def bench_shape(p, specs: dict, dev, args, bw: float) -> tuple[dict, list]:
    import torch

    from cudal2 import timing
    from cudal2.baselines import best, prepare
    from cudal2.check import check_kernel, make_inputs
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(p.M * 7 + p.N * 3 + p.K))
    c0 = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    reasons: dict = {}
    fns = dict(prepare(BASELINES_NT, p, a, b, c0, reasons=reasons))
    one = torch.empty(1, dtype=torch.float16, device="cuda")
    fns["floor"] = lambda: one.fill_(0.0)
    kinds, status = {}, {}
    jobs = [("stream", s, False) for s in specs["stream"]] + \
           [(kind, s, trim) for s in specs["wgmma"] for kind, trim in (("wgmma", False), ("wgmma-trim", True))]
    for kind, spec, trim in jobs:
        name = ("A_TRIM=1 " if trim else "") + spec.text
        try:
            k = build(spec, p, dev, trim)
            rep = check_kernel(k, p, "cuda", checks=("random",))
            if not rep.passed:
                status[name] = f"check failed: {rep.reason}"
                continue
        except Exception as e:                 # a kernel that fails is a row's note, not an outage
            status[name] = f"build failed: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}"
            continue
        c = torch.empty_like(c0)
        fns[name] = lambda f=k.bind(p.M, p.N, p.K), c=c: f(a, b, c)
        kinds[name], status[name] = kind, "ok"
    off = timing.offline(fns, min_ms=args.min_ms, max_calls=args.max_calls)
    base_name, base_us = best({n: s for n, s in off.items() if n in BASELINES_NT})
    nbytes = p.min_bytes
    row = {"shape": p.shape, "layout": p.layout, "M": p.M, "N": p.N, "K": p.K, "mbytes": round(nbytes / 1e6, 3),
           "best_cublas": base_name, "cublas_us": round(base_us, 3), "cublas_tbs": round(nbytes / base_us / 1e6, 3),
           "floor_us": round(off["floor"].median_us, 3)}
    for kind in ("stream", "wgmma", "wgmma-trim"):
        got = [n for n, k in kinds.items() if k == kind]
        if not got:
            continue
        top = min(got, key=lambda n: off[n].median_us)
        t = off[top].median_us
        row.update({f"{kind}_us": round(t, 3), f"{kind}_speedup": round(base_us / t, 4),
                    f"{kind}_tbs": round(nbytes / t / 1e6, 3), f"{kind}_of_copy": round(nbytes / t / 1e6 / (bw / 1e12), 3),
                    f"{kind}_spec": top.replace("A_TRIM=1 ", "").replace("backend=cuda ", "")})
    pairs = [off[s.text].median_us / off["A_TRIM=1 " + s.text].median_us for s in specs["wgmma"]
             if s.text in off and "A_TRIM=1 " + s.text in off]
    row["plain_over_trim"] = round(geo(pairs), 4) if pairs else None
    per = [{"name": n, "status": st, "us": round(off[n].median_us, 3) if n in off else None} for n, st in status.items()]
    per += [{"name": n, "status": why} for n, why in reasons.items()]
    return row, per


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--configs", default=",".join(str(CONFIGS / f"{m}.json") for m in DECODE_MODELS),
                    help="model config.json files (default: issue 20's decode set, Llama-3-8B and Qwen2.5-7B)")
    ap.add_argument("--wgmma", type=int, default=6, help="wave-model wgmma specs per shape (each plain and trimmed)")
    ap.add_argument("--stream", type=int, default=2, help="stream-rule specs per shape")
    ap.add_argument("--min-ms", type=float, default=10.0)
    ap.add_argument("--max-calls", type=int, default=2000)
    ap.add_argument("--max-seconds", type=float, default=300.0, help="start no shape after this many seconds")
    ap.add_argument("--procs", type=int, default=min(16, os.cpu_count() or 1), help="compile processes")
    args = ap.parse_args(argv)
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    if not tokens or min(tokens) < 1 or args.wgmma < 1 or args.stream < 0:
        ap.error("--tokens must be positive integers, --wgmma >= 1, --stream >= 0")
    t_start = time.monotonic()
    import torch
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark times kernels on the GPU", file=sys.stderr)
        return 3
    from cudal2.device import current
    from cudal2.versions import collect, source_commit
    dev = current()
    work = [(p, plan(p, dev, args.wgmma, args.stream))
            for _, _, p in decode_set([Path(c) for c in args.configs.split(",") if c], tokens)]
    # Plain and trimmed compiled ahead in parallel (one job per distinct spec: the source does not
    # depend on M, N, K); the builds below hit the CUDA backend's disk cache.
    jobs = {s.text: (p.text, s.text, "A_TRIM=0", UNTRIM) for p, sp in work for s in sp["wgmma"]}
    bad = [f"{k[0]}: {err}" for k, (_, err) in compile_pairs(sorted(jobs.values()), args.procs).items() if err]
    print(f"compiled {len(jobs)} wgmma specs plain and trimmed, {len(bad)} failed", *bad[:3], sep="\n  ", flush=True)
    bw = copy_bandwidth(50.0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"decode_trim_{dev.key}_{source_commit()}"
    meta = {"command": " ".join([sys.executable, *sys.argv]), "device": dev.key, "versions": collect(),
            "copy_bw_bytes_per_s": bw, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rows, details = [], {}
    for i, (p, specs) in enumerate(work):
        if time.monotonic() - t_start > args.max_seconds:
            meta["stopped_early"] = f"{i} of {len(work)}"
            print(f"--max-seconds: stopped before {p} ({i} of {len(work)})", flush=True)
            break
        try:
            row, per = bench_shape(p, specs, dev, args, bw)
        except Exception as e:
            row, per = {"shape": p.shape, "layout": p.layout, "M": p.M, "N": p.N, "K": p.K,
                        "status": f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}, []
        rows.append(row)
        details[p.text] = per
        print(f"[{i + 1}/{len(work)}] {p}: cublas {row.get('cublas_us')} stream {row.get('stream_us')} "
              f"wgmma {row.get('wgmma_us')} trim {row.get('wgmma-trim_us')} (plain/trim {row.get('plain_over_trim')})",
              flush=True)
        write_rows_csv(out / f"{tag}.csv", rows,
                       (meta["command"], f"device {dev.key} commit {source_commit()} copy_bw_TBs {bw / 1e12:.3f}"))
        (out / f"{tag}.json").write_text(json.dumps({**meta, "rows": rows, "specs": details}, indent=1))
    for kind in ("stream", "wgmma", "wgmma-trim"):
        xs = [r.get(f"{kind}_speedup") for r in rows]
        best_of = [max(r.get("stream_speedup") or 0, r.get(f"{kind}_speedup") or 0) for r in rows]
        print(f"{kind:10s} vs best-cublas: geomean {geo(xs):.3f} over {sum(1 for x in xs if x)} shapes; "
              f"best of it and stream {geo(best_of):.3f}")
    print(f"plain / trimmed, same spec (geomean over shapes): {geo(r.get('plain_over_trim') for r in rows):.3f}")
    print(f"{len(rows)} shapes in {time.monotonic() - t_start:.0f} s -> {out / tag}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
