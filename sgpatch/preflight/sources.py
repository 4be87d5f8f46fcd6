"""Reading SGLang's files for preflight: bounded, never through a link, parsed with :mod:`ast`, never imported.

Every fact the rules use is located as ``python/sglang/...:LINE`` in the checkout it was read from.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from sgpatch.errors import ConfigError
from sgpatch.pyast import parse_python
from sgpatch.source.tree import DirTree

MAX_SOURCE_BYTES = 8 << 20  # SGLang's largest source file is under 1 MB
SRT = "python/sglang/srt/"


def read_source(tree: DirTree, path: str) -> bytes | None:
    """The bytes of ``path`` (None: no such regular file); over MAX_SOURCE_BYTES is a ConfigError (exit 2)."""
    data = tree.read_at_most(path, MAX_SOURCE_BYTES)
    if data is not None and len(data) > MAX_SOURCE_BYTES:
        raise ConfigError(f"{path}: over {MAX_SOURCE_BYTES} bytes in {tree.label}; not an SGLang source file")
    return data


def parse_source(tree: DirTree, path: str) -> ast.Module | None:
    """``path`` parsed (None: no such file); a file that does not parse is a ConfigError naming it."""
    data = read_source(tree, path)
    if data is None:
        return None
    try:
        return parse_python(data, filename=path)
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else path
        raise ConfigError(f"{where}: cannot parse ({exc.msg}) in {tree.label}") from exc
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ConfigError(f"{path}: cannot parse ({exc}) in {tree.label}") from exc


def first_parsed(tree: DirTree, paths: tuple[str, ...]) -> tuple[str, ast.Module] | None:
    """The first of ``paths`` the tree has, parsed."""
    for path in paths:
        module = parse_source(tree, path)
        if module is not None:
            return path, module
    return None


def top_function(module: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def top_class(module: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def assigned_list(module: ast.Module, name: str) -> tuple[tuple[str, ...], int] | None:
    """``NAME = ["a", "b", ...]`` at the top level: its strings and line (None: absent or not such a list)."""
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target: ast.expr | None = node.targets[0]
        elif isinstance(node, ast.AnnAssign):
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name) and target.id == name:
            value = node.value
            if isinstance(value, ast.List | ast.Tuple) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
            ):
                return tuple(e.value for e in value.elts), node.lineno  # type: ignore[attr-defined]
            return None
    return None


def walk_in_order(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node`` in source order (``ast.walk`` is breadth first)."""
    for child in ast.iter_child_nodes(node):
        yield child
        yield from walk_in_order(child)


_ENTRY = re.compile(rb"^EntryClass\s*[:=]", re.MULTILINE)
MAX_ENTRY_LINES = 60


def entry_classes(data: bytes) -> tuple[tuple[str, ...], int] | None:
    """The names a model file's top-level ``EntryClass = X`` or ``= [X, Y]`` lists, and its line.

    Only that statement is parsed (a model file can be 10k lines; the registry reads every one), so the
    whole registry costs a text scan of the models directory.  None: no such statement, or not a plain
    name or list of names."""
    matches = list(_ENTRY.finditer(data))  # the last binding wins, as at import
    found = matches[-1] if matches else None
    if found is None:
        return None
    line = data.count(b"\n", 0, found.start()) + 1
    lines = data[found.start() :].split(b"\n", MAX_ENTRY_LINES)[:MAX_ENTRY_LINES]
    for end in range(1, len(lines) + 1):
        try:
            stmt = ast.parse(b"\n".join(lines[:end]))
        except (SyntaxError, ValueError):
            continue
        if len(stmt.body) != 1:
            return None
        node = stmt.body[0]
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        elts = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
        names = tuple(e.id for e in elts if isinstance(e, ast.Name))
        return (names, line) if names and len(names) == len(elts) else None
    return None
