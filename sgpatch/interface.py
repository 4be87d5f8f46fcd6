"""Static check of the interface a speculative algorithm uses on the target and draft models.

Nothing is imported: the tree's sources are parsed with :mod:`ast`, so the check needs no torch and runs
the same on a checkout, a wheel or an installed sglang, in about a second, long before a model would load.

*Required* names come from the tree's own call sites, never from a built-in list:

- ``SpeculativeAlgorithm.create_worker`` (``speculative/spec_info.py``) is evaluated for the algorithm,
  its ``is_*()`` predicates read from their bodies; that names the algorithm's worker classes.  Their
  modules, their bases' modules and the ``speculative/`` modules those import belong to the algorithm.
- There, a name used on ``<...>.target_worker.model_runner.model`` (also through local names) is a target
  requirement, and one used on a draft runner's ``.model`` (``draft_runner``, ``draft_model_runner``,
  ``mtp_model_runner(i)``) a draft requirement.  Branches the algorithm never takes are skipped
  (``if algo.is_eagle3(): ... else: <skipped for EAGLE3>``).
- In ``model_executor/`` a name used on the runner's model (``self.model``, ``model_runner.model``) is a
  requirement when its guards can hold for the algorithm but not without speculative decoding, directly
  (``algo.is_eagle3()``) or through a flag only ever set under such a guard
  (``self.eagle_use_aux_hidden_state``).  It is the target's unless guarded by ``is_draft_worker``.
- ``hasattr(m, "name")`` guards (not ``if not hasattr(...): raise``) and ``getattr(m, "name", default)``
  make a use optional: listed, never a gap.

*Provided* names are the class's methods and attributes (``self.x = ...`` included) with its bases
resolved through the tree's imports, stopping at bases outside the tree.  A provided method that calls
``self.<attr>.<name>(...)`` is checked through the class ``__init__`` assigns to ``self.<attr>``.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sgpatch.config import InterfaceSpec
from sgpatch.errors import ConfigError
from sgpatch.tree import SourceTree

SPECULATIVE = "python/sglang/srt/speculative/"
MODEL_EXECUTOR = "python/sglang/srt/model_executor/"
SPEC_INFO = SPECULATIVE + "spec_info.py"
ALGORITHM_ENUM = "SpeculativeAlgorithm"
NO_ALGORITHM = "NONE"
TARGET, DRAFT, RUNNER = "target", "draft", "runner"
_TARGET_WORKERS = frozenset({"target_worker", "_target_worker"})
_MAX_FORWARD_DEPTH = 4


# ------------------------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True)
class ClassRef:
    """A class named by its file in upstream's layout: ``python/sglang/srt/models/x.py:Cls``."""

    path: str
    name: str

    @classmethod
    def parse(cls, spec: str) -> ClassRef:
        path, sep, name = spec.strip().rpartition(":")
        if not sep or not path.endswith(".py") or path.startswith("/") or ".." in path.split("/"):
            raise ConfigError(f"bad class reference {spec!r}", hint="write 'python/sglang/.../module.py:ClassName'")
        if not name.isidentifier():
            raise ConfigError(f"bad class name in {spec!r}", hint="write 'python/sglang/.../module.py:ClassName'")
        return cls(path, name)

    def __str__(self) -> str:
        return f"{self.path}:{self.name}"


@dataclass(frozen=True, slots=True)
class Location:
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class CallSite:
    """One use of a name on a model; ``access`` is ``call``, ``attribute`` or ``getattr``."""

    path: str
    line: int
    access: str
    optional: bool

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class Base:
    """A base class as written, and what it is; ``location`` is ``None`` outside the tree."""

    written: str
    resolved: str
    location: Location | None


@dataclass(frozen=True, slots=True)
class ClassInfo:
    name: str
    location: Location
    bases: tuple[Base, ...]


@dataclass(frozen=True, slots=True)
class Delegate:
    """``self.<attr> = <written>(...)`` in an ``__init__``; ``resolved`` is ``None`` outside the tree."""

    attr: str
    written: str
    assigned_at: Location
    resolved: ClassInfo | None


@dataclass(frozen=True, slots=True)
class ClassResolution:
    """The class and its bases inside the tree (depth first), and the bases outside it."""

    ref: ClassRef
    chain: tuple[ClassInfo, ...]
    external_bases: tuple[str, ...]
    delegates: tuple[Delegate, ...]


@dataclass(frozen=True, slots=True)
class Member:
    class_name: str
    kind: str  # "method" | "attribute" | "class"
    location: Location


@dataclass(frozen=True, slots=True)
class Requirement:
    role: str
    name: str
    call_sites: tuple[CallSite, ...]
    declared: bool
    provided_by: Member | None

    @property
    def optional(self) -> bool:
        return not self.declared and all(site.optional for site in self.call_sites)


@dataclass(frozen=True, slots=True)
class Gap:
    role: str
    name: str
    class_name: str
    call_sites: tuple[CallSite, ...]
    fix: str


