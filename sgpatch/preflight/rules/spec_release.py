"""SGLang's speculative-decoding flag rules (EAGLE/EAGLE3), read from the stack's release with :mod:`ast`.

Where they live: 0.5.9 ``ServerArgs._handle_speculative_decoding`` (``server_args.py``), 0.5.23
``_handle_eagle_family`` (``arg_groups/speculative_hook.py``); the page-size rewrites of the attention backends
run before them (0.5.9 ``ServerArgs._handle_attention_backend_compatibility``, 0.5.23
``_mla_backend_page_constraints`` in ``arg_groups/overrides.py``).  What is data (the backends allowed for
topk > 1 on pages, the auto-chosen (steps, topk, draft tokens) per architecture, the page sizes each backend
forces, the spec-v2 environment variable) is read; each check is located by its shape, with its line.  The
logic is mirrored in :mod:`sgpatch.preflight.rules_spec`.  A check the release does not have is None.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from sgpatch.preflight.sources import SRT, first_parsed, method, top_class, top_function, walk_in_order
from sgpatch.source.tree import DirTree

HANDLERS = (
    (SRT + "arg_groups/speculative_hook.py", None, "_handle_eagle_family"),
    (SRT + "server_args.py", "ServerArgs", "_handle_speculative_decoding"),
)
PAGE_REWRITERS = (
    (SRT + "arg_groups/overrides.py", None, "_mla_backend_page_constraints"),
    (SRT + "server_args.py", "ServerArgs", "_handle_attention_backend_compatibility"),
)
AUTO = ("_auto_choose_speculative_params", "auto_choose_speculative_params")
BACKEND_FIELDS = (
    "attention_backend",
    "decode_attention_backend",
    "prefill_attention_backend",
    "speculative_draft_attention_backend",
)


def at(path: str, line: int) -> str:
    return f"{path}:{line}"


@dataclass(frozen=True, slots=True)
class PageRewrite:
    """``if <backend field> == "x" ...: [if page_size not in allowed:] page_size = value``."""

    backends: tuple[str, ...]
    fields: tuple[str, ...]
    """The ServerArgs fields compared with the backend names."""
    allowed: tuple[int, ...] | None
    """None: the page size is forced whatever it was."""
    value: int
    where: str


@dataclass(frozen=True, slots=True)
class SpecRules:
    handler_at: str
    steps_assert_at: str | None
    """``assert topk is None and num_draft_tokens is None`` when ``--speculative-num-steps`` is not given."""
    auto: tuple[tuple[tuple[str, ...], tuple[int, int, int]], ...]
    """(architectures, (steps, topk, draft tokens)) chosen when none of the three is given."""
    auto_default: tuple[int, int, int] | None
    auto_at: str | None
    trtllm_topk_at: str | None
    """The raise for topk > 1 with ``trtllm_mha``."""
    trtllm_compare_at: str | None
    """Its ``topk > 1`` (a TypeError when topk is still None)."""
    adjust_at: str | None
    """topk == 1: num_draft_tokens is rewritten to num_steps + 1."""
    page_backends: tuple[str, ...] | None
    """The attention backends allowed for topk > 1 with page_size > 1."""
    page_at: str | None
    page_compare_at: str | None
    """The page check's ``topk > 1`` (a TypeError when topk is still None)."""
    spec_v2_var: str | None
    """0.5.9: the environment variable that keeps the overlap schedule on (and then topk must be 1)."""
    spec_v2_topk_at: str | None
    overlap_off_at: str | None
    max_running: tuple[int, str] | None
    """``max_running_requests`` set to this when not given, and where."""
    page_rewrites: tuple[PageRewrite, ...]


def _function(tree: DirTree, places: tuple[tuple[str, str | None, str], ...]) -> tuple[str, ast.FunctionDef] | None:
    for path, cls_name, name in places:
        found = first_parsed(tree, (path,))
        if found is None:
            continue
        module = found[1]
        cls = top_class(module, cls_name) if cls_name else None
        fn = method(cls, name) if cls is not None else (top_function(module, name) if cls_name is None else None)
        if fn is not None:
            return path, fn
    return None


def _mentions(node: ast.AST) -> set[str]:
    """Every attribute/name and string constant below ``node``."""
    out: set[str] = set()
    for n in [node, *walk_in_order(node)]:
        if isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value)
    return out


