"""The conflict markers a stopped command leaves for the person, and refuses to take back.

A conflict is a complete triple of marker lines, in order: ``<<<<<<<`` (and an optional ``|||||||``), ``=======``,
``>>>>>>>``.  A line of seven ``=`` alone is text (an RST underline), and so is a lone ``<<<<<<<``.
"""

from __future__ import annotations

import re
from pathlib import Path

from sgpatch.errors import CheckFailed
from sgpatch.git.batch import read_blobs
from sgpatch.git.repo import Git

# A line that may be part of a conflict: "<<<<<<< x", "||||||| x", ">>>>>>> x" (or alone), and "=======" alone.
CONFLICT_MARKER = re.compile(rb"^(?:(<{7}|\|{7}|>{7})(?: .*)?|(={7}))\r?$", re.MULTILINE)
_ORDER = {b"<": 0, b"|": 1, b"=": 2, b">": 3}


def marker_lines(data: bytes) -> list[int]:
    """The 1-based numbers of the lines of ``data`` that belong to a complete conflict triple."""
    found: list[int] = []
    open_: list[int] = []  # the lines of the triple being read
    stage, pos, line = -1, 0, 1
    for m in CONFLICT_MARKER.finditer(data):
        kind = _ORDER[(m.group(1) or m.group(2))[:1]]
        line += data.count(b"\n", pos, m.start())
        pos = m.start()
        if kind == 0:
            open_, stage = [line], 0
        elif stage >= 0 and kind == 1 and stage == 0:
            open_.append(line)
            stage = 1
        elif stage >= 0 and kind == 2 and stage in (0, 1):
            open_.append(line)
            stage = 2
        elif stage == 2 and kind == 3:
            found.extend([*open_, line])
            open_, stage = [], -1
    return found


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
