"""The project's own files (VERSIONS.toml, a series file, its patches, anchors.toml), read as the input they are.

Each is read only when it is a regular file (``atomic.read_regular``: opened without blocking, checked on the
open descriptor, read up to a bound; a link the person made is followed).  A refusal is an ``OSError``, which
every caller already reports as one line, exit 2.
"""

from __future__ import annotations

from pathlib import Path

from sgpatch.atomic import NotAFile, read_regular

MAX_BYTES = 64 << 20  # far beyond any VERSIONS.toml, series or patch; /dev/zero is refused before this


def read_project_file(path: Path, *, limit: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (FileNotFoundError when there is none; NotAFile when it is
    something else, or larger than ``limit``)."""
    return read_regular(path, limit=limit)


__all__ = ["MAX_BYTES", "NotAFile", "read_project_file"]
