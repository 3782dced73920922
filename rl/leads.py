"""`cudal2 generate --lead-specs FILE`: specs a shape evaluates first, named per shape.

A line is `MxNxK:layout|spec text` (`#` starts a comment; several lines may name one shape, in
order). A shape's valid leads come before the `--seed-list` seeds and count toward its N, so the
budget is unchanged: `--seed-list cost:4` with one lead evaluates the lead and the cost model's 3
best. What they are for: a spec measured as the best elsewhere is the likeliest best here, e.g. the
other layout's winner of the same M, N, K (bench/search_order.py writes such a file from the
registry: on the H200 sweeps the nt-best spec was within 2% of the nn-best on 480 of 539 shapes).

A lead the validity rule refuses for its shape (another layout may differ) is dropped and counted;
lines for shapes the run does not visit are ignored. A malformed line is an error naming it.
"""
from __future__ import annotations

from pathlib import Path

from cudal2.problems import Problem, ProblemError
from cudal2.spec import KernelSpec, SpecError, is_valid


class LeadError(ValueError):
    pass


def read_leads(path: str | Path, layout: str | None = "nn", option: str = "--lead-specs"
               ) -> dict[str, list[KernelSpec]]:
    """{problem text: [spec, ...]} in file order, duplicates dropped. `layout`: the layout of a shape
    written without one (None: every line must name it, as bench/hopper_sweep.py --pairs asks);
    `option`: the command-line option the errors name."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise LeadError(f"{option} {path}: {e.strerror or e}") from None
    out: dict[str, list[KernelSpec]] = {}
    for i, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        shape, bar, text = line.partition("|")
        if not bar:
            raise LeadError(f"{option} {path}:{i}: expected 'MxNxK:layout|spec', got {line!r}")
        if layout is None and ":" not in shape:
            raise LeadError(f"{option} {path}:{i}: not 'MxNxK:layout|spec' (no layout): {line[:80]!r}")
        try:
            p = Problem.parse(shape.strip(), None if ":" in shape else layout)
            spec = KernelSpec.parse(text.strip())
        except (ProblemError, SpecError, ValueError) as e:
            raise LeadError(f"{option} {path}:{i}: {e}") from None
        specs = out.setdefault(p.text, [])
        if spec not in specs:
            specs.append(spec)
    return out


def valid_leads(leads: dict[str, list[KernelSpec]], problem: Problem, device, backends=None) -> tuple[list[KernelSpec], int]:
    """(the problem's leads the validity rule accepts, and in the run's backends; how many it dropped)."""
    keep, dropped = [], 0
    for s in leads.get(problem.text, ()):
        if (backends and s.backend not in backends) or not is_valid(s, problem, device):
            dropped += 1
        else:
            keep.append(s)
    return keep, dropped


def with_leads(lead: list[KernelSpec], seeds: list[KernelSpec], n: int) -> list[KernelSpec]:
    """The leads, then the seeds not among them, n in all (the leads alone if they are n or more)."""
    return (lead + [s for s in seeds if s not in lead])[:max(n, len(lead))]
