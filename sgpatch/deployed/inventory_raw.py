"""What the inventory parsers collect (INI and YAML alike), before groups and variables are resolved,
and the pieces both parsers use: host ranges, ``host:port``, quoting a file's text in an error."""

from __future__ import annotations

import itertools
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field

from sgpatch.errors import ConfigError

MAX_HOSTS = 10_000
NAME = re.compile(r"[A-Za-z0-9_.\-]+")  # a group name (Ansible warns about more and accepts less)
RANGE = re.compile(r"^(.*?)\[([a-z]|[0-9]+):([a-z]|[0-9]+)(?::([0-9]+))?\](.*)$")


class InventoryError(ConfigError):
    """A host list or inventory sgpatch cannot read (exit 2), naming FILE:LINE."""


@dataclass
class RawGroup:
    """A group as the file states it: its hosts, children and variables, each with its line."""

    line: int
    hosts: dict[str, int] = field(default_factory=dict)
    children: dict[str, int] = field(default_factory=dict)
    vars: dict[str, tuple[object, int]] = field(default_factory=dict)


@dataclass
class RawInventory:
    """An inventory as a parser collected it, before groups and variables are resolved."""

    path: str
    groups: dict[str, RawGroup] = field(default_factory=dict)
    host_vars: dict[str, dict[str, tuple[object, int]]] = field(default_factory=dict)
    host_line: dict[str, int] = field(default_factory=dict)

    def error(self, line: int | str, what: str, hint: str | None = None) -> InventoryError:
        """``line`` of this file, or FILE:LINE of a variables file (group_vars, host_vars)."""
        return InventoryError(f"{line if isinstance(line, str) else f'{self.path}:{line}'}: {what}", hint=hint)

    def group(self, name: str, line: int) -> RawGroup:
        if not NAME.fullmatch(name) or len(name) > 255:
            raise self.error(line, f"{shown(name)} is not a group name (letters, digits, '_', '.', '-')")
        return self.groups.setdefault(name, RawGroup(line))

    def add_host(self, name: str, line: int, group: str, variables: Mapping[str, tuple[object, int]]) -> None:
        if not name or name.startswith("-") or not name.isprintable() or any(c.isspace() for c in name):
            raise self.error(line, f"{shown(name)} is not a host: give [USER@]HOST or a Host alias of ~/.ssh/config")
        if len(name) > 255:
            raise self.error(line, "a host name longer than 255 characters")
        if name not in self.host_line:
            if len(self.host_line) >= MAX_HOSTS:
                raise self.error(line, f"more than {MAX_HOSTS} hosts")
            self.host_line[name] = line
        self.group(group, line).hosts.setdefault(name, line)
        self.host_vars.setdefault(name, {}).update(variables)


def shown(text: str, limit: int = 80) -> str:
    """``text`` from the file as one safe quoted word: control characters escaped, cut at ``limit``."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else quoted[:limit] + "…"


def expand(pattern: str, raw: RawInventory, line: int) -> list[str]:
    """``gpu[01:03]`` -> gpu01, gpu02, gpu03 (Ansible's ranges: numbers keep their width, or letters).

    Every range of the pattern is read and the names counted before one is made: ``a[0:99]b[0:99]...``
    is refused for its count, never expanded."""
    parts: list[list[str]] = []  # literal text and each range's items, in order
    count = 1
    rest = pattern
    while (match := RANGE.match(rest)) is not None:
        head, start, end, step_s, rest = match.groups()
        parts.append([head])
        items = _range_items(pattern, start, end, step_s, raw, line)
        count *= len(items)
        if count > MAX_HOSTS:
            raise raw.error(line, f"{shown(pattern)}: more than {MAX_HOSTS} hosts")
        parts.append(items)
    parts.append([rest])
    return ["".join(chosen) for chosen in itertools.product(*parts)]


def _range_items(pattern: str, start: str, end: str, step_s: str | None, raw: RawInventory, line: int) -> list[str]:
    """One range's items, refused before they are made when there are too many."""
    if max(len(start), len(end), len(step_s or "")) > 9:
        raise raw.error(line, f"{shown(pattern)}: a range bound of more than 9 digits")
    step = int(step_s or 1)
    if step < 1:
        raise raw.error(line, f"{shown(pattern)}: a range step must be 1 or more")
    if start.isdigit() != end.isdigit():
        raise raw.error(line, f"{shown(pattern)}: a range goes from a number to a number or a letter to a letter")
    if start.isdigit():
        numbers = range(int(start), int(end) + 1, step)
        if len(numbers) > MAX_HOSTS:
            raise raw.error(line, f"{shown(pattern)}: more than {MAX_HOSTS} hosts")
        width = len(start) if start.startswith("0") else 0
        items: list[str] = [str(i).zfill(width) for i in numbers]
    else:
        letters = string.ascii_lowercase
        items = list(letters[letters.index(start) : letters.index(end) + 1 : step])
    if not items:
        raise raw.error(line, f"{shown(pattern)}: an empty range")
    return items


def split_port(pattern: str) -> tuple[str, str | None]:
    """``host:2222`` -> (host, "2222"); ``[::1]:22`` -> (::1, "22"); anything else as it is.  The port (any
    digits, ``²`` too) is checked where every ``ansible_port`` is, and refused there unless ASCII."""
    if pattern.startswith("[") and "]:" in pattern:
        host, _, port = pattern[1:].partition("]:")
        return (host, port) if port.isdigit() else (pattern, None)
    head, sep, port = pattern.rpartition(":")
    if sep and port.isdigit() and ":" not in head and head:
        return head, port
    return pattern, None