@dataclass(frozen=True, slots=True)
class DelegationGap:
    """``name`` is provided by ``method``, which forwards to ``self.<attr>.<missing>``; the delegate lacks it."""

    role: str
    name: str
    method: Location
    attr: str
    delegate: str
    missing: str
    forward_at: Location
    call_sites: tuple[CallSite, ...]


@dataclass(frozen=True, slots=True)
class StaleName:
    """A declared name no call site of the algorithm uses; ``used_by`` lists other algorithms using it."""

    role: str
    name: str
    used_by: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OtherUse:
    """Uses of a name by other algorithms only: not a requirement of this one."""

    role: str
    name: str
    algorithms: tuple[str, ...]
    call_sites: tuple[CallSite, ...]


@dataclass(frozen=True, slots=True)
class InterfaceReport:
    tree: str
    algorithm: str
    workers: tuple[ClassInfo, ...]
    target: ClassResolution
    draft: ClassResolution | None
    requirements: tuple[Requirement, ...]
    gaps: tuple[Gap, ...]
    delegation_gaps: tuple[DelegationGap, ...]
    stale: tuple[StaleName, ...]
    other_uses: tuple[OtherUse, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.gaps and not self.delegation_gaps

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (tuples become lists), with ``ok``."""
        out: dict[str, Any] = _plain(self)
        out["ok"] = self.ok
        return out


def _plain(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Requirement):
            out["optional"] = value.optional
        return out
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- modules and classes


@dataclass(frozen=True, slots=True)
class _Binding:
    kind: str  # "class" | "from" | "import" | "alias" (Name = other.Name) | "other"
    line: int
    module: str = ""
    attr: str = ""
    node: ast.ClassDef | None = None
    value: ast.expr | None = None
    typing_only: bool = False


@dataclass(eq=False)
class _Class:
    name: str
    path: str
    node: ast.ClassDef
    bases: list[tuple[str, _Class | str]]
    members: dict[str, tuple[str, int]]  # name -> (kind, line)
    inits: list[tuple[str, ast.expr, int]]  # self.<attr> = <callee>(...) in __init__


class _Modules:
    """The tree's modules, parsed on demand, with their top-level bindings and classes."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._data: dict[str, bytes | None] = {}
        self._asts: dict[str, ast.Module | None] = {}
        self._bindings: dict[str, dict[str, list[_Binding]]] = {}
        self._classes: dict[tuple[str, int], _Class] = {}

    def data(self, path: str) -> bytes | None:
        if path not in self._data:
            self._data[path] = self.tree.read(path)
        return self._data[path]

    def parse(self, path: str) -> ast.Module | None:
        if path not in self._asts:
            data = self.data(path)
            try:
                self._asts[path] = None if data is None else ast.parse(data, filename=path)
            except SyntaxError as exc:
                raise ConfigError(f"{path}:{exc.lineno}: cannot parse ({exc.msg}) in {self.tree.label}") from exc
        return self._asts[path]

    def path_of(self, dotted: str) -> str | None:
        base = "python/" + dotted.replace(".", "/")
        return next((p for p in (base + ".py", base + "/__init__.py") if self.data(p) is not None), None)

    def bindings(self, path: str) -> dict[str, list[_Binding]]:
        if path not in self._bindings:
            table: dict[str, list[_Binding]] = {}
            module = self.parse(path)
            self._collect(path, module.body if module else [], table, typing_only=False)
            self._bindings[path] = table
        return self._bindings[path]

    def _collect(self, path: str, body: list[ast.stmt], table: dict[str, list[_Binding]], *, typing_only: bool) -> None:
        for st in body:
            if isinstance(st, ast.ClassDef):
                table.setdefault(st.name, []).append(_Binding("class", st.lineno, node=st))
            elif isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
                table.setdefault(st.name, []).append(_Binding("other", st.lineno))
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                named = _dotted(st.value) != ""
                b = _Binding("alias", st.lineno, value=st.value) if named else _Binding("other", st.lineno)
                table.setdefault(st.targets[0].id, []).append(b)
            elif isinstance(st, ast.ImportFrom):
                module = _absolute_module(path, st)
                for alias in st.names:
                    b = _Binding("from", st.lineno, module, alias.name, typing_only=typing_only)
                    table.setdefault(alias.asname or alias.name, []).append(b)
            elif isinstance(st, ast.Import):
                for alias in st.names:
                    module = alias.name if alias.asname else alias.name.split(".")[0]
                    b = _Binding("import", st.lineno, module, typing_only=typing_only)
                    table.setdefault(alias.asname or module, []).append(b)
            elif isinstance(st, ast.If):
                inner = typing_only or _dotted(st.test).endswith("TYPE_CHECKING")
                self._collect(path, st.body, table, typing_only=inner)
                self._collect(path, st.orelse, table, typing_only=typing_only)
            elif isinstance(st, ast.Try):
                for block in (st.body, *(h.body for h in st.handlers), st.orelse, st.finalbody):
                    self._collect(path, block, table, typing_only=typing_only)

    def imports(self, path: str, prefix: str) -> set[str]:
        """The tree's modules below ``prefix`` that ``path`` imports at run time, at module level."""
        package = _dotted_path(prefix)
        out: set[str] = set()
        for b in (b for binds in self.bindings(path).values() for b in binds):
            if b.kind in ("from", "import") and not b.typing_only and b.module.startswith(package):
                found = (self.path_of(f"{b.module}.{b.attr}") if b.attr else None) or self.path_of(b.module)
                if found:
                    out.add(found)
        return out

    def resolve(self, path: str, name: str, before: int | None = None, depth: int = 0) -> _Class | str | None:
        """What ``name`` is in module ``path``: a class of the tree, a dotted name outside it, or ``None``."""
        table = self.bindings(path)
        binds = table.get(name)
        if depth > 16:
            return None
        if not binds:  # maybe through `from x import *`
            for star in table.get("*", []):
                inner = self.path_of(star.module)
                found = self.resolve(inner, name, None, depth + 1) if inner else None
                if found is not None:
                    return found
            return None
        b = ([b for b in binds if before is None or b.line < before] or binds)[-1]
        if b.kind == "class" and b.node is not None:
            return self.cls(path, b.node)
        if b.kind == "import":
            return b.module
        if b.kind == "alias" and b.value is not None:
            return self.resolve_expr(path, b.value, b.line, depth + 1)
        if b.kind != "from":
            return None
        inner = self.path_of(b.module)
        return self.resolve(inner, b.attr, None, depth + 1) if inner else f"{b.module}.{b.attr}"

    def resolve_expr(self, path: str, expr: ast.expr, before: int | None = None, depth: int = 0) -> _Class | str | None:
        if isinstance(expr, ast.Subscript):  # Generic[T], Base[...]
            return self.resolve_expr(path, expr.value, before, depth)
        head, _, rest = _dotted(expr).partition(".")
        found = self.resolve(path, head, before, depth) if head else None
        if not rest or not isinstance(found, str):
            return found
        module, _, last = f"{found}.{rest}".rpartition(".")
        inner = self.path_of(module)
        return self.resolve(inner, last) if inner else f"{module}.{last}"

    def find_class(self, ref: ClassRef) -> _Class:
        if self.parse(ref.path) is None:
            raise ConfigError(f"{ref.path}: no such file in {self.tree.label}", hint=f"looking for class {ref.name}")
        found = self.resolve(ref.path, ref.name)
        if not isinstance(found, _Class):
            raise ConfigError(f"{ref.path}: class {ref.name} not found in {self.tree.label}")
        return found

    def cls(self, path: str, node: ast.ClassDef) -> _Class:
        key = (path, node.lineno)
        if key not in self._classes:
            made = _Class(node.name, path, node, [], _members(node), list(_inits(node)))
            self._classes[key] = made  # registered before its bases: a cycle stops here
            for base in node.bases:
                resolved = self.resolve_expr(path, base, node.lineno)
                made.bases.append((ast.unparse(base), resolved if resolved is not None else ast.unparse(base)))
        return self._classes[key]


def _absolute_module(path: str, st: ast.ImportFrom) -> str:
    if not st.level:
        return st.module or ""
    package = _dotted_path(path).split(".")
    package = package[: len(package) - st.level + (1 if path.endswith("/__init__.py") else 0)]
    return ".".join([*package, *([st.module] if st.module else [])])


def _dotted_path(path: str) -> str:
    return path.removeprefix("python/").removesuffix(".py").removesuffix("/__init__").strip("/").replace("/", ".")


def _dotted(expr: ast.expr) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        head = _dotted(expr.value)
        return f"{head}.{expr.attr}" if head else ""
    return ""


def _is_name(expr: ast.expr, name: str) -> bool:
    return isinstance(expr, ast.Name) and expr.id == name


def _methods(node: ast.ClassDef) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    return (st for st in node.body if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef))


