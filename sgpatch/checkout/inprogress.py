"""What a command that stops for a person (``port``, ``edit``) keeps in the checkout while it waits: its record in
``.git`` (written atomically and durably, never through a link; read bounded, as data), and the conflict markers it
leaves for the person and refuses to take back."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from sgpatch.errors import CheckFailed, CheckoutError
from sgpatch.git.batch import read_blobs
from sgpatch.git.repo import Git
from sgpatch.results import SCHEMA_VERSION

# A conflict marker line: "<<<<<<< x", "||||||| x", ">>>>>>> x" (or alone), and "=======" alone.
CONFLICT_MARKER = re.compile(rb"^(?:(?:<{7}|\|{7}|>{7})(?: .*)?|={7})\r?$", re.MULTILINE)


def marker_lines(data: bytes) -> list[int]:
    """The 1-based numbers of the lines of ``data`` that are conflict markers."""
    return [data.count(b"\n", 0, m.start()) + 1 for m in CONFLICT_MARKER.finditer(data)]


def refuse_markers(g: Git, tip: str, tree: str, *, resume: str) -> None:
    """CheckFailed naming the first conflict marker ``tree`` holds that ``tip`` did not (one the release had is
    fine); ``resume`` is the command to run again once they are gone."""
    paths = sorted(g.changed_paths(tip, tree))
    before, after = read_blobs(g, tip, paths), read_blobs(g, tree, paths)
    for path in paths:
        data = after[path]
        if data is None or b"\0" in data[:8000]:
            continue
        lines = marker_lines(data)
        if len(lines) > len(marker_lines(before[path] or b"")):
            raise CheckFailed(
                f"{Path(g.root) / path}:{lines[0]}: a conflict marker is still there ({len(lines)} marker line(s))",
                hint=f"resolve every conflict, then run '{resume}' again",
            )


def reaches(g: Git, head: str, ancestor: str, limit: int = 200) -> bool:
    """Whether ``ancestor`` is on the single-parent line below ``head`` (within ``limit`` commits)."""
    commit = head
    for _ in range(limit + 1):
        if commit == ancestor:
            return True
        parents = g.parents(commit)
        if len(parents) != 1:
            return False
        commit = parents[0]
    return False


def read_record_file(path: Path, limit: int) -> object | None:
    """The JSON at ``path`` (None: there is none); OSError or ValueError when it cannot be read or parsed, or is
    over ``limit`` bytes; a link is refused (CheckoutError), never followed."""
    if path.is_symlink():
        raise CheckoutError(f"{path}: is a symbolic link; sgpatch does not read records through links")
    if not path.exists():
        return None
    with path.open("rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"over {limit} bytes")
    found: object = json.loads(raw)
    return found


def write_record_file(path: Path, record: dict[str, Any]) -> None:
    """Replace the record at ``path`` atomically and durably (under the checkout lock: a leftover temporary file
    is removed, never followed), with the ``schema_version`` it is read back by."""
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


def clear_record_file(path: Path) -> None:
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)
    path.unlink(missing_ok=True)
