"""The record of a port in progress (``.git/sgpatch-port.json`` in the new stack's checkout).

A port that stops for a person records there how to go on: the old and new
stacks, the kept patches' commits, the patch being resolved and what was
decided before it.  Each step that moves the checkout first records where it
is going (``phase``), so a kill at any point leaves a record that the next
``port --continue`` (or ``--abort``) finishes from, as ``apply``'s journal does:

``stopped``      waiting for the person: the checkout holds the conflict;
``stopping``     moving to a new stop (``head`` -> ``stop``, then index and HEAD to ``tip``);
``finishing``    moving to the new series (``head`` -> ``final``), then writing the new stack's files
                 (kept as blobs in the checkout: ``outputs``), then removing the record.

Written atomically (a temporary file, fsync, rename; never through a link).
"""

from __future__ import annotations

from pathlib import Path

from sgpatch.checkout.stop import record as stop_record
from sgpatch.checkout.stop.kinds import PORT, PortRecord
from sgpatch.checkout.stop.markers import reaches
from sgpatch.git.repo import Git

RECORD = PORT.file
STOP_REF = "refs/sgpatch/port-stop"  # keeps the stop commit (the conflict as it was left) reachable


def record_path(g: Git) -> Path:
    """Where the record lives; asking git runs its guard first (a checkout whose config names a program is
    refused before anything of it is read)."""
    return g.git_dir() / RECORD


def read_record(checkout: Path) -> PortRecord | None:
    """The record of the port in progress in ``checkout``, if any."""
    if not (checkout / ".git").exists():
        return None
    g = Git(checkout)
    if not g.is_repo():
        return None
    return load_record(g)


def load_record(g: Git) -> PortRecord | None:
    """The record, read once and every field checked (``stop.record``: the one reader and validator)."""
    return stop_record.load(g.git_dir(), PortRecord, g.root)


def write_record(g: Git, record: PortRecord) -> None:
    """Replace the record atomically and durably."""
    stop_record.write(g.git_dir(), record)


def clear_record(g: Git) -> None:
    stop_record.clear(g.git_dir(), PORT)


def made_here(g: Git, record: PortRecord) -> str | None:
    """Why ``record`` is not the record of a port that made this checkout, or None: its stop is a commit port
    wrote for its conflicted patch, on the commits of the kept patches, on the release's base."""
    stop, base = record.stop, record.base
    if g.rev_parse(f"{stop}^{{commit}}") is None or g.rev_parse(f"{base}^{{commit}}") is None:
        return "its stop and base are not commits of this checkout"
    if g.message(stop).strip() != f"sgpatch port: {record.conflict} stopped for a person":
        return f"{stop[:12]} is not a stop port made"
    limit = len(record.series) + 2
    if not reaches(g, stop, base, limit):
        return f"its stop {stop[:12]} is not on its base {base[:12]}"
    head = g.head()
    if head is None or not reaches(g, head, base, limit + 200):
        return f"HEAD is not on its base {base[:12]}"
    return None
