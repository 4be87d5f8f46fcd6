"""One command that stops for a person (``port``, ``edit``, ``watch``) at a time per project, and what a killed
one left behind.

The project lock is ``.sgpatch/project.lock`` (``lock.exclusive``: an ``flock`` the kernel drops when its owner
dies; a second command waits for it up to ``$SGPATCH_LOCK_TIMEOUT`` seconds, then refuses with one line).
Under it nothing else of this project is porting, so a ``.port-NAME-*`` directory is a killed port's work
(removed), and a checkout a killed ``port --force`` (or ``port --abort``) had moved aside with nothing in its
place is put back.  Each is said in the command's notes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from sgpatch.errors import CheckoutError
from sgpatch.lock import Held, Notify, exclusive

LOCK = "project.lock"
STAGING = ".port-"  # tempfile.mkdtemp(prefix=f".port-{name}-") beside the new checkout (port.run)
ASIDE = ".sgpatch-replaced"  # f".{name}.sgpatch-replaced": the checkout a --force port replaces


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


def aside_of(checkout: Path) -> Path:
    """Where a ``--force`` port keeps the checkout it replaces until the new one is finished."""
    real = checkout.resolve()
    return real.parent / f".{real.name}{ASIDE}"


def clear_leftovers(target: Path) -> tuple[str, ...]:
    """Finish or clean up what a killed port of the checkout ``target`` left beside it (under the project lock);
    what was done, in words."""
    parent, name = target.parent, target.name
    if parent.is_symlink() or not parent.is_dir():
        return ()
    notes = []
    for entry in sorted(parent.iterdir()):
        if entry.name.startswith(f"{STAGING}{name}-") and entry.is_dir() and not entry.is_symlink():
            size = _size(entry)
            shutil.rmtree(entry)
            notes.append(f"removed {entry}, left by a port that was killed ({size / 1e6:.0f} MB)")
    aside = aside_of(target)
    if aside.is_dir() and not aside.is_symlink() and not os.path.lexists(target):
        aside.rename(target)
        notes.append(f"put back {target}, which a killed 'port --force' or 'port --abort' had moved aside")
    return tuple(notes)


def _size(path: Path) -> int:
    total = 0
    for top, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, f)).st_size
    return total
