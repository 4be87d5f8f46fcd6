"""The project's own files (VERSIONS.toml, a series file, its patches, anchors.toml), read as the input they are.

Each is read only when it is a regular file: it is opened without blocking (a FIFO would wait for a writer
for ever, and whatever a writer sent would be read as the project), then checked on the open descriptor
(a FIFO, a directory, a device or a socket is refused, with no race between a check and the read), and read
up to a bound.  A refusal is an ``OSError``, which every caller already reports as one line, exit 2.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_BYTES = 64 << 20  # far beyond any VERSIONS.toml, series or patch; /dev/zero is refused before this

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotAFile(OSError):
    """The path names something other than a regular file, or one over :data:`MAX_BYTES`."""


def read_project_file(path: Path, *, limit: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (FileNotFoundError when there is none; NotAFile when it is
    something else, or larger than ``limit``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise NotAFile(f"it is {kind}, not a regular file")
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise NotAFile(f"it is larger than {limit >> 20} MiB")
        return b"".join(chunks)
    finally:
        os.close(fd)
