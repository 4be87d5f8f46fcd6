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
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sgpatch.deployed.inventory_raw import InventoryError, RawGroup, RawInventory, expand, shown, split_port
from sgpatch.deployed.inventory_vars import Loc, VarFiles, common_args, identity_file
from sgpatch.deployed.inventory_yaml import parse_yaml

MAX_BYTES = 1 << 20  # an inventory of tens of thousands of hosts fits
HOSTNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]*")  # ansible_host: a DNS name or an IP address
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
VARS = {
    "ansible_host": "hostname",
    "ansible_ssh_host": "hostname",
    "ansible_user": "user",
    "ansible_ssh_user": "user",
    "ansible_port": "port",
    "ansible_ssh_port": "port",
    "ansible_python_interpreter": "python",
    "ansible_connection": "connection",
    "ansible_ssh_private_key_file": "identity",
    "ansible_private_key_file": "identity",
    "ansible_ssh_common_args": "ssh_args",
}
CONNECTIONS = ("ssh", "smart", "paramiko", "local")


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
    identity: str | None = None  # ansible_ssh_private_key_file: ``-i``
    ssh_args: tuple[str, ...] = ()  # ansible_ssh_common_args, each option checked (inventory_vars)
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


def _digits(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes ``²`` and ``٣`` too, which ``int`` then refuses)."""
    return text.isascii() and text.isdigit()


# --------------------------------------------------------------------------- INI (and the plain list)


def parse_ini(text: str, path: str) -> RawInventory:
    """An INI inventory (a plain list of hosts is one: every host in ``ungrouped``)."""
    raw = RawInventory(path)
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


def _words(text: str, raw: RawInventory, line: int) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:
        raise raw.error(line, f"{exc}: {shown(text)}") from None


def _unquote(value: str, raw: RawInventory, line: int) -> str:
    if value[:1] in ("'", '"'):
        words = _words(value, raw, line)
        if len(words) != 1:
            raise raw.error(line, f"{shown(value)}: expected one value")
        return words[0]
    return value.split(" #", 1)[0].split(" ;", 1)[0].strip()


# --------------------------------------------------------------------------- resolving groups and variables


def resolve(raw: RawInventory) -> Inventory:
    """Hosts with their groups (direct and inherited) and their variables applied by depth."""
    groups = raw.groups
    groups.setdefault("all", RawGroup(0))
    groups.setdefault("ungrouped", RawGroup(0))
    parents: dict[str, set[str]] = {name: set() for name in groups}
    for name, group in groups.items():
        for child in group.children:
            parents[child].add(name)
    for name in groups:
        if name != "all" and not parents[name]:
            parents[name].add("all")
    depth = _depths(raw, parents)
    files = VarFiles(Path(raw.path))
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
        order = sorted(ancestry, key=lambda g: (depth[g], g))
        merged = files.layered([dict(groups[g].vars) for g in order], dict(raw.host_vars.get(host, {})), order, host)
        hosts.append(_host(raw, host, line, merged, tuple(sorted(ancestry - {"all"}))))
    return Inventory(raw.path, tuple(hosts), {g: tuple(m) for g, m in members.items()})


def _depths(raw: RawInventory, parents: Mapping[str, set[str]]) -> dict[str, int]:
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


def _host(
    raw: RawInventory, name: str, line: int, merged: Mapping[str, tuple[object, Loc]], groups: tuple[str, ...]
) -> Host:
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


def _checked(raw: RawInventory, what: str, key: str, value: str, line: Loc) -> object:
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
    if what in ("identity", "ssh_args"):
        try:
            return identity_file(value) if what == "identity" else common_args(value)
        except ValueError as exc:
            raise raw.error(line, f"{bad}: {exc}") from None
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
    raw = parse_yaml(text, where, RawInventory(where)) if _looks_yaml(path, text) else parse_ini(text, where)
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
