"""Where did a file go?  For a file the new release lacks, the file of the release that looks most like it.

Only a hint for the person resolving the port (it is shown, never acted on): candidates share the
name, or one name contains the other, and must share at least half of the old file's lines.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

from sgpatch.series.gone import MIN_SHARED, shared

MAX_CANDIDATES = 20


def candidates(path: str, files: Sequence[str]) -> list[str]:
    """The files of the release ``path`` may have become: the same name first, then names that contain
    the other (``collector.py`` and ``metrics_collector.py``); at most ``MAX_CANDIDATES``."""
    name, stem, suffix = _parts(path)
    same = [f for f in files if _parts(f)[0] == name and f != path]
    near = [
        f
        for f in files
        if f not in same
        and _parts(f)[2] == suffix
        and len(stem) >= 5
        and len(_parts(f)[1]) >= 5
        and (stem in _parts(f)[1] or _parts(f)[1] in stem)
    ]
    return [*same, *near][:MAX_CANDIDATES]


@functools.lru_cache(maxsize=1 << 14)
def _parts(path: str) -> tuple[str, str, str]:
    """(name, stem, suffix) of a POSIX path: each missing file of a port compares the same release's names."""
    p = PurePosixPath(path)
    return p.name, p.stem, p.suffix


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
