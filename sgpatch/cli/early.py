"""What a command will surely ask first, started as the process starts, before typer reads the argv.

``sgpatch port --to VERSION`` asks pip's index first, and pip's settings come from ``pip config list``, a Python
process of its own (about 0.2 s): started here it runs while sgpatch imports its modules and reads the series,
instead of after them (0.1 s less before the index answers, on a 2-core machine).  Only the start is early: the
command still decides whether it asks (``pipearly.ask_early``: the same command, its answer not kept past the
process, stopped at exit when no one asked).  The argv is read loosely, never to decide anything but this: a
command that will not ask, but looks as if it would, costs one ``pip config list`` stopped at exit.
"""

from __future__ import annotations

from collections.abc import Sequence

_ELSEWHERE = ("--continue", "--abort", "--resolve")  # a port that goes on, gives up or resolves asks no index


def start_early(args: Sequence[str]) -> None:
    """Start what the command in ``args`` (argv without the program) will ask first, if anything."""
    if len(args) < 2 or args[0] != "port":
        return
    options = {a.partition("=")[0] for a in args[1:] if a.startswith("--")}
    source = _value(args[1:], "--source")
    if "--to" in options and not options.intersection(_ELSEWHERE) and source in (None, "pypi"):
        from sgpatch.source.pipearly import ask_early  # the standard library only: pip starts before the rest

        ask_early()


def _value(args: Sequence[str], flag: str) -> str | None:
    """The last value given for ``flag`` (``--flag VALUE`` or ``--flag=VALUE``), None if none."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(f"{flag}="):
            found = arg.partition("=")[2]
    return found
