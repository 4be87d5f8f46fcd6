"""Uses of a model object: call sites, the guards around them, and which role (target/draft) they are."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sgpatch.interface.model import DRAFT, RUNNER, TARGET, TARGET_WORKERS, CallSite
from sgpatch.interface.modules import is_name

# ------------------------------------------------------------------------------ uses on a model


@dataclass(frozen=True, slots=True)
class Guard:
    test: ast.expr
    positive: bool
    by_raise: bool = False  # from `if not <test>: raise ...` before the use


@dataclass(frozen=True, slots=True)
class Site:
    path: str
    line: int
    role: str
    name: str
    access: str
    optional: bool
    guards: tuple[Guard, ...]

    def call_site(self) -> CallSite:
        return CallSite(self.path, self.line, self.access, self.optional)


RoleOf = Callable[[ast.expr, dict[str, str]], str | None]


def final_name(expr: ast.expr) -> str:
    while isinstance(expr, ast.Subscript | ast.Call):
        expr = expr.value if isinstance(expr, ast.Subscript) else expr.func
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return expr.id if isinstance(expr, ast.Name) else ""


def worker_role(expr: ast.expr, names: dict[str, str]) -> str | None:
    """What ``expr`` is in a speculative worker: a model (``target``/``draft``) or a step towards one."""
    if isinstance(expr, ast.Name) and expr.id in names:
        return names[expr.id]
    final = final_name(expr)
    if final in TARGET_WORKERS and isinstance(expr, ast.Name | ast.Attribute):
        return "target_worker"
    if isinstance(expr, ast.Attribute):
        inner = worker_role(expr.value, names)
        if inner == "target_worker" and expr.attr == "model_runner":
            return "target_runner"
        if expr.attr == "model" and inner in ("target_runner", "draft_runner"):
            return TARGET if inner == "target_runner" else DRAFT
    is_draft = "runner" in final and ("draft" in final or "mtp" in final) and "graph" not in final
    return "draft_runner" if is_draft else None


def executor_role(expr: ast.expr, names: dict[str, str]) -> str | None:
    """In ``model_executor/``: the runner's own model, ``self.model`` or ``<...>model_runner.model``."""
    if isinstance(expr, ast.Attribute) and expr.attr == "model" and final_name(expr.value) in ("self", "model_runner"):
        return RUNNER
    return worker_role(expr, names)


class Collector:
    """Walks a module or function: each name used on a model, with its guards; each attribute assigned."""

    def __init__(self, path: str, role_of: RoleOf, roles: frozenset[str]) -> None:
        self.path, self.role_of, self.roles = path, role_of, roles
        self.sites: list[Site] = []
        self.assigned: list[tuple[str, tuple[Guard, ...]]] = []  # self.<x> = <truthy value>

    def body(self, stmts: list[ast.stmt], g: tuple[Guard, ...], names: dict[str, str]) -> None:
        for st in stmts:
            self.stmt(st, g, names)
            if isinstance(st, ast.If) and not st.orelse and st.body:
                last = st.body[-1]
                if isinstance(last, ast.Return | ast.Raise | ast.Continue | ast.Break):  # an early exit
                    g = (
                        *g,
                        Guard(st.test, False, by_raise=isinstance(last, ast.Raise)),
                    )

    def stmt(self, st: ast.AST, g: tuple[Guard, ...], names: dict[str, str]) -> None:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
            self.body(st.body, g, dict(names))
            return
        if isinstance(st, ast.If | ast.While):
            self.expr(st.test, g, names)
            self.body(st.body, (*g, Guard(st.test, True)), names)
            self.body(st.orelse, (*g, Guard(st.test, False)), names)
            return
        for _, value in ast.iter_fields(st):
            items = value if isinstance(value, list) else [value]
            if items and isinstance(items[0], ast.stmt):
                self.body(items, g, names)
                continue
            for item in items:
                if isinstance(item, ast.expr):
                    self.expr(item, g, names)
                elif isinstance(
                    item,
                    ast.excepthandler | ast.withitem | ast.match_case | ast.comprehension,
                ):
                    self.stmt(item, g, names)
        if isinstance(st, ast.Assign | ast.AnnAssign) and st.value is not None:
            self._assigned(
                st.targets if isinstance(st, ast.Assign) else [st.target],
                st.value,
                g,
                names,
            )

    def _assigned(
        self,
        targets: list[ast.expr],
        value: ast.expr,
        g: tuple[Guard, ...],
        names: dict[str, str],
    ) -> None:
        truthy = not (isinstance(value, ast.Constant) and not value.value)
        self.assigned += [(t.attr, g) for t in targets if isinstance(t, ast.Attribute) and truthy]
        if len(targets) == 1 and isinstance(targets[0], ast.Name):  # local names, in source order
            role = self.role_of(value, names)
            if role is None:
                names.pop(targets[0].id, None)
            else:
                names[targets[0].id] = role

    def expr(self, e: ast.expr, g: tuple[Guard, ...], names: dict[str, str]) -> None:
        if isinstance(e, ast.BoolOp):
            for i, value in enumerate(e.values):
                earlier = tuple(Guard(p, isinstance(e.op, ast.And)) for p in e.values[:i])
                self.expr(value, g + earlier, names)
            return
        if isinstance(e, ast.IfExp):
            self.expr(e.test, g, names)
            self.expr(e.body, (*g, Guard(e.test, True)), names)
            self.expr(e.orelse, (*g, Guard(e.test, False)), names)
            return
        if isinstance(e, ast.Lambda):
            return
        if isinstance(e, ast.Call):
            fn = e.func
            if is_name(fn, "getattr") and len(e.args) >= 2 and isinstance(e.args[1], ast.Constant):
                self.site(
                    e.args[0],
                    str(e.args[1].value),
                    e,
                    "getattr",
                    g,
                    names,
                    optional=len(e.args) > 2,
                )
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
        g: tuple[Guard, ...],
        names: dict[str, str],
        *,
        optional: bool = False,
    ) -> bool:
        role = self.role_of(obj, names)
        if role not in self.roles or name.startswith("__"):
            return False
        for positive, test, by_raise in guard_facts(g):
            checked = _hasattr_on(test, name)
            if positive and not by_raise and checked is not None and self.role_of(checked, names) == role:
                optional = True
        self.sites.append(Site(self.path, node.lineno, role, name, access, optional, g))
        return True


def guard_facts(guards: tuple[Guard, ...]) -> Iterator[tuple[bool, ast.expr, bool]]:
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
    if isinstance(test, ast.Call) and is_name(test.func, "hasattr") and len(test.args) == 2:
        arg = test.args[1]
        if isinstance(arg, ast.Constant) and arg.value == name:
            return test.args[0]
    return None
