"""A foreign patch's hunks placed where their lines stand (``sgpatch import --offsets``).

``git apply`` takes a hunk whose exact lines stand a few lines off from where its header says: an offset, what a
patch made on a branch or a fork of the release has (a real one: miles' 0.5.10 patch, one hunk a line off).  A
series sgpatch keeps has none (SPEC §6: offsets are reported, never silently accepted for a pinned stack).
``at_offsets`` rewrites the header of each such hunk to the line where its lines stand, when they stand there
exactly once in the file (git takes the nearest of several; sgpatch does not guess) and the file's hunks keep
their order; each hunk moved is returned, to be reported.  The rewritten patch then goes through every check of
a strict apply, as any other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sgpatch.series.engine import HunkFailure, apply_file, apply_patch
from sgpatch.series.hunks import only
from sgpatch.series.patch import FilePatch, Hunk, Patch, parse_patch

_HEADER = re.compile(rb"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


@dataclass(frozen=True, slots=True)
class Moved:
    """One hunk placed at the line where its lines stand, not where its header said."""

    patch: str
    path: str
    hunk: str  # its header, as the patch wrote it
    said: int  # the old-side line the header gave
    line: int  # where its lines stand, once

    def as_dict(self) -> dict[str, Any]:
        return {
            "patch": self.patch,
            "file": self.path,
            "hunk": self.hunk,
            "said": self.said,
            "line": self.line,
            "offset": self.line - self.said,
        }


def at_offsets(files: Mapping[str, bytes | None], patches: Sequence[Patch]) -> tuple[list[Patch], list[Moved]]:
    """``patches`` (in order, each on the files the ones before it left) with every hunk that does not stand at its
    line but stands exactly once elsewhere placed there; and the hunks so placed.  A file whose hunks would change
    order, or a patch that still does not apply, is left as it was (and the patches after it): the strict check
    that follows refuses it, saying why."""
    current = dict(files)
    out: list[Patch] = []
    moved: list[Moved] = []
    for k, patch in enumerate(patches):
        starts: dict[int, int] = {}  # the line of a hunk's header in the patch -> the line its lines stand at
        found: list[Moved] = []
        for fp in patch.files:
            before = current.get(fp.path)
            if fp.new_file or fp.deleted or before is None:
                continue
            placed = [(hunk, _line(before, fp, hunk)) for hunk in fp.hunks]
            if all(line == hunk.old_start for hunk, line in placed) or not _in_order(placed):
                continue
            for hunk, line in placed:
                if line != hunk.old_start:
                    starts[hunk.patch_line] = line
                    found.append(Moved(patch.name, fp.path, hunk.header, hunk.old_start, line))
        placed_patch = _rewritten(patch, starts) if starts else patch
        result = apply_patch(current, placed_patch)
        if isinstance(result, HunkFailure):
            return [*out, *patches[k:]], moved
        out.append(placed_patch)
        moved.extend(found)
        current.update(result)
    return out, moved


def _line(before: bytes, fp: FilePatch, hunk: Hunk) -> int:
    """Where ``hunk``'s old lines stand in ``before``: its own line, else the one place they stand (a hunk of no
    old lines stays where it says)."""
    got = apply_file(before, only(fp, (hunk,)))
    if isinstance(got, HunkFailure) and got.found_at is not None and hunk.old:
        return got.found_at
    return hunk.old_start


def _in_order(placed: Sequence[tuple[Hunk, int]]) -> bool:
    """Whether the hunks, at their lines, still come one after the other without overlapping."""
    end = 0
    for hunk, line in placed:
        begin = line - 1 if hunk.old else line
        if begin < end:
            return False
        end = begin + len(hunk.old)
    return True


def _rewritten(patch: Patch, starts: Mapping[int, int]) -> Patch:
    """``patch`` with the hunk headers at the given lines of its text moved to their new old-side lines (the
    new side moves by as much: the hunks before them are unchanged)."""
    lines = patch.data.split(b"\n")
    for number, line in starts.items():
        header = lines[number - 1]
        m = _HEADER.match(header)
        assert m is not None, header  # a hunk's header line, as parse_patch read it
        delta = line - int(m[1])
        lines[number - 1] = (
            b"@@ -%d%s +%d%s @@" % (line, m[2] or b"", int(m[3]) + delta, m[4] or b"") + header[m.end() :]
        )
    return parse_patch(b"\n".join(lines), patch.path, name=patch.name)
