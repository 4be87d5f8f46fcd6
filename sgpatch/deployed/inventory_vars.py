"""Ansible's variable files beside an inventory (``group_vars/``, ``host_vars/``), and the ssh settings they give.

For a group or host NAME, Ansible reads the first of ``DIR/NAME``, ``NAME.yml``, ``NAME.yaml``,
``NAME.json`` that exists, where DIR is ``group_vars`` or ``host_vars`` next to the inventory file;
a directory stands for every file below it (sorted, hidden files and ``~`` backups left out, only
``.yml``/``.yaml``/``.json`` or no extension), each a YAML mapping of variables, a later file over an
earlier one.  A file encrypted with ansible-vault is passed over (sgpatch has no vault password; it
reads no secret).

The order, least to most (Ansible's documented "Variable precedence"): the inventory file's group
variables (``all``, then each group by depth, a child over its parent, then by name); ``group_vars/all``;
``group_vars/GROUP`` in the same order; the inventory file's host variables; ``host_vars/HOST``.

``ansible_ssh_private_key_file`` (and ``ansible_private_key_file``) becomes ``ssh -i``;
``ansible_ssh_common_args`` is split as a shell would and each option checked against a list of
options that neither run a program, load a library nor forward anything (``ProxyCommand`` is
refused: ``ProxyJump``/``-J`` does the same without a command line).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

from sgpatch.deployed.inventory_yaml import _Walk
from sgpatch.errors import ConfigError

MAX_BYTES = 1 << 20  # one variables file
MAX_FILES = 1000  # files of one group's or host's directory
EXTENSIONS = ("", ".yml", ".yaml", ".json")
VAULT = "$ANSIBLE_VAULT;"

Loc = int | str  # a line of the inventory file, or FILE:LINE of a variables file
Vars = dict[str, tuple[object, Loc]]

_SAFE = [
    "AddressFamily",
    "BindAddress",
    "CertificateFile",
    "CheckHostIP",
    "Ciphers",
    "Compression",
    "ConnectionAttempts",
    "ConnectTimeout",
    "ControlMaster",
    "ControlPath",
    "ControlPersist",
    "GlobalKnownHostsFile",
    "GSSAPIAuthentication",
    "HostKeyAlgorithms",
    "HostKeyAlias",
    "IdentitiesOnly",
    "IdentityAgent",
    "IdentityFile",
    "IPQoS",
    "KbdInteractiveAuthentication",
    "KexAlgorithms",
    "LogLevel",
    "MACs",
    "PasswordAuthentication",
    "PreferredAuthentications",
    "ProxyJump",
    "PubkeyAcceptedAlgorithms",
    "PubkeyAcceptedKeyTypes",
    "PubkeyAuthentication",
    "RekeyLimit",
    "ServerAliveCountMax",
    "ServerAliveInterval",
    "StrictHostKeyChecking",
    "TCPKeepAlive",
    "UpdateHostKeys",
    "UserKnownHostsFile",
    "VerifyHostKeyDNS",
]
SAFE_OPTIONS = {name.lower(): name for name in _SAFE}
_FLAGS = ("-4", "-6", "-C")
_JUMP = re.compile(
    r"(?:[A-Za-z0-9_][A-Za-z0-9_.\-]*@)?(?:[A-Za-z0-9_][A-Za-z0-9_.\-]*|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?"
)
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*")


class _Where:
    """What the YAML walk needs to name a file's line in its errors."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def error(self, line: int, what: str, hint: str | None = None) -> ConfigError:
        return ConfigError(f"{self.path}:{line}: {what}", hint=hint)


def _candidates(top: Path, name: str) -> list[Path]:
    """The variables files of ``name`` in ``top`` (``group_vars`` or ``host_vars``), as Ansible finds them."""
    for ext in EXTENSIONS:
        path = top / f"{name}{ext}"
        if path.is_dir():
            found = _directory(path)
            if len(found) > MAX_FILES:
                raise ConfigError(f"{path}: more than {MAX_FILES} variables files")
            return found
        if path.is_file():
            return [path]
    return []


def _directory(path: Path) -> list[Path]:
    out: list[Path] = []
    for entry in sorted(os.listdir(path)):
        if entry.startswith(".") or entry.endswith("~") or len(out) > MAX_FILES:
            continue
        full = path / entry
        ext = os.path.splitext(entry)[1]
        if full.is_dir() and not ext:
            out.extend(_directory(full))
        elif full.is_file() and ext in EXTENSIONS:
            out.append(full)
    return out