def _members(node: ast.ClassDef) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for st in node.body:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
            out.setdefault(st.name, ("method", st.lineno))
        elif isinstance(st, ast.ClassDef):
            out.setdefault(st.name, ("class", st.lineno))
        elif isinstance(st, ast.Assign | ast.AnnAssign):
            for target in st.targets if isinstance(st, ast.Assign) else [st.target]:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        out.setdefault(n.id, ("attribute", st.lineno))
    for fn in _methods(node):
        me = fn.args.args[0].arg if fn.args.args else ""
        for n in ast.walk(fn):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and _is_name(n.value, me):
                out.setdefault(n.attr, ("attribute", n.lineno))
    return out


def _inits(node: ast.ClassDef) -> Iterator[tuple[str, ast.expr, int]]:
    """``self.<attr> = Callee(...)`` in ``__init__``, when the callee is named like a class."""
    for fn in _methods(node):
        for st in ast.walk(fn) if fn.name == "__init__" else ():
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call):
                callee = _dotted(st.value.func)
                if not callee[callee.rfind(".") + 1 :][:1].isupper() or callee.startswith("self."):
                    continue
                for target in st.targets:
                    if isinstance(target, ast.Attribute) and _is_name(target.value, "self"):
                        yield target.attr, st.value.func, st.lineno


