"""What the probe answers, read as hostile data: every field checked by type, text shown with control
characters made visible, a malformed answer an environment failure (exit 3) naming the field."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name

from sgpatch.deployed.target import Target
from sgpatch.errors import EnvironmentFailure


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """A distribution's RECORD against its files on the target, hashed there."""

    present: bool
    paths: tuple[str, ...]
    modified: tuple[str, ...]  # rows whose file no longer has the recorded sha256
    missing: tuple[str, ...]  # rows whose file is gone
    unhashed: int  # rows without a hash (RECORD itself, .pyc files, INSTALLER, ...)


@dataclass(frozen=True, slots=True)
class InstalledDist:
    """One installed distribution as the probe found it."""

    name: str
    version: str
    location: str  # the site-packages directory holding its .dist-info
    dist_info: str | None
    package_root: str | None  # where its package imports from (differs for editable installs)
    shadowed: tuple[str, ...]  # other installs of the same name later on sys.path
    files: Mapping[str, bytes | None]  # requested files, relative to package_root
    meta: Mapping[str, str | None]  # requested .dist-info files
    record: RecordCheck | None
    tree: tuple[str, ...] | None = None  # every file of the package, relative to package_root, if asked


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The probe's answer: the interpreter and the requested distributions (None: not installed)."""

    target: Target
    executable: str
    python_version: str
    environment: Mapping[str, str]  # PEP 508 marker environment of the target
    dists: Mapping[str, InstalledDist | None]
    imported: tuple[str, ...]  # watched modules in the probe's sys.modules (must be empty)


class MalformedAnswer(EnvironmentFailure):
    """The probe's answer is not what sgpatch's probe sends: a broken or hostile target (exit 3)."""


def printable(text: str, limit: int = 300) -> str:
    """``text`` from the target as one safe line: control characters escaped, cut at ``limit``."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= limit else shown[:limit] + "…"


class BadField(Exception):
    """Where (a dotted path into the answer) and what is wrong; the session makes it a MalformedAnswer."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")


def field_of(doc: Any, key: str, where: str) -> Any:
    if not isinstance(doc, dict):
        raise BadField(where, f"expected an object, got {type(doc).__name__}")
    if key not in doc:
        raise BadField(f"{where}.{key}", "missing")
    return doc[key]


