"""A content-keyed cache of the interface report: a second check of the same sources parses nothing.

An entry lives in the user's cache directory (``$XDG_CACHE_HOME/sgpatch/interface/``; the rules every
cached result follows are in :mod:`sgpatch.cache`), one file per
*slot*: the tree's label, the class references, algorithm and declared names of the stack's interface
table, where ``torch.nn.Module``'s members come from (and the content of that source), sgpatch's version
and the content of its interface checker.  The entry records every read the check made (the path and the
sha256 of the bytes found, or that the file was missing) and every directory listing it walked.  The check
is a function of those alone, so an entry is used only when re-reading each of those paths and re-listing
each of those directories gives the same answer; otherwise the check runs and the entry is rewritten.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.cache import code_digest, digest, read_entry, write_entry
from sgpatch.errors import SgpatchError
from sgpatch.interface.model import ClassRef, InterfaceReport
from sgpatch.source.tree import SourceTree

FORMAT = 1


def interface_cache_dir(cache: Path) -> Path:
    """Where interface entries live below a result cache (``cache.cache_root()``)."""
    return cache / "interface"


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
        "checker": code_digest(),
        "tree": tree.label,
        "args": {k: plain(v) for k, v in sorted(kwargs.items()) if k != "externals"},
        "externals": externals_id,
    }


def _slot_path(cache: Path, key: Mapping[str, Any]) -> Path:
    return interface_cache_dir(cache) / f"{digest(json.dumps(key, sort_keys=True))}.json"


def _load(path: Path, key: Mapping[str, Any], tree: SourceTree) -> InterfaceReport | None:
    """The entry's report if the entry is whole, is for this slot, and every recorded input is unchanged."""
    entry = read_entry(path)
    try:
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        reads, lists = entry["reads"], entry["lists"]
        if not isinstance(reads, dict) or not isinstance(lists, dict):
            return None
        for prefix, listed in lists.items():
            if tree.list(prefix) != listed:
                return None
        for rel, sha in reads.items():
            data = tree.read(rel)
            if (None if data is None else hashlib.sha256(data).hexdigest()) != sha:
                return None
        return report_from_dict(entry["report"])
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None  # an entry of another shape: a miss, rewritten by the caller
    except (SgpatchError, OSError):
        return None  # the tree refuses a read now (a link on the way): the full check says so, its own way


def _store(path: Path, key: Mapping[str, Any], recorded: RecordingTree, report: InterfaceReport) -> None:
    write_entry(path, {"key": key, "reads": recorded.reads, "lists": recorded.lists, "report": report.as_dict()})


def check_interface_cached(tree: SourceTree, *, cache: Path | None, **kwargs: Any) -> Lookup:
    """:func:`sgpatch.interface.check_interface` through the result cache ``cache`` (None: none)."""
    from sgpatch.interface.external import ExternalBases

    if cache is None:
        return Lookup(_check(tree, kwargs), False)
    externals = kwargs.get("externals") or ExternalBases()
    kwargs = {**kwargs, "externals": externals}
    key = slot_key(tree, kwargs, externals.identity())
    path = _slot_path(cache, key)
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
