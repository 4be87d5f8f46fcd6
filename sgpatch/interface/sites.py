"""Uses of a model object: call sites, the guards around them, and which role (target/draft) they are."""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Container, Iterator
from typing import NamedTuple

from sgpatch.interface.model import DRAFT, RUNNER, TARGET, TARGET_WORKERS, CallSite
from sgpatch.interface.syntax import Function, dotted_name, is_name

# ------------------------------------------------------------------------------ uses on a model


# The types of this room and of sgpatch.interface.facts are NamedTuples, not dataclasses: a check makes
# thousands of them, and a dataclass costs about a millisecond to define at every start of the CLI.


class Guard(NamedTuple):
    test: ast.expr
    positive: bool
    by_raise: bool = False  # the other way raises: `if not <test>: raise ...` before the use, or an `else: raise`


class Site(NamedTuple):
    path: str
    line: int
    role: str
    name: str
    access: str
    optional: bool
    guards: tuple[Guard, ...]
    origin: str = ""  # the module scanned, when the use is in a helper it calls

    def call_site(self) -> CallSite:
        return CallSite(self.path, self.line, self.access, self.optional)


class Given(NamedTuple):
    """One argument of a call that may be followed: its keyword (None: positional), whether it is starred, its
    role (a model or a step towards one), else the expression it stands for in the callee's guards."""

    key: str | None
    starred: bool
    role: str | None
    expr: ast.expr | None


class Deferred(NamedTuple):
    """A call into another module, met while one module's facts were collected: it is followed when the
    check runs (the callee's module is other bytes).  ``calls``: the functions being followed at the call."""

    dotted: str
    args: tuple[Given, ...]
    guards: tuple[Guard, ...]
    calls: tuple[FnKey, ...]


class Defer:
    """What a resolver returns for a call it leaves to the check (see :class:`Deferred`)."""


