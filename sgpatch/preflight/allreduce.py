"""The FlashInfer fused all-reduce and the EAGLE-3 capture, read from the stack's release with :mod:`ast`.

With the fusion on, a decoder layer skips its MLP all-reduce (``should_fuse_mlp_allreduce_with_next_layer``)
and the next layer's ``prepare_attn`` does it, fused with the RMSNorm.  A model loop that captures EAGLE-3's aux
hidden states *before* calling the layer (0.5.9: ``aux_hidden_states.append(hidden_states + residual)``)
captures per-rank partial sums; from 0.5.14 (upstream #28343) the capture happens in
``prepare_attn_and_capture_last_layer_outputs``, after the all-reduce.  What is read here, each with its
``file:line``: the automatic switch in ``ServerArgs`` (its test: architectures, GPU, nodes, DP attention, MoE
all-to-all), the statements that turn it off again, the fields' defaults, the guard's body and the
``apply_flashinfer_allreduce_fusion`` it calls, and, per model file, where the capture happens.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sgpatch.preflight.flags import SERVER_ARGS
from sgpatch.preflight.sources import SRT, parse_source, top_class, walk_in_order
from sgpatch.source.tree import DirTree

COMMUNICATOR = SRT + "layers/communicator.py"
GUARD = "should_fuse_mlp_allreduce_with_next_layer"
CAPTURE_AFTER = "prepare_attn_and_capture_last_layer_outputs"
CAPTURED = "captured_last_layer_outputs"


@dataclass(frozen=True, slots=True)
class Switch:
    """``if TEST: self.FIELD = VALUE`` in ``ServerArgs``: turning the fusion on (automatic) or off."""

    field: str
    value: object
    test: ast.expr
    names: Mapping[str, ast.expr]
    """The method's local assignments above the ``if`` (``device_name``, ``is_h20_device``)."""
    at: str


@dataclass(frozen=True, slots=True)
class Guard:
    """``should_fuse_mlp_allreduce_with_next_layer``'s body and the module it lives in."""

    body: tuple[ast.stmt, ...]
    at: str
    module_names: Mapping[str, ast.expr]
    """Module-level ``name = expr`` of its file (``_is_sm90_supported = _is_cuda and is_sm90_supported()``)."""
    functions: Mapping[str, ast.FunctionDef]
    """Module-level functions of its file (``apply_flashinfer_allreduce_fusion``)."""


@dataclass(frozen=True, slots=True)
class FusionRules:
    field: str | None
    """The ServerArgs field the fusion hangs on (``enable_flashinfer_allreduce_fusion``)."""
    on: tuple[Switch, ...]
    """What turns it on from other flags first (0.5.14: the deprecated ``--enable-flashinfer-allreduce-fusion``)."""
    auto: Switch | None
    off: tuple[Switch, ...]
    defaults: Mapping[str, object]
    """ServerArgs field defaults written as constants."""
    guard: Guard | None


@dataclass(frozen=True, slots=True)
class CaptureSite:
    how: Literal["before-layer", "after-allreduce", "none"]
    """``before-layer``: appended in the model loop before the layer runs (partial sums under a deferred
    all-reduce); ``after-allreduce``: through ``prepare_attn_and_capture_last_layer_outputs``; ``none``: the
    file captures no aux hidden states sgpatch recognises."""
    at: str
    defers: str | None
    """Where the model's layers ask the guard (None: they never defer their all-reduce)."""


def _is_fusion_field(node: ast.expr) -> str | None:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and "allreduce_fusion" in node.attr
        and "aiter" not in node.attr
    ):
        return node.attr
    return None


def _switches(path: str, cls: ast.ClassDef) -> list[Switch]:
    """Every ``self.<fusion field> = CONSTANT`` under an ``if`` in ``ServerArgs``'s methods, its test joined
    with the tests of the ``if`` statements around it."""
    out: list[Switch] = []

    def visit(body: list[ast.stmt], outer: list[ast.expr], locals_: dict[str, ast.expr]) -> None:
        for st in body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                locals_[st.targets[0].id] = st.value
            if isinstance(st, ast.If):
                tests = [*outer, st.test]
                for inner in st.body:
                    if (
                        isinstance(inner, ast.Assign)
                        and len(inner.targets) == 1
                        and (name := _is_fusion_field(inner.targets[0])) is not None
                        and isinstance(inner.value, ast.Constant)
                    ):
                        test = tests[0] if len(tests) == 1 else ast.BoolOp(op=ast.And(), values=tests)
                        out.append(Switch(name, inner.value.value, test, dict(locals_), f"{path}:{st.lineno}"))
                visit(st.body, tests, locals_)
            elif isinstance(st, ast.For | ast.With | ast.Try):
                visit(st.body, outer, locals_)

    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef):
            visit(fn.body, [], {})
    return out


