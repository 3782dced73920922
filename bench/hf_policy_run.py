"""The Hugging Face policy path end to end on the GPU (issue 21, item 4), against the default policy.

A small causal LM is built from a config here (cudal2.rl.hf_local: GPT-2, random weights, a BPE
tokenizer learnt from the spec grammar; nothing downloaded), then `cudal2 generate --policy hf:DIR`
searches the nn shapes with GRPO updates and checkpoints, and a second `generate --resume` on the
nt shapes must restore that checkpoint (its log line "restored policy checkpoint ... (step N)").
The default policy (fresh weights) runs the same two commands into its own store. No seed list
(--seed-list none): every candidate is the policy's own. Per shape: the screened best and the
full-pass winner against best-cublas, the LM answers that were corrected.

  # one H200 device call, carry [".whl", ".commit"]:
  source bench/device_env.sh && python3 bench/hf_policy_run.py --out $OUT/hf
Writes hf_policy.json (everything, with the commands) and hf_policy.log (both policies' output).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

NN = "256x64x512,4096x256x2048,12288x1024x2048"     # small, starved, mid: held-out shapes of the study
NT = "128x64x4096,2048x2048x1024,16x3584x3584"      # small, mid, an off-grid decode projection


def _generate(args, policy: str, shapes: str, layout: str, store: Path, registry: Path, resume: bool,
              log) -> dict:
    cmd = [sys.executable, "-m", "cudal2.cli", "generate", "--backend", "both", "--shapes", shapes,
           "--layout", layout, "--budget", str(args.budget), "--group", str(args.group), "--seed-list", "none",
           "--policy", policy, "--store", str(store), "--registry", str(registry), "--seed", str(args.seed)]
    if resume:
        cmd.append("--resume")
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    out = p.stdout + p.stderr
    log.write(f"$ {' '.join(cmd)}\n{out}\n(rc {p.returncode}, {wall:.1f} s)\n\n")
    log.flush()
    if p.returncode != 0:
        raise SystemExit(f"generate failed (rc {p.returncode}): {out.strip().splitlines()[-1:]}")
    # rich wraps long lines at the console width: match across the break.
    restored = re.search(r"restored policy checkpoint\s+(\S+)\s+\(step\s+(\d+)\)", out)
    rejected = re.search(r"(\d+)\s+of\s+(\d+)\s+LM\s+answers\s+were\s+rejected", out)
    return {"command": " ".join(cmd[2:]), "wall_s": round(wall, 1),
            "restored_step": int(restored.group(2)) if restored else None,
            "rejected": [int(rejected.group(1)), int(rejected.group(2))] if rejected else None}


def _rows(store: Path) -> dict:
    from cudal2.store import Store
    with Store(store) as s:
        return {k: {f: r.get(f) for f in ("screen_speedup", "full_speedup", "winner_spec", "screen_spec",
                                            "evaluations", "failures_screen", "filed")}
                for k, r in s.shapes().items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/hf_policy_run", help="stores, registries and the LM (not returned)")
    ap.add_argument("--nn", default=NN)
    ap.add_argument("--nt", default=NT)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--policies", default="hf,default",
                    help="which side(s) to run: hf, default or both (a device call too short for both)")
    args = ap.parse_args()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    from cudal2.rl.hf_local import build_grammar_lm
    lm = build_grammar_lm(work / "lm", n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head, seed=args.seed)
    res = {"lm": {"n_embd": args.n_embd, "n_layer": args.n_layer, "n_head": args.n_head, "seed": args.seed},
           "budget": args.budget, "group": args.group, "commit": _commit(), "runs": {}, "shapes": {}}
    with open(out / "hf_policy.log", "w") as log:
        wanted = set(args.policies.split(","))
        for name, policy in (("hf", f"hf:{lm}"), ("default", "default")):
            if name not in wanted:
                continue
            store, reg = work / f"{name}.db", work / f"reg_{name}"
            runs = [_generate(args, policy, args.nn, "nn", store, reg, False, log),
                    _generate(args, policy, args.nt, "nt", store, reg, True, log)]
            res["runs"][name] = runs
            res["shapes"][name] = _rows(store)
            print(f"{name}: restored at step {runs[1]['restored_step']}; "
                  f"{sum(r['wall_s'] for r in runs):.0f} s", flush=True)
    from cudal2.stats import geomean
    hf, de = res["shapes"].get("hf", {}), res["shapes"].get("default", {})
    for which in ("screen_speedup", "full_speedup"):
        pairs = [(hf[k][which], de[k][which]) for k in hf if k in de and hf[k][which] and de[k][which]]
        res[f"geomean_{which}"] = {"hf": geomean([a for a, _ in pairs]) if pairs else None,
                                   "default": geomean([b for _, b in pairs]) if pairs else None,
                                   "shapes": len(pairs)}
        print(which, res[f"geomean_{which}"], flush=True)
    (out / "hf_policy.json").write_text(json.dumps(res, indent=1, default=str))


def _commit() -> str:
    p = Path(".commit")
    return p.read_text().strip() if p.is_file() else ""


if __name__ == "__main__":
    main()
