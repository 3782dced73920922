"""How a command reports an error a user caused: one line on stderr and a non-zero exit.

Every command module imports these from here (not from app.py, which imports the commands)."""
from __future__ import annotations

import typer


class UserError(Exception):
    """An error whose message is the whole story: printed as one line, exit status 2."""


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
