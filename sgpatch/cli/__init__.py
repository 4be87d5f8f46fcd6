"""The command line: parse, call the core, render, map errors to exit codes (typer only).

``base.py`` holds the app, the error handler and the shared options; each command area is a module
that registers its commands on it; ``render.py`` holds every table.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import Any

# Each command area registers its commands on ``app`` when imported, once; this order is --help's.
AREAS = (
    "workspace",
    "core",
    "show",
    "edit",
    "importing",
    "build",
    "doctor",
    "interface",
    "preflight",
    "port",
    "watch",
)

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    if name == "app":
        return _app()
    raise AttributeError(name)


def _app() -> Any:
    """The typer app with every command registered (the declared ones from their parameters: params.py)."""
    from sgpatch.cli.base import app, register

    if not _REGISTERED:
        for area in AREAS:
            module = importlib.import_module(f"{__name__}.{area}")
            for command in getattr(module, "COMMANDS", ()):
                register(app, command)
        _REGISTERED.append(app)
    return app


_REGISTERED: list[Any] = []


def main(*, fast: bool = True) -> None:
    """Console entry point (``sgpatch``, ``python -m sgpatch``).

    ``verify`` and ``check-interface`` with an argv the fast command line understands run without typer
    (:mod:`sgpatch.cli.fast`); everything else, and every error and help text, goes through typer (all of
    it with ``fast=False``: tests/test_cli_fast.py compares the two)."""
    from sgpatch.cli.streams import open_std_streams

    open_std_streams()  # first: no pipe or file sgpatch opens may take a closed standard descriptor's number
    argv = sys.argv
    if argv[1:2] == ["port"]:  # what it will ask first, started before the imports and typer (cli.early)
        from sgpatch.cli.early import start_early

        start_early(argv[1:])
    from sgpatch.cli.common import _err
    from sgpatch.cli.fast import parse
    from sgpatch.errors import EXIT_INTERRUPTED

    try:
        parsed = parse(argv[1:], os.environ) if fast else None
        if parsed is None:
            typer_main(argv)
        else:
            from sgpatch.cli.common import run_command

            command, kwargs = parsed
            sys.exit(run_command(command.func(), kwargs))
    except KeyboardInterrupt:
        _err("sgpatch: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        # The command is done: the interpreter's last collection at exit need not walk what it left
        # (after a full interface check, hundreds of thousands of objects: measured ~0.2 s).
        gc.freeze()


def typer_main(argv: list[str]) -> None:
    """``argv`` through typer (it exits).  Typer reads every registered command's signature on each run: it
    gets only the one invoked (``sgpatch --help`` and an unknown command get the whole app)."""
    from sgpatch.cli.base import one_command_app

    _app()
    one_command_app(argv[1] if len(argv) > 1 else "")()
