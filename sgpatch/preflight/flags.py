"""SGLang's launch flags as the stack's release declares them, read with ``ast`` (nothing imported).

Two ways of declaring them exist, and a release may use both: ``parser.add_argument("--flag", ...)`` calls in
``ServerArgs.add_cli_args`` (0.5.9), and annotated fields ``name: A[type, "help" | Arg(aliases=...)] = default``
turned into flags by ``add_cli_args_from_dataclass`` (0.5.23, ``arg_groups/fields/*.py``).  ``from_cli_args``'s
``args.tp_size = args.tensor_parallel_size`` renames are read too, so every value ends under its ServerArgs name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal

from sgpatch.errors import ConfigError
from sgpatch.pyast import parse_python
from sgpatch.source.tree import SourceTree

SERVER_ARGS = "python/sglang/srt/server_args.py"
FIELDS_DIR = "python/sglang/srt/arg_groups/fields/"

Kind = Literal["value", "true", "false", "list", "optional", "none"]
"""``value``: one value; ``true``/``false``: store_true/store_false; ``list``: nargs + or *; ``optional``:
nargs ?; ``none``: a custom action taking no value (``DeprecatedAction``)."""

Conv = Literal["int", "float", "str", "json", "hint"]
"""``hint``: ``human_readable_int`` (0.5.23: ``128k``, ``1Mi``)."""


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: every spelling, where its value goes, how it is read, where it is declared."""

    strings: tuple[str, ...]
    dest: str
    kind: Kind
    conv: Conv
    choices: tuple[object, ...] | None
    required: bool
    at: str
    """``python/sglang/srt/server_args.py:2893``"""


@dataclass(frozen=True, slots=True)
class ServerFlags:
    flags: tuple[Flag, ...]
    renames: tuple[tuple[str, str], ...]
    """(argparse dest, ServerArgs field) pairs from ``from_cli_args``."""
    parse_at: str
    """Where the launch's argv is parsed: ``server_args.py:<line of parse_args>``."""

    def field_of(self, dest: str) -> str:
        return dict(self.renames).get(dest, dest)


_CONV = {
    "int": "int",
    "float": "float",
    "str": "str",
    "nullable_str": "str",
    "loads": "json",
    "json_list_type": "json",
    "human_readable_int": "hint",
}


def _name(node: ast.AST | None) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _literal(node: ast.AST | None) -> object:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _choices(node: ast.AST | None) -> tuple[object, ...] | None:
    value = _literal(node)
    return tuple(value) if isinstance(value, list | tuple) and value else None


def _from_call(call: ast.Call, path: str) -> Flag | None:
    strings = tuple(a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    if not strings or not all(s.startswith("-") for s in strings):
        return None
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    long = next((s for s in strings if s.startswith("--")), strings[0])
    dest = _literal(kw.get("dest"))
    action = kw.get("action")
    nargs = _literal(kw.get("nargs"))
    kind: Kind = "value"
    if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
        kind = "true" if action.value == "store_true" else "false"
    elif action is not None and nargs is None and "Deprecated" in _name(action):
        kind = "none"
    elif nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1):
        kind = "list"
    elif nargs == "?":
        kind = "optional"
    elif nargs == 0:
        kind = "none"
    return Flag(
        strings=strings,
        dest=dest if isinstance(dest, str) else long.lstrip("-").replace("-", "_"),
        kind=kind,
        conv=_CONV.get(_name(kw.get("type")), "str"),  # type: ignore[arg-type]
        choices=_choices(kw.get("choices")),
        required=_literal(kw.get("required")) is True,
        at=f"{path}:{call.lineno}",
    )


def _unwrap(node: ast.expr) -> tuple[ast.expr, bool]:
    """``Optional[X]`` / ``X | None`` -> (X, True)."""
    if isinstance(node, ast.Subscript) and _name(node.value) == "Optional":
        return node.slice, True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for a, b in ((node.left, node.right), (node.right, node.left)):
            if isinstance(b, ast.Constant) and b.value is None:
                return a, True
    return node, False


