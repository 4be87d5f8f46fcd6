"""Progress lines for people: on a terminal one line as each long step starts; elsewhere (CI logs, ``--json``
runs, ``make wheel``) one line when a step has run for a second and one with its elapsed time when it ends, on
stderr, so a log shows what a long step is doing and a quick step (or a refusal) stays one clean line.
``SGPATCH_PROGRESS=0`` silences both; ``SGPATCH_PROGRESS_AFTER=SECONDS`` sets the second (0: every step)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from sgpatch.results import Progress

PROGRESS_ENV = "SGPATCH_PROGRESS"
AFTER_ENV = "SGPATCH_PROGRESS_AFTER"
AFTER_DEFAULT = 1.0


class StepLog:
    """A :data:`sgpatch.results.Progress` that times its steps: a step ends when the next one starts, or when
    the command ends (:meth:`close`).  The core announces its steps one after the other, never nested.

    A step's start line is written once it has run ``after`` seconds (a timer thread), and its end line only
    when its start line was written."""

    def __init__(
        self, write: Callable[[str], None], *, after: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._write = write
        self._after = after
        self._clock = clock
        self._lock = threading.Lock()
        self._step: tuple[str, float] | None = None
        self._shown = False
        self._timer: threading.Timer | None = None

    def __call__(self, message: str) -> None:
        self.close()
        with self._lock:
            self._step = (message, self._clock())
            self._shown = False
            if self._after <= 0:
                self._show(self._step)
                return
            step = self._step
            self._timer = threading.Timer(self._after, self._due, args=(step,))
            self._timer.daemon = True
            self._timer.start()

    def _due(self, step: tuple[str, float]) -> None:
        with self._lock:
            if self._step is step and not self._shown:
                self._show(step)

    def _show(self, step: tuple[str, float]) -> None:
        self._shown = True
        self._write(f"sgpatch: {step[0]} ...")

    def close(self, *, failed: bool = False) -> None:
        """End the current step: ``done in 1.2 s``, or with ``failed`` ``stopped after 1.2 s`` (nothing when
        its start line was never written)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._step is None:
                return
            (message, started), shown = self._step, self._shown
            self._step = None
            if not shown:
                return
            elapsed = self._clock() - started
            self._write(f"sgpatch: {message}: {'stopped after' if failed else 'done in'} {elapsed:.1f} s")


def _after() -> float:
    try:
        value = float(os.environ.get(AFTER_ENV, AFTER_DEFAULT))
    except ValueError:
        return AFTER_DEFAULT
    return value if 0 <= value < 86400 else AFTER_DEFAULT


_OPEN: list[StepLog] = []


def progress_for(write: Callable[[str], None]) -> Progress | None:
    """The progress callback for this run: None with ``SGPATCH_PROGRESS=0``; plain lines on a terminal
    (outside CI); else a :class:`StepLog`, closed by :func:`close_steps` when the command ends."""
    if os.environ.get(PROGRESS_ENV, "").strip() == "0":
        return None
    if sys.stderr.isatty() and not os.environ.get("CI"):
        return lambda message: write(f"sgpatch: {message}")
    log = StepLog(write, after=_after())
    _OPEN.append(log)
    return log


def close_steps(*, failed: bool = False) -> None:
    """End the steps still open (the command is over)."""
    while _OPEN:
        _OPEN.pop().close(failed=failed)
