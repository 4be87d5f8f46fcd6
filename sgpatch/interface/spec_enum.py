"""``SpeculativeAlgorithm`` as a tree defines it (``speculative/spec_info.py``): its members, its ``is_*()``
predicates read from their bodies, the worker classes ``create_worker`` returns for each member; and the
value of a guard when one member runs."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from sgpatch.interface.model import ALGORITHM_ENUM, SPEC_INFO
from sgpatch.interface.sites import final_name
from sgpatch.interface.syntax import absolute_module, is_name, methods_of

Predicates = Mapping[str, frozenset[str]]
Flag = Callable[[str, str], "bool | None"]


def guard_value(e: ast.expr, algo: str, predicates: Predicates, flag: Flag | None) -> bool | None:
    """Whether ``e`` holds when ``algo`` runs; ``None`` when that depends on something else.  With ``flag``,
    an attribute is read as a flag (see :meth:`sgpatch.interface.algorithms.Algorithms.flag`)."""
    if isinstance(e, ast.BoolOp):
        values = [guard_value(v, algo, predicates, flag) for v in e.values]
        decisive = isinstance(e.op, ast.Or)
        return decisive if decisive in values else None if None in values else not decisive
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        inner = guard_value(e.operand, algo, predicates, flag)
        return None if inner is None else not inner
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and not e.args:
        holders, owner = predicates.get(e.func.attr), final_name(e.func.value)
        if holders is not None and (owner == "self" or "algo" in owner):
            return algo in holders
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and "algo" in final_name(e.left):
        right = e.comparators[0]
        if isinstance(right, ast.Attribute) and is_name(right.value, ALGORITHM_ENUM):
            return (algo == right.attr) == isinstance(e.ops[0], ast.Eq | ast.Is)
    if flag is not None and isinstance(e, ast.Attribute):
        return flag(e.attr, algo)
    return None


def read_enum(module: ast.Module | None) -> dict[str, Any] | None:
    """The enum's facts as plain data: ``members``, ``predicates`` (name -> members it holds for) and
    ``workers`` (member -> ``[module, name]`` of each class ``create_worker`` can return; module "" for a
    name of ``spec_info.py`` itself); None when the module defines no such class."""
    node = (
        next((s for s in module.body if isinstance(s, ast.ClassDef) and s.name == ALGORITHM_ENUM), None)
        if module
        else None
    )
    if node is None:
        return None
    members = tuple(
        t.id
        for s in node.body
        if isinstance(s, ast.Assign)
        for t in s.targets
        if isinstance(t, ast.Name) and t.id.isupper()
    )
    predicates: dict[str, frozenset[str]] = {}
    for _ in range(3):  # predicates calling predicates
        for fn in methods_of(node):
            body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if len(fn.args.args) == 1 and len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value:
                found = _members_of(body[0].value, members, predicates)
                if found is not None:
                    predicates[fn.name] = found
    create = next((f for f in methods_of(node) if f.name == "create_worker"), None)
    workers: dict[str, list[list[str]]] = {}
    for m in members:
        if create is None:
            workers[m] = []
            continue
        imported = {
            a.asname or a.name: (absolute_module(SPEC_INFO, n), a.name)
            for n in ast.walk(create)
            if isinstance(n, ast.ImportFrom)
            for a in n.names
        }
        names = _returns(create.body, m, predicates)[0]
        workers[m] = [list(imported.get(name, ("", name))) for name in names]
    return {
        "members": list(members),
        "predicates": {name: sorted(held) for name, held in predicates.items()},
        "workers": workers,
    }


def _members_of(e: ast.expr, members: tuple[str, ...], predicates: Predicates) -> frozenset[str] | None:
    """The members for which a predicate body (``self == X``, ``self in (X, Y)``, ...) holds."""
    everything = frozenset(members)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        inner = _members_of(e.operand, members, predicates)
        return None if inner is None else everything - inner
    if isinstance(e, ast.BoolOp):
        parts = [_members_of(v, members, predicates) for v in e.values]
        sets = [p for p in parts if p is not None]
        if len(sets) != len(parts):
            return None
        return frozenset.union(*sets) if isinstance(e.op, ast.Or) else frozenset.intersection(*sets)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and is_name(e.func.value, "self"):
        return predicates.get(e.func.attr)
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and is_name(e.left, "self"):
        right = e.comparators[0]
        elts = right.elts if isinstance(right, ast.Tuple | ast.List | ast.Set) else [right]
        named = frozenset(x.attr for x in elts if isinstance(x, ast.Attribute) and is_name(x.value, ALGORITHM_ENUM))
        if len(named) != len(elts):
            return None
        return everything - named if isinstance(e.ops[0], ast.NotEq | ast.IsNot | ast.NotIn) else named
    return None


def _returns(stmts: list[ast.stmt], algo: str, predicates: Predicates) -> tuple[list[str], bool]:
    """Names ``stmts`` can return under ``algo``, and whether they can fall through."""
    names: list[str] = []
    for st in stmts:
        if isinstance(st, ast.Return | ast.Raise):
            names += [st.value.id] if isinstance(st, ast.Return) and isinstance(st.value, ast.Name) else []
            return names, False
        if isinstance(st, ast.If):
            v = guard_value(st.test, algo, predicates, None)
            through = False
            for branch in [st.body] if v is True else [st.orelse] if v is False else [st.body, st.orelse]:
                found, falls = _returns(branch, algo, predicates)
                names, through = names + found, through or falls
            if not through:
                return names, False
    return names, True
