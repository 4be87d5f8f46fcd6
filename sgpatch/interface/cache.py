"""A content-keyed cache of the interface report: a second check of the same sources parses nothing.

An entry lives in the user's cache directory (``$XDG_CACHE_HOME/sgpatch/interface/``), one file per
*slot*: the tree's label, the class references, algorithm and declared names of the stack's interface
table, where ``torch.nn.Module``'s members come from (and the content of that source), sgpatch's version
and the content of its interface checker.  The entry records every read the check made (the path and the
sha256 of the bytes found, or that the file was missing) and every directory listing it walked.  The check
is a function of those alone, so an entry is used only when re-reading each of those paths and re-listing
each of those directories gives the same answer; otherwise the check runs and the entry is rewritten.

Entries are JSON (never code), written atomically; one that cannot be read, parsed or understood is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.interface.model import ClassRef, InterfaceReport
from sgpatch.tree import SourceTree

FORMAT = 1
MAX_ENTRY_BYTES = 64 << 20


def interface_cache_dir() -> Path:
    """Where interface entries live by default (under the user's cache directory)."""
    from sgpatch.cachedir import cache_root

    return cache_root() / "interface"


class RecordingTree:
    """A tree that remembers what was read from it (sha256 or missing) and what was listed."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.reads: dict[str, str | None] = {}
        self.lists: dict[str, list[str]] = {}

    @property
    def label(self) -> str:
        return self.tree.label

    def read(self, path: str) -> bytes | None:
        data = self.tree.read(path)
        self.reads[path] = None if data is None else hashlib.sha256(data).hexdigest()
        return data

    def list(self, prefix: str) -> list[str]:
        found = self.tree.list(prefix)
        self.lists[prefix] = list(found)
        return found


@dataclass(frozen=True, slots=True)
class Lookup:
    """The report, and whether it came from the cache."""

    report: InterfaceReport
    hit: bool


def checker_digest() -> str:
    """sgpatch's version and the content of the checker's own sources: a changed checker is a new slot."""
    import sgpatch

    h = hashlib.sha256(sgpatch.__version__.encode())
    here = Path(__file__).resolve().parent
    for src in sorted(here.glob("*.py")):
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    for extra in ("tree.py", "pyast.py"):
        path = here.parent / extra
        if path.is_file():
            h.update(extra.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def slot_key(tree: SourceTree, kwargs: Mapping[str, Any], externals_id: str) -> dict[str, Any]:
    """Everything besides the tree's content that the report depends on, as plain data."""

    def plain(value: Any) -> Any:
        if isinstance(value, ClassRef):
            return str(value)
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        return value

    return {
        "format": FORMAT,
        "checker": checker_digest(),
        "tree": tree.label,
        "args": {k: plain(v) for k, v in sorted(kwargs.items()) if k != "externals"},
        "externals": externals_id,
    }


def _slot_path(cache_dir: Path, key: Mapping[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return cache_dir / f"{digest}.json"


def _load(path: Path, key: Mapping[str, Any], tree: SourceTree) -> InterfaceReport | None:
    """The entry's report if the entry is whole, is for this slot, and every recorded input is unchanged."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_ENTRY_BYTES + 1)
        if len(raw) > MAX_ENTRY_BYTES:
            return None
        entry = json.loads(raw)
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        reads, lists = entry["reads"], entry["lists"]
        if not isinstance(reads, dict) or not isinstance(lists, dict):
            return None
        for prefix, listed in lists.items():
            if tree.list(prefix) != listed:
                return None
        for rel, digest in reads.items():
            data = tree.read(rel)
            if (None if data is None else hashlib.sha256(data).hexdigest()) != digest:
                return None
        return report_from_dict(entry["report"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # missing, unreadable, truncated or foreign: a miss, rewritten below


def _store(path: Path, key: Mapping[str, Any], recorded: RecordingTree, report: InterfaceReport) -> None:
    from sgpatch.atomic import write_atomic

    entry = {"key": key, "reads": recorded.reads, "lists": recorded.lists, "report": report.as_dict()}
    with contextlib.suppress(OSError):  # a read-only or full cache directory costs speed, never the answer
        write_atomic(path, json.dumps(entry, sort_keys=True).encode())


def check_interface_cached(tree: SourceTree, *, cache_dir: Path | None, **kwargs: Any) -> Lookup:
    """:func:`sgpatch.interface.check_interface` through the cache in ``cache_dir`` (``None``: no cache)."""
    from sgpatch.interface.external import ExternalBases

    if cache_dir is None:
        return Lookup(_check(tree, kwargs), False)
    externals = kwargs.get("externals") or ExternalBases()
    kwargs = {**kwargs, "externals": externals}
    key = slot_key(tree, kwargs, externals.identity())
    path = _slot_path(cache_dir, key)
    found = _load(path, key, tree)
    if found is not None:
        return Lookup(found, True)
    recorded = RecordingTree(tree)
    report = _check(recorded, kwargs)
    _store(path, key, recorded, report)
    return Lookup(report, False)


def _check(tree: SourceTree, kwargs: Mapping[str, Any]) -> InterfaceReport:
    from sgpatch.interface.check import check_interface  # the checker is loaded only when it runs

    return check_interface(tree, **kwargs)


# ------------------------------------------------------------------------ the report from its JSON


def report_from_dict(data: Mapping[str, Any]) -> InterfaceReport:
    """The :class:`InterfaceReport` whose ``as_dict()`` is ``data`` (the inverse; derived keys ignored)."""
    return _build(InterfaceReport, data)  # type: ignore[no-any-return]


_HINTS: dict[type, dict[str, Any]] = {}


def _build(cls: Any, data: Any) -> Any:
    import dataclasses
    import typing

    from sgpatch.interface import model

    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls, vars(model))
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__}: expected an object")
    return cls(**{f.name: _value(hints[f.name], data[f.name]) for f in dataclasses.fields(cls)})


def _value(hint: Any, data: Any) -> Any:
    import dataclasses
    import types
    import typing

    origin = typing.get_origin(hint)
    if origin is types.UnionType or origin is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if data is None:
            return None
        return _value(args[0], data)
    if origin is tuple:
        if not isinstance(data, Sequence) or isinstance(data, str):
            raise TypeError("expected a list")
        inner = typing.get_args(hint)[0]
        return tuple(_value(inner, d) for d in data)
    if dataclasses.is_dataclass(hint):
        return _build(hint, data)
    if hint in (str, int, bool) and isinstance(data, hint) and (hint is bool or not isinstance(data, bool)):
        return data
    raise TypeError(f"expected {hint}, found {type(data).__name__}")
