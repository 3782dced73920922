"""The `cudal2` command line (entry point `cudal2.cli:main`; also `python -m cudal2.cli`).

Owns: the typer app (app.py), one module per command (check.py, compare.py, generate.py, train.py,
registry.py: `registry` and `problems`), reading stores a user names (stores.py), and how a user
error is reported (errors.py).
May import: every other part of cudal2 (it is the top of the flow), lazily inside the commands so
that `--help` stays quick. Nothing in cudal2 imports the CLI; the commands import errors.py, never
app.py.
"""
from __future__ import annotations

from .app import app, main
from .errors import UserError, fail

__all__ = ["app", "main", "UserError", "fail"]
