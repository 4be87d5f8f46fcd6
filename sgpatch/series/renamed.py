"""``take-upstream`` by statements equal up to a consistent renaming of the definition's local names (issue 27).

A release may keep what a hunk adds while renaming a parameter or a local variable (``topk_ids`` becomes
``topk_indices``).  ``statements`` compares Python ASTs exactly; this compares them up to one bijection between the
two definitions' local names:

- the parameters are paired by position (both definitions take the same number);
- every other local name the hunk's statements use (one the definition assigns) must be assigned by those
  statements themselves, so that what it means is compared too;
- every other name (a global, an attribute, a keyword, a called function) is the same on both sides.

Every statement the hunk adds or changes stands in the release's definition in the same order, under enclosing
statements equal up to the same renaming; at least one of them says something.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Sequence

from sgpatch.pyast import per_memo
from sgpatch.series.patch import Hunk
from sgpatch.series.statements import touched_statements
from sgpatch.series.upstream import Definition

_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar)
_BODIES = ("body", "orelse", "finalbody")

Head = tuple[tuple[tuple[ast.AST, str], ...], ast.AST, ast.stmt]  # (enclosing headers, its header, the node)


def renamed_absorbed(hunk: Hunk, after_hunk: bytes, mine: Definition, theirs: Definition) -> str | None:
    """The evidence that every statement ``hunk`` adds in ``mine`` (its definition in ``after_hunk``) stands in
    ``theirs`` (the release's) up to a consistent renaming of local names; None without proof."""
    fa, fb = mine.node, theirs.node
    if not isinstance(fa, ast.FunctionDef | ast.AsyncFunctionDef) or not isinstance(
        fb, ast.FunctionDef | ast.AsyncFunctionDef
    ):
        return None
    pa, pb = _params(fa), _params(fb)
    if len(pa) != len(pb) or len(set(pa)) != len(pa) or len(set(pb)) != len(pb):
        return None
    touched = touched_statements(hunk, mine, after_hunk)
    if touched is None:
        return None
    wanted_nodes = {id(node) for _, node in touched}
    wanted = [h for h in _heads(fa) if id(h[2]) in wanted_nodes]
    la, lb = _bound(fa) | set(pa), _bound(fb) | set(pb)
    stored = {n.id for _, head, _ in wanted for n in _names(head) if isinstance(n.ctx, ast.Store)}
    used = {n.id for around, head, _ in wanted for node in (*(h for h, _ in around), head) for n in _names(node)}
    if any(name in la and name not in pa and name not in stored for name in used):
        return None  # it uses a local it does not assign: its meaning is not compared
    pairs = _Pairs(la, lb)
    for a, b in zip(pa, pb, strict=True):
        if not pairs.bind(a, b):
            return None
    have = _heads(fb)
    at = 0
    for around, head, _ in wanted:
        for k in range(at, len(have)):
            trial = pairs.copy()
            if _chain_equal(around, have[k][0], trial) and _equal(head, have[k][1], trial):
                pairs, at = trial, k + 1
                break
        else:
            return None
    renames = ", ".join(f"{a} -> {b}" for a, b in sorted(pairs.forward.items()) if a != b)
    up_to = f" up to a consistent renaming of local names ({renames})" if renames else ""
    return (
        f"statements: its {len(wanted)} added statement(s) stand in {theirs.qualname} as Python ASTs{up_to}, in the "
        "same order and nesting"
    )


class _Pairs:
    """A bijection between the local names of two definitions, grown as statements are compared."""

    def __init__(self, la: set[str], lb: set[str]) -> None:
        self.la, self.lb = la, lb
        self.forward: dict[str, str] = {}
        self.back: dict[str, str] = {}

    def copy(self) -> _Pairs:
        other = _Pairs(self.la, self.lb)
        other.forward, other.back = dict(self.forward), dict(self.back)
        return other

    def bind(self, a: str, b: str) -> bool:
        if a not in self.la and b not in self.lb:
            return a == b
        if a not in self.la or b not in self.lb:
            return False
        if self.forward.get(a, b) != b or self.back.get(b, a) != a:
            return False
        self.forward[a], self.back[b] = b, a
        return True


def _equal(a: object, b: object, pairs: _Pairs) -> bool:
    """Whether two AST values are equal up to ``pairs`` (line numbers aside)."""
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_equal(x, y, pairs) for x, y in zip(a, b, strict=True))
    if not isinstance(a, ast.AST):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, ast.Name) and isinstance(b, ast.Name):
        return type(a.ctx) is type(b.ctx) and pairs.bind(a.id, b.id)
    return all(_equal(getattr(a, f, None), getattr(b, f, None), pairs) for f in a._fields)


def _chain_equal(mine: Sequence[tuple[ast.AST, str]], theirs: Sequence[tuple[ast.AST, str]], pairs: _Pairs) -> bool:
    return len(mine) == len(theirs) and all(
        body == other and _equal(h, g, pairs) for (h, body), (g, other) in zip(mine, theirs, strict=True)
    )


def _heads(fn: ast.AST) -> list[Head]:
    """Each statement of ``fn``'s body in order, a compound one by its header (bodies emptied), with the headers
    around it."""
    out: list[Head] = []

    def walk(body: Sequence[ast.stmt], around: tuple[tuple[ast.AST, str], ...]) -> None:
        for node in body:
            if not isinstance(node, _COMPOUND):
                out.append((around, node, node))
                continue
            head = copy.copy(node)
            for name in (*_BODIES, "handlers"):
                if hasattr(head, name):
                    setattr(head, name, [])
            out.append((around, head, node))
            for name in _BODIES:
                walk(getattr(node, name, []), (*around, (head, name)))
            for handler in getattr(node, "handlers", []):
                walk(handler.body, (*around, (head, f"except {ast.dump(handler.type) if handler.type else ''}")))

    walk(getattr(fn, "body", []), ())
    return out


def _names(node: ast.AST) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name)]


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    extra = [x for x in (a.vararg, a.kwarg) if x is not None]
    return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, *extra)]


def _bound(fn: ast.AST) -> set[str]:
    """The names ``fn`` assigns anywhere in its body, but those it declares ``global`` or ``nonlocal``."""
    return set(_bound_names(fn))


@per_memo(maxsize=16)
def _bound_names(fn: ast.AST) -> frozenset[str]:
    """(one walk of ``fn``, kept for the node: a release's definition is compared with each hunk made in it)"""
    declared: set[str] = set()
    stored: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Store | ast.Del):
                stored.add(n.id)
        elif isinstance(n, ast.Global | ast.Nonlocal):
            declared.update(n.names)
    return frozenset(stored - declared)