def _first_raise(node: ast.AST) -> ast.Raise | None:
    return next((n for n in walk_in_order(node) if isinstance(n, ast.Raise)), None)


def _strings(node: ast.expr) -> tuple[str, ...] | None:
    if isinstance(node, ast.List | ast.Tuple) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]
    return None


def _ints(node: ast.expr) -> tuple[int, ...] | None:
    if isinstance(node, ast.List | ast.Tuple | ast.Set) and all(
        isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts
    ):
        return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]
    return None


def _scope(fn: ast.FunctionDef) -> ast.AST:
    """0.5.9's handler covers every algorithm: the EAGLE branch is the ``if`` naming ``"EAGLE3"``."""
    for node in walk_in_order(fn):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.In) and "EAGLE3" in _mentions(test):
            return node
    return fn


def _assigns(node: ast.AST, field: str) -> list[tuple[ast.expr, int]]:
    """``self.field = v``, ``field = v`` and ``declare_resolution(..., field=v)`` below ``node``."""
    out = []
    for n in walk_in_order(node):
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            t = n.targets[0]
            if (isinstance(t, ast.Attribute) and t.attr == field) or (isinstance(t, ast.Name) and t.id == field):
                out.append((n.value, n.lineno))
        elif isinstance(n, ast.Call):
            out.extend((k.value, n.lineno) for k in n.keywords if k.arg == field)
    return out


def read_spec_rules(root: DirTree) -> SpecRules | None:
    found = _function(root, HANDLERS)
    if found is None:
        return None
    path, fn = found
    scope = _scope(fn)
    steps_assert = trtllm = trtllm_cmp = adjust = page_at = page_cmp = v2_var = v2_raise = overlap_off = None
    page_backends: tuple[str, ...] | None = None
    max_running = None
    local_tuples = {
        t.id: v
        for n in walk_in_order(fn)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(t := n.targets[0], ast.Name)
        if (v := _strings(n.value)) is not None
    }
    for node in walk_in_order(scope):
        if isinstance(node, ast.Assert) and steps_assert is None:
            names = _mentions(node.test)
            if {"speculative_eagle_topk", "speculative_num_draft_tokens"} <= names:
                steps_assert = at(path, node.lineno)
        if not isinstance(node, ast.If):
            continue
        names = _mentions(node.test)
        raised = _first_raise(node)
        if "trtllm_mha" in names and trtllm is None and raised is not None:
            inner = next((n for n in walk_in_order(node) if isinstance(n, ast.If)), None)
            if inner is not None and "speculative_eagle_topk" in _mentions(inner.test):
                trtllm, trtllm_cmp = at(path, raised.lineno), at(path, _topk_compare(inner.test))
        elif {"speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_num_steps"} <= names:
            if adjust is None and any(isinstance(n, ast.NotEq) for n in walk_in_order(node.test)):
                adjust = at(path, node.lineno)
        elif {"speculative_eagle_topk", "page_size"} <= names and raised is not None and page_at is None:
            for cmp in (n for n in walk_in_order(node.test) if isinstance(n, ast.Compare)):
                if isinstance(cmp.ops[0], ast.NotIn):
                    right = cmp.comparators[0]
                    page_backends = _strings(right) or (
                        local_tuples.get(right.id) if isinstance(right, ast.Name) else None
                    )
            page_at, page_cmp = at(path, raised.lineno), at(path, _topk_compare(node.test))
        elif "max_running_requests" in names and max_running is None:
            values = _assigns(node, "max_running_requests")
            if values and isinstance(values[0][0], ast.Constant) and type(values[0][0].value) is int:
                max_running = (values[0][0].value, at(path, values[0][1]))
        if v2_var is None and node.orelse:
            var = next(
                (
                    n.attr
                    for n in walk_in_order(node.test)
                    if isinstance(n, ast.Attribute) and n.attr.startswith("SGLANG_")
                ),
                None,
            )
            off = [v for v in _assigns(ast.Module(body=node.orelse, type_ignores=[]), "disable_overlap_schedule")]
            if var is not None and off and isinstance(off[0][0], ast.Constant) and off[0][0].value is True:
                v2_var, overlap_off = var, at(path, off[0][1])
                v2_raise = at(path, raised.lineno) if raised is not None and raised.lineno < off[0][1] else None
    auto, default, auto_at = _auto(root, path)
    return SpecRules(
        at(path, fn.lineno),
        steps_assert,
        auto,
        default,
        auto_at,
        trtllm,
        trtllm_cmp,
        adjust,
        page_backends,
        page_at,
        page_cmp,
        v2_var,
        v2_raise,
        overlap_off,
        max_running,
        _page_rewrites(root),
    )


