"""Where a kernel's time goes, by the card's counters: Nsight Compute (ncu) over our kernels and
cuBLAS's on the same shape, with each Triton kernel's SASS opcode mix. The evidence behind
"what limits each class" in the grid report (issue 7).

One device call (each kernel runs in its own child process under ncu; ~20 s each):

  source bench/device_env.sh; python3 bench/kernel_profile.py --out $OUT

A case is "SHAPE|kernel|kernel|...": a kernel is a spec text (built by the backends and checked
against the fp32 reference before it is profiled) or a baseline name (cudal2.baselines.NAMES).
Writes kernel_profile_<commit>.json (per case and kernel: every launched GPU kernel's name, grid,
registers, shared memory, duration and throughputs, median over --calls launches; the SASS opcode
counts of our cubins) and kernel_profile_<commit>.md (the table). ncu runs with
`--clock-control none` (the device notes: leave the clocks alone), so durations are at the card's
own clocks, but under replay: compare kernels within a case, not with the timing runs.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# The grid's classes, each with our best family on it (search_log.csv, H200 2026-12-03) and the
# cuBLAS call that beat it: starved deep-K (split-K), a mid shape that fills the SMs, a big cube.
CASES = (
    "64x64x8192|backend=triton family=tiled bm=64 bn=64 bk=64 warps=4 stages=4 group_m=4 split_k=8"
    "|cublaslt-heuristic|cublas-nn",
    "512x256x16384|backend=triton family=tiled bm=64 bn=128 bk=64 warps=4 stages=4 group_m=4 split_k=8"
    "|cublaslt-heuristic",
    "2048x2048x2048|backend=triton family=tiled bm=64 bn=256 bk=32 warps=4 stages=4 group_m=4"
    "|cublaslt-autotune",
    "4096x4096x512|backend=triton family=persistent bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8"
    " subtile=2|cublaslt-autotune",
    "4096x4096x4096|backend=triton family=persistent bm=128 bn=256 bk=64 warps=8 stages=3 group_m=8"
    " subtile=2|cublaslt-autotune",
)
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "WarpStateStats")
# Metrics summarised per kernel ((section, metric) in ncu's details page, base units).
SUMMARY = {
    "duration_ns": ("GPU Speed Of Light Throughput", "Duration"),
    "dram_pct": ("GPU Speed Of Light Throughput", "DRAM Throughput"),
    "memory_pct": ("GPU Speed Of Light Throughput", "Memory Throughput"),
    "sm_pct": ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"),
    "registers": ("Launch Statistics", "Registers Per Thread"),
    "smem_dynamic": ("Launch Statistics", "Dynamic Shared Memory Per Block"),
    "waves": ("Launch Statistics", "Waves Per SM"),
    "achieved_occupancy_pct": ("Occupancy", "Achieved Occupancy"),
    "cycles_per_issue": ("Warp State Statistics", "Warp Cycles Per Issued Instruction"),
}
# Why warps wait: cycles stalled per issued instruction, by reason (the counters behind ncu's
# WarpStateStats chart); the largest few are summarised per kernel as "stalls".
STALL_METRICS = r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
_STALL = re.compile(r"smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio")
# Opcode groups worth reading in a GEMM's SASS: which MMA, how tiles are loaded, the syncs.
OPCODE_GROUPS = {
    "wgmma": ("HGMMA",), "mma": ("HMMA",), "tma_load": ("UTMALDG",), "tma_store": ("UTMASTG",),
    "stmatrix": ("STSM",), "local": ("LDL", "STL"),
    "cp_async": ("LDGSTS",), "ldg": ("LDG",), "stg": ("STG",), "ldsm": ("LDSM",), "lds": ("LDS",),
    "sts": ("STS",), "barrier": ("BAR",), "mbarrier": ("SYNCS",), "atomic": ("ATOM", "ATOMG", "RED", "REDG"),
}
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def parse_ncu_csv(text: str) -> list[dict]:
    """ncu's `--csv --page details` output -> one dict per profiled kernel launch (in launch order):
    id, name, grid, block and {"section/metric": value} (floats where the value is a number)."""
    start = text.find('"ID"')
    if start < 0:
        return []
    launches: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        if not row.get("ID") or not row.get("Metric Name"):
            continue
        k = launches.setdefault(row["ID"], {"id": int(row["ID"]), "name": row["Kernel Name"],
                                            "grid": row.get("Grid Size", ""), "block": row.get("Block Size", ""),
                                            "metrics": {}})
        raw = (row.get("Metric Value") or "").replace(",", "")
        try:
            value: object = float(raw)
        except ValueError:
            value = raw
        k["metrics"][f"{row['Section Name']}/{row['Metric Name']}"] = value
    return sorted(launches.values(), key=lambda k: k["id"])


def summarise(launches: list[dict]) -> list[dict]:
    """Group launches by kernel name (in first-launch order); each SUMMARY metric as the median over
    that kernel's launches (None where ncu did not report it)."""
    by_name: dict[str, list[dict]] = {}
    for k in launches:
        by_name.setdefault(k["name"], []).append(k)
    out = []
    for name, ks in by_name.items():
        row = {"kernel": name, "launches": len(ks), "grid": ks[0]["grid"], "block": ks[0]["block"]}
        for key, (section, metric) in SUMMARY.items():
            vals = [k["metrics"].get(f"{section}/{metric}") for k in ks]
            vals = [v for v in vals if isinstance(v, float)]
            row[key] = statistics.median(vals) if vals else None
        stalls: dict[str, float] = {}
        for k in ks:
            for name, v in k["metrics"].items():
                m = _STALL.search(name)
                if m and isinstance(v, float):
                    stalls.setdefault(m.group(1), []).append(v)
        top = sorted(((r, statistics.median(v)) for r, v in stalls.items()), key=lambda rv: -rv[1])
        row["stalls"] = {r: round(v, 3) for r, v in top[:6] if v > 0}
        out.append(row)
    return out


