"""The hosts of a fleet: a plain list, or an Ansible inventory (INI or YAML), read as hostile input.

One host per line is an INI inventory without sections, so one reader serves both:
``[group]``, ``[group:vars]``, ``[group:children]``, ``host key=value ...``, ``host:port``,
numeric and alphabetic ranges (``gpu[01:12]``), ``#``/``;`` comments.  YAML inventories
(``all: hosts: / children: / vars:``) are read with PyYAML's safe composer, which keeps each
node's line.  Variables apply as Ansible applies them: ``all``'s first, then each group's by
depth (a child's over its parent's), then the host's own.  sgpatch reads only
``ansible_host``, ``ansible_user``, ``ansible_port`` (and their ``ansible_ssh_*`` spellings),
``ansible_python_interpreter`` and ``ansible_connection`` (``ssh`` or ``local``); every value it
reads is checked (a host name, a user name, a port, a path) and anything else ends in one
``FILE:LINE: what`` error, exit 2.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
import shlex
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sgpatch.errors import ConfigError

MAX_BYTES = 1 << 20  # an inventory of tens of thousands of hosts fits
MAX_HOSTS = 10_000
NAME = re.compile(r"[A-Za-z0-9_.\-]+")  # a group name (Ansible warns about more and accepts less)
HOSTNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]*")  # ansible_host: a DNS name or an IP address
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
RANGE = re.compile(r"^(.*?)\[([a-z]|[0-9]+):([a-z]|[0-9]+)(?::([0-9]+))?\](.*)$")
VARS = {
    "ansible_host": "hostname",
    "ansible_ssh_host": "hostname",
    "ansible_user": "user",
    "ansible_ssh_user": "user",
    "ansible_port": "port",
    "ansible_ssh_port": "port",
    "ansible_python_interpreter": "python",
    "ansible_connection": "connection",
}
CONNECTIONS = ("ssh", "smart", "paramiko", "local")


class InventoryError(ConfigError):
    """A host list or inventory sgpatch cannot read (exit 2), naming FILE:LINE."""


@dataclass(frozen=True, slots=True)
class Host:
    """One host to check: ``name`` is given to ssh as is (an alias of the user's ssh config, or
    ``[user@]host``); ``hostname``/``user``/``port`` become ``-o HostName=``/``-l``/``-p``."""

    name: str
    hostname: str | None = None
    user: str | None = None
    port: int | None = None
    python: str | None = None  # ansible_python_interpreter: this host's interpreter, over --python
    local: bool = False  # ansible_connection=local: probed on this machine, without ssh
    groups: tuple[str, ...] = ()
    where: str = ""  # FILE:LINE where the inventory first names it


@dataclass(frozen=True, slots=True)
class Inventory:
    """Every host of a file, in the order the file names them, and each group's hosts."""

    path: str
    hosts: tuple[Host, ...]
    groups: Mapping[str, tuple[str, ...]]

    def limit(self, pattern: str | None) -> tuple[Host, ...]:
        """The hosts ``pattern`` selects (Ansible's ``--limit``): names or globs of groups or hosts,
        separated by ``,`` or ``:``; ``!x`` leaves x out, ``&x`` keeps only what is also in x."""
        if pattern is None:
            return self.hosts
        names = [h.name for h in self.hosts]
        chosen: set[str] = set()
        keep: set[str] | None = None
        drop: set[str] = set()
        for term in (t.strip() for t in re.split(r"[,:]", pattern)):
            if not term:
                continue
            kind, word = (term[0], term[1:]) if term[0] in "!&" else ("", term)
            found = self._match(word)
            if not found:
                raise InventoryError(
                    f"{self.path}: --limit {pattern!r}: no group or host matches {word!r}",
                    hint=f"groups: {', '.join(sorted(self.groups)) or 'none'}",
                )
            if kind == "!":
                drop |= found
            elif kind == "&":
                keep = found if keep is None else keep & found
            else:
                chosen |= found
        if not chosen:
            chosen = set(names)  # only exclusions or intersections: they apply to all
        selected = (chosen & keep if keep is not None else chosen) - drop
        return tuple(h for h in self.hosts if h.name in selected)

    def _match(self, word: str) -> set[str]:
        found: set[str] = set()
        for group, members in self.groups.items():
            if fnmatch.fnmatchcase(group, word):
                found.update(members)
        found.update(h.name for h in self.hosts if fnmatch.fnmatchcase(h.name, word))
        return found


# --------------------------------------------------------------------------- what the parsers collect


