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

from sgpatch.checkout.stop import record as stop_record
from sgpatch.checkout.stop.fields import Fields, dict_of, flag, list_of, name, oid, one_of, optional, relpath, sha256
from sgpatch.checkout.stop.markers import reaches
from sgpatch.checkout.stop.record import PORT
from sgpatch.git.repo import Git
from sgpatch.port.verdict import PortedPatch

RECORD = PORT.file
STOP_REF = "refs/sgpatch/port-stop"  # keeps the stop commit (the conflict as it was left) reachable


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
    """The record as a JSON object sgpatch wrote (``stop.record``: the one reader); its fields are checked by
    ``resume.checked`` before any is used."""
    return stop_record.load(g.git_dir(), PORT, g.root)


def write_record(g: Git, record: dict[str, Any]) -> None:
    """Replace the record atomically and durably."""
    stop_record.write(g.git_dir(), PORT, record)


def clear_record(g: Git) -> None:
    stop_record.clear(g.git_dir(), PORT)


def checked(record: dict[str, Any], g: Git) -> list[PortedPatch]:
    """The record's fields checked against what a port writes (``stop.fields``: the one validator) before any is
    used; the patches decided before the stop, and the stopped one last."""
    f = Fields(record, PORT, record_path(g), g.root)
    phase = f.need("phase", one_of("stopped", "stopping", "finishing"))
    for key in ("from", "stack", "version"):
        f.need(key, name)
    for key in ("base", "pypi_commit", "head", "tip", "stop"):
        f.need(key, oid)
    f.need("commit", optional(oid))
    if phase == "finishing":
        f.need("final", oid)
        f.need("outputs", dict_of(relpath, oid))
        f.need("config_before", sha256)
    f.need("artifacts", list_of(_artifact))
    f.need("source", one_of("pypi", "git"))
    series = f.need("series", dict_of(name, sha256))
    f.need("kept", list_of(lambda n: n in series))
    f.need("conflict", lambda n: n in series)
    f.need("rejects", list_of(lambda r: relpath(r) and r.endswith(".rej")))
    f.need("decided", list_of(lambda d: isinstance(d, dict)))
    f.need("conflicted", lambda d: isinstance(d, dict))
    for key in ("strict", "force", "existed_empty"):
        f.need(key, optional(flag))
    f.need("replaced", optional(lambda r: isinstance(r, str) and Path(r).is_absolute()))
    try:
        return [PortedPatch.from_record(d) for d in [*record["decided"], record["conflicted"]]]
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        f.fail("its 'decided' patches are not what sgpatch writes")
        raise  # unreachable: fail raises


def _artifact(a: object) -> bool:
    return (
        isinstance(a, dict)
        and a.get("kind") in ("sdist", "wheel")
        and name(a.get("filename"))
        and sha256(a.get("sha256"))
    )


def made_here(g: Git, record: dict[str, Any]) -> str | None:
    """Why ``record`` (well formed) is not the record of a port that made this checkout, or None: its stop is a
    commit port wrote for its conflicted patch, on the commits of the kept patches, on the release's base."""
    stop, base = str(record["stop"]), str(record["base"])
    if g.rev_parse(f"{stop}^{{commit}}") is None or g.rev_parse(f"{base}^{{commit}}") is None:
        return "its stop and base are not commits of this checkout"
    if g.message(stop).strip() != f"sgpatch port: {record['conflict']} stopped for a person":
        return f"{stop[:12]} is not a stop port made"
    limit = len(record["series"]) + 2
    if not reaches(g, stop, base, limit):
        return f"its stop {stop[:12]} is not on its base {base[:12]}"
    head = g.head()
    if head is None or not reaches(g, head, base, limit + 200):
        return f"HEAD is not on its base {base[:12]}"
    return None
