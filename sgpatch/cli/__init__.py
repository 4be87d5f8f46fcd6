"""The command line: parse, call the core, render, map errors to exit codes (typer only).

``app.py`` holds the app and the error handler; each command area is a module
that registers its commands on it; ``render.py`` holds every table.

``sgpatch COMMAND`` registers only COMMAND's area (typer reads the signature of every
registered command on each run); ``sgpatch --help``, an unknown command and
``from sgpatch.cli import app`` register them all.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from sgpatch.cli.app import _err
from sgpatch.errors import EXIT_INTERRUPTED

# Each command area registers its commands on ``app`` when imported, once; this order is --help's.
AREAS = ("core", "build", "doctor", "interface", "port")
# Which area registers each command (tests/test_cli_lazy.py checks it against the registered commands).
COMMANDS = {
    "stacks": "core",
    "fetch": "core",
    "apply": "core",
    "verify": "core",
    "show": "core",
    "build": "build",
    "doctor": "doctor",
    "check-interface": "interface",
    "port": "port",
    "export": "port",
}

__all__ = ["AREAS", "COMMANDS", "app", "main"]


def _register(areas: tuple[str, ...]) -> Any:
    for area in areas:
        importlib.import_module(f"{__name__}.{area}")
    from sgpatch.cli.app import app

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _register(AREAS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console entry point (``sgpatch``, ``python -m sgpatch``)."""
    area = COMMANDS.get(sys.argv[1]) if len(sys.argv) > 1 else None
    app = _register((area,) if area else AREAS)
    try:
        app()
    except KeyboardInterrupt:
        _err("sgpatch: interrupted")
        sys.exit(EXIT_INTERRUPTED)
