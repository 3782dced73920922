"""The PROTOCOL.md checker, written once for any kernel of any backend (and for the baselines).

A kernel is any callable `fn(a, b, c)` that writes C = A @ B in fp16 for the problem's layout
(`a` [M,K]; `b` [K,N] for nn, [N,K] for nt; `c` [M,N]). Six checks, in order:

  random   randn inputs vs an fp32 reference: normwise relative error <= 5e-3, no NaN/Inf.
           5e-3 is PROTOCOL.md's bound: fp16 output rounding alone gives ~2e-4, fp32 accumulation
           adds ~sqrt(K) * 6e-8, so a correct kernel sits an order of magnitude below it at any K.
  exact    A, B in {0, 1}: every product entry is an integer; where it is <= 2048 (fp16 represents
           every integer up to 2048) the output must equal it exactly.
  poison   C filled with NaN before the call: every element must be written.
  guard    A, B, C carved out of larger buffers with random guard values around them: guards and
           inputs must be bit-identical afterwards (out-of-bounds writes).
  fresh    new inputs into the same C: catches kernels that cache or skip work.
  edges    problems off the tile grid (1, 17, 100, 1000, 3000 on each axis), random check on each,
           for those the kernel claims to support.
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import torch

from .problems import Problem

REL_TOL = 5e-3
EXACT_LIMIT = 2048
EDGE_SIZES = (1, 17, 100, 1000, 3000)
# Guard band width in elements: 64 fp16 = 128 bytes keeps every carved view 128-byte aligned,
# which TMA descriptors (16-byte) and vector loads need.
GUARD = 64
CHECKS = ("random", "exact", "poison", "guard", "fresh", "edges")

KernelFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass
class CheckResult:
    name: str
    passed: bool
    value: float | None = None      # the measured figure (error, count ...)
    limit: float | None = None
    detail: str = ""

    def line(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        fig = ""
        if self.value is not None:
            fig = f"{self.value:.3g}" + (f" (limit {self.limit:.3g})" if self.limit is not None else "")
        return f"{status} {self.name:<7} {fig} {self.detail}".rstrip()


@dataclass
class CheckReport:
    problem: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def failure(self) -> CheckResult | None:
        return next((r for r in self.results if not r.passed), None)

    @property
    def reason(self) -> str:
        f = self.failure
        return "" if f is None else f"{f.name}: " + f.line().split(" ", 2)[-1].strip()

    def to_dict(self) -> dict:
        return {"problem": self.problem, "passed": self.passed, "reason": self.reason,
                "results": [asdict(r) for r in self.results]}


# ---- inputs -----------------------------------------------------------------------------------------
def _gen_device(gen: torch.Generator | None):
    return gen.device if gen is not None else torch.device("cpu")


def make_inputs(problem: Problem, device, gen: torch.Generator | None = None, kind: str = "randn"):
    """A [M,K] and B (layout shape) in fp16; `kind` is 'randn' or 'binary' ({0,1} entries).
    Drawn where the generator lives (check_kernel gives a CUDA one for a CUDA device: a CPU randn of
    a 67M-element operand takes ~0.5 s, and a full check draws about seven), then moved to `device`."""
    shapes = [(problem.M, problem.K), problem.b_shape()]
    where = _gen_device(gen)
    out = []
    for shp in shapes:
        if kind == "binary":
            t = torch.randint(0, 2, shp, generator=gen, device=where).to(torch.float16)
        else:
            t = torch.randn(shp, generator=gen, device=where, dtype=torch.float32).to(torch.float16)
        out.append(t.to(device))
    return out[0], out[1]


@contextlib.contextmanager
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def reference(a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """fp32 product (TF32 off), the yardstick of every check."""
    bb = b.float() if layout == "nn" else b.float().t()
    with _no_tf32():
        return a.float() @ bb


def rel_error(c: torch.Tensor, ref: torch.Tensor) -> float:
    den = torch.linalg.vector_norm(ref).item()
    num = torch.linalg.vector_norm(c.float() - ref).item()
    return num / den if den > 0 else num


def _sync(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.synchronize(t.device)


def _run(fn: KernelFn, a, b, c) -> None:
    fn(a, b, c)
    _sync(c)


# ---- the checks -------------------------------------------------------------------------------------
def _error_result(name: str, c: torch.Tensor, ref: torch.Tensor, what: str) -> CheckResult:
    """Non-finite outputs counted first: their relative error would be NaN, a value no store keeps
    (2026-12-04, H200: one in the guard check stopped a search)."""
    bad = (~torch.isfinite(c)).sum().item()
    if bad:
        return CheckResult(name, False, float(bad), 0, f"non-finite outputs of {c.numel()}")
    err = rel_error(c, ref)
    return CheckResult(name, err <= REL_TOL, err, REL_TOL, what)


def _check_random(fn, p, dev, gen, name="random", c=None) -> CheckResult:
    a, b = make_inputs(p, dev, gen)
    if c is None:
        c = torch.empty(p.M, p.N, dtype=torch.float16, device=dev)
    _run(fn, a, b, c)
    return _error_result(name, c, reference(a, b, p.layout), "relative error")


def _check_exact(fn, p, dev, gen) -> CheckResult:
    a, b = make_inputs(p, dev, gen, kind="binary")
    c = torch.empty(p.M, p.N, dtype=torch.float16, device=dev)
    _run(fn, a, b, c)
    ref = reference(a, b, p.layout)
    mask = ref <= EXACT_LIMIT
    wrong = ((c.float() != ref) & mask).sum().item()
    return CheckResult("exact", wrong == 0, float(wrong), 0, f"entries differ of {int(mask.sum().item())} exact")


def _check_poison(fn, p, dev, gen) -> CheckResult:
    a, b = make_inputs(p, dev, gen)
    c = torch.full((p.M, p.N), float("nan"), dtype=torch.float16, device=dev)
    _run(fn, a, b, c)
    left = torch.isnan(c).sum().item()
    return CheckResult("poison", left == 0, float(left), 0, f"unwritten (NaN) of {c.numel()}")


def _carve(shape, dev, gen, fill: torch.Tensor | None = None):
    """A contiguous `shape` view inside a buffer with GUARD random elements on each side."""
    n = shape[0] * shape[1]
    buf = torch.randn(n + 2 * GUARD, generator=gen, device=_gen_device(gen),
                      dtype=torch.float32).to(torch.float16).to(dev)
    view = buf[GUARD:GUARD + n].view(shape)
    if fill is not None:
        view.copy_(fill)
    return buf, view


def _check_guard(fn, p, dev, gen) -> CheckResult:
    a0, b0 = make_inputs(p, dev, gen)
    bufs, views = [], []
    for shp, fill in (((p.M, p.K), a0), (p.b_shape(), b0), ((p.M, p.N), None)):
        buf, view = _carve(shp, dev, gen, fill)
        bufs.append(buf)
        views.append(view)
    before = [buf.clone() for buf in bufs]
    _run(fn, *views)
    names = ("A", "B", "C")
    problems = []
    for i, (buf, old) in enumerate(zip(bufs, before)):
        ends = torch.cat([buf[:GUARD] != old[:GUARD], buf[-GUARD:] != old[-GUARD:]])
        # NaN guards compare unequal to themselves; guards are randn so none are NaN.
        if ends.any():
            problems.append(f"{names[i]} guard: {int(ends.sum().item())} elements changed")
    for i in (0, 1):
        if not torch.equal(bufs[i], before[i]):
            problems.append(f"{names[i]} input modified")
    if problems:
        return CheckResult("guard", False, float(len(problems)), 0, "; ".join(problems))
    return _error_result("guard", views[2], reference(a0, b0, p.layout), "guards intact; relative error")


def _check_fresh(fn, p, dev, gen) -> CheckResult:
    c = torch.empty(p.M, p.N, dtype=torch.float16, device=dev)
    a, b = make_inputs(p, dev, gen)
    _run(fn, a, b, c)
    return _check_random(fn, p, dev, gen, name="fresh", c=c)


def edge_problems(p: Problem, sizes: Iterable[int] = EDGE_SIZES, base: int = 256) -> list[Problem]:
    """One axis at a time set to each edge size, the other two at min(their size, base)."""
    out: dict[Problem, None] = {}
    mm, nn, kk = (min(x, base) for x in (p.M, p.N, p.K))
    for s in sizes:
        for q in (Problem(s, nn, kk, p.layout), Problem(mm, s, kk, p.layout), Problem(mm, nn, s, p.layout)):
            out.setdefault(q, None)
    return list(out)


def _check_edges(fn, p, dev, gen, sizes, supports) -> CheckResult:
    worst, tried, skipped = 0.0, 0, 0
    for q in edge_problems(p, sizes):
        if supports is not None and not supports(q):
            skipped += 1
            continue
        tried += 1
        r = _check_random(fn, q, dev, gen, name="edges")
        if not r.passed:
            r.detail = f"at {q}: {r.detail}"
            return r
        worst = max(worst, r.value or 0.0)
    note = f"worst relative error over {tried} edge shapes" + (f" ({skipped} not supported)" if skipped else "")
    return CheckResult("edges", True, worst, REL_TOL, note)


def check_kernel(fn: KernelFn, problem: Problem, device="cuda", *, seed: int = 0,
                 checks: Iterable[str] = CHECKS, edge_sizes: Iterable[int] = EDGE_SIZES,
                 supports: Callable[[Problem], bool] | None = None,
                 stop_on_fail: bool = True) -> CheckReport:
    """Run the checks; by default stop at the first failure (a failed kernel gets no more work).

    `supports(problem)` says which edge shapes the kernel claims (None: all). An exception from the
    kernel is a failed check with the exception as its reason.
    """
    where = torch.device(device)
    # Inputs are drawn on the kernel's device (a CUDA generator for CUDA): same distributions, no
    # host-side randn of large operands (seconds per check on big shapes) and no host-to-device copy.
    gen = (torch.Generator(device=where) if where.type == "cuda" else torch.Generator()).manual_seed(seed)
    report = CheckReport(problem.text)
    if supports is None:
        supports = getattr(fn, "supports", None)
    runners = {
        "random": lambda: _check_random(fn, problem, device, gen),
        "exact": lambda: _check_exact(fn, problem, device, gen),
        "poison": lambda: _check_poison(fn, problem, device, gen),
        "guard": lambda: _check_guard(fn, problem, device, gen),
        "fresh": lambda: _check_fresh(fn, problem, device, gen),
        "edges": lambda: _check_edges(fn, problem, device, gen, edge_sizes, supports),
    }
    for name in checks:
        if name not in runners:
            raise ValueError(f"unknown check {name!r}; checks are {CHECKS}")
        try:
            r = runners[name]()
        except Exception as e:  # a kernel that raises fails the check it was in
            r = CheckResult(name, False, None, None, f"raised {type(e).__name__}: {e}".splitlines()[0][:300])
        report.results.append(r)
        if not r.passed and stop_on_fail:
            break
    return report
