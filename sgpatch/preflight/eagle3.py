"""The EAGLE-3 capture rule of a model class, read from its ``set_eagle3_layers_to_capture`` with :mod:`ast`.

The rule is data in the method's body: the default layer list when the draft names none
(``[2, num_layers // 2, num_layers - 3]``), and the offset added to the draft's ids (Llama: always +1;
DeepSeek after upstream PR #25454: +1 only when ``layer_ids[0] == 1``).  The method is found on the class or
its bases inside the tree, and followed through ``self.<attr>.set_eagle3_layers_to_capture(layer_ids)`` to
the class ``__init__`` assigns to ``self.<attr>`` (Kimi-K2.5's wrapper delegates to its language model).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from sgpatch.interface.modules import ClassNode, Modules, base_chain, delegates_of
from sgpatch.preflight.classes import release_modules
from sgpatch.preflight.release import ReleaseRules
from sgpatch.preflight.sources import method

METHOD = "set_eagle3_layers_to_capture"
MAX_DELEGATION = 4


@dataclass(frozen=True, slots=True)
class CaptureRule:
    """How one model class turns the draft's aux layer ids (or none) into the layers it captures."""

    cls: str
    """The class that was asked (the architecture's)."""
    method_at: str | None
    """The ``def`` that decides (after delegation); None when the class has no such method."""
    default: str | None
    """The default list's expression as written (None: not understood)."""
    default_var: str | None
    """The name that expression uses for the target's layer count (``num_layers``)."""
    default_at: str | None
    offset: int | None
    """Added to each of the draft's ids (None: the method's form is not understood)."""
    only_if_first: int | None
    """The offset applies only when the first id equals this (None: always)."""
    offset_at: str | None
    delegated: tuple[str, ...] = ()
    """The delegation followed: ``self.language_model -> DeepseekV3ForCausalLM``."""


def read_capture_rule(release: ReleaseRules, architecture: str) -> CaptureRule | None:
    entry = release.registry.get(architecture)
    if entry is None:
        return None
    mods = release_modules(release)
    start = mods.resolve(entry.file, entry.name)
    if not isinstance(start, ClassNode):
        return None
    cls: ClassNode = start
    trail: list[str] = []
    for _ in range(MAX_DELEGATION):
        owner, fn = _find_method(mods, cls)
        if owner is None or fn is None:
            return CaptureRule(architecture, None, None, None, None, None, None, None, tuple(trail))
        attr = _delegate_attr(fn)
        if attr is None:
            return _rule(architecture, owner.path, fn, tuple(trail))
        nxt = next((c for _, _, c in delegates_of(mods, base_chain(owner), attr) if c is not None), None)
        if nxt is None:
            break
        trail.append(f"self.{attr} -> {nxt.name}")
        cls = nxt
    return CaptureRule(architecture, None, None, None, None, None, None, None, tuple(trail))


def _find_method(mods: Modules, cls: ClassNode) -> tuple[ClassNode | None, ast.FunctionDef | None]:
    for c in base_chain(cls):
        if METHOD in c.members:
            parsed = mods.parse(c.path)
            node = parsed.class_node(c.line) if parsed is not None else None
            fn = method(node, METHOD) if node is not None else None
            return c, fn
    return None, None


def _param(fn: ast.FunctionDef) -> str | None:
    args = fn.args.args
    return args[1].arg if len(args) > 1 else None


def _delegate_attr(fn: ast.FunctionDef) -> str | None:
    """``attr`` when the method hands its ids unchanged to ``self.<attr>.set_eagle3_layers_to_capture``."""
    param = _param(fn)
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == METHOD
            and isinstance(node.func.value, ast.Attribute)
            and isinstance(node.func.value.value, ast.Name)
            and node.func.value.value.id == "self"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == param
        ):
            return node.func.value.attr
    return None


def _is_none_test(test: ast.expr, param: str | None) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == param
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def _capture_assigns(body: list[ast.stmt]) -> list[ast.Assign]:
    return [
        n
        for st in body
        for n in ast.walk(st)
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Attribute)
        and n.targets[0].attr == "layers_to_capture"
    ]


def _rule(architecture: str, path: str, fn: ast.FunctionDef, trail: tuple[str, ...]) -> CaptureRule:
    param = _param(fn)
    default = default_var = default_at = None
    offset = only = offset_at = None
    branch = next((n for n in ast.walk(fn) if isinstance(n, ast.If) and _is_none_test(n.test, param)), None)
    if branch is not None:
        found = _capture_assigns(branch.body)
        if found and isinstance(found[0].value, ast.List):
            default, default_at = ast.unparse(found[0].value), f"{path}:{found[0].lineno}"
            names = {n.id for n in ast.walk(found[0].value) if isinstance(n, ast.Name)}
            default_var = next(iter(names)) if len(names) == 1 else None
        assigns = _capture_assigns(branch.orelse)
        cond = next((n for st in branch.orelse for n in ast.walk(st) if isinstance(n, ast.If)), None)
        if cond is not None and _first_equals(cond.test, param) is not None:
            plus, plain = _capture_assigns(cond.body), _capture_assigns(cond.orelse)
            k = _offset_of(plus[0].value, param) if plus else None
            if k is not None and plain and _offset_of(plain[0].value, param) == 0:
                offset, only, offset_at = k, _first_equals(cond.test, param), f"{path}:{cond.lineno}"
        elif len(assigns) == 1:
            offset, offset_at = _offset_of(assigns[0].value, param), f"{path}:{assigns[0].lineno}"
    return CaptureRule(
        architecture, f"{path}:{fn.lineno}", default, default_var, default_at, offset, only, offset_at, trail
    )


def _first_equals(test: ast.expr, param: str | None) -> int | None:
    """C in ``param and param[0] == C`` (or ``param[0] == C``)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for value in test.values:
            found = _first_equals(value, param)
            if found is not None:
                return found
        return None
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.left, ast.Subscript)
        and isinstance(test.left.value, ast.Name)
        and test.left.value.id == param
        and isinstance(test.left.slice, ast.Constant)
        and test.left.slice.value == 0
        and isinstance(test.comparators[0], ast.Constant)
        and type(test.comparators[0].value) is int
    ):
        return test.comparators[0].value
    return None


def _offset_of(value: ast.expr, param: str | None) -> int | None:
    """0 for ``param`` / ``list(param)``; K for ``[v + K for v in param]``; None for anything else."""
    if isinstance(value, ast.Name) and value.id == param:
        return 0
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "list"
        and len(value.args) == 1
        and isinstance(value.args[0], ast.Name)
        and value.args[0].id == param
    ):
        return 0
    if isinstance(value, ast.ListComp) and len(value.generators) == 1:
        gen = value.generators[0]
        elt = value.elt
        if (
            isinstance(gen.iter, ast.Name)
            and gen.iter.id == param
            and not gen.ifs
            and isinstance(gen.target, ast.Name)
            and isinstance(elt, ast.BinOp)
            and isinstance(elt.op, ast.Add)
            and isinstance(elt.left, ast.Name)
            and elt.left.id == gen.target.id
            and isinstance(elt.right, ast.Constant)
            and type(elt.right.value) is int
        ):
            return elt.right.value
    return None
