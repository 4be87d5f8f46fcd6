"""The records a stopped command keeps in the checkout's git directory, read as the input they are.

A record (``.git/sgpatch-port.json``, ``.git/sgpatch-edit.json``) is written atomically and durably, never
through a link, and read like the lock file: opened without blocking and without following a link, checked on
the open descriptor (a FIFO, a device, a socket or a directory is refused with no race between check and
read), read up to a bound, parsed as JSON no deeper than sgpatch ever writes.  Any refusal is a
``RecordError`` (exit 2) naming the file, with the hint that gives the stopped command up.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.errors import CheckoutError
from sgpatch.results import SCHEMA_VERSION

MAX_RECORD = 64 << 20  # a port of a long series records every decided hunk: far below this
MAX_DEPTH = 32  # sgpatch writes records 6 deep

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


@dataclass(frozen=True, slots=True)
class StopKind:
    """A command that stops for a person: its name, its record's file name and the command that gives it up."""

    name: str  # "port" or "edit"
    file: str

    def abort(self, checkout: Path) -> str:
        """The command that gives the stopped command up, for a hint (it works on any record, even a bad one)."""
        return f"sgpatch {self.name} --abort --checkout {shlex.quote(str(checkout))}"


PORT = StopKind("port", "sgpatch-port.json")
EDIT = StopKind("edit", "sgpatch-edit.json")
KINDS = (PORT, EDIT)


class RecordError(CheckoutError):
    """A record that is not a regular file, too large, not JSON, too deep, or not what sgpatch wrote (exit 2)."""


def describe(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_json(path: Path, *, limit: int = MAX_RECORD) -> object | None:
    """The JSON document at ``path`` (None: nothing there); ValueError saying why it cannot be one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("it is a symbolic link; sgpatch does not read records through links") from None
        raise ValueError(exc.strerror or str(exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"it is {describe(mode)}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"it is larger than {limit >> 20} MiB")
    try:
        found: object = json.loads(b"".join(chunks))
    except RecursionError:
        raise ValueError(f"its JSON is nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if _depth(found) > MAX_DEPTH:
        raise ValueError(f"its JSON is nested deeper than {MAX_DEPTH} levels")
    return found


def _depth(doc: object) -> int:
    """How deep ``doc`` nests (iteratively: a record is never trusted with the interpreter's stack)."""
    deepest, todo = 0, [(doc, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            todo.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def load(git_dir: Path, kind: StopKind, checkout: Path) -> dict[str, Any] | None:
    """The record of ``kind`` in ``git_dir`` as a JSON object sgpatch wrote (None: there is none); RecordError
    naming the file otherwise.  The caller checks its fields (``fields``) before acting on any."""
    path = git_dir / kind.file
    try:
        found = read_json(path)
    except ValueError as exc:
        raise RecordError(f"{path}: unreadable {kind.name} record: {exc}", hint=f"'{kind.abort(checkout)}'") from None
    if found is None:
        return None
    if not isinstance(found, dict) or found.get("schema_version") != SCHEMA_VERSION or "phase" not in found:
        raise RecordError(f"{path}: not a {kind.name} record sgpatch wrote", hint=f"'{kind.abort(checkout)}'")
    return found


def present(git_dir: Path, kind: StopKind) -> bool:
    """Whether anything (a file, a link, a FIFO …) is where the record of ``kind`` lives."""
    return os.path.lexists(git_dir / kind.file)


def write(git_dir: Path, kind: StopKind, record: dict[str, Any]) -> None:
    """Replace the record atomically and durably (under the checkout lock: a leftover temporary file is
    removed, never followed), with the ``schema_version`` it is read back by."""
    path = git_dir / kind.file
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    data = json.dumps({**record, "schema_version": SCHEMA_VERSION}, indent=1).encode() + b"\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def clear(git_dir: Path, kind: StopKind) -> None:
    """Remove the record (and a temporary file a killed write left).  Whatever is at its name goes: a link
    itself (never its target), a FIFO; a directory there is refused, as sgpatch never made one."""
    for path in (git_dir / (kind.file + ".tmp"), git_dir / kind.file):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(mode):
            raise RecordError(
                f"{path}: is a directory where sgpatch keeps its {kind.name} record; sgpatch made no directory there",
                hint=f"remove it yourself (rm -r {shlex.quote(str(path))})",
            )
        path.unlink(missing_ok=True)
