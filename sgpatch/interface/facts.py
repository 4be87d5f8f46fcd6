"""One source file's interface facts: what the check needs of a module, read from its syntax tree once.

Parsing a module and walking its tree is the expensive part of the check; everything after works on these
facts.  Each part is a function of one file's bytes (and its path) alone, so it is kept in the cache
(:mod:`sgpatch.cache`, kind ``interface-facts``) under a key of exactly those, and a later run that finds
the same bytes reads the part instead of parsing; the check itself runs every time, over the facts.

- ``module``: the top-level bindings (classes, functions, imports, aliases), by name, in source order.
- ``class``: one class's bases (as written and as a dotted name), members, and ``self.<x> = Cls(...)``
  assignments in ``__init__``.
- ``method``: in one method, the calls ``self.<attr>.<name>(...)`` that are not optional.
- ``scan``: every use on a model in the module (and in the module's own helpers it hands a model to), with
  the guards around it; every attribute assigned a true value, with its guards; and the calls into other
  modules' helpers, followed when the check runs (the callee is other bytes).
- ``enum``: ``SpeculativeAlgorithm`` (:mod:`sgpatch.interface.spec_enum`), for ``spec_info.py``.
- ``nn-module``: the members of ``class Module`` in an installed torch's ``module.py``.

Each part is plain JSON; :func:`load` turns it into the check's types, and is the one reader for a part
just computed and for one read from the cache, so the two cannot differ.  A kept part that does not have
exactly the expected shape raises ``ValueError`` (or another error in :data:`MALFORMED`) there, which the
caller takes as a miss.  Guards are kept as source text and parsed back (``ast.unparse`` round-trips).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any, NamedTuple

from sgpatch.interface.model import DRAFT, MODEL_EXECUTOR, RUNNER, SPECULATIVE, TARGET
from sgpatch.interface.sites import (
    DEFER,
    Collector,
    Defer,
    Deferred,
    FnKey,
    Given,
    Guard,
    Resolver,
    RoleOf,
    Site,
    executor_role,
    worker_role,
)
from sgpatch.interface.syntax import (
    AstBinding,
    Function,
    collect_bindings,
    dotted_name,
    inits_of,
    is_name,
    members_of,
    methods_of,
    resolvable_name,
)

KIND = "interface-facts"
FOLLOWED_WITHIN = (SPECULATIVE, MODEL_EXECUTOR)  # helpers handed a model are followed into these modules only
SCAN_ROLES: Mapping[str, RoleOf] = {"worker": worker_role, "executor": executor_role}
MODEL_ROLES = frozenset({TARGET, DRAFT, RUNNER})
# What a malformed kept part raises in load(): a miss, never an error.
MALFORMED = (ValueError, TypeError, LookupError, AttributeError, SyntaxError, RecursionError, MemoryError)

_BINDING_KINDS = frozenset({"class", "from", "import", "alias", "other"})
_MEMBER_KINDS = frozenset({"method", "class", "attribute"})
_ACCESS = frozenset({"call", "attribute", "getattr"})


# ------------------------------------------------------------------------------- the check's types


class Binding(NamedTuple):
    kind: str  # "class" | "from" | "import" | "alias" (Name = other.Name) | "other"
    line: int
    module: str = ""
    attr: str = ""
    cls: int | None = None  # a class: the line of its definition
    fn: tuple[int, int] | None = None  # a function: the line and column of its definition
    alias: str = ""  # an alias: the dotted name it stands for
    typing_only: bool = False


class ClassFacts(NamedTuple):
    name: str
    line: int
    bases: tuple[tuple[str, str], ...]  # as written, and the dotted name it resolves through
    members: dict[str, tuple[str, int]]  # name -> (kind, line)
    inits: tuple[tuple[str, str, str, int], ...]  # self.<attr> = <callee>(...): attr, dotted, as written, line


class MethodFacts(NamedTuple):
    line: int
    calls: tuple[tuple[str, str, int], ...]  # self.<attr>.<name>(...), not optional: attr, name, line


class ScanFacts(NamedTuple):
    sites: tuple[Site, ...]
    assigned: tuple[tuple[str, tuple[Guard, ...]], ...]
    deferred: tuple[Deferred, ...]
    followed: int
    capped: bool


class EnumFacts(NamedTuple):
    members: tuple[str, ...]
    predicates: dict[str, frozenset[str]]
    workers: dict[str, tuple[tuple[str, str], ...]]


# ------------------------------------------------------------------------------- from a syntax tree


class Parsed:
    """One parsed module, and its top-level bindings (collected once)."""

    def __init__(self, path: str, module: ast.Module) -> None:
        self.path, self.module = path, module
        self._bindings: dict[str, list[AstBinding]] | None = None

    @property
    def bindings(self) -> dict[str, list[AstBinding]]:
        if self._bindings is None:
            self._bindings = collect_bindings(self.path, self.module)
        return self._bindings

    def class_node(self, line: int) -> ast.ClassDef | None:
        """The class bound at the top level whose definition starts at ``line``."""
        for binds in self.bindings.values():
            for b in binds:
                if b.kind == "class" and b.node is not None and b.node.lineno == line:
                    return b.node
        return None

    def function_node(self, line: int, col: int) -> Function | None:
        """The function bound at the top level whose definition starts at ``line``, ``col``."""
        for binds in self.bindings.values():
            for b in binds:
                if b.fn is not None and (b.fn.lineno, b.fn.col_offset) == (line, col):
                    return b.fn
        return None


def module_part(parsed: Parsed) -> dict[str, Any]:
    bindings: dict[str, list[list[Any]]] = {}
    for name, binds in parsed.bindings.items():
        rows = bindings[name] = []
        for b in binds:
            ref: Any = None
            if b.kind == "class" and b.node is not None:
                ref = b.node.lineno
            elif b.kind == "other" and b.fn is not None:
                ref = [b.fn.lineno, b.fn.col_offset]
            elif b.kind == "alias" and b.value is not None:
                ref = resolvable_name(b.value)
            rows.append([b.kind, b.line, b.module, b.attr, b.typing_only, ref])
    return {"bindings": bindings}


def class_part(parsed: Parsed, line: int) -> dict[str, Any] | None:
    node = parsed.class_node(line)
    if node is None:
        return None
    return {
        "name": node.name,
        "line": node.lineno,
        "bases": [[ast.unparse(b), resolvable_name(b)] for b in node.bases],
        "members": [[name, kind, at] for name, (kind, at) in members_of(node).items()],
        "inits": [[attr, dotted_name(callee), ast.unparse(callee), at] for attr, callee, at in inits_of(node)],
    }


def method_part(parsed: Parsed, line: int, name: str) -> dict[str, Any] | None:
    """The first method ``name`` of the class at ``line``: its calls on ``self.<attr>`` for every attribute
    (the check keeps those on the attributes ``__init__`` assigns a delegate to)."""
    node = parsed.class_node(line)
    fn = next((f for f in methods_of(node) if f.name == name), None) if node else None
    if fn is None:
        return None

    def role_of(expr: ast.expr, names: dict[str, str]) -> str | None:
        if isinstance(expr, ast.Attribute) and is_name(expr.value, "self"):
            return "self." + expr.attr
        return None

    collector = Collector(parsed.path, role_of, _AnyRole())
    collector.body(fn.body, (), {})
    calls = [
        [s.role.removeprefix("self."), s.name, s.line] for s in collector.sites if s.access == "call" and not s.optional
    ]
    return {"line": fn.lineno, "calls": calls}


class _AnyRole:
    """Every role a method-body collector can give (``self.<attr>``): the check narrows them afterwards."""

    def __contains__(self, role: object) -> bool:
        return isinstance(role, str)


def scan_part(parsed: Parsed, role: str) -> dict[str, Any]:
    """The uses on a model in the module, its helpers followed; a call into another module is left to the check."""
    path = parsed.path
    collector = Collector(path, SCAN_ROLES[role], MODEL_ROLES, _local_resolver(path, parsed.bindings))
    collector.body(parsed.module.body, (), {})
    guards = _GuardTable()
    sites = []
    for s in collector.sites:
        assert s.path == path and s.origin == path  # only this module's helpers are followed here
        sites.append([s.line, s.role, s.name, s.access, s.optional, guards.refs(s.guards)])
    deferred = [
        [
            d.dotted,
            [[a.key, a.starred, a.role, None if a.expr is None else ast.unparse(a.expr)] for a in d.args],
            guards.refs(d.guards),
            [[line, col] for _, line, col in d.calls],
        ]
        for d in collector.deferred
    ]
    assigned = [[name, guards.refs(g)] for name, g in collector.assigned]
    return {
        "guards": guards.rows,
        "sites": sites,
        "assigned": assigned,
        "deferred": deferred,
        "followed": collector.followed,
        "capped": collector.capped,
    }


class _GuardTable:
    """Guards as rows of [test as source, positive, by_raise], each distinct one once."""

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []
        self._index: dict[tuple[str, bool, bool], int] = {}
        self._text: dict[int, str] = {}
        self._keep: list[ast.expr] = []  # ids stay unique while the table lives

    def refs(self, guards: tuple[Guard, ...]) -> list[int]:
        out = []
        for g in guards:
            text = self._text.get(id(g.test))
            if text is None:
                text = self._text[id(g.test)] = ast.unparse(g.test)
                self._keep.append(g.test)
            row = (text, g.positive, g.by_raise)
            if row not in self._index:
                self._index[row] = len(self.rows)
                self.rows.append(list(row))
            out.append(self._index[row])
        return out


def _local_resolver(path: str, bindings: dict[str, list[AstBinding]]) -> Resolver:
    """Follows a call into a function of this module; a call into another module's function (there, or
    further on) is left to the check: see :meth:`sgpatch.interface.modules.Modules.function`."""

    def resolve(at: str, dotted: str) -> tuple[str, Function] | Defer | None:
        head, _, rest = dotted.partition(".")
        binds = bindings.get(head) if head and at == path else None
        if not binds:
            return None
        b = binds[-1]
        if b.kind == "other" and b.fn is not None and not rest:
            return path, b.fn
        if b.kind not in ("from", "import") or (b.kind == "import" and not rest):
            return None
        module = f"{b.module}.{b.attr}" if b.kind == "from" and rest else b.module
        if rest:
            module = f"{module}.{rest}".rpartition(".")[0]
        if not ("python/" + module.replace(".", "/")).startswith(FOLLOWED_WITHIN):
            return None
        return DEFER

    return resolve


# ------------------------------------------------------------------------------- from plain data


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
                    kind not in _BINDING_KINDS
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
            members[_str(name)] = (_in(kind, _MEMBER_KINDS), _int(line))
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
            role, access = _in(role, MODEL_ROLES), _in(access, _ACCESS)
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
        out[_str(name)] = (_in(kind, _MEMBER_KINDS), _int(line))
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
