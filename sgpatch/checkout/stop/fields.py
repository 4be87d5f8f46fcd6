"""The one validator of stop records: each field checked against what the command itself writes, before any
field is used (a record lives in a checkout, and a checkout is input), and the record built from them as the
typed object of ``kinds`` (``parse``).  A field that is not what sgpatch writes is a ``RecordError`` naming
the file and the field, with the hint that gives the stopped command up."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sgpatch.checkout.stop.kinds import (
    EDIT,
    PORT,
    Conflict,
    EditRecord,
    PortRecord,
    Record,
    RecordError,
    SavedFile,
    StopKind,
)
from sgpatch.config import Artifact
from sgpatch.series.verdict import PortedPatch

Test = Callable[[Any], bool]

_OID = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_NAME = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,199}$")  # a stack, version or patch file name: no path
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def oid(v: object) -> bool:
    return isinstance(v, str) and bool(_OID.match(v))


def name(v: object) -> bool:
    return isinstance(v, str) and bool(_NAME.match(v))


def sha256(v: object) -> bool:
    return isinstance(v, str) and bool(_SHA256.match(v))


def flag(v: object) -> bool:
    return isinstance(v, bool)


def relpath(v: object) -> bool:
    """A relative path inside a directory: no absolute path, no ``..``, no empty or ``.`` component."""
    return (
        isinstance(v, str)
        and 0 < len(v) <= 4096
        and "\0" not in v
        and not v.startswith("/")
        and all(part not in ("", ".", "..") for part in v.split("/"))
    )


def one_of(*values: object) -> Test:
    return lambda v: v in values


def optional(test: Test) -> Test:
    return lambda v: v is None or test(v)


def list_of(test: Test) -> Test:
    return lambda v: isinstance(v, list) and all(test(x) for x in v)


def dict_of(key: Test, value: Test) -> Test:
    return lambda v: isinstance(v, dict) and all(key(k) and value(x) for k, x in v.items())


class Fields:
    """Checks the fields of one record; ``need`` returns the value once it passed."""

    def __init__(self, record: dict[str, Any], kind: StopKind, path: Path, checkout: Path) -> None:
        self.record, self.kind, self.path, self.checkout = record, kind, path, checkout

    def need(self, key: str, test: Test, default: Any = None) -> Any:
        """The value of ``key`` once it passed ``test`` (an absent key is ``default``: a key an earlier sgpatch
        did not write yet)."""
        value = self.record.get(key, default)
        try:
            ok = bool(test(value))
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError):  # a list where a name goes
            ok = False
        if not ok:
            self.fail(f"its {key!r} is not what sgpatch writes")
        return value

    def fail(self, why: str) -> None:
        raise RecordError(
            f"{self.path}: not a {self.kind.name} record sgpatch wrote: {why}",
            hint=f"'{self.kind.abort(self.checkout)}'",
        )


def parse(doc: dict[str, Any], kind: StopKind, path: Path, checkout: Path) -> Record:
    """The record of ``kind`` that ``doc`` (a JSON object ``record.load`` read) holds, every field checked."""
    f = Fields(doc, kind, path, checkout)
    return _port(f) if kind is PORT else _edit(f)


PORT_PHASES = PORT.phases
EDIT_PHASES = EDIT.phases


def _port(f: Fields) -> PortRecord:
    phase = f.need("phase", one_of(*PORT_PHASES))
    series = f.need("series", dict_of(name, sha256))
    finishing = phase == "finishing"
    try:
        decided = tuple(PortedPatch.from_record(d) for d in f.need("decided", list_of(_is_dict)))
        conflicted = PortedPatch.from_record(f.need("conflicted", _is_dict))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        f.fail("its 'decided' patches are not what sgpatch writes")
        raise  # unreachable: fail raises
    return PortRecord(
        phase=phase,
        old_stack=f.need("from", name),
        stack=f.need("stack", name),
        version=f.need("version", name),
        source=f.need("source", one_of("pypi", "git")),
        commit=f.need("commit", optional(oid)),
        base=f.need("base", oid),
        pypi_commit=f.need("pypi_commit", oid),
        artifacts=tuple(
            Artifact(kind=a["kind"], filename=a["filename"], sha256=a["sha256"])
            for a in f.need("artifacts", list_of(_artifact))
        ),
        series=series,
        kept=tuple(f.need("kept", list_of(lambda n: n in series))),
        conflict=f.need("conflict", lambda n: n in series),
        decided=decided,
        conflicted=conflicted,
        strict=bool(f.need("strict", optional(flag))),
        force=bool(f.need("force", optional(flag))),
        existed_empty=bool(f.need("existed_empty", optional(flag))),
        replaced=f.need("replaced", optional(lambda r: isinstance(r, str) and Path(r).is_absolute())),
        head=f.need("head", oid),
        tip=f.need("tip", oid),
        stop=f.need("stop", oid),
        rejects=tuple(f.need("rejects", list_of(lambda r: relpath(r) and r.endswith(".rej")))),
        moved=bool(f.need("moved", optional(flag))),
        final=f.need("final", oid) if finishing else None,
        outputs=f.need("outputs", dict_of(relpath, oid)) if finishing else None,
        config_before=f.need("config_before", sha256) if finishing else None,
    )


def _edit(f: Fields) -> EditRecord:
    phase = f.need("phase", one_of(*EDIT_PHASES))
    series = f.need("series", dict_of(name, sha256))
    patch = f.need("patch", lambda p: p in series)
    # the write-back's keys: written from ``moving`` on, and kept by an abort that follows
    carried = phase in ("moving", "stopped", "finishing") or f.record.get("taken") is not None
    return EditRecord(
        phase=phase,
        stack=f.need("stack", name),
        patch=patch,
        index=f.need("index", lambda i: type(i) is int and list(series).index(patch) == i),
        base=f.need("base", oid),
        head=f.need("head", oid),
        commits=tuple(f.need("commits", lambda c: list_of(oid)(c) and len(c) == len(series))),
        series=series,
        saved=tuple(SavedFile(path=p, blob=b) for p, b in f.need("saved", dict_of(relpath, optional(oid))).items()),
        restore=bool(f.need("restore", optional(flag))),
        taken=f.need("taken", oid) if carried else None,
        tip=f.need("tip", oid) if carried else None,
        moving_from=f.need("moving_from", oid) if carried else None,
        stop=f.need("stop", oid if phase == "stopped" else optional(oid)) if carried else None,
        conflict_index=f.need(
            "conflict_index", _index_in(series) if phase == "stopped" else optional(_index_in(series))
        )
        if carried
        else None,
        conflicts=tuple(
            Conflict(path=c["path"], line=c["line"], regions=c["regions"])
            for c in (f.need("conflicts", list_of(_conflict), []) if carried else [])
        ),
        untracked=tuple(f.need("untracked", list_of(lambda u: isinstance(u, str)), []) if carried else ()),
        moved=bool(f.need("moved", optional(flag))) if carried else False,
    )


def _is_dict(v: object) -> bool:
    return isinstance(v, dict)


def _index_in(series: dict[str, str]) -> Test:
    return lambda i: type(i) is int and 0 <= i < len(series)


def _artifact(a: object) -> bool:
    return (
        isinstance(a, dict)
        and a.get("kind") in ("sdist", "wheel")
        and name(a.get("filename"))
        and sha256(a.get("sha256"))
    )


def _conflict(c: object) -> bool:
    return (
        isinstance(c, dict)
        and isinstance(c.get("path"), str)
        and type(c.get("line")) is int
        and type(c.get("regions")) is int
    )


__all__ = ["EDIT", "EDIT_PHASES", "PORT", "PORT_PHASES", "Fields", "parse"]
