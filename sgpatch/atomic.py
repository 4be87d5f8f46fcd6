"""Files written whole and read whole: atomic writes (a temporary file beside the target, renamed over it
when whole), and the one bounded read of a regular file (a FIFO, device, socket or directory refused on the
open descriptor, a link refused unless asked for)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

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


def read_regular(path: Path, *, limit: int, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, read through one descriptor opened without blocking (a FIFO
    would wait for a writer for ever) and checked on that descriptor (no race between a check and the read),
    up to ``limit`` bytes; through a link at its last component only with ``follow``.

    FileNotFoundError when nothing is there; NotAFile when it is something else, or larger than ``limit``;
    another OSError when it cannot be read."""
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


def write_atomic(path: Path, content: bytes | Path) -> None:
    """Replace ``path`` with ``content`` (bytes, or the file at that path, copied in chunks) in one rename.

    A reader sees the old file or the new one, never a part; a failure leaves the
    old one and no temporary file.  The new file keeps the old one's permissions
    (0644 for a new file).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(content, Path):
                with content.open("rb") as src:
                    shutil.copyfileobj(src, fh, 1 << 20)
            else:
                fh.write(content)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
