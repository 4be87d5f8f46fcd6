"""What the interface check reads of one module's syntax tree: its top-level bindings, a class's members
and delegates, dotted names.  Only :mod:`sgpatch.interface.facts` calls these on a tree; the check itself
works on the facts they produce."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import NamedTuple

Function = ast.FunctionDef | ast.AsyncFunctionDef


class AstBinding(NamedTuple):
    """A name bound at the top level of a module (also inside ``if``/``try`` there)."""

    kind: str  # "class" | "from" | "import" | "alias" (Name = other.Name) | "other"
    line: int
    module: str = ""
    attr: str = ""
    node: ast.ClassDef | None = None
    fn: Function | None = None
    value: ast.expr | None = None
    typing_only: bool = False


def collect_bindings(path: str, module: ast.Module) -> dict[str, list[AstBinding]]:
    """Every top-level binding of ``module`` (the file ``path``), by name, in source order."""
    table: dict[str, list[AstBinding]] = {}
    _collect(path, module.body, table, typing_only=False)
    return table


def _collect(path: str, body: list[ast.stmt], table: dict[str, list[AstBinding]], *, typing_only: bool) -> None:
    for st in body:
        if isinstance(st, ast.ClassDef):
            table.setdefault(st.name, []).append(AstBinding("class", st.lineno, node=st))
        elif isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
            table.setdefault(st.name, []).append(AstBinding("other", st.lineno, fn=st))
        elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            named = dotted_name(st.value) != ""
            b = AstBinding("alias", st.lineno, value=st.value) if named else AstBinding("other", st.lineno)
            table.setdefault(st.targets[0].id, []).append(b)
        elif isinstance(st, ast.ImportFrom):
            module = absolute_module(path, st)
            for alias in st.names:
                b = AstBinding("from", st.lineno, module, alias.name, typing_only=typing_only)
                table.setdefault(alias.asname or alias.name, []).append(b)
        elif isinstance(st, ast.Import):
            for alias in st.names:
                module = alias.name if alias.asname else alias.name.split(".")[0]
                b = AstBinding("import", st.lineno, module, typing_only=typing_only)
                table.setdefault(alias.asname or module, []).append(b)
        elif isinstance(st, ast.If):
            inner = typing_only or dotted_name(st.test).endswith("TYPE_CHECKING")
            _collect(path, st.body, table, typing_only=inner)
            _collect(path, st.orelse, table, typing_only=typing_only)
        elif isinstance(st, ast.Try):
            for block in (st.body, *(h.body for h in st.handlers), st.orelse, st.finalbody):
                _collect(path, block, table, typing_only=typing_only)


def absolute_module(path: str, st: ast.ImportFrom) -> str:
    if not st.level:
        return st.module or ""
    package = dotted_path(path).split(".")
    package = package[: len(package) - st.level + (1 if path.endswith("/__init__.py") else 0)]
    return ".".join([*package, *([st.module] if st.module else [])])


def dotted_path(path: str) -> str:
    """``python/sglang/srt/x/__init__.py`` -> ``sglang.srt.x``."""
    return path.removeprefix("python/").removesuffix(".py").removesuffix("/__init__").strip("/").replace("/", ".")


def dotted_name(expr: ast.expr) -> str:
    """``a.b.c`` for a chain of names and attributes; "" for anything else."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        head = dotted_name(expr.value)
        return f"{head}.{expr.attr}" if head else ""
    return ""


def resolvable_name(expr: ast.expr) -> str:
    """The dotted name an expression resolves through: subscripts stripped (``Generic[T]`` -> ``Generic``)."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return dotted_name(expr)


def is_name(expr: ast.expr, name: str) -> bool:
    return isinstance(expr, ast.Name) and expr.id == name


def methods_of(node: ast.ClassDef) -> Iterator[Function]:
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


def inits_of(node: ast.ClassDef) -> Iterator[tuple[str, ast.expr, int]]:
    """``self.<attr> = Callee(...)`` in ``__init__``, when the callee is named like a class."""
    for fn in methods_of(node):
        for st in ast.walk(fn) if fn.name == "__init__" else ():
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call):
                callee = dotted_name(st.value.func)
                if not callee[callee.rfind(".") + 1 :][:1].isupper() or callee.startswith("self."):
                    continue
                for target in st.targets:
                    if isinstance(target, ast.Attribute) and is_name(target.value, "self"):
                        yield target.attr, st.value.func, st.lineno