def _chain(start: _Class) -> list[_Class]:
    out: list[_Class] = []
    todo = [start]
    while todo:
        c = todo.pop(0)
        if all(c is not seen for seen in out):
            out.append(c)
            todo[:0] = [b for _, b in c.bases if isinstance(b, _Class)]
    return out


def _provider(chain: list[_Class], name: str) -> tuple[_Class, str, int] | None:
    return next(((c, *c.members[name]) for c in chain if name in c.members), None)


def _info(c: _Class) -> ClassInfo:
    bases = tuple(
        Base(w, r.name, Location(r.path, r.node.lineno)) if isinstance(r, _Class) else Base(w, r, None)
        for w, r in c.bases
    )
    return ClassInfo(c.name, Location(c.path, c.node.lineno), bases)


def _delegates(
    mods: _Modules, chain: list[_Class], attr: str | None = None
) -> Iterator[tuple[str, Delegate, _Class | None]]:
    for c in chain:
        for name, callee, line in c.inits:
            if attr is None or name == attr:
                found = mods.resolve_expr(c.path, callee)
                cls = found if isinstance(found, _Class) else None
                yield (
                    name,
                    Delegate(name, ast.unparse(callee), Location(c.path, line), _info(cls) if cls else None),
                    cls,
                )


def _resolution(mods: _Modules, ref: ClassRef, start: _Class) -> ClassResolution:
    chain = _chain(start)
    external = tuple(dict.fromkeys(r for c in chain for _, r in c.bases if isinstance(r, str)))
    delegates = tuple(d for _, d, _ in _delegates(mods, chain))
    return ClassResolution(ref, tuple(_info(c) for c in chain), external, delegates)


# ------------------------------------------------------------------------------ uses on a model


@dataclass(frozen=True, slots=True)
class _Guard:
    test: ast.expr
    positive: bool
    by_raise: bool = False  # from `if not <test>: raise ...` before the use


@dataclass(frozen=True, slots=True)
class _Site:
    path: str
    line: int
    role: str
    name: str
    access: str
    optional: bool
    guards: tuple[_Guard, ...]

    def call_site(self) -> CallSite:
        return CallSite(self.path, self.line, self.access, self.optional)


RoleOf = Callable[[ast.expr, dict[str, str]], str | None]


def _final_name(expr: ast.expr) -> str:
    while isinstance(expr, ast.Subscript | ast.Call):
        expr = expr.value if isinstance(expr, ast.Subscript) else expr.func
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return expr.id if isinstance(expr, ast.Name) else ""


def _worker_role(expr: ast.expr, names: dict[str, str]) -> str | None:
    """What ``expr`` is in a speculative worker: a model (``target``/``draft``) or a step towards one."""
    if isinstance(expr, ast.Name) and expr.id in names:
        return names[expr.id]
    final = _final_name(expr)
    if final in _TARGET_WORKERS and isinstance(expr, ast.Name | ast.Attribute):
        return "target_worker"
    if isinstance(expr, ast.Attribute):
        inner = _worker_role(expr.value, names)
        if inner == "target_worker" and expr.attr == "model_runner":
            return "target_runner"
        if expr.attr == "model" and inner in ("target_runner", "draft_runner"):
            return TARGET if inner == "target_runner" else DRAFT
    is_draft = "runner" in final and ("draft" in final or "mtp" in final) and "graph" not in final
    return "draft_runner" if is_draft else None


def _executor_role(expr: ast.expr, names: dict[str, str]) -> str | None:
    """In ``model_executor/``: the runner's own model, ``self.model`` or ``<...>model_runner.model``."""
    if isinstance(expr, ast.Attribute) and expr.attr == "model" and _final_name(expr.value) in ("self", "model_runner"):
        return RUNNER
    return _worker_role(expr, names)