@dataclass
class _Group:
    line: int
    hosts: dict[str, int] = field(default_factory=dict)
    children: dict[str, int] = field(default_factory=dict)
    vars: dict[str, tuple[object, int]] = field(default_factory=dict)


@dataclass
class _Raw:
    path: str
    groups: dict[str, _Group] = field(default_factory=dict)
    host_vars: dict[str, dict[str, tuple[object, int]]] = field(default_factory=dict)
    host_line: dict[str, int] = field(default_factory=dict)

    def error(self, line: int, what: str, hint: str | None = None) -> InventoryError:
        return InventoryError(f"{self.path}:{line}: {what}", hint=hint)

    def group(self, name: str, line: int) -> _Group:
        if not NAME.fullmatch(name) or len(name) > 255:
            raise self.error(line, f"{shown(name)} is not a group name (letters, digits, '_', '.', '-')")
        return self.groups.setdefault(name, _Group(line))

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


def expand(pattern: str, raw: _Raw, line: int) -> list[str]:
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


def _range_items(pattern: str, start: str, end: str, step_s: str | None, raw: _Raw, line: int) -> list[str]:
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


def _digits(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes ``²`` and ``٣`` too, which ``int`` then refuses)."""
    return text.isascii() and text.isdigit()


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


# --------------------------------------------------------------------------- INI (and the plain list)


def parse_ini(text: str, path: str) -> _Raw:
    """An INI inventory (a plain list of hosts is one: every host in ``ungrouped``)."""
    raw = _Raw(path)
    group, kind = "ungrouped", "hosts"
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("["):
            header = re.fullmatch(r"\[([^\]:]+)(?::([^\]]+))?\]\s*(?:[#;].*)?", stripped)
            if header is None:
                raise raw.error(number, f"{shown(stripped)} is not a section header ([group], [group:vars] ...)")
            group, kind = header.group(1).strip(), header.group(2) or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise raw.error(number, f"[{group}:{kind}]: expected [{group}], [{group}:vars] or [{group}:children]")
            raw.group(group, number)
            continue
        if kind == "vars":
            key, sep, value = stripped.partition("=")
            if not sep:
                raise raw.error(number, f"{shown(stripped)}: expected key=value in [{group}:vars]")
            raw.groups[group].vars[key.strip()] = (_unquote(value.strip(), raw, number), number)
        elif kind == "children":
            words = _words(stripped, raw, number)
            if len(words) != 1:
                raise raw.error(number, f"{shown(stripped)}: expected one group name in [{group}:children]")
            if words[0] == "all":
                raise raw.error(number, "group all cannot be a child")
            raw.group(words[0], number)
            raw.groups[group].children.setdefault(words[0], number)
        else:
            words = _words(stripped, raw, number)
            variables: dict[str, tuple[object, int]] = {}
            for word in words[1:]:
                key, sep, value = word.partition("=")
                if not sep or not key:
                    raise raw.error(number, f"{shown(word)}: expected key=value after the host")
                variables[key] = (value, number)
            name, port = split_port(words[0])
            if port is not None:
                variables.setdefault("ansible_port", (port, number))
            for host in expand(name, raw, number):
                raw.add_host(host, number, group, variables)
    return raw


def _words(text: str, raw: _Raw, line: int) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise raw.error(line, f"{exc}: {shown(text)}") from None


def _unquote(value: str, raw: _Raw, line: int) -> str:
    if value[:1] in ("'", '"'):
        words = _words(value, raw, line)
        if len(words) != 1:
            raise raw.error(line, f"{shown(value)}: expected one value")
        return words[0]
    return value.split(" #", 1)[0].split(" ;", 1)[0].strip()


# --------------------------------------------------------------------------- resolving groups and variables


def resolve(raw: _Raw) -> Inventory:
    """Hosts with their groups (direct and inherited) and their variables applied by depth."""
    groups = raw.groups
    groups.setdefault("all", _Group(0))
    groups.setdefault("ungrouped", _Group(0))
    parents: dict[str, set[str]] = {name: set() for name in groups}
    for name, group in groups.items():
        for child in group.children:
            parents[child].add(name)
    for name in groups:
        if name != "all" and not parents[name]:
            parents[name].add("all")
    depth = _depths(raw, parents)
    members: dict[str, list[str]] = {name: [] for name in groups}
    hosts = []
    for host, line in raw.host_line.items():
        direct = {g for g, grp in groups.items() if host in grp.hosts} | {"all"}
        if direct == {"all", "ungrouped"} or direct == {"all"}:
            direct.add("ungrouped")
        elif "ungrouped" in direct:
            direct.discard("ungrouped")
        ancestry = _ancestors(direct, parents)
        for g in ancestry:
            members[g].append(host)
        merged: dict[str, tuple[object, int]] = {}
        for g in sorted(ancestry, key=lambda g: (depth[g], g)):
            merged.update(groups[g].vars)
        merged.update(raw.host_vars.get(host, {}))
        hosts.append(_host(raw, host, line, merged, tuple(sorted(ancestry - {"all"}))))
    return Inventory(raw.path, tuple(hosts), {g: tuple(m) for g, m in members.items()})


def _depths(raw: _Raw, parents: Mapping[str, set[str]]) -> dict[str, int]:
    """Each group's depth below ``all`` (its longest path up); a group that is its own ancestor is refused."""
    depth: dict[str, int] = {"all": 0}
    visiting: set[str] = set()

    def walk(name: str) -> int:
        if name in depth:
            return depth[name]
        if name in visiting:
            raise raw.error(
                raw.groups[name].line, f"group {shown(name)} is its own ancestor ([...:children] make a loop)"
            )
        visiting.add(name)
        found = 1 + max(walk(p) for p in parents[name])
        visiting.discard(name)
        depth[name] = found
        return found

    for name in list(parents):
        walk(name)
    return depth