def opcode_counts(sass: str) -> dict[str, int]:
    """Static instruction counts by base opcode (predicate and modifiers dropped) of cuobjdump -sass."""
    counts: dict[str, int] = {}
    for m in _SASS_LINE.finditer(sass):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def opcode_groups(counts: dict[str, int]) -> dict[str, int]:
    return {g: sum(counts.get(op, 0) for op in ops) for g, ops in OPCODE_GROUPS.items()}


# ---- child: build, check, warm up, then run the profiled launches --------------------------------
def child(shape: str, kernel: str, calls: int) -> int:
    import torch

    from cudal2.backends import build_kernel
    from cudal2.baselines import NAMES, prepare
    from cudal2.check import check_kernel, make_inputs
    from cudal2.device import current
    from cudal2.problems import parse_shapes
    from cudal2.spec import KernelSpec

    (p,) = parse_shapes(shape)
    a, b = make_inputs(p, "cuda", torch.Generator(device="cuda").manual_seed(1))
    c = torch.empty(p.M, p.N, dtype=torch.float16, device="cuda")
    if kernel in NAMES:
        reasons: dict = {}
        fns = prepare([kernel], p, a, b, c, reasons=reasons)
        if kernel not in fns:
            print(f"error: baseline {kernel} on {shape}: {reasons.get(kernel)}", file=sys.stderr)
            return 2
        fn = fns[kernel]
    else:
        k = build_kernel(KernelSpec.parse(kernel), p, current())
        rep = check_kernel(k, p, "cuda", checks=("random",))
        if not rep.passed:
            print(f"error: {kernel} fails the check on {shape}: {rep.reason}", file=sys.stderr)
            return 2
        fn = lambda: k(a, b, c)                          # noqa: E731
    for _ in range(3):                                   # compile / bind / tune outside the profile
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


# ---- driver: one ncu process per kernel ----------------------------------------------------------
def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    import triton                  # Triton ships its own cuobjdump
    for root in ("/usr/local/cuda/bin", "/opt/nvidia/nsight-compute", Path(triton.__file__).parent / "backends"):
        hits = sorted(p for p in Path(root).rglob(name) if p.is_file()) if Path(root).exists() else []
        if hits:
            return str(hits[-1])
    return None


def _sass_of(cache: Path) -> dict[str, dict[str, int]]:
    """Opcode counts per cubin that the child wrote to its cache: Triton's (named by kernel) and
    the CUDA backend's (named by its cache key)."""
    tool = _tool("cuobjdump")
    if tool is None:
        return {}
    return {cubin.stem: opcode_counts(subprocess.run([tool, "-sass", str(cubin)], capture_output=True,
                                                     text=True).stdout)
            for cubin in sorted(cache.rglob("*.cubin"))}