class _Collector:
    """Walks a module or function: each name used on a model, with its guards; each attribute assigned."""

    def __init__(self, path: str, role_of: RoleOf, roles: frozenset[str]) -> None:
        self.path, self.role_of, self.roles = path, role_of, roles
        self.sites: list[_Site] = []
        self.assigned: list[tuple[str, tuple[_Guard, ...]]] = []  # self.<x> = <truthy value>

    def body(self, stmts: list[ast.stmt], g: tuple[_Guard, ...], names: dict[str, str]) -> None:
        for st in stmts:
            self.stmt(st, g, names)
            if isinstance(st, ast.If) and not st.orelse and st.body:
                last = st.body[-1]
                if isinstance(last, ast.Return | ast.Raise | ast.Continue | ast.Break):  # an early exit
                    g = (*g, _Guard(st.test, False, by_raise=isinstance(last, ast.Raise)))

    def stmt(self, st: ast.AST, g: tuple[_Guard, ...], names: dict[str, str]) -> None:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
            self.body(st.body, g, dict(names))
            return
        if isinstance(st, ast.If | ast.While):
            self.expr(st.test, g, names)
            self.body(st.body, (*g, _Guard(st.test, True)), names)
            self.body(st.orelse, (*g, _Guard(st.test, False)), names)
            return
        for _, value in ast.iter_fields(st):
            items = value if isinstance(value, list) else [value]
            if items and isinstance(items[0], ast.stmt):
                self.body(items, g, names)
                continue
            for item in items:
                if isinstance(item, ast.expr):
                    self.expr(item, g, names)
                elif isinstance(item, ast.excepthandler | ast.withitem | ast.match_case | ast.comprehension):
                    self.stmt(item, g, names)
        if isinstance(st, ast.Assign | ast.AnnAssign) and st.value is not None:
            self._assigned(st.targets if isinstance(st, ast.Assign) else [st.target], st.value, g, names)

    def _assigned(self, targets: list[ast.expr], value: ast.expr, g: tuple[_Guard, ...], names: dict[str, str]) -> None:
        truthy = not (isinstance(value, ast.Constant) and not value.value)
        self.assigned += [(t.attr, g) for t in targets if isinstance(t, ast.Attribute) and truthy]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):  # local names, in source order
            role = self.role_of(value, names)
            if role is None:
                names.pop(targets[0].id, None)
            else:
                names[targets[0].id] = role

    def expr(self, e: ast.expr, g: tuple[_Guard, ...], names: dict[str, str]) -> None:
        if isinstance(e, ast.BoolOp):
            for i, value in enumerate(e.values):
                earlier = tuple(_Guard(p, isinstance(e.op, ast.And)) for p in e.values[:i])
                self.expr(value, g + earlier, names)
            return
        if isinstance(e, ast.IfExp):
            self.expr(e.test, g, names)
            self.expr(e.body, (*g, _Guard(e.test, True)), names)
            self.expr(e.orelse, (*g, _Guard(e.test, False)), names)
            return
        if isinstance(e, ast.Lambda):
            return
        if isinstance(e, ast.Call):
            fn = e.func
            if _is_name(fn, "getattr") and len(e.args) >= 2 and isinstance(e.args[1], ast.Constant):
                self.site(e.args[0], str(e.args[1].value), e, "getattr", g, names, optional=len(e.args) > 2)
            elif isinstance(fn, ast.Attribute) and self.site(fn.value, fn.attr, fn, "call", g, names):
                for child in (fn.value, *e.args, *(k.value for k in e.keywords)):
                    self.expr(child, g, names)
                return
        elif isinstance(e, ast.Attribute) and isinstance(e.ctx, ast.Load):
            self.site(e.value, e.attr, e, "attribute", g, names)
        for node in ast.iter_child_nodes(e):
            if isinstance(node, ast.expr):
                self.expr(node, g, names)
            elif isinstance(node, ast.comprehension):
                self.stmt(node, g, names)

    def site(
        self,
        obj: ast.expr,
        name: str,
        node: ast.expr,
        access: str,
        g: tuple[_Guard, ...],
        names: dict[str, str],
        *,
        optional: bool = False,
    ) -> bool:
        role = self.role_of(obj, names)
        if role not in self.roles or name.startswith("__"):
            return False
        for positive, test, by_raise in _facts(g):
            checked = _hasattr_on(test, name)
            if positive and not by_raise and checked is not None and self.role_of(checked, names) == role:
                optional = True
        self.sites.append(_Site(self.path, node.lineno, role, name, access, optional, g))
        return True


def _facts(guards: tuple[_Guard, ...]) -> Iterator[tuple[bool, ast.expr, bool]]:
    """The (holds, test, by_raise) facts the guards imply, with ``and``/``or``/``not`` split apart."""
    stack = [(gd.positive, gd.test, gd.by_raise) for gd in guards]
    while stack:
        positive, test, by_raise = stack.pop()
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            stack.append((not positive, test.operand, by_raise))
        elif isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And if positive else ast.Or):
            stack.extend((positive, v, by_raise) for v in test.values)
        else:
            yield positive, test, by_raise


def _hasattr_on(test: ast.expr, name: str) -> ast.expr | None:
    if isinstance(test, ast.Call) and _is_name(test.func, "hasattr") and len(test.args) == 2:
        arg = test.args[1]
        if isinstance(arg, ast.Constant) and arg.value == name:
            return test.args[0]
    return None


# ----------------------------------------------------------------------------------- algorithms


