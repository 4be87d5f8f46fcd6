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

Each part is plain JSON; :class:`sgpatch.interface.loader.Loader` turns it into the check's types, and is
the one reader for a part just computed and for one read from the cache, so the two cannot differ.  A kept
part that does not have exactly the expected shape raises ``ValueError`` (or another error in
:data:`MALFORMED`) there, which the caller takes as a miss.  Guards are kept as source text and parsed
back (``ast.unparse`` round-trips).
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

BINDING_KINDS = frozenset({"class", "from", "import", "alias", "other"})
MEMBER_KINDS = frozenset({"method", "class", "attribute"})
ACCESS_KINDS = frozenset({"call", "attribute", "getattr"})


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
