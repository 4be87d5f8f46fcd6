"""The records a stopped command keeps in the checkout's git directory, read as the input they are.

A record (``.git/sgpatch-port.json``, ``.git/sgpatch-edit.json``) is written atomically and durably, never
through a link, and read like the lock file: opened without blocking and without following a link, checked on
the open descriptor (a FIFO, a device, a socket or a directory is refused with no race between check and
read), read up to a bound, parsed as JSON no deeper than sgpatch ever writes.  Any refusal is a
``RecordError`` (exit 2) naming the file, with the hint that gives the stopped command up.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path
from typing import TypeVar

from sgpatch.checkout.stop.fields import parse
from sgpatch.checkout.stop.kinds import EDIT, KINDS, PORT, EditRecord, PortRecord, Record, RecordError, StopKind
from sgpatch.config.projectfiles import read_regular
from sgpatch.results import SCHEMA_VERSION

R = TypeVar("R", bound=Record)

MAX_RECORD = 64 << 20  # a port of a long series records every decided hunk: far below this
MAX_DEPTH = 32  # sgpatch writes records 6 deep


def read_json(path: Path, *, limit: int = MAX_RECORD) -> object | None:
    """The JSON document at ``path`` (None: nothing there); ValueError saying why it cannot be one."""
    try:
        data = read_regular(path, limit=limit, follow=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    try:
        found: object = json.loads(data)
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


def load(git_dir: Path, kind: type[R], checkout: Path) -> R | None:
    """The record of ``kind`` in ``git_dir``, read once from its bounded bytes and every field checked
    (``fields.parse``) before anything acts on it (None: there is none); RecordError naming the file
    otherwise, with the hint that gives the stopped command up."""
    stop = kind.kind
    path = git_dir / stop.file
    try:
        found = read_json(path)
    except ValueError as exc:
        raise RecordError(f"{path}: unreadable {stop.name} record: {exc}", hint=f"'{stop.abort(checkout)}'") from None
    if found is None:
        return None
    if not isinstance(found, dict) or found.get("schema_version") != SCHEMA_VERSION or "phase" not in found:
        raise RecordError(f"{path}: not a {stop.name} record sgpatch wrote", hint=f"'{stop.abort(checkout)}'")
    record = parse(found, stop, path, checkout)
    assert isinstance(record, kind)  # parse builds the record of ``stop``: ``kind`` itself
    return record


def present(git_dir: Path, kind: StopKind) -> bool:
    """Whether anything (a file, a link, a FIFO …) is where the record of ``kind`` lives."""
    return os.path.lexists(git_dir / kind.file)


def write(git_dir: Path, record: Record) -> None:
    """Replace the record atomically and durably (under the checkout lock: a leftover temporary file is
    removed, never followed), with the ``schema_version`` it is read back by."""
    path = git_dir / record.kind.file
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    data = json.dumps({**record.as_json(), "schema_version": SCHEMA_VERSION}, indent=1).encode() + b"\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
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


__all__ = ["EDIT", "KINDS", "PORT", "EditRecord", "PortRecord", "Record", "RecordError", "StopKind"]
