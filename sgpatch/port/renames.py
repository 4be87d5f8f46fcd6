"""Where did a file go?  For a file the new release lacks, the file of the release that looks most like it.

Only a hint for the person resolving the port (it is shown, never acted on): candidates share the
name, or one name contains the other, and must share at least half of the old file's lines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

MIN_SHARED = 0.5
MAX_CANDIDATES = 20


def _lines(data: bytes) -> Counter[bytes]:
    return Counter(ln.strip() for ln in data.splitlines() if ln.strip())


def shared(old: bytes, new: bytes) -> float:
    """The share of ``old``'s non-blank lines (as a multiset, indentation ignored) that ``new`` has."""
    a, b = _lines(old), _lines(new)
    total = sum(a.values())
    return sum((a & b).values()) / total if total else 0.0


def candidates(path: str, files: Sequence[str]) -> list[str]:
    """The files of the release ``path`` may have become: the same name first, then names that contain
    the other (``collector.py`` and ``metrics_collector.py``); at most ``MAX_CANDIDATES``."""
    name = PurePosixPath(path)
    stem = name.stem
    same = [f for f in files if PurePosixPath(f).name == name.name and f != path]
    near = [
        f
        for f in files
        if f not in same
        and PurePosixPath(f).suffix == name.suffix
        and len(stem) >= 5
        and len(PurePosixPath(f).stem) >= 5
        and (stem in PurePosixPath(f).stem or PurePosixPath(f).stem in stem)
    ]
    return [*same, *near][:MAX_CANDIDATES]


def find_rename(old: bytes | None, found: Mapping[str, bytes | None]) -> tuple[str, float] | None:
    """Of the ``candidates`` (read: ``found``), the one that shares most of ``old``'s lines, and the share."""
    if old is None:
        return None
    best: tuple[str, float] | None = None
    for candidate, data in found.items():
        if data is None:
            continue
        score = shared(old, data)
        if score >= MIN_SHARED and (best is None or score > best[1]):
            best = (candidate, score)
    return best
