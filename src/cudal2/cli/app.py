"""The `cudal2` command line: check, compare, generate, train, registry, problems.

Each command lives in its own module (cli/<name>.py) and registers itself on the one typer app here;
heavy imports (torch, triton, the CUDA bindings) happen inside the commands, so `--help` is quick.
Errors a user can cause (a malformed shape or spec, no GPU) print one line and exit non-zero.
"""
from __future__ import annotations

import sys

import typer

from . import check, compare, generate, registry, train
from .errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Generate, check and compare half-precision GEMM kernels against cuBLAS.")


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__
        typer.echo(f"cudal2 {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """cudal2: RL-searched HGEMM kernels for Hopper, judged against cuBLAS by GPU time."""


for _mod in (check, compare, generate, registry, train):
    _mod.register(app)


def main() -> None:
    import os
    from ..problems import ProblemError
    from ..registry.entry import RegistryError
    from ..spec import SpecError
    try:
        app()
    except (UserError, ProblemError, SpecError, RegistryError) as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except Exception as e:      # a bug, not a user error: still one line; CUDAL2_DEBUG=1 shows the traceback
        if os.environ.get("CUDAL2_DEBUG"):
            raise
        first = (str(e).splitlines() or [""])[0]
        typer.echo(f"error: internal error, {type(e).__name__}: {first} (CUDAL2_DEBUG=1 shows the traceback)",
                   err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
