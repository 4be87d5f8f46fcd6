"""``pip config list`` started as soon as a command knows it will ask pip's settings (``ask_early``), from a module
that imports nothing but the standard library: ``sgpatch.cli.early`` starts it for a port before the command's
own imports, so that pip's start-up (a Python process of its own, about 0.2 s) runs beside them on the other core.
``take`` hands the started process to the one reader of pip's settings (``sgpatch.source.pipconfig``), in the
process that started it and for the environment it was started in; one nobody took is stopped at exit.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from collections.abc import Container

KEYS = ("index-url", "extra-index-url", "cert", "proxy", "keyring-provider", "find-links", "no-index")
Environment = tuple[tuple[str, str], ...]
EARLY: dict[Environment, tuple[int, subprocess.Popen[bytes] | None]] = {}  # environment -> (pid, started)


def environment() -> Environment:
    """What decides the files pip reads: its variables, XDG's, the virtual environment and the home."""
    return tuple(
        sorted((k, v) for k, v in os.environ.items() if k.startswith(("PIP_", "XDG_", "VIRTUAL_ENV")) or k == "HOME")
    )


def from_environment() -> dict[str, str]:
    """The keys sgpatch reads, as the environment sets them (``PIP_INDEX_URL``, ...; "" where it does not)."""
    return {key: os.environ.get(f"PIP_{key.upper().replace('-', '_')}", "").strip() for key in KEYS}


def ask_early(asked: Container[Environment] = ()) -> None:
    """Start ``pip config list`` now, beside what the command does first; ``take`` gives it to the first reader,
    in this process and this environment.  The same command, started sooner: its answer is not kept past the
    process.  Nothing is started where ``asked`` has this environment or the environment sets every key."""
    key = environment()
    if key in asked or key in EARLY or all(from_environment().values()):
        return
    if not EARLY:
        atexit.register(_reap, os.getpid())
    EARLY[key] = (os.getpid(), start())


def take(key: Environment) -> subprocess.Popen[bytes] | None:
    """The ``pip config list`` started early for environment ``key`` by this process (a forked child's copy of the
    table is not its own), now the caller's; None if there is none."""
    pid, early = EARLY.pop(key, (0, None))
    return early if pid == os.getpid() else None


def start() -> subprocess.Popen[bytes] | None:
    """``pip config list`` of this interpreter's pip, started; None if it cannot be run."""
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "pip", "config", "list"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError:
        return None


def _reap(owner: int) -> None:
    """An early ``pip config list`` no one took is stopped at exit, not left behind (by the process that started
    it: a forked child's copy of the table is not its own)."""
    if os.getpid() != owner:
        return
    for pid, proc in EARLY.values():
        if pid == owner and proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    EARLY.clear()
