"""The standard streams made safe before anything else runs (the standard library only: a port starts pip's
``pip config list`` right after, before the command's imports)."""

from __future__ import annotations

import os
import sys


def open_std_streams() -> None:
    """Before anything else runs: a standard descriptor the caller closed (``2>&-``, ``>&-``) is opened on
    /dev/null, as git does, so no file sgpatch opens later takes its number and receives what was meant for
    the terminal, and no child inherits it as one; ``sys.stdout`` and ``sys.stderr`` exist (Python leaves
    them None for a closed descriptor); and what they cannot encode is written escaped, never an error."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # not the lowest free number: the descriptors below it are open
                os.dup2(null, fd)
                os.close(null)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False))  # noqa: SIM115
        elif hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
