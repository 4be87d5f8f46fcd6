"""Modules and classes of a tree: imports followed, bases resolved, members and delegates read."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from sgpatch.errors import ConfigError
from sgpatch.interface.model import (
    Base,
    ClassInfo,
    ClassRef,
    ClassResolution,
    Delegate,
    Location,
)
from sgpatch.pyast import parse_python
from sgpatch.source.tree import SourceTree

# --------------------------------------------------------------------------- modules and classes

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True, slots=True)
class _Binding:
    kind: str  # "class" | "from" | "import" | "alias" (Name = other.Name) | "other"
    line: int
    module: str = ""
    attr: str = ""
    node: ast.ClassDef | None = None
    fn: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    value: ast.expr | None = None
    typing_only: bool = False


@dataclass(eq=False)
class ClassNode:
    name: str
    path: str
    node: ast.ClassDef
    bases: list[tuple[str, ClassNode | str]]
    members: dict[str, tuple[str, int]]  # name -> (kind, line)
    inits: list[tuple[str, ast.expr, int]]  # self.<attr> = <callee>(...) in __init__


class Modules:
    """The tree's modules, parsed on demand, with their top-level bindings and classes."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._data: dict[str, bytes | None] = {}
        self._asts: dict[str, ast.Module | None] = {}
        self._bindings: dict[str, dict[str, list[_Binding]]] = {}
        self._classes: dict[tuple[str, int], ClassNode] = {}

    def data(self, path: str) -> bytes | None:
        if path not in self._data:
            self._data[path] = self.tree.read(path)
        return self._data[path]

    def parse(self, path: str) -> ast.Module | None:
        if path not in self._asts:
            data = self.data(path)
            try:
                self._asts[path] = None if data is None else parse_python(data, filename=path)
            except SyntaxError as exc:
                where = f"{path}:{exc.lineno}" if exc.lineno else path
                raise ConfigError(f"{where}: cannot parse ({exc.msg}) in {self.tree.label}") from exc
            except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
                raise ConfigError(f"{path}: cannot parse ({exc}) in {self.tree.label}") from exc
        return self._asts[path]

    def path_of(self, dotted: str) -> str | None:
        base = "python/" + dotted.replace(".", "/")
        return next(
            (p for p in (base + ".py", base + "/__init__.py") if self.data(p) is not None),
            None,
        )

    def bindings(self, path: str) -> dict[str, list[_Binding]]:
        if path not in self._bindings:
            table: dict[str, list[_Binding]] = {}
            module = self.parse(path)
            self._collect(path, module.body if module else [], table, typing_only=False)
            self._bindings[path] = table
        return self._bindings[path]

    def _collect(
        self,
        path: str,
        body: list[ast.stmt],
        table: dict[str, list[_Binding]],
        *,
        typing_only: bool,
    ) -> None:
        for st in body:
            if isinstance(st, ast.ClassDef):
                table.setdefault(st.name, []).append(_Binding("class", st.lineno, node=st))
            elif isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
                table.setdefault(st.name, []).append(_Binding("other", st.lineno, fn=st))
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                named = _dotted(st.value) != ""
                b = _Binding("alias", st.lineno, value=st.value) if named else _Binding("other", st.lineno)
                table.setdefault(st.targets[0].id, []).append(b)
            elif isinstance(st, ast.ImportFrom):
                module = absolute_module(path, st)
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
                for block in (
                    st.body,
                    *(h.body for h in st.handlers),
                    st.orelse,
                    st.finalbody,
                ):
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

    def resolve(self, path: str, name: str, before: int | None = None, depth: int = 0) -> ClassNode | str | None:
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

    def resolve_expr(
        self, path: str, expr: ast.expr, before: int | None = None, depth: int = 0
    ) -> ClassNode | str | None:
        if isinstance(expr, ast.Subscript):  # Generic[T], Base[...]
            return self.resolve_expr(path, expr.value, before, depth)
        head, _, rest = _dotted(expr).partition(".")
        found = self.resolve(path, head, before, depth) if head else None
        if not rest or not isinstance(found, str):
            return found
        module, _, last = f"{found}.{rest}".rpartition(".")
        inner = self.path_of(module)
        return self.resolve(inner, last) if inner else f"{module}.{last}"

    def function(
        self, path: str, expr: ast.expr, within: tuple[str, ...], depth: int = 0
    ) -> tuple[str, Function] | None:
        """The module-level function ``expr`` (``f`` or ``module.f``) names in ``path``, if it is defined
        in a module below one of the ``within`` prefixes (no other module is parsed to find it)."""
        head, _, rest = _dotted(expr).partition(".")
        binds = self.bindings(path).get(head) if head and depth <= 16 else None
        if not binds:
            return None
        b = binds[-1]
        if b.kind == "other" and b.fn is not None and not rest:
            return path, b.fn
        if b.kind not in ("from", "import") or (b.kind == "import" and not rest):
            return None
        module = f"{b.module}.{b.attr}" if b.kind == "from" and rest else b.module
        if rest:
            module, _, name = f"{module}.{rest}".rpartition(".")
        else:
            name = b.attr
        if not ("python/" + module.replace(".", "/")).startswith(within):
            return None
        inner = self.path_of(module)
        return self.function(inner, ast.Name(name), within, depth + 1) if inner else None

    def find_class(self, ref: ClassRef) -> ClassNode:
        if self.parse(ref.path) is None:
            raise ConfigError(
                f"{ref.path}: no such file in {self.tree.label}",
                hint=f"looking for class {ref.name}",
            )
        found = self.resolve(ref.path, ref.name)
        if not isinstance(found, ClassNode):
            raise ConfigError(f"{ref.path}: class {ref.name} not found in {self.tree.label}")
        return found

    def cls(self, path: str, node: ast.ClassDef) -> ClassNode:
        key = (path, node.lineno)
        if key not in self._classes:
            made = ClassNode(node.name, path, node, [], members_of(node), list(_inits(node)))
            self._classes[key] = made  # registered before its bases: a cycle stops here
            for base in node.bases:
                resolved = self.resolve_expr(path, base, node.lineno)
                made.bases.append(
                    (
                        ast.unparse(base),
                        resolved if resolved is not None else ast.unparse(base),
                    )
                )
        return self._classes[key]


