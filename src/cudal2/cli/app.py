"""The `cudal2` command line: check, compare, generate, registry, problems.

Each command lives in its own module (cli/<name>.py) and registers itself on the one typer app here;
heavy imports (torch, triton, the CUDA bindings) happen inside the commands, so `--help` is quick.
Errors a user can cause (a malformed shape or spec, no GPU) print one line and exit non-zero.
"""
from __future__ import annotations

import sys

import typer

from . import check, compare, generate, registry
from .errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Generate, check and compare half-precision GEMM kernels against cuBLAS.")


@app.callback()
def _root() -> None:
    """cudal2: RL-searched HGEMM kernels for Hopper, judged against cuBLAS by GPU time."""


for _mod in (check, compare, generate, registry):
    _mod.register(app)


def main() -> None:
    from ..problems import ProblemError
    from ..spec import SpecError
    try:
        app()
    except (UserError, ProblemError, SpecError) as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
