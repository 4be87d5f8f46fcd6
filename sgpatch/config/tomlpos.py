"""Where a key stands in a TOML file (the line an error about it should name), and a table reader whose
errors name it.

``tomllib`` parses without positions; this finds the line of a key path such as
``("stacks", "0.5.9-cu130", "files", "python/sglang/x.py")`` or, in an array of
tables, ``("anchor", 2, "lines")`` (the third ``[[anchor]]``'s ``lines``).  Used by
every reader of a TOML file sgpatch validates (VERSIONS.toml, anchors.toml).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sgpatch.errors import ConfigError

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


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class TableReader:
    """Typed access to one parsed table that records which keys were used; every error names ``file:line``."""

    def __init__(self, config_path: Path, text: str, data: Mapping[str, Any], path: tuple[str, ...]) -> None:
        self.config_path = config_path
        self.text = text
        self.data = data
        self.path = path
        self._used: set[str] = set()

    def error(self, key: str | None, message: str, hint: str | None = None) -> ConfigError:
        where = self.path + ((key,) if key else ())
        line = locate(self.text, where)
        # Keys are shown as TOML spells them: bare when plain, else quoted with escapes (never a raw control byte).
        dotted = ".".join(k if _BARE_KEY.match(k) else json.dumps(k) for k in where) or "(top level)"
        return ConfigError(f"{self.config_path}:{line}: {dotted}: {message}", hint=hint)

    def _get(self, key: str, kind: type | tuple[type, ...], kind_name: str, *, required: bool) -> Any:
        self._used.add(key)
        if key not in self.data:
            if required:
                raise self.error(None, f"missing required key {key!r}")
            return None
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise self.error(key, f"expected {kind_name}, found {type(value).__name__}")
        return value

    def string(
        self, key: str, *, required: bool = True, pattern: re.Pattern[str] | None = None, what: str = ""
    ) -> str | None:
        value: str | None = self._get(key, str, "a string", required=required)
        if value is not None and pattern is not None and not pattern.match(value):
            raise self.error(key, f"{value!r} is not {what or 'valid'}")
        return value

    def req_string(self, key: str, *, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        value = self.string(key, pattern=pattern, what=what)
        assert value is not None
        return value

    def integer(self, key: str) -> int:
        value: int = self._get(key, int, "an integer", required=True)
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._get(key, list, "an array of strings", required=False)
        if value is None:
            return ()
        if not all(isinstance(v, str) for v in value):
            raise self.error(key, "expected an array of strings")
        return tuple(value)

    def table(self, key: str, *, required: bool = False) -> TableReader | None:
        value = self._get(key, dict, "a table", required=required)
        if value is None:
            return None
        return TableReader(self.config_path, self.text, value, (*self.path, key))

    def keys(self) -> list[str]:
        self._used.update(self.data)
        return list(self.data)

    def finish(self) -> None:
        unknown = [k for k in self.data if k not in self._used]
        if unknown:
            raise self.error(unknown[0], "unknown key", hint="check the spelling; unknown keys are errors")
