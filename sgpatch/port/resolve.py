"""``port --resolve suggested|upstream|patch [PATH...]``: write choices into a stopped port for review.

A port stopped for a person leaves, in each file it could not carry, diff3 conflicts (``stop``).  This
writes a choice into those files; the person reviews them (``git diff``) and runs ``port --continue``,
which checks the resolution as it checks any other.  Only files still as the stop left them are
touched (a file the person already edited is theirs); a file the release lacks (``.rej``) is left, unless
every one of its hunks is suggested ``take-upstream`` (``suggested``: its reject file is deleted).

``upstream``   every conflict takes the release's side: the conflicting hunks are dropped.
``patch``      every conflict takes the patch's side.
``suggested``  the hunks suggested ``take-upstream`` are dropped (the file's other hunks merged again,
               three-way, without them); every conflict left takes what ``combine.region_choice``
               suggests, if the file still parses and defines no name twice; the rest stays marked.  A file
               one of whose hunks had its suggestion withdrawn (``series.needed``) is left as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.atomic import write_atomic
from sgpatch.checkout.journal import lock_checkout
from sgpatch.checkout.state import open_checkout
from sgpatch.config import Config
from sgpatch.errors import CheckoutError, ConfigError
from sgpatch.git.batch import read_blobs
from sgpatch.git.diff import merge_file
from sgpatch.port.rebase import load_old
from sgpatch.port.record import load_record
from sgpatch.results import Progress
from sgpatch.series.combine import chooser
from sgpatch.series.conflicts import (
    NONE,
    TAKE_PATCH,
    TAKE_UPSTREAM,
    Region,
    Suggestion,
    regions_of,
    resolve_regions,
    sound,
)
from sgpatch.series.engine import HunkFailure, apply_file
from sgpatch.series.hunks import KEPT_HUNKS, FileVerdict, only
from sgpatch.series.patch import FilePatch

MODES = ("suggested", "upstream", "patch")


@dataclass(frozen=True, slots=True)
class ResolvedFile:
    path: str
    outcome: str  # resolved, partly, left, untouched (edited since the stop), gone (a reject file)
    resolved: int  # conflicts resolved
    left: int  # conflicts still marked
    dropped: tuple[int, ...] = ()  # hunks dropped as take-upstream (suggested)

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "outcome": self.outcome,
            "resolved": self.resolved,
            "left": self.left,
            "dropped_hunks": list(self.dropped),
        }


@dataclass(frozen=True, slots=True)
class ResolveResult:
    checkout: Path
    mode: str
    patch: str
    files: tuple[ResolvedFile, ...]

    @property
    def left(self) -> tuple[str, ...]:
        """The files a person must still open (markers or a reject file)."""
        return tuple(f.path for f in self.files if f.outcome in ("partly", "left", "untouched", "gone"))

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkout": str(self.checkout),
            "mode": self.mode,
            "patch": self.patch,
            "files": [f.as_dict() for f in self.files],
            "left": list(self.left),
        }


def resolve_port(
    config: Config, checkout: Path, mode: str, paths: tuple[str, ...] = (), *, progress: Progress | None = None
) -> ResolveResult:
    """Write ``mode``'s choices into the conflicting files (``paths``: only those) of the stopped port."""
    if mode not in MODES:
        raise ConfigError(f"--resolve {mode!r}: use one of {', '.join(MODES)}")
    g = open_checkout(checkout)
    with lock_checkout(g, command="port --resolve"):
        record = load_record(g)
        if record is None or record.phase != "stopped":
            raise CheckoutError(f"{checkout}: no port is stopped here", hint="'sgpatch port --to VERSION' starts one")
        stopped = record.conflicted
        old, _ = load_old(config, record.old_stack, progress=progress)
        names = [p.name for p in old.series.patches]
        if stopped.name not in names:
            raise CheckoutError(f"{checkout}: the series no longer has {stopped.name}", hint="'sgpatch port --abort'")
        k = names.index(stopped.name)
        patch = old.series.patches[k]
        conflicting = [f for f in stopped.files if f.state == "conflict"]
        wanted = set(paths)
        unknown = wanted - {f.path for f in conflicting}
        if unknown:
            raise ConfigError(f"{sorted(unknown)[0]}: not a conflicting file of {stopped.name}")
        chosen = [f for f in conflicting if not wanted or f.path in wanted]
        tip, stop = record.tip, record.stop
        release = read_blobs(g, tip, [f.path for f in chosen])
        at_stop = read_blobs(g, stop, [f.path for f in chosen] + [f"{f.path}.rej" for f in chosen if f.gone])
        sections = {fp.path: fp for fp in patch.files}
        labels = ("the release", "the old base", f"{patch.name}")

        def merge(current: bytes, base: bytes, other: bytes) -> tuple[bytes, int]:
            return merge_file(g, current, base, other, labels)

        out: list[ResolvedFile] = []
        for fv in chosen:
            full = g.root / fv.path
            new, left_at_stop = release.get(fv.path), at_stop.get(fv.path)
            before = old.states[k].get(fv.path)
            if fv.gone and f"{fv.path}.rej" not in record.rejects:
                out.append(ResolvedFile(fv.path, "resolved", len(fv.hunks), 0))  # settled by kept decisions (reuse)
                continue
            if fv.gone and mode == "suggested" and _all_upstream(fv):
                out.append(_drop_reject(g.root, fv, at_stop.get(f"{fv.path}.rej")))
                continue
            if fv.gone or new is None or before is None:
                out.append(ResolvedFile(fv.path, "gone", 0, len(fv.hunks)))
                continue
            if full.is_symlink() or not full.is_file() or full.read_bytes() != left_at_stop:
                out.append(ResolvedFile(fv.path, "untouched", 0, len(fv.regions)))
                continue
            if mode == "suggested" and any(h.held for h in fv.hunks):  # a suggestion withdrawn: for a person
                out.append(ResolvedFile(fv.path, "left", 0, len(fv.regions)))
                continue
            text, done, left, dropped = _resolve_file(mode, sections[fv.path], fv, before, new, left_at_stop, merge)
            if text != left_at_stop:
                mode_bits = os.stat(full).st_mode
                write_atomic(full, text)
                os.chmod(full, mode_bits & 0o7777)
            outcome = "resolved" if not left else "partly" if done or dropped else "left"
            out.append(ResolvedFile(fv.path, outcome, done, left, dropped))
    return ResolveResult(checkout, mode, stopped.name, tuple(out))


