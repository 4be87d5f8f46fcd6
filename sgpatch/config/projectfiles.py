"""Files read as the input they are: the project's own (VERSIONS.toml, a series file, its patches,
anchors.toml) and every other file sgpatch reads whole from a place others may write (a stop record).

``read_regular`` is the one bounded read: the file is opened without blocking (a FIFO would wait for a writer
for ever, and whatever a writer sent would be read), then checked on the open descriptor (a FIFO, a directory,
a device or a socket is refused, with no race between a check and the read), and read up to a bound; a link
at its last component is followed only when asked (a project file may be a link the person made; a record may
not).  A refusal is an ``OSError`` (``NotAFile``), which every caller reports as one line, exit 2.
"""

from __future__ import annotations

import errno
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
    (stat.S_ISLNK, "a symbolic link"),
)


class NotAFile(OSError):
    """The path names something other than a regular file (a link, when links are not followed), or one over
    the bound it was read with."""


def describe(mode: int) -> str:
    """What a file of ``mode`` is, in words (``a FIFO``)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular(path: Path, *, limit: int = MAX_BYTES, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, read through one descriptor checked as it is read, up to
    ``limit`` bytes; through a link at its last component only with ``follow``.  FileNotFoundError when
    nothing is there; NotAFile when it is something else, or larger than ``limit``; another OSError when it
    cannot be read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise NotAFile("it is a symbolic link; sgpatch does not read it through links") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotAFile(f"it is {describe(mode)}, not a regular file")
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


def read_project_file(path: Path, *, limit: int = MAX_BYTES) -> bytes:
    """The bytes of the project's regular file ``path`` (a link the person made followed)."""
    return read_regular(path, limit=limit)