def _lists_architectures(test: ast.expr) -> bool:
    """The automatic switch's test names the architectures it is for: ``model_arch in ["DeepseekV3...", ...]``."""
    return any(
        isinstance(n, ast.List) and len(n.elts) > 1 and all(isinstance(e, ast.Constant) for e in n.elts)
        for n in ast.walk(test)
    )


def _defaults(cls: ast.ClassDef) -> dict[str, object]:
    out: dict[str, object] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Constant):
                out[node.target.id] = value.value
    return out


def _imported_functions(tree: DirTree, module: ast.Module, wanted: set[str]) -> dict[str, ast.FunctionDef]:
    """The functions among ``wanted`` that ``module`` imports from another ``sglang`` module (one level)."""
    out: dict[str, ast.FunctionDef] = {}
    for node in module.body:
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("sglang.")):
            continue
        names = [a.name for a in node.names if a.name in wanted and a.asname is None]
        if not names:
            continue
        base = "python/" + (node.module or "").replace(".", "/")
        source = parse_source(tree, base + ".py") or parse_source(tree, base + "/__init__.py")
        for fn in source.body if source is not None else []:
            if isinstance(fn, ast.FunctionDef) and fn.name in names:
                out[fn.name] = fn
    return out


def _guard(tree: DirTree) -> Guard | None:
    module = parse_source(tree, COMMUNICATOR)
    if module is None:
        return None
    names = {
        n.targets[0].id: n.value
        for n in module.body
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    }
    functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
    called = {n.func.id for n in ast.walk(module) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    functions.update(_imported_functions(tree, module, called - set(functions)))
    for cls in module.body:
        if isinstance(cls, ast.ClassDef):
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == GUARD:
                    return Guard(tuple(fn.body), f"{COMMUNICATOR}:{fn.lineno}", names, functions)
    return None


def read_fusion_rules(tree: DirTree) -> FusionRules:
    """The fusion's switches in ``ServerArgs`` and the guard (a release without them: None fields)."""
    module = parse_source(tree, SERVER_ARGS)
    cls = top_class(module, "ServerArgs") if module is not None else None
    switches = _switches(SERVER_ARGS, cls) if cls is not None else []
    auto = next((s for s in switches if s.value and _lists_architectures(s.test)), None)
    field = auto.field if auto is not None else None
    on = tuple(s for s in switches if s.field == field and s is not auto and s.value)
    off = tuple(s for s in switches if s.field == field and s is not auto and not s.value)
    return FusionRules(field, on, auto, off, _defaults(cls) if cls is not None else {}, _guard(tree))


def _appends_aux(node: ast.AST) -> bool:
    """``aux_hidden_states.append(hidden_states + residual)``: the layer input captured as the loop holds it."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "append"
        and len(node.args) == 1
        and "aux" in ast.unparse(node.func.value)
    )


def _calls_layer(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "layer") or (
        isinstance(func, ast.Subscript) and ast.unparse(func.value).endswith("layers")
    )


def read_capture_site(tree: DirTree, path: str) -> CaptureSite:
    """Where ``path``'s model loop captures EAGLE-3's aux hidden states, and whether its layers defer."""
    module = parse_source(tree, path)
    if module is None:
        return CaptureSite("none", path, None)
    defers = next(
        (
            f"{path}:{n.lineno}"
            for n in walk_in_order(module)
            if isinstance(n, ast.Attribute) and n.attr == GUARD and isinstance(n.ctx, ast.Load)
        ),
        None,
    )
    for loop in walk_in_order(module):
        if not isinstance(loop, ast.For):
            continue
        nodes = list(walk_in_order(loop))
        append = next((n for n in nodes if _appends_aux(n)), None)
        layer = next((n for n in nodes if _calls_layer(n)), None)
        if append is not None and layer is not None and getattr(append, "lineno", 0) < getattr(layer, "lineno", 0):
            return CaptureSite("before-layer", f"{path}:{getattr(append, 'lineno', 0)}", defers)
        handed = next(
            (k for n in nodes if _calls_layer(n) for k in n.keywords if k.arg == CAPTURED),  # type: ignore[attr-defined]
            None,
        )
        if handed is not None:  # the layer captures in its prepare_attn, after the all-reduce (upstream #28343)
            return CaptureSite("after-allreduce", f"{path}:{handed.value.lineno}", defers)
    after = next(
        (n for n in walk_in_order(module) if isinstance(n, ast.Attribute) and n.attr == CAPTURE_AFTER),
        None,
    )
    if after is not None:
        return CaptureSite("after-allreduce", f"{path}:{getattr(after, 'lineno', 0)}", defers)
    return CaptureSite("none", path, defers)
