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
from typing import Any

from sgpatch.checkout.inprogress import clear_record_file, read_record_file, write_record_file
from sgpatch.errors import CheckoutError
from sgpatch.git.repo import Git
from sgpatch.results import SCHEMA_VERSION

RECORD = "sgpatch-port.json"
STOP_REF = "refs/sgpatch/port-stop"  # keeps the stop commit (the conflict as it was left) reachable
MAX_RECORD = 64 << 20


def record_path(g: Git) -> Path:
    """Where the record lives; asking git runs its guard first (a checkout whose config names a program is
    refused before anything of it is read)."""
    return g.git_dir() / RECORD


def read_record(checkout: Path) -> dict[str, Any] | None:
    """The record of the port in progress in ``checkout``, if any."""
    if not (checkout / ".git").exists():
        return None
    g = Git(checkout)
    if not g.is_repo():
        return None
    return load_record(g)


def load_record(g: Git) -> dict[str, Any] | None:
    path = record_path(g)
    try:
        record = read_record_file(path, MAX_RECORD)
    except (OSError, ValueError) as exc:
        raise CheckoutError(
            f"{path}: unreadable port record: {exc}", hint=f"'sgpatch port --abort --checkout {g.root}' gives it up"
        ) from None
    if record is None:
        return None
    if not isinstance(record, dict) or record.get("schema_version") != SCHEMA_VERSION or "phase" not in record:
        raise CheckoutError(
            f"{path}: not a port record sgpatch wrote",
            hint=f"'sgpatch port --abort --checkout {g.root}' gives the port up",
        )
    return record


def write_record(g: Git, record: dict[str, Any]) -> None:
    """Replace the record atomically and durably."""
    write_record_file(record_path(g), record)


def clear_record(g: Git) -> None:
    clear_record_file(record_path(g))
