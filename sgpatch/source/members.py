"""The checks on an archive's member names (sgpatch.source.archive): each path relative and inside the archive,
no ``.git`` part, no control character, each path once and never both a file and a directory."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from pathlib import PurePosixPath
from typing import Protocol

from sgpatch.errors import ArchiveError

HOSTILE = "the artifact is hostile or corrupt"


class Named(Protocol):
    """A member as listed: its POSIX path inside the archive."""

    @property
    def name(self) -> str: ...


_CONTROL_CHAR = re.compile("[\x00-\x1f\x7f]")
# Parts that start with a letter, digit or underscore and hold only those, '.', '+', '-', ',' and '=', joined by single
# slashes: no empty, '.', '..' or '.git' part, no leading or trailing slash, no backslash or control character.
# Nearly every member of a real wheel or sdist: one match instead of the checks below.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+,=-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+,=-]*)*")


def check_member_name(name: str, where: str) -> list[str]:
    """The parts of ``name`` (``PurePosixPath(name).parts``, by string operations: a wheel lists thousands)
    when it is a relative path that stays inside the archive; ArchiveError otherwise."""
    if _PLAIN_NAME.fullmatch(name):
        return name.split("/")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if name.startswith("/") or ".." in parts or "\\" in name or not parts:
        raise ArchiveError(f"{where}: member {name!r} escapes the archive root", hint=HOSTILE)
    if any(part.lower() == ".git" for part in parts):
        raise ArchiveError(
            f"{where}: member {name!r} is git metadata; refusing to extract", hint="the artifact is hostile"
        )
    if _CONTROL_CHAR.search(name):
        raise ArchiveError(f"{where}: member {name!r} has a control character in its name", hint=HOSTILE)
    return parts


def _parents(name: str) -> Iterator[str]:
    """``str`` of each of ``PurePosixPath(name).parents``, nearest first, one at a time; by string slicing when
    ``name`` is already in the form pathlib would give it (no empty or ``.`` part, no leading or trailing
    slash)."""
    if name.startswith(("/", "./")) or name.endswith(("/", "/.")) or "//" in name or "/./" in name or name == ".":
        yield from (str(p) for p in PurePosixPath(name).parents)
        return
    cut = name.rfind("/")
    while cut > 0:
        name = name[:cut]
        yield name
        cut = name.rfind("/")
    yield "."


def check_set(entries: Collection[Named], where: str) -> None:
    """Each path once, and never both a file and a directory (which would fail half-way)."""
    seen: set[str] = set()
    for e in entries:
        if e.name in seen:
            raise ArchiveError(f"{where}: member {e.name!r} appears twice", hint=HOSTILE)
        seen.add(e.name)
    dirs: set[str] = set()
    for e in entries:
        for parent in _parents(e.name):  # nearest first: a parent already seen has its own parents in too
            if parent in dirs:
                break
            dirs.add(parent)
    clash = sorted(seen & dirs)
    if clash:
        raise ArchiveError(f"{where}: member {clash[0]!r} is both a file and a directory", hint=HOSTILE)
