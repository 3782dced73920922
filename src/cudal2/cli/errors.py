"""How a command reports an error a user caused: one line on stderr and a non-zero exit.

Every command module imports these from here (not from app.py, which imports the commands)."""
from __future__ import annotations

import typer


class UserError(Exception):
    """An error whose message is the whole story: printed as one line, exit status 2."""


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def load_jsons(paths, kind: str) -> list[dict]:
    """Each path's JSON document (gzipped or not), in order; a missing or unreadable one fails the
    command naming the file and what it should have been (`kind`, e.g. "cudal2 compare JSON")."""
    import json

    from ..report import load_json
    docs = []
    for path in paths:
        try:
            docs.append(load_json(path))
        except FileNotFoundError:
            fail(f"{path}: no such file", code=1)
        except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as e:
            fail(f"{path}: not a {kind} ({type(e).__name__}: {e})", code=1)
    return docs
