"""An MLA-only attention backend that does not check the model kind: where it fails for an MHA model.

``flashmla`` and ``cutlass_mla`` (0.5.9; ``flashmla`` still in 0.5.23) are registered without the
``if not runner.use_mla_backend: raise`` of ``trtllm_mla``: their factory returns ``Backend(runner)``, whose
``__init__`` (through ``super().__init__`` and the helper classes it builds) reads
``model_runner.model_config.kv_lora_rank``, an attribute ``ModelConfig`` sets only for MLA models, so an MHA
model (an EAGLE-3 draft inheriting ``--attention-backend``) gets an AttributeError there, when its runner
builds its attention backend, after the weights load.  This module finds that read, with :mod:`ast`: the
first one on the path ``__init__`` takes with its parameters at their defaults.
"""

from __future__ import annotations

import ast

from sgpatch.preflight.sources import first_parsed, method, top_class
from sgpatch.source.tree import DirTree

MLA_ONLY_ATTRIBUTE = "kv_lora_rank"
MAX_DEPTH = 6


def _module_path(dotted: str) -> tuple[str, str]:
    base = "python/" + dotted.replace(".", "/")
    return base + ".py", base + "/__init__.py"


def _imported(body: list[ast.stmt], name: str) -> tuple[str, str] | None:
    for node in body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.startswith("sglang")
            and any(a.name == name and a.asname in (None, name) for a in node.names)
        ):
            return _module_path(node.module)
    return None


def mla_attribute_read(tree: DirTree, fn: ast.FunctionDef) -> str | None:
    """``path:LINE`` of the ``model_config.kv_lora_rank`` read the backend ``fn`` registers would hit for a
    model without MLA (None: ``fn`` is not ``import X; return X(runner)``, or no such read is reached)."""
    returns = [s for s in fn.body if isinstance(s, ast.Return)]
    if len(returns) != 1 or not isinstance(call := returns[0].value, ast.Call) or not isinstance(call.func, ast.Name):
        return None
    paths = _imported(fn.body, call.func.id)
    found = first_parsed(tree, paths) if paths is not None else None
    if found is None:
        return None
    return _class_init(tree, found[0], found[1], call.func.id, 0)


def _class_init(tree: DirTree, path: str, module: ast.Module, name: str, depth: int) -> str | None:
    cls = top_class(module, name)
    if cls is None:
        paths = _imported(module.body, name)
        found = first_parsed(tree, paths) if paths is not None and depth < MAX_DEPTH else None
        return _class_init(tree, found[0], found[1], name, depth + 1) if found is not None else None
    init = method(cls, "__init__")
    if init is None:
        base = cls.bases[0] if cls.bases else None
        return _class_init(tree, path, module, base.id, depth + 1) if isinstance(base, ast.Name) else None
    return _walk(tree, path, module, cls, init, init.body, _defaults(init), depth)


def _defaults(fn: ast.FunctionDef) -> dict[str, object]:
    args = fn.args.args
    out: dict[str, object] = {}
    for arg, default in zip(args[len(args) - len(fn.args.defaults) :], fn.args.defaults, strict=True):
        if isinstance(default, ast.Constant):
            out[arg.arg] = default.value
    return out


def _truth(test: ast.expr, params: dict[str, object]) -> bool | None:
    """``p``, ``not p``, ``self.p``, ``not self.p`` for a parameter at its default; None: not known."""
    negate = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if isinstance(test, ast.UnaryOp) and negate else test
    name = inner.id if isinstance(inner, ast.Name) else inner.attr if isinstance(inner, ast.Attribute) else None
    if name is None or name not in params:
        return None
    return bool(params[name]) != negate


def _walk(
    tree: DirTree,
    path: str,
    module: ast.Module,
    cls: ast.ClassDef,
    init: ast.FunctionDef,
    body: list[ast.stmt],
    params: dict[str, object],
    depth: int,
) -> str | None:
    if depth > MAX_DEPTH:
        return None
    for stmt in body:
        if isinstance(stmt, ast.If):
            truth = _truth(stmt.test, params)
            if truth is None:
                continue
            found = _walk(tree, path, module, cls, init, stmt.body if truth else stmt.orelse, params, depth)
            if found is not None:
                return found
            continue
        if isinstance(stmt, ast.FunctionDef | ast.ClassDef | ast.Try | ast.With | ast.For | ast.While):
            continue
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (  # super().__init__(...)
                isinstance(func, ast.Attribute)
                and func.attr == "__init__"
                and isinstance(func.value, ast.Call)
                and isinstance(func.value.func, ast.Name)
                and func.value.func.id == "super"
                and cls.bases
                and isinstance(cls.bases[0], ast.Name)
            ):
                found = _class_init(tree, path, module, cls.bases[0].id, depth + 1)
            elif isinstance(func, ast.Name) and func.id[:1].isupper():  # a helper class built here
                found = _class_init(tree, path, module, func.id, depth + 1)
            else:
                continue
            if found is not None:
                return found
        for node in ast.walk(stmt):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == MLA_ONLY_ATTRIBUTE
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "model_config"
            ):
                return f"{path}:{node.lineno}"
    return None
