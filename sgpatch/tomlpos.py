"""Where a key stands in a TOML file: the line an error about it should name.

``tomllib`` parses without positions; this finds the line of a key path such as
``("stacks", "0.5.9-cu130", "files", "python/sglang/x.py")`` or, in an array of
tables, ``("anchor", 2, "lines")`` (the third ``[[anchor]]``'s ``lines``).  Used by
every reader of a TOML file sgpatch validates (VERSIONS.toml, anchors.toml).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from typing import Any

_HEADER = re.compile(r"^\s*(?P<open>\[\[?)\s*(?P<name>[^\]]+?)\s*\]\]?\s*(#.*)?$")
_PART = r"""(?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_\-]+)"""
_KEYLINE = re.compile(rf"^\s*(?P<key>{_PART}(?:\s*\.\s*{_PART})*)\s*=")


def _parse_key_path(fragment: str) -> tuple[str, ...] | None:
    """The key path a TOML header or dotted key spells, e.g. ``stacks."0.5.9".source``."""
    try:
        doc = tomllib.loads(f"{fragment} = 0")
    except tomllib.TOMLDecodeError:
        return None
    path: list[str] = []
    node: Any = doc
    while isinstance(node, dict) and len(node) == 1:
        key = next(iter(node))
        path.append(key)
        node = node[key]
    return tuple(path)


def locate(text: str, path: Sequence[str | int]) -> int:
    """The 1-based line that defines ``path`` (or its nearest ancestor); 1 if none does."""
    want = tuple(path)
    best_line, best_len = 1, 0
    table: tuple[str | int, ...] = ()
    arrays: dict[tuple[str, ...], int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        full: tuple[str | int, ...]
        if header:
            name = _parse_key_path(header.group("name"))
            if name is None:
                continue
            if header.group("open") == "[[":
                index = arrays.get(name, -1) + 1
                arrays[name] = index
                table = (*name, index)
            else:
                table = name
            full = table
        else:
            keyline = _KEYLINE.match(line)
            if not keyline:
                continue
            key = _parse_key_path(keyline.group("key"))
            if key is None:
                continue
            full = table + key
        if full == want[: len(full)] and len(full) > best_len:
            best_line, best_len = lineno, len(full)
            if best_len == len(want):
                break
    return best_line
