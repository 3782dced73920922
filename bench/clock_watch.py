"""Issue 19's open question: at 4096^3 nt ours and cuBLAS's kernels tie alone under ncu (184.8 vs
184.6 µs, run 57) while back to back on the offline clock ours ran 209.8 vs 203.6 (run 53). Is the
gap the SM clock (power or thermal limits under a sustained run) or something between launches?

Each kernel runs alone, back to back, for --seconds of GPU time per phase (cudal2.timing.offline
with one callable), phases in turn ours / baselines / ours / ... for --rounds, while nvidia-smi
samples the SM clock, power, temperature and the active clock-event reasons every --sample-ms.
Per phase: the median call time and the samples that fall in the phase's middle 80% (warm-up and
the hand-over to the next phase left out).

  source bench/device_env.sh
  python3 bench/clock_watch.py --out $OUT --shape 4096x4096x4096:nt --spec "<wgmma spec text>" \
      [--baselines cublaslt-autotune,torch] [--seconds 3] [--rounds 3]

Writes clock_watch_<commit>.json (phases, samples, card, command) and prints the table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

FIELDS = ("timestamp", "clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active")
# Older drivers name the last field clocks_throttle_reasons.active.
FIELDS_OLD = FIELDS[:-1] + ("clocks_throttle_reasons.active",)


def parse_smi(text: str) -> list[dict]:
    """nvidia-smi --format=csv,noheader,nounits lines of FIELDS -> samples (t: epoch seconds in the
    machine's local time, as nvidia-smi prints it). Unparsable lines ("[N/A]", a cut last line)
    are skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(FIELDS):
            continue
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append({"t": t, "sm_mhz": float(parts[1]), "power_w": float(parts[2]),
                        "temp_c": float(parts[3]), "reasons": parts[4]})
        except ValueError:
            continue
    return out


def phase_samples(samples: list[dict], t0: float, t1: float, keep: float = 0.8) -> list[dict]:
    """The samples in the middle `keep` of [t0, t1]."""
    cut = (t1 - t0) * (1 - keep) / 2
    return [s for s in samples if t0 + cut <= s["t"] <= t1 - cut]


def summarize_phase(name: str, us: float, samples: list[dict]) -> dict:
    row = {"name": name, "us": round(us, 3), "samples": len(samples)}
    if samples:
        row.update(sm_mhz=statistics.median(s["sm_mhz"] for s in samples),
                   sm_mhz_min=min(s["sm_mhz"] for s in samples),
                   power_w=round(statistics.median(s["power_w"] for s in samples), 1),
                   temp_c=max(s["temp_c"] for s in samples),
                   reasons=sorted({s["reasons"] for s in samples}))
    return row


class Sampler:
    """nvidia-smi in a child process, writing to a file until stopped."""

    def __init__(self, sample_ms: int):
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv", delete=False)
        for fields in (FIELDS, FIELDS_OLD):
            cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                   f"-lms={sample_ms}"]
            self.proc = subprocess.Popen(cmd, stdout=self.file, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
            if self.proc.poll() is None:          # still sampling: the driver knows these fields
                self.cmd = cmd
                return
        raise RuntimeError(f"nvidia-smi refused both field sets: {self.proc.stderr.read()[:300]}")

    def stop(self) -> list[dict]:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.file.flush()
        return parse_smi(Path(self.file.name).read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="4096x4096x4096:nt")
    ap.add_argument("--spec", required=True, help="our kernel's spec text")
    ap.add_argument("--baselines", default="cublaslt-autotune,torch")
    ap.add_argument("--seconds", type=float, default=3.0, help="GPU time per phase")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sample-ms", type=int, default=20)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1 or args.sample_ms < 1:
        ap.error("--seconds must be > 0, --rounds and --sample-ms >= 1")
    import torch

    from cudal2 import timing
    from cudal2.backends import build_kernel
    from cudal2.baselines import prepare
    from cudal2.check import check_kernel, make_inputs
    from cudal2.device import current
    from cudal2.problems import Problem
    from cudal2.spec import KernelSpec
    from cudal2.versions import collect, source_commit
    dev, problem = current(), Problem.parse(args.shape)
    kern = build_kernel(KernelSpec.parse(args.spec), problem, dev)
    rep = check_kernel(kern, problem, "cuda", checks=("random",))
    if not rep.passed:
        print(f"our kernel failed the check: {rep.reason}", file=sys.stderr)
        return 1
    a, b = make_inputs(problem, "cuda", torch.Generator(device="cuda").manual_seed(3))
    c = torch.empty(problem.M, problem.N, dtype=torch.float16, device="cuda")
    reasons: dict = {}
    fns = {"ours": lambda: kern(a, b, c)}
    fns.update(prepare([n for n in args.baselines.split(",") if n], problem, a, b, c, reasons=reasons))
    sampler = Sampler(args.sample_ms)
    windows = []
    try:
        for r in range(args.rounds):
            for name, fn in fns.items():
                torch.cuda.synchronize()
                t0 = time.time()
                st = timing.offline({name: fn}, min_ms=args.seconds * 1000, max_calls=10**7)[name]
                windows.append((r, name, st.median_us, t0, time.time()))
    finally:
        samples = sampler.stop()
    phases = [{"round": r, **summarize_phase(n, us, phase_samples(samples, t0, t1))}
              for r, n, us, t0, t1 in windows]
    commit = source_commit()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"card": dev.name, "commit": commit, "versions": collect(), "shape": problem.text, "spec": args.spec,
           "command": "python3 bench/clock_watch.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "smi": sampler.cmd, "baselines_missing": reasons, "phases": phases, "samples": samples}
    (out / f"clock_watch_{commit}.json").write_text(json.dumps(doc))
    for p in phases:
        print(json.dumps(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