def _all_upstream(fv: FileVerdict) -> bool:
    """Whether every hunk of ``fv`` is a conflict suggested ``take-upstream``."""
    return bool(fv.hunks) and all(h.state == "conflict" and h.suggestion == TAKE_UPSTREAM for h in fv.hunks)


def _drop_reject(root: Path, fv: FileVerdict, at_stop: bytes | None) -> ResolvedFile:
    """A file the release lacks whose every hunk the release's files already hold: its reject file deleted, when
    it is still as the stop left it."""
    reject = root / f"{fv.path}.rej"
    if at_stop is None or reject.is_symlink() or not reject.is_file() or reject.read_bytes() != at_stop:
        return ResolvedFile(fv.path, "untouched", 0, len(fv.hunks))
    reject.unlink()
    return ResolvedFile(fv.path, "resolved", len(fv.hunks), 0, tuple(h.index for h in fv.hunks))


def _resolve_file(
    mode: str, fp: FilePatch, fv: FileVerdict, before: bytes, new: bytes, stopped: bytes, merge: Any
) -> tuple[bytes, int, int, tuple[int, ...]]:
    """(the file's text, conflicts resolved, conflicts left, hunks dropped) for one file."""
    pieces = regions_of(stopped)
    if pieces is None:
        return stopped, 0, len(fv.regions), ()
    if mode != "suggested":
        side = TAKE_UPSTREAM if mode == "upstream" else TAKE_PATCH

        def always(_: Region) -> Suggestion:
            return Suggestion(side, mode)

        text, done, left = resolve_regions(pieces, always)
        return text, done, left, ()
    drop = tuple(h.index for h in fv.hunks if h.state == "conflict" and h.suggestion == TAKE_UPSTREAM)
    text = stopped
    if drop:
        keep = [h for h, v in zip(fp.hunks, fv.hunks, strict=True) if v.state in KEPT_HUNKS and v.index not in drop]
        other = apply_file(before, only(fp, keep)) if keep else before
        if isinstance(other, HunkFailure):  # cannot be: a subset of a patch applies to its own base
            return stopped, 0, len(fv.regions), ()
        text = merge(new, before, other)[0] if keep else new
        pieces = regions_of(text)
        if pieces is None:
            return stopped, 0, len(fv.regions), ()
    resolved, done, left = resolve_regions(pieces, chooser(pieces))
    if done and not left and not sound(fp.path, new, resolved):  # the choices together break the file
        resolved, done, left = resolve_regions(pieces, lambda _: NONE)
    if drop and not left and not sound(fp.path, new, resolved):
        return stopped, 0, len(fv.regions), ()
    return resolved, done, left, drop
