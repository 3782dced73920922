"""The model set of issue 22: the linear-layer GEMMs of four open model configs (bench/configs/,
hidden sizes 2048 / 3584 / 4096 / 8192) at M in 1, 2, 4, ... 8192 tokens, layout nt (nn.Linear).

  python3 bench/model_set.py            # writes bench/model_set.txt (one MxNxK:nt per line, a --shapes file)
                                        # and bench/model_decode_set.txt (its lines with M <= 32)
  python3 bench/model_set.py --check    # exit 1 if a committed file differs from what the configs give

Each distinct shape is listed once (in a model q_proj and o_proj are both h x h, gate and up one
shape): 16 (N, K) pairs x 14 M = 224 shapes. The M list is also the bucket grid: `cudal2 generate
--m-buckets` makes the entry at each M serve (previous M, M] where its kernel wins at both edges.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cudal2.problems import problems_from_hf_config

HERE = Path(__file__).resolve().parent
CONFIGS = ("llama-3.2-1b.json", "qwen2.5-7b.json", "llama-3-8b.json", "llama-3-70b.json")
TOKENS = [2 ** i for i in range(14)]          # 1 ... 8192
OUT = HERE / "model_set.txt"
DECODE_OUT = HERE / "model_decode_set.txt"
DECODE_MAX_M = 32       # decode_lead's reach (rl/staged.py): its seeds go to min(M, N) <= 32


def model_set() -> list[str]:
    seen: dict[str, None] = {}
    for name in CONFIGS:
        for p in problems_from_hf_config(HERE / "configs" / name, TOKENS, "nt"):
            seen.setdefault(p.text, None)
    return list(seen)


def decode_set() -> list[str]:
    """The model set's decode shapes (M <= DECODE_MAX_M), in model_set's order: grid_search.sh's
    models-decode set."""
    return [t for t in model_set() if int(t.split("x")[0]) <= DECODE_MAX_M]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = ap.parse_args()
    bad = 0
    for path, shapes in ((OUT, model_set()), (DECODE_OUT, decode_set())):
        text = "\n".join(shapes) + "\n"
        if args.check:
            same = path.exists() and path.read_text() == text
            print(f"{path}: {'up to date' if same else 'differs from the configs; rerun without --check'}")
            bad += not same
        else:
            path.write_text(text)
            print(f"{path}: {len(shapes)} shapes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
