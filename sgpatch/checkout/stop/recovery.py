"""One recovery after a kill, for every command that stops for a person.

A stopped command moves its checkout in steps, each recorded first (the record's ``phase``), so a kill leaves
a record saying which step was under way.  The command registers its steps with the room (``Steps``: its
record type and, for each phase a kill may leave, the function that finishes it from the record); the next
command of either kind runs ``recover_stop`` before it acts, under the project and checkout locks:

1. what a killed port left beside the checkout (``clear_leftovers``, under the project lock, before the
   checkout is opened: a ``.port-*`` staging directory removed, a checkout a killed ``port --force`` or
   ``port --abort`` had moved aside with nothing in its place put back);
2. a move of the checkout the journal records, finished (``journal.recover``);
3. the record read (the one reader and validator) and each step the kill interrupted finished by the function
   its command registered, until the record rests in a phase that waits for a person, or in one that writes
   the project, which only its own command finishes (``StopKind.owned``: ``port --continue`` the new stack's
   files, ``edit --continue`` the edited series, ``edit --abort`` the files it saved); every other command
   names that command (``here.Stopped.next_step``).

Each thing done is said in the notes the command reports.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from sgpatch.checkout.journal import recover
from sgpatch.checkout.stop.kinds import Record
from sgpatch.checkout.stop.record import load
from sgpatch.git.repo import Git

R = TypeVar("R", bound=Record)
STAGING = ".port-"  # tempfile.mkdtemp(prefix=f".port-{name}-") beside the new checkout (port.run)
ASIDE = ".sgpatch-replaced"  # f".{name}.sgpatch-replaced": the checkout a --force port replaces


@dataclass(frozen=True, slots=True)
class Steps(Generic[R]):
    """What a command that stops registers with the room: its record type, and for each phase a kill may
    leave half done, the step that finishes it (from the record alone) and returns the record after it."""

    record: type[R]
    finish: Mapping[str, Callable[[Git, R], R]]
    doing: Mapping[str, str]  # a phase -> what its step does, in words ("moving the checkout to the stop")

    def __post_init__(self) -> None:
        """Every phase of the kind is accounted for: it waits for a person, one command owns it (it writes the
        project), or a step registered here finishes it — never two of these, never none."""
        kind = self.record.kind
        rest = set(kind.phases) - set(kind.waits) - {phase for phase, _ in kind.owned}
        if set(self.finish) != rest or set(self.doing) != rest:
            raise ValueError(f"the {kind.name} steps {sorted(self.finish)} are not its phases {sorted(rest)}")


@dataclass(frozen=True, slots=True)
class Recovered(Generic[R]):
    """The record after recovery (None: no stop here) and what was finished or cleaned up, in words."""

    record: R | None
    notes: tuple[str, ...] = ()


def recover_stop(g: Git, steps: Steps[R], *, finish: bool = True) -> Recovered[R]:
    """Steps 2 and 3 under the checkout lock: the journal's move finished, the record read, and (with
    ``finish``) each interrupted step finished (``finish_steps``).  Without ``finish`` the caller looks at the
    record first (an abort goes back instead; ``edit --continue`` refuses a changed series before moving)."""
    done = recover(g)
    found = Recovered(record=load(g.git_dir(), steps.record, g.root), notes=(done,) if done else ())
    if not finish or found.record is None:
        return found
    record, notes = finish_steps(g, steps, found.record)
    return Recovered(record=record, notes=(*found.notes, *notes))


def finish_steps(g: Git, steps: Steps[R], record: R) -> tuple[R, tuple[str, ...]]:
    """Each step a kill left half done in ``record`` finished by the function its command registered, until
    the record rests in a phase no step is registered for; what was finished, in words."""
    notes: list[str] = []
    while record.phase in steps.finish:
        phase = record.phase
        record = steps.finish[phase](g, record)
        what = steps.doing.get(phase, f"the step {phase!r}")
        notes.append(f"finished {what}, which a killed 'sgpatch {record.kind.name}' had left half done")
        if record.phase == phase:  # a step that does not move the record on would loop
            break
    return record, tuple(notes)


def aside_of(checkout: Path) -> Path:
    """Where a ``--force`` port keeps the checkout it replaces until the new one is finished."""
    real = checkout.resolve()
    return real.parent / f".{real.name}{ASIDE}"


def moved_aside(checkout: Path) -> Path | None:
    """Where a killed ``port --force`` or ``port --abort`` left ``checkout`` moved aside (None: it is not)."""
    if os.path.lexists(checkout):
        return None
    aside = aside_of(checkout)
    return aside if aside.is_dir() and not aside.is_symlink() else None


def put_back_hint(checkout: Path) -> str:
    """The command that puts a checkout moved aside back (``clear_leftovers``, run by every port and edit)."""
    return f"'sgpatch port --abort --checkout {shlex.quote(str(checkout))}' puts it back"


def hidden_checkouts(parent: Path) -> list[Path]:
    """The checkouts below ``parent`` that a killed ``port --force`` or ``port --abort`` left moved aside (the
    checkout itself missing): ``clear_leftovers`` of each puts it back."""
    if parent.is_symlink() or not parent.is_dir():
        return []
    found = []
    for entry in sorted(parent.iterdir()):
        name = entry.name
        if name.startswith(".") and name.endswith(ASIDE) and entry.is_dir() and not entry.is_symlink():
            target = parent / name[1 : -len(ASIDE)]
            if target.name and not os.path.lexists(target):
                found.append(target)
    return found


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