def absolute_module(path: str, st: ast.ImportFrom) -> str:
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


def is_name(expr: ast.expr, name: str) -> bool:
    return isinstance(expr, ast.Name) and expr.id == name


def methods_of(node: ast.ClassDef) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    return (st for st in node.body if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef))


def members_of(node: ast.ClassDef) -> dict[str, tuple[str, int]]:
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
    for fn in methods_of(node):
        me = fn.args.args[0].arg if fn.args.args else ""
        for n in ast.walk(fn):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and is_name(n.value, me):
                out.setdefault(n.attr, ("attribute", n.lineno))
    return out


def _inits(node: ast.ClassDef) -> Iterator[tuple[str, ast.expr, int]]:
    """``self.<attr> = Callee(...)`` in ``__init__``, when the callee is named like a class."""
    for fn in methods_of(node):
        for st in ast.walk(fn) if fn.name == "__init__" else ():
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call):
                callee = _dotted(st.value.func)
                if not callee[callee.rfind(".") + 1 :][:1].isupper() or callee.startswith("self."):
                    continue
                for target in st.targets:
                    if isinstance(target, ast.Attribute) and is_name(target.value, "self"):
                        yield target.attr, st.value.func, st.lineno


def base_chain(start: ClassNode) -> list[ClassNode]:
    out: list[ClassNode] = []
    todo = [start]
    while todo:
        c = todo.pop(0)
        if all(c is not seen for seen in out):
            out.append(c)
            todo[:0] = [b for _, b in c.bases if isinstance(b, ClassNode)]
    return out


def provider_of(chain: list[ClassNode], name: str) -> tuple[ClassNode, str, int] | None:
    return next(((c, *c.members[name]) for c in chain if name in c.members), None)


def class_info(c: ClassNode) -> ClassInfo:
    bases = tuple(
        Base(w, r.name, Location(r.path, r.node.lineno)) if isinstance(r, ClassNode) else Base(w, r, None)
        for w, r in c.bases
    )
    return ClassInfo(c.name, Location(c.path, c.node.lineno), bases)


def delegates_of(
    mods: Modules, chain: list[ClassNode], attr: str | None = None
) -> Iterator[tuple[str, Delegate, ClassNode | None]]:
    for c in chain:
        for name, callee, line in c.inits:
            if attr is None or name == attr:
                found = mods.resolve_expr(c.path, callee)
                cls = found if isinstance(found, ClassNode) else None
                yield (
                    name,
                    Delegate(
                        name,
                        ast.unparse(callee),
                        Location(c.path, line),
                        class_info(cls) if cls else None,
                    ),
                    cls,
                )


def resolution_of(mods: Modules, ref: ClassRef, start: ClassNode) -> ClassResolution:
    chain = base_chain(start)
    external = tuple(dict.fromkeys(r for c in chain for _, r in c.bases if isinstance(r, str)))
    delegates = tuple(d for _, d, _ in delegates_of(mods, chain))
    return ClassResolution(ref, tuple(class_info(c) for c in chain), external, delegates)
