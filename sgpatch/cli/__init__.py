"""The command line: parse, call the core, render, map errors to exit codes (typer only).

``app.py`` holds the app and the error handler; each command area is a module
that registers its commands on it; ``render.py`` holds every table.
"""

from __future__ import annotations

import gc
import importlib
import sys

from sgpatch.cli.app import _err, app, one_command_app
from sgpatch.errors import EXIT_INTERRUPTED

# Each command area registers its commands on ``app`` when imported, once, here; this order is --help's.
AREAS = ("core", "build", "doctor", "interface", "port")
for _area in AREAS:
    importlib.import_module(f"{__name__}.{_area}")

__all__ = ["app", "main"]


def main() -> None:
    """Console entry point (``sgpatch``, ``python -m sgpatch``)."""
    try:
        # typer reads every registered command's signature on each run: give it only the one invoked
        # (``sgpatch --help`` and an unknown command get the whole app).
        (one_command_app(sys.argv[1]) if len(sys.argv) > 1 else app)()
    except KeyboardInterrupt:
        _err("sgpatch: interrupted")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        # The command is done: the interpreter's last collection at exit need not walk what it left
        # (after a full interface check, hundreds of thousands of objects: measured ~0.2 s).
        gc.freeze()
