"""What a stopped command records, typed: ``PortRecord`` and ``EditRecord`` and the parts they share.

A record is built by keyword, replaced (``dataclasses.replace``) as its command moves, written by
``record.write`` as the JSON object of ``as_json`` and read back by ``record.load`` (the one reader) through
``fields`` (the one validator) into an equal object.  The JSON keys are the ones sgpatch has always written,
so a record left by an earlier sgpatch is read the same way.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.config import Artifact
from sgpatch.errors import CheckoutError
from sgpatch.series.verdict import PortedPatch


@dataclass(frozen=True, slots=True)
class StopKind:
    """A command that stops for a person: its name, its record's file name, the command that gives it up, and
    its phases.  Every phase is one of three: it waits for a person (``waits``); it is a move of the checkout
    that any later command of the kind finishes from the record alone (the steps the command registers with
    ``recovery.Steps``); or it writes or restores the project's files and only one command finishes it
    (``owned``: the phase -> that command's arguments), which every other command names in its refusal."""

    name: str  # "port" or "edit"
    file: str
    phases: tuple[str, ...] = ()
    waits: tuple[str, ...] = ()
    owned: tuple[tuple[str, str], ...] = ()

    def abort(self, checkout: Path) -> str:
        """The command that gives the stopped command up, for a hint (it works on any record, even a bad one)."""
        return f"sgpatch {self.name} --abort --checkout {shlex.quote(str(checkout))}"

    def owner(self, phase: str) -> str | None:
        """The arguments of the one command that finishes ``phase`` (None: not such a phase)."""
        return dict(self.owned).get(phase)


PORT = StopKind(
    name="port",
    file="sgpatch-port.json",
    phases=("stopped", "stopping", "finishing"),
    waits=("stopped",),
    owned=(("finishing", "port --continue"),),  # writing the new stack's files and VERSIONS.toml
)
EDIT = StopKind(
    name="edit",
    file="sgpatch-edit.json",
    phases=("entering", "editing", "moving", "stopped", "finishing", "aborting"),
    waits=("editing", "stopped"),
    owned=(("finishing", "edit --continue"), ("aborting", "edit --abort")),  # writing or restoring the project
)
KINDS = (PORT, EDIT)


class RecordError(CheckoutError):
    """A record that is not a regular file, too large, not JSON, too deep, or not what sgpatch wrote (exit 2)."""


@dataclass(frozen=True, slots=True)
class SavedFile:
    """A project file as it was when the command started: its path (relative to the project) and its blob in
    the checkout's objects (None: it did not exist then)."""

    path: str
    blob: str | None


@dataclass(frozen=True, slots=True)
class Conflict:
    """A file a stop left conflicted: the first marker line and how many regions."""

    path: str
    line: int
    regions: int

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "regions": self.regions}


@dataclass(frozen=True, slots=True)
class PortRecord:
    """A port stopped for a person (``.git/sgpatch-port.json``; the phases are ``port.record``'s)."""

    phase: str  # stopped, stopping, finishing
    old_stack: str  # "from"
    stack: str
    version: str
    source: str
    commit: str | None
    base: str
    pypi_commit: str
    artifacts: tuple[Artifact, ...]
    series: Mapping[str, str]  # patch name -> sha256, in series order
    kept: tuple[str, ...]
    conflict: str
    decided: tuple[PortedPatch, ...]
    conflicted: PortedPatch
    strict: bool = False
    force: bool = False
    existed_empty: bool = False
    replaced: str | None = None
    head: str = ""  # set by the stop itself (``enter_stop``) before the record is first written
    tip: str = ""
    stop: str = ""
    rejects: tuple[str, ...] = ()
    moved: bool = False
    final: str | None = None  # finishing: the new series' commit, the files to write (path -> blob), the
    outputs: Mapping[str, str] | None = None  # sha256 of VERSIONS.toml before any was written
    config_before: str | None = None

    kind = PORT

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "phase": self.phase,
            "from": self.old_stack,
            "stack": self.stack,
            "version": self.version,
            "source": self.source,
            "commit": self.commit,
            "base": self.base,
            "pypi_commit": self.pypi_commit,
            "artifacts": [{"kind": a.kind, "filename": a.filename, "sha256": a.sha256} for a in self.artifacts],
            "series": dict(self.series),
            "kept": list(self.kept),
            "conflict": self.conflict,
            "decided": [p.record() for p in self.decided],
            "conflicted": self.conflicted.record(),
            "strict": self.strict,
            "force": self.force,
            "existed_empty": self.existed_empty,
            "replaced": self.replaced,
            "head": self.head,
            "tip": self.tip,
            "stop": self.stop,
            "rejects": list(self.rejects),
            "moved": self.moved,
        }
        if self.phase == "finishing":
            doc.update(final=self.final, outputs=dict(self.outputs or {}), config_before=self.config_before)
        return doc


@dataclass(frozen=True, slots=True)
class EditRecord:
    """An edit in progress (``.git/sgpatch-edit.json``; the phases are ``checkout.edit``'s)."""

    phase: str  # entering, editing, moving, stopped, finishing, aborting
    stack: str
    patch: str
    index: int
    base: str
    head: str
    commits: tuple[str, ...]
    series: Mapping[str, str]  # patch name -> sha256, in series order
    saved: tuple[SavedFile, ...]
    restore: bool = False
    taken: str | None = None  # moving and after: the person's work as a commit, the carried series' tip,
    tip: str | None = None  # where HEAD was, the stop (None: no conflict) and the conflicting patch
    moving_from: str | None = None
    stop: str | None = None
    conflict_index: int | None = None
    conflicts: tuple[Conflict, ...] = ()
    untracked: tuple[str, ...] = ()
    moved: bool = False

    kind = EDIT

    @property
    def saved_blobs(self) -> dict[str, str | None]:
        return {s.path: s.blob for s in self.saved}

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "phase": self.phase,
            "stack": self.stack,
            "patch": self.patch,
            "index": self.index,
            "base": self.base,
            "head": self.head,
            "commits": list(self.commits),
            "series": dict(self.series),
            "saved": self.saved_blobs,
            "restore": self.restore,
        }
        if self.taken is not None:
            doc.update(
                taken=self.taken,
                tip=self.tip,
                moving_from=self.moving_from,
                stop=self.stop,
                conflict_index=self.conflict_index,
                conflicts=[c.as_dict() for c in self.conflicts],
                untracked=list(self.untracked),
                moved=self.moved,
            )
        return doc


Record = PortRecord | EditRecord
