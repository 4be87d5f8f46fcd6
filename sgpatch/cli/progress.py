"""Progress lines for people: on a terminal one line as each long step starts; elsewhere (CI logs, ``--json``
runs, ``make wheel``) one line when a step starts and one with its elapsed time when it ends, on stderr.
``SGPATCH_PROGRESS=0`` silences both."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from sgpatch.results import Progress

PROGRESS_ENV = "SGPATCH_PROGRESS"


class StepLog:
    """A :data:`sgpatch.results.Progress` that times its steps: a step ends when the next one starts, or when
    the command ends (:meth:`close`).  The core announces its steps one after the other, never nested."""

    def __init__(self, write: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self._write = write
        self._clock = clock
        self._step: tuple[str, float] | None = None

    def __call__(self, message: str) -> None:
        self.close()
        self._write(f"sgpatch: {message} ...")
        self._step = (message, self._clock())

    def close(self, *, failed: bool = False) -> None:
        """End the current step: ``done in 1.2 s``, or with ``failed`` ``stopped after 1.2 s``."""
        if self._step is None:
            return
        message, started = self._step
        self._step = None
        elapsed = self._clock() - started
        self._write(f"sgpatch: {message}: {'stopped after' if failed else 'done in'} {elapsed:.1f} s")


_OPEN: list[StepLog] = []


def progress_for(write: Callable[[str], None]) -> Progress | None:
    """The progress callback for this run: None with ``SGPATCH_PROGRESS=0``; plain lines on a terminal
    (outside CI); else a :class:`StepLog`, closed by :func:`close_steps` when the command ends."""
    if os.environ.get(PROGRESS_ENV, "").strip() == "0":
        return None
    if sys.stderr.isatty() and not os.environ.get("CI"):
        return lambda message: write(f"sgpatch: {message}")
    log = StepLog(write)
    _OPEN.append(log)
    return log


def close_steps(*, failed: bool = False) -> None:
    """End the steps still open (the command is over)."""
    while _OPEN:
        _OPEN.pop().close(failed=failed)