def text_field(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise BadField(where, f"expected a string, got {type(value).__name__}")
    if "\0" in value:
        raise BadField(where, "contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadField(where, "is not valid Unicode") from None
    return value


def opt_text_field(value: Any, where: str) -> str | None:
    return None if value is None else text_field(value, where)


def texts_field(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise BadField(where, f"expected a list, got {type(value).__name__}")
    return tuple(text_field(v, f"{where}[{i}]") for i, v in enumerate(value))


def object_field(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadField(where, f"expected an object, got {type(value).__name__}")
    return value


def blob_field(value: Any, where: str) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(text_field(value, where), validate=True)
    except ValueError:  # binascii.Error, and a string with characters outside ASCII
        raise BadField(where, "is not base64") from None


def count_field(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadField(where, f"expected a count, got {printable(repr(value), 40)}")
    return value


def record_field(value: Any, where: str) -> RecordCheck | None:
    if value is None:
        return None
    modified = field_of(value, "modified", where)
    if not isinstance(modified, list):
        raise BadField(f"{where}.modified", f"expected a list, got {type(modified).__name__}")
    present = field_of(value, "present", where)
    if not isinstance(present, bool):
        raise BadField(f"{where}.present", f"expected true or false, got {printable(repr(present), 40)}")
    record = RecordCheck(
        present=present,
        paths=texts_field(field_of(value, "paths", where), f"{where}.paths"),
        modified=tuple(
            text_field(field_of(m, "path", f"{where}.modified[{i}]"), f"{where}.modified[{i}].path")
            for i, m in enumerate(modified)
        ),
        missing=texts_field(field_of(value, "missing", where), f"{where}.missing"),
        unhashed=count_field(field_of(value, "unhashed", where), f"{where}.unhashed"),
    )
    _consistent_record(record, where)
    return record


def _consistent_record(record: RecordCheck, where: str) -> None:
    """What the probe's RECORD check cannot say of itself: a contradiction is a malformed answer, never a verdict."""
    listed = set(record.paths)
    rows = len(record.modified) + len(record.missing) + record.unhashed
    if not record.present and (record.paths or rows):
        raise BadField(where, "says there is no RECORD, yet lists its rows")
    if stray := next((p for p in (*record.modified, *record.missing) if p not in listed), None):
        raise BadField(where, f"{printable(stray, 80)} is modified or missing, yet not a row of RECORD")
    if both := set(record.modified) & set(record.missing):
        raise BadField(where, f"{printable(min(both), 80)} is both modified and missing")
    if rows > len(record.paths):
        raise BadField(where, f"{rows} rows modified, missing or unhashed, but RECORD has {len(record.paths)}")


def dist_field(doc: Any, where: str = "dist", asked: str | None = None) -> InstalledDist:
    """One distribution of an ``inspect`` answer, every field checked (``BadField`` naming the first wrong one);
    ``asked``: the name requested, which the answer's must be (as PEP 503 compares names)."""
    object_field(doc, where)
    files = object_field(doc.get("files") or {}, f"{where}.files")
    meta = object_field(doc.get("meta") or {}, f"{where}.meta")
    tree = doc.get("tree")
    dist = InstalledDist(
        name=text_field(field_of(doc, "name", where), f"{where}.name"),
        version=text_field(field_of(doc, "version", where), f"{where}.version"),
        location=text_field(field_of(doc, "location", where), f"{where}.location"),
        dist_info=opt_text_field(doc.get("dist_info"), f"{where}.dist_info"),
        package_root=opt_text_field(doc.get("package_root"), f"{where}.package_root"),
        shadowed=texts_field(doc.get("shadowed") or [], f"{where}.shadowed"),
        files={k: blob_field(v, f"{where}.files[{k!r}]") for k, v in files.items()},
        meta={k: opt_text_field(v, f"{where}.meta[{k!r}]") for k, v in meta.items()},
        record=record_field(doc.get("record"), f"{where}.record"),
        tree=texts_field(tree, f"{where}.tree") if tree is not None else None,
    )
    _consistent_dist(dist, where)
    if asked is not None and canonicalize_name(dist.name) != canonicalize_name(asked):
        raise BadField(f"{where}.name", f"{printable(dist.name, 80)}, but {asked} was asked for")
    return dist


def _consistent_dist(dist: InstalledDist, where: str) -> None:
    """An answer that contradicts itself is malformed (exit 3, the host an ``error``), never checked as if true:
    files read below an import root it says it has not, metadata without a ``.dist-info``, a file read yet not
    among the package's files."""
    read = [name for name, data in dist.files.items() if data is not None]
    if dist.package_root is None and (read or dist.tree):
        raise BadField(f"{where}.package_root", "null (no import root), yet files were read below it")
    if dist.dist_info is None and ((dist.record is not None and dist.record.present) or any(dist.meta.values())):
        raise BadField(f"{where}.dist_info", "null (no .dist-info), yet its RECORD or metadata was read")
    if dist.tree is not None and (stray := next((n for n in read if n not in set(dist.tree)), None)):
        raise BadField(f"{where}.files", f"{printable(stray, 80)} was read, yet is not among the package's files")


def imported_failure(imported: Sequence[str]) -> str | None:
    """The one verdict on watched modules loaded in the probe's process, for doctor and verify alike.

    The probe never imports sglang, torch, sgl_kernel or flashinfer; if its process
    had one loaded anyway (a ``.pth`` file or sitecustomize on the target, or a bug
    in sgpatch), code ran that the check promised not to run: the check fails.
    """
    if not imported:
        return None
    return (
        f"the probe's process had imported {', '.join(printable(m, 80) for m in imported)} on the target "
        "(sgpatch never imports them: a .pth file or sitecustomize there did, or a bug in sgpatch)"
    )
