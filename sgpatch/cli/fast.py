"""The command line for ``verify`` and ``check-interface`` without typer: their start-up without typer's
and click's imports (about a third of a warm ``check-interface``).

It reads only an argv it understands completely and that typer would accept as it is: the command's name
first, then its declared parameters (:mod:`sgpatch.cli.params`, the declarations typer's command is made
from), ``--flag VALUE`` or ``--flag=VALUE`` for a path or a string, ``--flag`` for a switch, and the stack
as the one positional argument.  Everything else it declines, and typer parses the argv as always: help, an
unknown or repeated-list option, a number, ``--``, a value that is empty or starts with ``-``, a path typer
would refuse as unreadable, shell completion.  So every usage error and help text still comes from typer,
and a command it runs gets exactly the arguments typer would give it (tests/test_cli_fast.py holds that).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sgpatch.cli.params import FAST, Command, Param

COMPLETE_VAR = "_SGPATCH_COMPLETE"  # click's shell completion for a program called sgpatch


def parse(args: Sequence[str], environ: Mapping[str, str]) -> tuple[Command, dict[str, Any]] | None:
    """The command ``args`` (argv without the program) names and the keyword arguments typer would call it
    with; None when this command line declines (typer then parses ``args``)."""
    if not args or args[0] not in FAST or COMPLETE_VAR in environ:
        return None
    command = FAST[args[0]]
    flags = {p.flag: p for p in command.params if p.flag is not None}
    positional = [p for p in command.params if p.flag is None]
    given: dict[str, Any] = {}
    rest = list(args[1:])
    while rest:
        token = rest.pop(0)
        if not _plain(token):
            return None
        if not token.startswith("-"):
            if not positional or positional[0].name in given:
                return None
            given[positional[0].name] = token
            continue
        flag, eq, value = token.partition("=")
        param = flags.get(flag)
        if param is None or param.multiple or param.kind not in ("str", "path", "bool"):
            return None
        if param.kind == "bool":
            if eq:
                return None
            given[param.name] = True
            continue
        if not eq:
            if not rest:
                return None
            value = rest.pop(0)
        converted = _value(param, value)
        if converted is None:
            return None
        given[param.name] = converted  # given again: the last one counts, as in typer
    return command, {p.name: given.get(p.name, p.default) for p in command.params}


def _plain(token: str) -> bool:
    """Not empty, and valid text (an argument that is not UTF-8 reaches Python as lone surrogates)."""
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return token != ""


def _value(param: Param, value: str) -> Any:
    """``value`` as typer converts it for ``param``; None where this command line declines it."""
    if not _plain(value) or value.startswith("-"):
        return None
    if param.kind == "str":
        return value
    try:  # typer refuses a path that exists but cannot be read (its Path type, readable=True)
        os.stat(value)
    except OSError:
        return Path(value)
    return Path(value) if os.access(value, os.R_OK) else None
