"""Interface facts from plain data: the one reader of a part, just computed or read from the cache.

It turns a part into the check's types, and raises ``ValueError`` (or another error in
:data:`sgpatch.interface.facts.MALFORMED`) when a kept part has not exactly the expected shape: a miss,
never an error."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from sgpatch.interface.facts import (
    ACCESS_KINDS,
    BINDING_KINDS,
    MEMBER_KINDS,
    MODEL_ROLES,
    Binding,
    ClassFacts,
    EnumFacts,
    MethodFacts,
    ScanFacts,
)
from sgpatch.interface.sites import Deferred, FnKey, Given, Guard, Site


class Loader:
    """Reads parts (just computed, or kept) into the check's types; parses each guard's text once."""

    def __init__(self) -> None:
        self._exprs: dict[str, ast.expr] = {}

    def expr(self, text: Any) -> ast.expr:
        found = self._exprs.get(_str(text))
        if found is None:
            found = self._exprs[text] = ast.parse(text, mode="eval").body
        return found

    def module(self, doc: Any) -> dict[str, tuple[Binding, ...]]:
        _keys(doc, {"bindings"})
        out: dict[str, tuple[Binding, ...]] = {}
        for name, rows in _dict(doc["bindings"]).items():
            binds = []
            for row in _list(rows):
                kind, line, module, attr, typing_only, ref = _list(row, 6)
                if (
                    kind not in BINDING_KINDS
                    or type(line) is not int
                    or line < 0
                    or type(module) is not str
                    or type(attr) is not str
                    or type(typing_only) is not bool
                ):
                    raise TypeError("a binding of the wrong shape")
                cls, fn, alias = None, None, ""
                if kind == "class" and ref is not None:
                    cls = _int(ref)
                elif kind == "other" and ref is not None:
                    fl, fc = _list(ref, 2)
                    fn = (_int(fl), _int(fc))
                elif kind == "alias":
                    alias = _dotted(ref)
                elif ref is not None:
                    raise ValueError("a reference on a binding that has none")
                binds.append(Binding(kind, line, module, attr, cls, fn, alias, typing_only))
            out[_str(name)] = tuple(binds)
        return out

    def cls(self, doc: Any) -> ClassFacts | None:
        if doc is None:
            return None
        _keys(doc, {"name", "line", "bases", "members", "inits"})
        bases = tuple((_str(w), _dotted(d)) for w, d in (_list(r, 2) for r in _list(doc["bases"])))
        members: dict[str, tuple[str, int]] = {}
        for row in _list(doc["members"]):
            name, kind, line = _list(row, 3)
            members[_str(name)] = (_in(kind, MEMBER_KINDS), _int(line))
        inits = tuple(
            (_str(a), _dotted(d), _str(w), _int(n)) for a, d, w, n in (_list(r, 4) for r in _list(doc["inits"]))
        )
        return ClassFacts(_str(doc["name"]), _int(doc["line"]), bases, members, inits)

    def method(self, doc: Any) -> MethodFacts | None:
        if doc is None:
            return None
        _keys(doc, {"line", "calls"})
        calls = tuple((_str(a), _str(n), _int(line)) for a, n, line in (_list(r, 3) for r in _list(doc["calls"])))
        return MethodFacts(_int(doc["line"]), calls)

    def scan(self, doc: Any, path: str) -> ScanFacts:
        _keys(doc, {"guards", "sites", "assigned", "deferred", "followed", "capped"})
        table = []
        for row in _list(doc["guards"]):
            text, positive, by_raise = _list(row, 3)
            table.append(Guard(self.expr(text), _bool(positive), _bool(by_raise)))

        count = len(table)
        made: dict[tuple[Any, ...], tuple[Guard, ...]] = {}

        def guards(refs: Any) -> tuple[Guard, ...]:
            key = tuple(_list(refs))
            found = made.get(key)  # many uses and assignments stand under the same guards
            if found is None:
                if not all(type(i) is int and 0 <= i < count for i in key):
                    raise ValueError("a guard out of range")
                found = made[key] = tuple(table[i] for i in key)
            return found

        sites = []
        for row in _list(doc["sites"]):
            line, role, name, access, optional, refs = _list(row, 6)
            role, access = _in(role, MODEL_ROLES), _in(access, ACCESS_KINDS)
            sites.append(Site(path, _int(line), role, _str(name), access, _bool(optional), guards(refs), path))
        assigned = []
        for row in _list(doc["assigned"]):
            name, refs = _list(row, 2)
            assigned.append((_str(name), guards(refs)))
        deferred = []
        for row in _list(doc["deferred"]):
            dotted, args, refs, calls = _list(row, 4)
            given = []
            for arg in _list(args):
                key, starred, role, text = _list(arg, 4)
                expr = None if text is None else self.expr(text)
                if (role is not None or _bool(starred)) and expr is not None:
                    raise ValueError("an argument with a role or starred stands for no expression")
                given.append(
                    Given(
                        None if key is None else _str(key), _bool(starred), None if role is None else _str(role), expr
                    )
                )
            stack: tuple[FnKey, ...] = tuple((path, _int(a), _int(b)) for a, b in (_list(c, 2) for c in _list(calls)))
            deferred.append(Deferred(_dotted(dotted), tuple(given), guards(refs), stack))
        followed = _int(doc["followed"])
        return ScanFacts(tuple(sites), tuple(assigned), tuple(deferred), followed, _bool(doc["capped"]))

    def enum(self, doc: Any) -> EnumFacts | None:
        if doc is None:
            return None
        _keys(doc, {"members", "predicates", "workers"})
        members = tuple(_str(m) for m in _list(doc["members"]))
        predicates = {
            _str(n): frozenset(_in(m, frozenset(members)) for m in _list(held))
            for n, held in _dict(doc["predicates"]).items()
        }
        workers = {
            _in(m, frozenset(members)): tuple((_str(mod), _str(name)) for mod, name in (_list(r, 2) for r in _list(w)))
            for m, w in _dict(doc["workers"]).items()
        }
        if set(workers) != set(members):
            raise ValueError("workers for other members than the enum's")
        return EnumFacts(members, predicates, workers)


def nn_module_doc(members: Mapping[str, tuple[str, int]]) -> list[list[Any]]:
    return [[name, kind, line] for name, (kind, line) in members.items()]


def nn_module_members_from(doc: Any) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for row in _list(doc):
        name, kind, line = _list(row, 3)
        out[_str(name)] = (_in(kind, MEMBER_KINDS), _int(line))
    return out


# ------------------------------------------------------------------------------- shape checks


def _keys(doc: Any, keys: set[str]) -> None:
    if not isinstance(doc, dict) or set(doc) != keys:
        raise ValueError("not an object with the expected keys")


def _dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("expected an object")
    return value


def _list(value: Any, length: int | None = None) -> list[Any]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        raise TypeError("expected a list" + ("" if length is None else f" of {length}"))
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _int(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise TypeError("expected a count")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected true or false")
    return value


def _in(value: Any, allowed: frozenset[str]) -> str:
    if value not in allowed:
        raise ValueError(f"unexpected {value!r}")
    return str(value)


def _dotted(value: Any) -> str:
    text = _str(value)
    if text and not all(part.isidentifier() for part in text.split(".")):
        raise ValueError(f"not a dotted name: {text!r}")
    return text