def profile(shape: str, kernel: str, calls: int, ncu: str, log) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        # both backends' cubins land in the temporary cache, so their SASS is read below
        env = {**os.environ, "TRITON_CACHE_DIR": cache, "CUDAL2_CACHE_DIR": cache}
        base = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--csv", "--page", "details"]
        cmd = [sys.executable, __file__, "--child", "--shape", shape, "--kernel", kernel, "--calls", str(calls)]
        attempts = (base + ["--print-units", "base"] + [x for s in SECTIONS for x in ("--section", s)]
                    + ["--metrics", STALL_METRICS] + cmd,
                    base + ["--print-units", "base"] + [x for s in SECTIONS for x in ("--section", s)] + cmd,
                    base + ["--section", "SpeedOfLight"] + cmd)
        for argv in attempts:      # the second: fewer options, should this ncu refuse one of them
            r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
            launches = parse_ncu_csv(r.stdout)
            if r.returncode == 0 and launches:
                break
            log(f"  ncu rc={r.returncode}: {(r.stderr or r.stdout).strip().splitlines()[-3:]}")
        res = {"shape": shape, "kernel": kernel, "rc": r.returncode, "ncu_argv": argv[:len(argv) - len(cmd)],
               "kernels": summarise(launches)}
        if r.returncode != 0 or not launches:
            res["error"] = (r.stderr or r.stdout).strip()[-2000:]
        if "=" in kernel:
            res["sass"] = {name: {"groups": opcode_groups(c), "top": dict(list(c.items())[:25])}
                           for name, c in _sass_of(Path(cache)).items()}
    return res


def markdown(results: list[dict], meta: dict) -> str:
    lines = [f"# Kernel profiles ({meta['device']}, commit {meta['commit']}, ncu --clock-control none)", "",
             "| shape | kernel | GPU kernel | grid | regs | smem | µs | DRAM % | SM % | occupancy % |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def f(v, nd=1):
        return "" if v is None else f"{v:.{nd}f}"
    for r in results:
        for k in r["kernels"] or [{"kernel": f"(no profile: {r.get('error', '')[:60]})"}]:
            us = k.get("duration_ns")
            lines.append(f"| {r['shape']} | {r['kernel']} | `{k['kernel'][:70]}` | {k.get('grid', '')} | "
                         f"{f(k.get('registers'), 0)} | {f(k.get('smem_dynamic'), 0)} | "
                         f"{f(us / 1e3 if us is not None else None, 2)} | {f(k.get('dram_pct'))} | "
                         f"{f(k.get('sm_pct'))} | {f(k.get('achieved_occupancy_pct'))} |")
    lines += ["", "Stalls (cycles per issued instruction, largest reasons; smsp__average_warps_issue_stalled_*):", ""]
    for r in results:
        for k in r["kernels"] or []:
            if k.get("stalls"):
                lines.append(f"- {r['shape']} {r['kernel'][:60]} `{k['kernel'][:40]}`: "
                             + ", ".join(f"{n} {v}" for n, v in k["stalls"].items()))
    lines += ["", "SASS opcode groups (static counts in the cubins):", ""]
    for r in results:
        for name, s in (r.get("sass") or {}).items():
            lines.append(f"- {r['shape']} `{name}`: "
                         + ", ".join(f"{g} {n}" for g, n in s["groups"].items() if n))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/h200-sm90")
    ap.add_argument("--case", action="append", help="SHAPE|kernel|kernel... (repeatable; default: CASES)")
    ap.add_argument("--calls", type=int, default=3, help="profiled launches per kernel")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    ap.add_argument("--kernel", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.shape, args.kernel, args.calls)
    if args.calls < 1:
        ap.error("--calls must be at least 1")
    ncu = _tool("ncu")
    if ncu is None:
        print("error: ncu (Nsight Compute) is not on this machine", file=sys.stderr)
        return 3
    from cudal2.device import current
    from cudal2.versions import collect, source_commit
    meta = {"device": current().key, "commit": source_commit(), "versions": collect(), "ncu": ncu,
            "calls": args.calls}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"kernel_profile_{meta['commit']}"
    results = []
    for case in args.case or CASES:
        shape, *kernels = [x.strip() for x in case.split("|")]
        if not kernels:
            ap.error(f"case {case!r} names no kernel")
        for kernel in kernels:
            print(f"{shape}  {kernel}", flush=True)
            r = profile(shape, kernel, args.calls, ncu, lambda m: print(m, flush=True))
            for k in r["kernels"]:
                print(f"  {k['kernel'][:90]}  grid {k['grid']}  {k['duration_ns']} ns  DRAM {k['dram_pct']}%  "
                      f"SM {k['sm_pct']}%", flush=True)
            results.append(r)
            # Written after every kernel: a call cut short by its time limit keeps what it measured.
            (out / f"{tag}.json").write_text(json.dumps({**meta, "results": results}, indent=1))
            (out / f"{tag}.md").write_text(markdown(results, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
