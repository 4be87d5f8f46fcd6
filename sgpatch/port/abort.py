"""``port --abort``: give up a port stopped for a person (SPEC §9).

The project was never written, so giving up is removing the new stack's checkout (and putting back the one a
``--force`` port was replacing) — but only a checkout the port itself made: the record must be what a port
writes (the stop room's one reader and validator) and match the checkout (``record.made_here``: its stop is a
commit the port made, on its base).  A record that cannot be read or does not match is removed and the
directory left as it is, said so: ``--abort`` is the way out of every refusal, and never removes what it did
not create.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.checkout.journal import lock_checkout
from sgpatch.checkout.state import open_checkout
from sgpatch.checkout.stop.here import stopped_here
from sgpatch.checkout.stop.kinds import PORT, RecordError
from sgpatch.checkout.stop.project import lock_project
from sgpatch.checkout.stop.recovery import aside_of, clear_leftovers, recover_stop
from sgpatch.config import Config
from sgpatch.errors import CheckoutError, SgpatchError
from sgpatch.git.repo import Git
from sgpatch.git.worktree import delete_ref
from sgpatch.lock import pause
from sgpatch.port.record import STOP_REF, clear_record, made_here
from sgpatch.port.stop import STEPS
from sgpatch.results import SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class AbortResult:
    """What ``port --abort`` undid."""

    stack: str | None  # None: the record could not be trusted, the checkout was left
    checkout: Path
    restored: Path | None  # the checkout a --force port was replacing, put back
    removed: bool = True  # the checkout was removed (False: only the record)
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "aborted": self.stack,
            "checkout": str(self.checkout),
            "removed": self.removed,
            "restored": str(self.restored) if self.restored else None,
            "notes": list(self.notes),
        }


def abort_port(config: Config, checkout: Path) -> AbortResult:
    """Give up the port stopped in ``checkout`` (see the module docstring)."""
    with lock_project(config.root, command="port --abort"):
        notes = clear_leftovers(checkout)
        stopped = stopped_here(checkout)
        if notes and (stopped is None or stopped.kind is not PORT):  # a killed port's leftovers were all
            return AbortResult(None, checkout, None, removed=False, notes=notes)
        g = open_checkout(checkout)
        with lock_checkout(g, command="port --abort"):
            try:
                found = recover_stop(g, STEPS, finish=False)  # an abort goes back: no step is finished
                record, notes = found.record, (*notes, *found.notes)
                if record is None:
                    raise CheckoutError(f"{checkout}: no port in progress here")
                why = made_here(g, record)
            except RecordError as exc:
                return _give_up(g, exc.message, notes)
            if why is not None:
                return _give_up(g, f"{g.root}: the port record does not match the checkout: {why}", notes)
            if record.phase == "finishing":
                raise CheckoutError(
                    f"{checkout}: the port to {record.version} is writing the new stack",
                    hint="run 'sgpatch port --continue' to finish it; remove the stack afterwards if not wanted",
                )
            root = g.root.resolve()  # a link to the checkout is handled like the checkout: the link stays
            aside = aside_of(root)  # where a --force port put the checkout it replaces (never a path from the record)
            made = bool(record.replaced) and aside.is_dir() and not aside.is_symlink()
            replaced = aside if made else None
            shutil.rmtree(root)
            pause("port:abort-removed")  # a kill here: the next command puts the replaced checkout back
            if record.existed_empty:
                root.mkdir()
            if replaced is not None:
                replaced.rename(root)
    return AbortResult(record.stack, root, root if replaced is not None else None, notes=notes)


def _give_up(g: Git, why: str, notes: tuple[str, ...]) -> AbortResult:
    """Remove a record that cannot be trusted (and the port's stop ref); the checkout stays as it is."""
    clear_record(g)
    try:
        if g.rev_parse(STOP_REF) is not None:
            delete_ref(g, STOP_REF)
    except SgpatchError:
        pass
    said = (
        f"{why}; removed the record and left {g.root} as it is: remove it yourself if the port made it",
        *notes,
    )
    return AbortResult(None, g.root, None, removed=False, notes=said)