class _Algorithms:
    """``SpeculativeAlgorithm`` as the tree defines it, and which code runs for which member."""

    def __init__(self, mods: _Modules) -> None:
        self.mods = mods
        module = mods.parse(SPEC_INFO)
        node = (
            next((s for s in module.body if isinstance(s, ast.ClassDef) and s.name == ALGORITHM_ENUM), None)
            if module
            else None
        )
        if node is None:
            raise ConfigError(f"{SPEC_INFO}: class {ALGORITHM_ENUM} not found in {mods.tree.label}")
        self.members = tuple(
            t.id
            for s in node.body
            if isinstance(s, ast.Assign)
            for t in s.targets
            if isinstance(t, ast.Name) and t.id.isupper()
        )
        self.predicates: dict[str, frozenset[str]] = {}
        for _ in range(3):  # predicates calling predicates
            for fn in _methods(node):
                body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                if len(fn.args.args) == 1 and len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value:
                    found = self._members_of(body[0].value)
                    if found is not None:
                        self.predicates[fn.name] = found
        self.assigned: dict[str, list[tuple[_Guard, ...]]] = {}
        self._flags: dict[tuple[str, str], bool | None] = {}
        create = next((f for f in _methods(node) if f.name == "create_worker"), None)
        self.workers = {m: self._workers(create, m) if create else [] for m in self.members}
        self._modules: dict[str, set[str]] = {}

    def _members_of(self, e: ast.expr) -> frozenset[str] | None:
        """The members for which a predicate body (``self == X``, ``self in (X, Y)``, ...) holds."""
        everything = frozenset(self.members)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            inner = self._members_of(e.operand)
            return None if inner is None else everything - inner
        if isinstance(e, ast.BoolOp):
            parts = [self._members_of(v) for v in e.values]
            sets = [p for p in parts if p is not None]
            if len(sets) != len(parts):
                return None
            return frozenset.union(*sets) if isinstance(e.op, ast.Or) else frozenset.intersection(*sets)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and _is_name(e.func.value, "self"):
            return self.predicates.get(e.func.attr)
        if isinstance(e, ast.Compare) and len(e.ops) == 1 and _is_name(e.left, "self"):
            right = e.comparators[0]
            elts = right.elts if isinstance(right, ast.Tuple | ast.List | ast.Set) else [right]
            named = frozenset(
                x.attr for x in elts if isinstance(x, ast.Attribute) and _is_name(x.value, ALGORITHM_ENUM)
            )
            if len(named) != len(elts):
                return None
            return everything - named if isinstance(e.ops[0], ast.NotEq | ast.IsNot | ast.NotIn) else named
        return None

    def value(self, e: ast.expr, algo: str, *, flags: bool = True) -> bool | None:
        """Whether ``e`` holds when ``algo`` runs; ``None`` when that depends on something else."""
        if isinstance(e, ast.BoolOp):
            values = [self.value(v, algo, flags=flags) for v in e.values]
            decisive = isinstance(e.op, ast.Or)
            return decisive if decisive in values else None if None in values else not decisive
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            inner = self.value(e.operand, algo, flags=flags)
            return None if inner is None else not inner
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and not e.args:
            holders, owner = self.predicates.get(e.func.attr), _final_name(e.func.value)
            if holders is not None and (owner == "self" or "algo" in owner):
                return algo in holders
        if isinstance(e, ast.Compare) and len(e.ops) == 1 and "algo" in _final_name(e.left):
            right = e.comparators[0]
            if isinstance(right, ast.Attribute) and _is_name(right.value, ALGORITHM_ENUM):
                return (algo == right.attr) == isinstance(e.ops[0], ast.Eq | ast.Is)
        if flags and isinstance(e, ast.Attribute):
            return self.flag(e.attr, algo)
        return None

    def holds(self, guards: tuple[_Guard, ...], algo: str) -> bool | None:
        out: bool | None = True
        for gd in guards:
            v = self.value(gd.test, algo)
            v = v if v is None or gd.positive else not v
            if v is False:
                return False
            out = out if v else None
        return out

    def assign(self, assigned: list[tuple[str, tuple[_Guard, ...]]]) -> None:
        """Record assignments ``<obj>.<name> = <true value>`` under their guards."""
        for name, guards in assigned:
            self.assigned.setdefault(name, []).append(guards)
        self._flags.clear()

    def flag(self, name: str, algo: str) -> bool | None:
        """An attribute is false under ``algo`` when no assignment of a true value to it can run there."""
        key = (name, algo)
        if key not in self._flags:
            self._flags[key] = None  # a cycle reads "unknown"
            guards = self.assigned.get(name, [])
            self._flags[key] = False if guards and all(self.holds(g, algo) is False for g in guards) else None
        return self._flags[key]

    def _workers(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, algo: str) -> list[_Class]:
        imported = {
            a.asname or a.name: (_absolute_module(SPEC_INFO, n), a.name)
            for n in ast.walk(fn)
            if isinstance(n, ast.ImportFrom)
            for a in n.names
        }
        out: list[_Class] = []
        for name in self._returns(fn.body, algo)[0]:
            module, attr = imported.get(name, ("", name))
            path = self.mods.path_of(module) if module else SPEC_INFO
            found = self.mods.resolve(path, attr) if path else None
            if isinstance(found, _Class) and all(found is not c for c in out):
                out.append(found)
        return out

    def _returns(self, stmts: list[ast.stmt], algo: str) -> tuple[list[str], bool]:
        """Names ``stmts`` can return under ``algo``, and whether they can fall through."""
        names: list[str] = []
        for st in stmts:
            if isinstance(st, ast.Return | ast.Raise):
                names += [st.value.id] if isinstance(st, ast.Return) and isinstance(st.value, ast.Name) else []
                return names, False
            if isinstance(st, ast.If):
                v = self.value(st.test, algo, flags=False)
                through = False
                for branch in [st.body] if v is True else [st.orelse] if v is False else [st.body, st.orelse]:
                    found, falls = self._returns(branch, algo)
                    names, through = names + found, through or falls
                if not through:
                    return names, False
        return names, True

    def modules(self, algo: str) -> set[str]:
        """``speculative/`` modules of the algorithm's workers, their bases and what they import."""
        if algo not in self._modules:
            todo = [c.path for w in self.workers[algo] for c in _chain(w) if c.path.startswith(SPECULATIVE)]
            seen: set[str] = set()
            while todo:
                path = todo.pop()
                if path not in seen:
                    seen.add(path)
                    todo += self.mods.imports(path, SPECULATIVE)
            self._modules[algo] = seen
        return self._modules[algo]

    def runs(self, site: _Site, algo: str) -> bool:
        """Whether the use is made when ``algo`` runs, and because of it."""
        if self.holds(site.guards, algo) is False:
            return False
        if site.path.startswith(SPECULATIVE):
            return site.path in self.modules(algo)
        return self.holds(site.guards, NO_ALGORITHM) is False