def read_vars_file(path: Path) -> Vars:
    """The variables of one file (a YAML or JSON mapping; empty: none), each with its FILE:LINE."""
    import yaml

    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_BYTES} bytes: not a variables file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text") from None
    if text.lstrip().startswith(VAULT):
        return {}
    where = _Where(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise where.error(mark.line + 1 if mark is not None else 1, f"not YAML: {exc.problem or exc.context}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise where.error(1, f"not YAML: {exc}") from None
    if root is None:
        return {}
    walk = _Walk(where)  # type: ignore[arg-type]  # it only calls .error
    return {key: (walk.scalar(node), f"{path}:{line}") for key, node, line in walk.mapping(root, "the variables")}


class VarFiles:
    """The ``group_vars``/``host_vars`` next to an inventory, each read once."""

    def __init__(self, inventory: Path) -> None:
        self.base = inventory.parent
        self._read: dict[tuple[str, str], Vars] = {}

    def _of(self, kind: str, name: str) -> Vars:
        key = (kind, name)
        if key not in self._read:
            merged: Vars = {}
            for path in _candidates(self.base / kind, name):
                merged.update(read_vars_file(path))
            self._read[key] = merged
        return self._read[key]

    def layered(self, groups_vars: list[Vars], host_vars: Vars, groups: list[str], host: str) -> Vars:
        """A host's variables in Ansible's order: ``groups_vars`` (the inventory's, ordered as ``groups``),
        ``group_vars`` files, ``host_vars`` (the inventory's), ``host_vars`` files."""
        merged: Vars = {}
        for found in groups_vars:
            merged.update(found)
        for group in groups:
            merged.update(self._of("group_vars", group))
        merged.update(host_vars)
        merged.update(self._of("host_vars", host))
        return merged


# --------------------------------------------------------------------------- the ssh settings


def identity_file(value: str) -> str:
    """``ansible_ssh_private_key_file``: a path for ``ssh -i`` (ValueError: why not)."""
    if not value.strip() or value.startswith("-") or not value.isprintable() or len(value) > 4096:
        raise ValueError("not a key file path")
    return value


def _option(text: str) -> list[str]:
    key, sep, value = text.partition("=")
    if not sep:
        key, _, value = text.partition(" ")
    key, value = key.strip(), value.strip()
    if not _KEY.fullmatch(key):
        raise ValueError(f"-o {text!r} is not KEY=VALUE")
    canonical = SAFE_OPTIONS.get(key.lower())
    if canonical is None:
        why = " (it runs a program: use ProxyJump, -J, instead)" if key.lower() == "proxycommand" else ""
        raise ValueError(f"ssh option {key} is not on sgpatch's list of safe options{why}")
    if not value or value.startswith("-") or not value.isprintable() or len(value) > 1024:
        raise ValueError(f"-o {key}={value!r}: not a value sgpatch passes to ssh")
    if canonical == "ProxyJump" and value != "none" and not all(_JUMP.fullmatch(j) for j in value.split(",")):
        raise ValueError(f"ProxyJump={value!r}: expected [USER@]HOST[:PORT], comma-separated")
    return ["-o", f"{canonical}={value}"]


def common_args(value: str) -> tuple[str, ...]:
    """``ansible_ssh_common_args`` as ssh arguments, each option checked (ValueError: the first refused)."""
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"not shell words: {exc}") from None
    out: list[str] = []
    rest: list[Any] = list(words)
    while rest:
        word = rest.pop(0)
        if word in _FLAGS:
            out.append(word)
        elif word in ("-o", "-J"):
            if not rest:
                raise ValueError(f"{word} without a value")
            given = rest.pop(0)
            out += _option(given if word == "-o" else f"ProxyJump={given}")
        elif word.startswith("-o") and len(word) > 2:
            out += _option(word[2:])
        elif word.startswith("-J") and len(word) > 2:
            out += _option(f"ProxyJump={word[2:]}")
        else:
            raise ValueError(f"{word!r} is not an ssh option sgpatch passes (-o KEY=VALUE, -J, -C, -4, -6)")
    return tuple(out)
