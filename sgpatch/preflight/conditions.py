"""A three-valued reading of SGLang's conditions (``if`` tests, ``return`` expressions), as Python evaluates
them, over what preflight knows: the launch's arguments, the target's architecture, the GPU when known.

Never ``eval``: the expression is walked with :mod:`ast`; constants, names assigned before it in the same
function, ``and``/``or``/``not`` (returning operands, as Python does), comparisons, ``in``, lists and tuples
are evaluated here; every other term goes to the caller's ``term`` hook (a server argument, a GPU query, a
call SGLang makes), which answers a value or :data:`UNKNOWN`.  An expression whose value depends on an unknown
term is :data:`UNKNOWN`, and the terms are collected so the row can say which.  ``tests/test_preflight_allreduce``
holds it to Python's own evaluation of upstream's expressions.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 24


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
"""A value preflight cannot know for this launch."""


class _NotMine:
    __slots__ = ()


NOT_MINE: Any = _NotMine()
"""What a ``term`` hook answers for a term it does not understand (``None`` is a value like any other)."""

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


@dataclass
class Scope:
    """What an expression's names mean: ``names`` (assigned earlier in the function: the expression it was
    given), and ``term`` for everything else (:data:`NOT_MINE` from it: not understood)."""

    term: Callable[[ast.expr], Any]
    names: Mapping[str, ast.expr] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    """The terms that made a value unknown, as written."""

    def _miss(self, node: ast.expr) -> Any:
        text = ast.unparse(node)
        if text not in self.unknown:
            self.unknown.append(text)
        return UNKNOWN


def evaluate(node: ast.expr, scope: Scope, depth: int = 0) -> Any:
    """The value of ``node`` under ``scope`` (:data:`UNKNOWN` when it depends on something unknown)."""
    if depth > MAX_DEPTH:
        return scope._miss(node)
    nxt = depth + 1
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        items = [evaluate(e, scope, nxt) for e in node.elts]
        return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(items)
    if isinstance(node, ast.BoolOp):
        return _boolop(node, scope, nxt)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = evaluate(node.operand, scope, nxt)
        return UNKNOWN if value is UNKNOWN else not value
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        hooked = scope.term(node)
        if hooked is not NOT_MINE:
            return hooked if hooked is not UNKNOWN else scope._miss(node)
        left, right = evaluate(node.left, scope, nxt), evaluate(node.comparators[0], scope, nxt)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        try:
            return bool(_COMPARE[type(node.ops[0])](left, right))
        except TypeError:
            return scope._miss(node)
    if isinstance(node, ast.Name) and node.id in scope.names:
        return evaluate(scope.names[node.id], scope, nxt)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in scope.names:
        # ``sa.x`` after ``sa = get_global_server_args()``: the attribute of what the name holds
        held = ast.Attribute(value=scope.names[node.value.id], attr=node.attr, ctx=ast.Load())
        return evaluate(ast.copy_location(held, node), scope, nxt)
    hooked = scope.term(node)
    if hooked is NOT_MINE or hooked is UNKNOWN:
        return scope._miss(node)
    return hooked


def _boolop(node: ast.BoolOp, scope: Scope, depth: int) -> Any:
    """Python's ``and``/``or``: the first operand that decides, else the last; unknown when an unknown operand
    comes before the one that decides (a later known falsy ``and`` operand still decides ``False``)."""
    is_and = isinstance(node.op, ast.And)
    seen_unknown = False
    value: Any = UNKNOWN
    for operand in node.values:
        value = evaluate(operand, scope, depth)
        if value is UNKNOWN:
            seen_unknown = True
            continue
        if (not value) if is_and else bool(value):
            return (not is_and) if seen_unknown else value
    return UNKNOWN if seen_unknown else value


def assignments(fn: ast.FunctionDef, before: int) -> dict[str, ast.expr]:
    """``name = expr`` statements of ``fn`` above line ``before`` (the last one wins, as at run time)."""
    out: dict[str, ast.expr] = {}
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and node.lineno < before
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            out[node.targets[0].id] = node.value
    return out