def _scan(mods: _Modules, algos: _Algorithms) -> list[_Site]:
    """Every use on a model in ``speculative/``, and in the ``model_executor/`` modules that can hold one.

    A use in ``model_executor/`` counts only behind a predicate or a flag, so a module whose text names
    neither is skipped; each round adds the modules naming a flag the last round found.
    """
    sites: list[_Site] = []

    def scan(path: str, role_of: RoleOf) -> None:
        module = mods.parse(path)
        collector = _Collector(path, role_of, frozenset({TARGET, DRAFT, RUNNER}))
        collector.body(module.body if module else [], (), {})
        algos.assign(collector.assigned)
        sites.extend(dataclasses.replace(s, role=_runner_role(s)) if s.role == RUNNER else s for s in collector.sites)

    for path in mods.tree.list(SPECULATIVE):
        if path.endswith(".py"):
            scan(path, _worker_role)
    pending = [p for p in mods.tree.list(MODEL_EXECUTOR) if p.endswith(".py")]
    words = {f".{p}(".encode() for p in algos.predicates}
    while True:
        found = [p for p in pending if any(w in (mods.data(p) or b"") for w in words)]
        if not found:
            return sites
        pending = [p for p in pending if p not in found]
        for path in found:
            scan(path, _executor_role)
        words |= {n.encode() for n in algos.assigned if algos.flag(n, NO_ALGORITHM) is False}


def _runner_role(site: _Site) -> str:
    draft = any(positive and _final_name(test) == "is_draft_worker" for positive, test, _ in _facts(site.guards))
    return DRAFT if draft else TARGET


# ---------------------------------------------------------------------------------------- check


