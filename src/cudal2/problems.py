"""GEMM problems: C[M,N] = A[M,K] @ B, fp16 in, fp32 accumulate, fp16 out.

Layouts (PROTOCOL.md):
  nn  B is [K, N] row-major.
  nt  B is [N, K] row-major (the nn.Linear weight; "TN / B column-major" in cuBLAS terms).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

LAYOUTS = ("nn", "nt")
_SHAPE_RE = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+)\s*[xX*]\s*(\d+)\s*(?::\s*(nn|nt))?\s*$")


class ProblemError(ValueError):
    """A shape or layout that cannot be a problem; the message names what is wrong."""


@dataclass(frozen=True, order=True)
class Problem:
    M: int
    N: int
    K: int
    layout: str = "nn"

    def __post_init__(self) -> None:
        for name in ("M", "N", "K"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ProblemError(f"{name} must be an integer >= 1, got {v!r}")
        if self.layout not in LAYOUTS:
            raise ProblemError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")

    @classmethod
    def parse(cls, text: str, layout: str | None = None) -> "Problem":
        """`MxNxK` or `MxNxK:nt`; an explicit `layout` argument wins over none in the text."""
        m = _SHAPE_RE.match(text)
        if not m:
            raise ProblemError(f"shape {text!r} is not of the form MxNxK (e.g. 4096x4096x4096)")
        M, N, K = (int(g) for g in m.group(1, 2, 3))
        lay = m.group(4) or layout or "nn"
        if m.group(4) and layout and m.group(4) != layout:
            raise ProblemError(f"shape {text!r} says layout {m.group(4)} but {layout} was asked for")
        return cls(M, N, K, lay)

    @classmethod
    def of_row(cls, row: dict) -> "Problem":
        """The problem a `cudal2 compare --json` row timed (its M, N, K and layout; nn if it names none)."""
        return cls(row["M"], row["N"], row["K"], row.get("layout", "nn"))

    @property
    def shape(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"

    @property
    def text(self) -> str:
        """Canonical key: `MxNxK:layout`."""
        return f"{self.shape}:{self.layout}"

    def __str__(self) -> str:
        return self.text

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    @property
    def min_bytes(self) -> int:
        """Each operand read once and C written once, fp16."""
        return 2 * (self.M * self.K + self.K * self.N + self.M * self.N)

    def b_shape(self) -> tuple[int, int]:
        return (self.K, self.N) if self.layout == "nn" else (self.N, self.K)

    def with_layout(self, layout: str) -> "Problem":
        return Problem(self.M, self.N, self.K, layout)


def _grid_lines() -> list[str]:
    # Beside this module (package data), not importlib.resources: editable installs with
    # package-dir mappings give cudal2 a multiplexed path that resources.files() rejects.
    return (Path(__file__).parent / "data" / "shapes_1000.txt").read_text().splitlines()


def read_shape_file(path: str | Path, layout: str = "nn") -> list[Problem]:
    """Lines of `M N K` or `MxNxK[:layout]`; `#` starts a comment."""
    text = Path(path).read_text() if not isinstance(path, list) else "\n".join(path)
    return _parse_lines(text.splitlines(), layout, str(path))


def _parse_lines(lines: list[str], layout: str, where: str) -> list[Problem]:
    out = []
    for i, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        try:
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                out.append(Problem(int(parts[0]), int(parts[1]), int(parts[2]), layout))
            else:
                out.append(Problem.parse(line, layout if ":" not in line else None))
        except ProblemError as e:
            raise ProblemError(f"{where}:{i}: {e}") from None
    return out


def grid(layout: str = "nn") -> list[Problem]:
    """The 1000-shape headline grid (every combination of 64 ... 16384)."""
    return _parse_lines(_grid_lines(), layout, "shapes_1000.txt")


def parse_shapes(arg: str, layout: str = "nn") -> list[Problem]:
    """`grid` | `grid:N` (every N-th grid shape) | a file | `MxNxK,MxNxK,...`."""
    arg = arg.strip()
    if arg == "grid":
        return grid(layout)
    if arg.startswith("grid:"):
        step = arg.split(":", 1)[1]
        if not step.isdigit() or int(step) < 1:
            raise ProblemError(f"--shapes {arg!r}: grid:N needs a positive integer N")
        return grid(layout)[:: int(step)]
    try:
        is_file = Path(arg).is_file()
    except OSError:          # a long list of shapes is no file name (ENAMETOOLONG on the H200)
        is_file = False
    if is_file:
        return read_shape_file(arg, layout)
    if not arg:
        raise ProblemError("no shapes given")
    # One word with a path's marks (or no digit at all) that is no file: say so, not "not MxNxK".
    if "," not in arg and not _SHAPE_RE.match(arg) and ("/" in arg or "." in arg or not any(c.isdigit() for c in arg)):
        raise ProblemError(f"--shapes {arg!r}: no such file, and not grid, grid:N or MxNxK[,MxNxK...]")
    # `layout` is the default; a shape's own `:nt` / `:nn` suffix wins.
    return [Problem.parse(s, None if ":" in s else layout) for s in arg.split(",") if s.strip()]


def problems_from_hf_config(config: dict | str | Path, tokens: list[int], layout: str = "nt") -> list[Problem]:
    """The distinct GEMMs of a decoder-only transformer's linear layers for each token count.

    Reads a Hugging Face `config.json` (a dict or a path; nothing is downloaded). For nn.Linear,
    y = x @ W^T with W [out, in]: M = tokens, N = out_features, K = in_features, layout nt.
    """
    if not isinstance(config, dict):
        config = json.loads(Path(config).read_text())
    cfg = config.get("text_config", config)
    try:
        h = int(cfg["hidden_size"])
    except KeyError:
        raise ProblemError("config has no hidden_size: not a transformer config cudal2 understands") from None
    heads = int(cfg.get("num_attention_heads", 1))
    kv_heads = int(cfg.get("num_key_value_heads", heads))
    head_dim = int(cfg.get("head_dim") or h // heads)
    inter = int(cfg.get("intermediate_size", 4 * h))
    vocab = cfg.get("vocab_size")
    # (out, in) of each linear layer; q/k/v and gate/up listed separately as the HF modules are.
    layers = {
        "q_proj": (heads * head_dim, h),
        "k_proj": (kv_heads * head_dim, h),
        "v_proj": (kv_heads * head_dim, h),
        "o_proj": (h, heads * head_dim),
        "gate_proj": (inter, h),
        "up_proj": (inter, h),
        "down_proj": (h, inter),
    }
    if vocab:
        layers["lm_head"] = (int(vocab), h)
    seen: dict[Problem, None] = {}
    for t in tokens:
        for out_f, in_f in layers.values():
            seen.setdefault(Problem(int(t), out_f, in_f, layout), None)
    return list(seen)
