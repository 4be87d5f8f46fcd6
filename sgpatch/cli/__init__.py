"""The command line: parse, call the core, render, map errors to exit codes (typer only).

``base.py`` holds the app, the error handler and the shared options; each command area is a module
that registers its commands on it; ``render.py`` holds every table.
"""

from __future__ import annotations

import gc
import importlib
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
    """The typer app with every command registered."""
    from sgpatch.cli.base import app

    for area in AREAS:
        importlib.import_module(f"{__name__}.{area}")
    return app


def main() -> None:
    """Console entry point (``sgpatch``, ``python -m sgpatch``)."""
    from sgpatch.cli.base import _err, one_command_app, open_std_streams
    from sgpatch.errors import EXIT_INTERRUPTED

    open_std_streams()
    _app()
    argv = sys.argv
    try:
        # typer reads every registered command's signature on each run: give it only the one invoked
        # (``sgpatch --help`` and an unknown command get the whole app).
        one_command_app(argv[1] if len(argv) > 1 else "")()
    except KeyboardInterrupt:
        _err("sgpatch: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        # The command is done: the interpreter's last collection at exit need not walk what it left
        # (after a full interface check, hundreds of thousands of objects: measured ~0.2 s).
        gc.freeze()
