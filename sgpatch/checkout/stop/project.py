"""One command that stops for a person (``port``, ``edit``, ``watch``) at a time per project.

The project lock is ``.sgpatch/project.lock`` (``lock.exclusive``: an ``flock`` the kernel drops when its owner
dies; a second command waits for it up to ``$SGPATCH_LOCK_TIMEOUT`` seconds, then refuses with one line).
Under it nothing else of this project is porting, so what a killed one left behind is cleaned up
(``recovery.clear_leftovers``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from sgpatch.errors import CheckoutError
from sgpatch.lock import Held, Notify, exclusive

LOCK = "project.lock"


def lock_project(
    root: Path, *, command: str, notify: Notify | None = None, create: bool = True
) -> AbstractContextManager[Held | None]:
    """The project's lock: one port, edit or watch at a time on the project at ``root``.  Without ``create``
    (a command that makes nothing else in ``.sgpatch/``), a project with no ``.sgpatch/`` is not locked: no
    port, edit or watch runs there, as each would have made it."""
    state = root / ".sgpatch"
    if not create and not os.path.lexists(state):
        return nullcontext()
    made = not os.path.lexists(state)
    try:
        state.mkdir(exist_ok=True)
    except OSError as exc:
        raise CheckoutError(f"{state}: cannot make sgpatch's directory: {exc.strerror}") from None
    if state.is_symlink() or not state.is_dir():
        raise CheckoutError(f"{state}: is not a directory; sgpatch keeps its checkouts and lock there")
    return _held(state, made=made, what=f"project {root}", command=command, notify=notify)


@contextlib.contextmanager
def _held(state: Path, *, made: bool, what: str, command: str, notify: Notify | None) -> Iterator[Held | None]:
    """The lock in ``state``; a ``state`` this command made is removed again if it is left empty (a refused
    port leaves no trace in the project)."""
    try:
        with exclusive(state / LOCK, what=what, command=command, notify=notify) as held:
            yield held
    finally:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(state)  # only when empty: a checkout or a port's work keeps it