def _ancestors(direct: Iterable[str], parents: Mapping[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = list(direct)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(parents[name])
    return seen


def _host(raw: _Raw, name: str, line: int, merged: Mapping[str, tuple[object, int]], groups: tuple[str, ...]) -> Host:
    fields: dict[str, object] = {}
    for key, (value, where) in merged.items():
        if key not in VARS:
            continue
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise raw.error(where, f"{key} of {shown(name)}: expected a string")
        text = value if isinstance(value, str) else str(value) if abs(value) < 10**18 else "(a number of 19+ digits)"
        fields[VARS[key]] = _checked(raw, VARS[key], key, text, where)
    connection = fields.pop("connection", "ssh")
    return Host(name=name, groups=groups, where=f"{raw.path}:{line}", local=connection == "local", **fields)  # type: ignore[arg-type]


def _checked(raw: _Raw, what: str, key: str, value: str, line: int) -> object:
    """A variable's value, checked for what it becomes on ssh's command line."""
    bad = f"{key}={shown(value)}"
    if what == "port":
        if not _digits(value) or len(value) > 5 or not 0 < int(value) < 65536:
            raise raw.error(line, f"{bad}: not a port number (1-65535)")
        return int(value)
    if what == "hostname" and not (HOSTNAME.fullmatch(value) and len(value) <= 255):
        raise raw.error(line, f"{bad}: not a host name or IP address")
    if what == "user" and not (USER.fullmatch(value) and len(value) <= 64):
        raise raw.error(line, f"{bad}: not a user name")
    if what == "python" and (not value.strip() or not value.isprintable() or len(value) > 4096):
        raise raw.error(line, f"{bad}: not an interpreter path")
    if what == "connection" and value not in CONNECTIONS:
        raise raw.error(line, f"{bad}: sgpatch checks hosts over ssh (or ansible_connection=local)")
    return value


# --------------------------------------------------------------------------- reading a file


def load_inventory(path: Path) -> Inventory:
    """The hosts of ``path``: YAML when it says so (``.yml``, ``.yaml``, ``.json``, or a first line like
    ``all:`` or ``---``), else INI or a plain list."""
    where = str(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InventoryError(f"{where}: cannot read the host list: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise InventoryError(f"{where}: larger than {MAX_BYTES} bytes: not a host list")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InventoryError(f"{where}:{line}: not UTF-8 text") from None
    if "\0" in text:
        raise InventoryError(f"{where}:{text[: text.index(chr(0))].count(chr(10)) + 1}: a NUL byte: not a host list")
    if _looks_yaml(path, text):
        from sgpatch.deployed.inventory_yaml import parse_yaml

        raw = parse_yaml(text, where, _Raw(where))
    else:
        raw = parse_ini(text, where)
    try:
        inventory = resolve(raw)
    except RecursionError:
        raise InventoryError(f"{where}: groups nested too deep") from None
    if not inventory.hosts:
        raise InventoryError(f"{where}: no hosts", hint="one host per line, or an Ansible inventory (INI or YAML)")
    return inventory


def _looks_yaml(path: Path, text: str) -> bool:
    if path.suffix.lower() in (".yml", ".yaml", ".json"):
        return True
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    return first == "---" or first.startswith("{") or (first.endswith(":") and not first.startswith("["))