def _topk_compare(test: ast.expr) -> int:
    for n in [test, *walk_in_order(test)]:
        if isinstance(n, ast.Compare) and "speculative_eagle_topk" in _mentions(n.left):
            return n.lineno
    return test.lineno


def _auto(
    root: DirTree, path: str
) -> tuple[tuple[tuple[tuple[str, ...], tuple[int, int, int]], ...], tuple[int, int, int] | None, str | None]:
    """The ``if model_arch in [...]: return (steps, topk, tokens)`` chain and its final ``else``."""
    found = _function(root, tuple((path, None, name) for name in AUTO))
    if found is None:
        return (), None, None
    fpath, fn = found
    out: list[tuple[tuple[str, ...], tuple[int, int, int]]] = []
    default = None

    def triple(body: list[ast.stmt]) -> tuple[int, int, int] | None:
        ret = body[-1] if body else None
        if isinstance(ret, ast.Return) and ret.value is not None:
            got = _ints(ret.value)
            return (got[0], got[1], got[2]) if got is not None and len(got) == 3 else None
        return None

    node: ast.stmt | None = next((n for n in fn.body if isinstance(n, ast.If) and _arch_list(n.test)), None)
    while isinstance(node, ast.If):
        archs = _arch_list(node.test)
        value = triple(node.body)
        if archs is not None and value is not None:
            out.append((archs, value))
        rest = node.orelse
        if len(rest) == 1 and isinstance(rest[0], ast.If):
            node = rest[0]
        else:
            default = triple(rest)
            node = None
    return tuple(out), default, at(fpath, fn.lineno)


def _arch_list(test: ast.expr) -> tuple[str, ...] | None:
    if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.In):
        return _strings(test.comparators[0])
    return None


def _page_rewrites(root: DirTree) -> tuple[PageRewrite, ...]:
    found = _function(root, PAGE_REWRITERS)
    if found is None:
        return ()
    path, fn = found
    out = []
    for node in fn.body:
        rewrite = _page_rewrite(path, node)
        if rewrite is not None:
            out.append(rewrite)
    return tuple(out)


def _page_rewrite(path: str, node: ast.stmt) -> PageRewrite | None:
    """A top-level ``if`` whose test is only ``<field> == "backend"`` comparisons joined by ``or``."""
    if not isinstance(node, ast.If):
        return None
    parts = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or) else [node.test]
    backends: list[str] = []
    fields: list[str] = []
    for part in parts:
        if not (
            isinstance(part, ast.Compare)
            and isinstance(part.ops[0], ast.Eq)
            and isinstance(part.left, ast.Attribute)
            and part.left.attr in BACKEND_FIELDS
            and isinstance(part.comparators[0], ast.Constant)
            and isinstance(part.comparators[0].value, str)
        ):
            return None
        fields.append(part.left.attr)
        backends.append(part.comparators[0].value)
    values = _assigns(node, "page_size")
    if not values or not (isinstance(values[0][0], ast.Constant) and type(values[0][0].value) is int):
        return None
    value, line = values[0][0].value, values[0][1]
    allowed = None
    for inner in walk_in_order(node):
        if isinstance(inner, ast.If) and "page_size" in _mentions(inner.test) and isinstance(inner.test, ast.Compare):
            op = inner.test.ops[0]
            if isinstance(op, ast.NotIn):
                allowed = _ints(inner.test.comparators[0])
            elif isinstance(op, ast.NotEq) and isinstance(c := inner.test.comparators[0], ast.Constant):
                allowed = (c.value,) if type(c.value) is int else None
            break
    return PageRewrite(tuple(dict.fromkeys(backends)), tuple(dict.fromkeys(fields)), allowed, value, at(path, line))
