"""``sgpatch edit PATCH``: put a patched checkout where one patch of the series can be changed (quilt's and
stgit's edit loop), and ``edit --abort``: go back exactly to before it.

``start_edit`` moves the checkout from the full series to the commit of that patch (one journalled
``move_checkout``); the person edits files there, committing or not.  ``writeback`` folds the edits into
the patch, carries the later patches over them and exports the series.  What an edit needs to go on or
be undone lives in its record, ``.git/sgpatch-edit.json`` (written atomically, never through a link),
with the phase it is in, so a kill at any point leaves something ``--continue`` or ``--abort`` finishes:

``entering``   moving the checkout from ``head`` (the full series) to the patch's commit;
``editing``    waiting for the person;
``moving``     taking the person's work as a commit and moving the checkout to the next stop or the end;
``stopped``    a later patch conflicts with the edit: the checkout holds the conflict, marked;
``finishing``  the checkout holds the new series; the patch files are being written;
``aborting``   the saved project files are being put back and the checkout moved back to ``head``.

The project files an edit may write (the series' patch files, ``series``, ``anchors.toml`` and
VERSIONS.toml) are saved as blobs in the checkout when it starts, so ``--abort`` restores them byte for byte.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgpatch.checkout.journal import lock_checkout, move_checkout, recover
from sgpatch.checkout.state import inspect, open_checkout
from sgpatch.checkout.stop import record as stop_record
from sgpatch.checkout.stop.fields import EDIT_PHASES
from sgpatch.checkout.stop.here import refuse_stopped, stopped_in
from sgpatch.checkout.stop.kinds import EDIT, Conflict, EditRecord, SavedFile
from sgpatch.checkout.stop.project import lock_project
from sgpatch.checkout.stop.recovery import clear_leftovers
from sgpatch.config import Config, Stack
from sgpatch.errors import CheckoutError
from sgpatch.git.repo import Git
from sgpatch.lock import pause
from sgpatch.results import SCHEMA_VERSION
from sgpatch.series.anchors import ANCHORS_FILE
from sgpatch.series.patch import SERIES_FILE, Series

RECORD = EDIT.file
HEAD_REF = "refs/sgpatch/edit-head"  # the full series the edit started from, kept reachable
STOP_REF = "refs/sgpatch/edit-stop"  # a conflict as it was left for the person
PHASES = EDIT_PHASES


# --------------------------------------------------------------------------- the record


def record_path(g: Git) -> Path:
    return g.git_dir() / RECORD


def load_record(g: Git) -> EditRecord | None:
    """The record of the edit in progress in the checkout, read once and every field checked (``stop.record``:
    the one reader and validator); None: none."""
    return stop_record.load(g.git_dir(), EditRecord, g.root)


def write_record(g: Git, record: EditRecord) -> None:
    """Replace the record atomically and durably (under the checkout lock)."""
    stop_record.write(g.git_dir(), record)


def clear_record(g: Git) -> None:
    stop_record.clear(g.git_dir(), EDIT)


def edit_in_progress(checkout: Path) -> str | None:
    """The patch an edit in progress in ``checkout`` is changing, if any (for ``export`` to route to it)."""
    if not (checkout / ".git").exists():
        return None
    g = Git(checkout)
    if not g.is_repo():
        return None
    record = load_record(g)
    return None if record is None else record.patch


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class EditResult:
    """What ``edit``, ``edit --continue`` (or ``export`` during an edit) and ``edit --abort`` did."""

    stack: str
    checkout: Path
    patch: str
    action: str  # "started", "written", "stopped", "aborted", "dropped" (a record not to be trusted, removed)
    head: str
    written: tuple[Path, ...] = ()
    bumped: tuple[str, ...] = ()  # patches whose Last-Update became today
    stopped: str | None = None  # the later patch that conflicts
    conflicts: tuple[Conflict, ...] = ()
    notes: tuple[str, ...] = field(default=())
    next_steps: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.action != "stopped"

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "stack": self.stack,
            "checkout": str(self.checkout),
            "patch": self.patch,
            "action": self.action,
            "ok": self.ok,
            "head": self.head,
            "written": [str(p) for p in self.written],
            "last_update_bumped": list(self.bumped),
            "stopped": self.stopped,
            "conflicts": [c.as_dict() for c in self.conflicts],
            "notes": list(self.notes),
            "next_steps": list(self.next_steps),
        }


# --------------------------------------------------------------------------- start


def find_patch(series: Series, wanted: str) -> int:
    """The index of ``wanted`` in the series: a number (``2``, ``0002``), the file name, or its stem."""
    names = [p.name for p in series.patches]
    if wanted in names:
        return names.index(wanted)
    found = [i for i, n in enumerate(names) if n == f"{wanted}.patch"]
    if not found and wanted.isascii() and wanted.isdigit():  # ASCII digits only: int() refuses '²'
        number = int(wanted)
        found = [
            i for i, n in enumerate(names) if (h := n.split("-", 1)[0]).isascii() and h.isdigit() and int(h) == number
        ]
    if len(found) != 1:
        shown = ", ".join(names) or "no patches"
        raise CheckoutError(f"{series.directory}: no patch {wanted!r} in the series ({shown})")
    return found[0]


def project_files(config: Config, stack: Stack, series: Series) -> list[Path]:
    """The project files writing an edit back may change (what ``--abort`` puts back)."""
    directory = series.directory
    files = [directory / p.name for p in series.patches]
    return [*files, directory / SERIES_FILE, directory / ANCHORS_FILE, config.path]


def start_edit(config: Config, stack: Stack, series: Series, checkout: Path, wanted: str) -> EditResult:
    """Move a patched, clean ``checkout`` to the commit of patch ``wanted`` and record the edit."""
    with lock_project(config.root, command=f"edit {wanted}"):
        beside = clear_leftovers(checkout)  # what a killed port left (the stop room's recovery, step 1)
        g = open_checkout(checkout)
        k = find_patch(series, wanted)
        patch = series.patches[k]
        with lock_checkout(g, command="edit"):
            recover(g)
            current = load_record(g)
            if current is not None:
                raise CheckoutError(
                    f"{g.root}: an edit of {current.patch} is in progress",
                    hint="'sgpatch export' writes it back, 'sgpatch edit --abort' gives it up",
                )
            refuse_stopped(stopped_in(g), f"sgpatch edit {wanted}")
            state = inspect(g, stack, series)
            if state.dirty:
                shown = ", ".join(e[3:] for e in state.dirty[:5]) + (" …" if len(state.dirty) > 5 else "")
                raise CheckoutError(
                    f"{g.root}: the work tree has uncommitted changes ({len(state.dirty)}: {shown})",
                    hint="commit or stash them first; an edit starts from the series exactly as applied",
                )
            if state.phase != "patched":
                why = "it is pristine" if state.phase == "pristine" else str(state.problem)
                raise CheckoutError(
                    f"{g.root}: an edit needs the checkout at the series of {stack.name}, and {why}",
                    hint="run 'sgpatch apply' first" if state.phase == "pristine" else "'sgpatch verify' says more",
                )
            assert state.base is not None
            saved = tuple(
                SavedFile(
                    path=os.path.relpath(path, config.root),
                    blob=g.hash_blob(path.read_bytes()) if path.is_file() and not path.is_symlink() else None,
                )
                for path in project_files(config, stack, series)
            )
            record = EditRecord(
                phase="entering",
                stack=stack.name,
                patch=patch.name,
                index=k,
                base=state.base,
                head=state.head,
                commits=tuple(state.series_commits),
                series={p.name: p.sha256 for p in series.patches},
                saved=saved,
            )
            g.set_ref(HEAD_REF, state.head)
            write_record(g, record)
            pause("edit:recorded")
            record = settle_entering(g, record)
        return started(g, record, beside)


def started(g: Git, record: EditRecord, notes: tuple[str, ...] = ()) -> EditResult:
    """What an edit that is ready for the person reports (``edit PATCH``, or the recovery of a killed one)."""
    later = len(record.series) - record.index - 1
    notes = (*notes, f"{later} later patch(es) are set aside until the edit is written back")
    steps = (
        f"edit the files in {g.root} (committing is optional: edits are folded into {record.patch})",
        "then run 'sgpatch export' (or 'sgpatch edit --continue') to write the patch back, the later "
        "patches carried over your change; 'sgpatch edit --abort' goes back to before the edit",
    )
    return EditResult(record.stack, g.root, record.patch, "started", str(g.head()), notes=notes, next_steps=steps)


def settle_entering(g: Git, record: EditRecord) -> EditRecord:
    """Finish the move from the full series to the patch's commit, from wherever a kill left it."""
    target = record.commits[record.index]
    head = g.head()
    if head == record.head and head != target:
        move_checkout(g, old=record.head, new=target, reason=f"sgpatch edit {record.patch}")
    elif head != target:
        raise CheckoutError(
            f"{g.root}: HEAD {str(head)[:12]} moved while the edit of {record.patch} was starting",
            hint="'sgpatch edit --abort' goes back to before the edit",
        )
    record = dataclasses.replace(record, phase="editing")
    write_record(g, record)
    return record
