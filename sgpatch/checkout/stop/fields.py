"""The one validator of stop records: each field checked against what the command itself writes, before any
field is used (a record lives in a checkout, and a checkout is input).  A field that is not what sgpatch
writes is a ``RecordError`` naming the file and the field, with the hint that gives the stopped command up."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sgpatch.checkout.stop.record import RecordError, StopKind

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

    def need(self, key: str, test: Test) -> Any:
        value = self.record.get(key)
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