DEFER = Defer()
FnKey = tuple[str, int, int]  # a function definition: path, line, column
RoleOf = Callable[[ast.expr, dict[str, str]], str | None]
Resolver = Callable[[str, str], "tuple[str, Function] | Defer | None"]
MAX_CALL_DEPTH = 4
MAX_FOLLOWED = 2000  # helper bodies walked per module scanned: a crafted tree cannot fan out without end


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
    """Walks a module or function: each name used on a model, with its guards; each attribute assigned.

    With ``resolve``, a call of a function of the tree that is given a model (or a step towards one) is
    followed into the function's body: its parameters take the arguments' roles, its other parameters
    stand for the arguments in its guards, and its uses are reported where they are written.
    """

    def __init__(self, path: str, role_of: RoleOf, roles: Container[str], resolve: Resolver | None = None) -> None:
        self.path, self.role_of, self.roles, self.resolve = path, role_of, roles, resolve
        self.origin = path
        self.sites: list[Site] = []
        self.assigned: list[tuple[str, tuple[Guard, ...]]] = []  # self.<x> = <truthy value>
        self.deferred: list[Deferred] = []
        self._subst: dict[str, ast.expr] = {}
        self._calls: list[FnKey] = []
        self.followed = 0
        self.capped = False  # more calls were worth following than MAX_FOLLOWED

    def start_at(self, calls: tuple[FnKey, ...]) -> None:
        """Resume in the module scanned, inside the functions ``calls`` (where a :class:`Deferred` was met)."""
        self.path, self._subst, self._calls = self.origin, {}, list(calls)

    def _test(self, test: ast.expr) -> ast.expr:
        """A guard's test with the followed function's parameters replaced by the caller's arguments."""
        if not self._subst or not any(isinstance(n, ast.Name) and n.id in self._subst for n in ast.walk(test)):
            return test
        return _Substitute(self._subst).visit(copy.deepcopy(test))  # type: ignore[no-any-return]

    def _follow(self, call: ast.Call, g: tuple[Guard, ...], names: dict[str, str]) -> None:
        if self.resolve is None or len(self._calls) >= MAX_CALL_DEPTH:
            return
        given = [(None, a) for a in call.args] + [(k.arg, k.value) for k in call.keywords if k.arg]
        if not any(self.role_of(a, names) for _, a in given if not isinstance(a, ast.Starred)):
            return
        args = []
        for key, arg in given:
            starred = isinstance(arg, ast.Starred)
            role = None if starred else self.role_of(arg, names)
            args.append(Given(key, starred, role, None if starred or role is not None else self._test(arg)))
        self.call(dotted_name(call.func), tuple(args), g)

    def call(self, dotted: str, args: tuple[Given, ...], g: tuple[Guard, ...]) -> None:
        """Follow a call of ``dotted`` with ``args`` under ``g`` into the function it names, if any."""
        assert self.resolve is not None
        found = self.resolve(self.path, dotted)
        if isinstance(found, Defer):
            self.deferred.append(Deferred(dotted, args, g, tuple(self._calls)))
            return
        if found is None:
            return
        path, fn = found
        here = (path, fn.lineno, fn.col_offset)
        if here in self._calls:
            return
        positional = [*fn.args.posonlyargs, *fn.args.args]
        by_name = {a.arg for a in (*positional, *fn.args.kwonlyargs)}
        roles: dict[str, str] = {}
        subst: dict[str, ast.expr] = {}
        for i, arg in enumerate(args):
            if arg.key is None and (arg.starred or i >= len(positional)):
                continue
            param = arg.key if arg.key is not None else positional[i].arg
            if param not in by_name:
                continue
            if arg.role is not None:
                roles[param] = arg.role
            elif arg.expr is not None:
                subst[param] = arg.expr
        if not roles:
            return
        if self.followed >= MAX_FOLLOWED:
            self.capped = True
            return
        self.followed += 1
        saved = self.path, self._subst
        self.path, self._subst = path, subst
        self._calls.append(here)
        try:
            self.body(fn.body, g, roles)
        finally:
            self._calls.pop()
            self.path, self._subst = saved

    def body(self, stmts: list[ast.stmt], g: tuple[Guard, ...], names: dict[str, str]) -> None:
        for st in stmts:
            self.stmt(st, g, names)
            if isinstance(st, ast.If) and not st.orelse and st.body:
                last = st.body[-1]
                if isinstance(last, ast.Return | ast.Raise | ast.Continue | ast.Break):  # an early exit
                    g = (
                        *g,
                        Guard(self._test(st.test), False, by_raise=isinstance(last, ast.Raise)),
                    )

    def stmt(self, st: ast.AST, g: tuple[Guard, ...], names: dict[str, str]) -> None:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
            self.body(st.body, g, dict(names))
            return
        if isinstance(st, ast.If | ast.While):
            self.expr(st.test, g, names)
            test = self._test(st.test)
            # `if hasattr(m, "x"): m.x() else: raise ...`: the other branch raises, so the use is required
            raises = [bool(b) and isinstance(b[-1], ast.Raise) for b in (st.orelse, st.body)]
            self.body(st.body, (*g, Guard(test, True, by_raise=raises[0])), names)
            self.body(st.orelse, (*g, Guard(test, False, by_raise=raises[1])), names)
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
                earlier = tuple(Guard(self._test(p), isinstance(e.op, ast.And)) for p in e.values[:i])
                self.expr(value, g + earlier, names)
            return
        if isinstance(e, ast.IfExp):
            self.expr(e.test, g, names)
            test = self._test(e.test)
            self.expr(e.body, (*g, Guard(test, True)), names)
            self.expr(e.orelse, (*g, Guard(test, False)), names)
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
            self._follow(e, g, names)
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
        if role is None or role not in self.roles or name.startswith("__"):
            return False
        for positive, test, by_raise in guard_facts(g):
            checked = _hasattr_on(test, name)
            if positive and not by_raise and checked is not None and self.role_of(checked, names) == role:
                optional = True
        self.sites.append(Site(self.path, node.lineno, role, name, access, optional, g, self.origin))
        return True


class _Substitute(ast.NodeTransformer):
    def __init__(self, subst: dict[str, ast.expr]) -> None:
        self.subst = subst

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.subst.get(node.id, node) if isinstance(node.ctx, ast.Load) else node


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