def _from_field(stmt: ast.AnnAssign, path: str) -> Flag | None:
    """``name: A[type, "help" | Arg(...)] = default`` -> the flag ``add_cli_args_from_dataclass`` makes."""
    ann = stmt.annotation
    if not (
        isinstance(stmt.target, ast.Name) and isinstance(ann, ast.Subscript) and _name(ann.value) in ("A", "Annotated")
    ):
        return None
    if not isinstance(ann.slice, ast.Tuple) or len(ann.slice.elts) < 2:
        return None
    raw, meta = ann.slice.elts[0], ann.slice.elts[1]
    kw: dict[str, ast.expr] = {}
    if isinstance(meta, ast.Call) and _name(meta.func) == "Arg":
        kw = {k.arg: k.value for k in meta.keywords if k.arg}
        if _literal(kw.get("no_cli")) is True:
            return None
    elif not (isinstance(meta, ast.Constant) and isinstance(meta.value, str)):
        return None
    field = stmt.target.id
    cli = _literal(kw.get("cli_name"))
    name = cli if isinstance(cli, str) else "--" + field.replace("_", "-")
    aliases = _literal(kw.get("aliases"))
    strings = (name, *(a for a in aliases if isinstance(a, str))) if isinstance(aliases, list) else (name,)
    inner, _ = _unwrap(raw)
    base = _name(inner.value) if isinstance(inner, ast.Subscript) else _name(inner)
    kind: Kind = "value"
    conv: Conv = "str"
    choices = _choices(kw.get("choices"))
    parser = _name(kw.get("type_parser"))
    if base == "Literal" and isinstance(inner, ast.Subscript):
        lits = _literal(inner.slice)
        values = tuple(lits) if isinstance(lits, tuple) else (lits,)
        choices = choices or values
        conv = "int" if values and isinstance(values[0], int) else "str"
    elif base in ("list", "List") and not parser:
        kind = "list"
        elem = inner.slice if isinstance(inner, ast.Subscript) else None
        conv = _CONV.get(_name(elem), "str")  # type: ignore[assignment]
    elif base == "bool":
        kind = "true"
    elif kw.get("action") is not None:
        kind = "none" if "Deprecated" in _name(kw.get("action")) else "value"
    else:
        conv = _CONV.get(parser or base, "str")  # type: ignore[assignment]
    nargs = _literal(kw.get("nargs"))
    if kind == "value" and nargs in ("+", "*"):
        kind = "list"
    elif kind == "value" and nargs == "?":
        kind = "optional"
    required = _literal(kw.get("required")) is True or (stmt.value is None and _literal(kw.get("required")) is None)
    return Flag(strings, field, kind, conv, choices, required and kind == "value", f"{path}:{stmt.lineno}")


def _renames(tree: ast.Module) -> tuple[tuple[str, str], ...]:
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == "from_cli_args":
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Attribute)
                    and isinstance(node.value, ast.Attribute)
                    and _name(node.targets[0].value) == _name(node.value.value) == "args"
                ):
                    out.append((node.value.attr, node.targets[0].attr))
    return tuple(out)


def _parse(tree: SourceTree, path: str) -> ast.Module:
    data = tree.read(path)
    if data is None:
        raise ConfigError(f"{tree.label}: no {path}", hint="is this an SGLang checkout of the stack?")
    try:
        return parse_python(data, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ConfigError(f"{tree.label}/{path}: not Python SGLang could run ({type(exc).__name__})") from None


def read_flags(tree: SourceTree) -> ServerFlags:
    """Every flag ``prepare_server_args`` gives its parser, in declaration order (a later spelling wins)."""
    module = _parse(tree, SERVER_ARGS)
    flags: dict[str, Flag] = {}

    def add(flag: Flag | None) -> None:
        if flag is not None:
            for s in flag.strings:
                flags[s] = flag

    parse_at = SERVER_ARGS
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "add_argument":
                add(_from_call(node, SERVER_ARGS))
            elif node.func.attr == "parse_args" and _name(node.func.value) == "parser":
                parse_at = f"{SERVER_ARGS}:{node.lineno}"
    sources = [(SERVER_ARGS, module)]
    sources += [(p, _parse(tree, p)) for p in tree.list(FIELDS_DIR) if p.endswith(".py")]
    for path, mod in sources:
        for cls in (n for n in mod.body if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign):
                    add(_from_field(stmt, path))
    unique = tuple(dict.fromkeys(flags.values()))
    if not unique:
        raise ConfigError(f"{tree.label}/{SERVER_ARGS}: no launch flag declared", hint="is this an SGLang checkout?")
    return ServerFlags(unique, _renames(module), parse_at)