def check_interface(
    tree: SourceTree,
    *,
    target: ClassRef,
    draft: ClassRef | None = None,
    algorithm: str = "eagle3",
    declared_target: Sequence[str] = (),
    declared_draft: Sequence[str] = (),
) -> InterfaceReport:
    """Every name ``algorithm`` uses on the target (and draft) model that the class does not provide.

    Raises :class:`ConfigError` when a class, its file or the algorithm is not in the tree.
    """
    mods = _Modules(tree)
    classes = {TARGET: mods.find_class(target), DRAFT: mods.find_class(draft) if draft else None}
    algos = _Algorithms(mods)
    algo = algorithm.upper()
    if algo not in algos.members or algo == NO_ALGORITHM:
        known = ", ".join(m.lower() for m in algos.members if m != NO_ALGORITHM)
        raise ConfigError(f"unknown speculative algorithm {algorithm!r} in {tree.label}", hint=f"known: {known}")
    notes: list[str] = []
    if not algos.workers[algo]:
        notes.append(f"{SPEC_INFO}: create_worker names no worker class for {algo}; worker call sites not used")

    mine: dict[tuple[str, str], list[_Site]] = {}
    others: dict[tuple[str, str], tuple[set[str], list[_Site]]] = {}
    for s in _scan(mods, algos):
        if algos.runs(s, algo):
            mine.setdefault((s.role, s.name), []).append(s)
            continue
        users = {m for m in algos.members if m not in (algo, NO_ALGORITHM) and algos.runs(s, m)}
        if users:
            entry = others.setdefault((s.role, s.name), (set(), []))
            entry[0].update(users)
            entry[1].append(s)

    requirements: list[Requirement] = []
    gaps: list[Gap] = []
    forwards: list[DelegationGap] = []
    stale: list[StaleName] = []
    for role, declared in ((TARGET, declared_target), (DRAFT, declared_draft)):
        cls = classes[role]
        chain = _chain(cls) if cls else []
        used = {name for r, name in mine if r == role}
        for name in (n for n in declared if n not in used):
            stale.append(StaleName(role, name, tuple(sorted(others.get((role, name), (set(), []))[0]))))
        for name in sorted(used | set(declared)):
            sites = _call_sites(mine.get((role, name), []))
            found = _provider(chain, name)
            member = Member(found[0].name, found[1], Location(found[0].path, found[2])) if found else None
            req = Requirement(role, name, sites, name in declared, member)
            requirements.append(req)
            if cls is None or req.optional:
                continue
            if found is None:
                method = req.declared or any(s.access == "call" for s in sites)
                gaps.append(Gap(role, name, cls.name, sites, _fix(mods, cls, chain, name, method=method)))
            else:
                forwards += _forwards(mods, chain, name, role, sites, notes, set())
        if cls is None and used:
            notes.append(f"no {role} class given: {len(used)} {role} name(s) listed, not checked")

    refs = {TARGET: target, DRAFT: draft}
    resolutions = {role: _resolution(mods, ref, c) for role, ref in refs.items() if ref and (c := classes[role])}
    for res in resolutions.values():
        notes += [f"{res.ref.name}: base {ext} is outside the tree, not inspected" for ext in res.external_bases]
    return InterfaceReport(
        tree=tree.label,
        algorithm=algorithm.lower(),
        workers=tuple(_info(w) for w in algos.workers[algo]),
        target=resolutions[TARGET],
        draft=resolutions.get(DRAFT),
        requirements=tuple(requirements),
        gaps=tuple(gaps),
        delegation_gaps=tuple(dict.fromkeys(forwards)),
        stale=tuple(stale),
        other_uses=tuple(
            OtherUse(role, name, tuple(sorted(users)), _call_sites(found))
            for (role, name), (users, found) in sorted(others.items())
        ),
        notes=tuple(dict.fromkeys(notes)),
    )


def _call_sites(sites: list[_Site]) -> tuple[CallSite, ...]:
    return tuple(sorted({s.call_site() for s in sites}, key=lambda c: (c.path, c.line, c.access)))


def _fix(mods: _Modules, cls: _Class, chain: list[_Class], name: str, *, method: bool) -> str:
    ways = [f"define {name}() on {cls.name}" if method else f"set self.{name} in {cls.name}.__init__"]
    for attr, _, delegate in _delegates(mods, chain):
        found = _provider(_chain(delegate), name) if delegate else None
        if delegate and found:
            via = "" if found[0] is delegate else f" via {found[0].name}"
            ways.append(f"forward to self.{attr} ({delegate.name} provides it{via}, {found[0].path}:{found[2]})")
    return ", or ".join(ways)


def _forwards(
    mods: _Modules,
    chain: list[_Class],
    name: str,
    role: str,
    call_sites: tuple[CallSite, ...],
    notes: list[str],
    seen: set[tuple[int, str]],
) -> list[DelegationGap]:
    """Gaps behind a provided method that calls ``self.<attr>.<x>(...)`` when the delegate lacks ``x``."""
    found = _provider(chain, name)
    if found is None or found[1] != "method" or (id(found[0]), name) in seen or len(seen) > _MAX_FORWARD_DEPTH:
        return []
    seen.add((id(found[0]), name))
    owner = found[0]
    fn = next(f for f in _methods(owner.node) if f.name == name)
    attrs = {attr for c in chain for attr, _, _ in c.inits}

    def role_of(expr: ast.expr, names: dict[str, str]) -> str | None:
        if isinstance(expr, ast.Attribute) and _is_name(expr.value, "self") and expr.attr in attrs:
            return "self." + expr.attr
        return None

    collector = _Collector(owner.path, role_of, frozenset("self." + a for a in attrs))
    collector.body(fn.body, (), {})
    out: list[DelegationGap] = []
    for s in (s for s in collector.sites if s.access == "call" and not s.optional):
        attr = s.role.removeprefix("self.")
        for _, delegate, cls in _delegates(mods, chain, attr):
            if cls is None:
                notes.append(f"{s.path}:{s.line}: self.{attr} is {delegate.written}, outside the tree; not checked")
            elif _provider(_chain(cls), s.name) is None:
                method = Location(owner.path, fn.lineno)
                out.append(
                    DelegationGap(role, name, method, attr, cls.name, s.name, Location(s.path, s.line), call_sites)
                )
            else:
                out += _forwards(mods, _chain(cls), s.name, role, call_sites, notes, seen)
    return out


def interface_of(spec: InterfaceSpec) -> dict[str, Any]:
    """``check_interface`` keyword arguments from a stack's ``[interface]`` table."""
    return {
        "target": ClassRef.parse(spec.target),
        "draft": ClassRef.parse(spec.draft) if spec.draft else None,
        "algorithm": spec.algorithm,
        "declared_target": spec.declared_target,
        "declared_draft": spec.declared_draft,
    }
