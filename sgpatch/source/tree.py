"""Read-only views of an sglang source tree, whatever holds it.

Every view is addressed with checkout-relative paths in upstream's layout
(``python/sglang/srt/models/kimi_k25.py``).  A wheel or an installed sglang
has no ``python/`` directory; their views strip it, so anchors, blob checks and
the interface check run unchanged against a checkout, a wheel or an install.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import IO, Protocol

from sgpatch.errors import SgpatchError

PYTHON_PREFIX = "python/"


class SourceTree(Protocol):
    """A read-only tree of files addressed by checkout-relative POSIX paths."""

    @property
    def label(self) -> str:
        """What the tree is, for reports (``checkout /srv/sglang``)."""
        ...

    def read(self, path: str) -> bytes | None:
        """The bytes of ``path``, or ``None`` when the tree has no such file."""
        ...

    def list(self, prefix: str) -> list[str]:
        """Sorted paths of the regular files at or below directory ``prefix``."""
        ...


def _check_relative(path: str) -> PurePosixPath:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"not a relative path inside the tree: {path!r}")
    return pure


class LinkInPath(SgpatchError):
    """A path leads through a symbolic link to a directory: it may point anywhere, so it is never followed (exit 2)."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class DirTree:
    """Files on disk below ``root`` (a checkout's work tree).

    Reads stay inside ``root``: every directory on the way to a file is opened
    relative to its parent without following links, so a symlinked directory
    anywhere on the path (``python/etcdir -> /etc``) is refused with LinkInPath
    and the file itself must be a regular file (a symlink reads as missing, as
    in git's view of the tree).  ``root`` itself is the caller's choice.
    """

    def __init__(self, root: Path, *, strip_prefix: str = "", label: str | None = None) -> None:
        self.root = root
        self.strip_prefix = strip_prefix
        self._label = label or f"checkout {root}"
        self._dirs: dict[tuple[str, ...], int] | None = None  # inside ``with``: each directory opened once

    @property
    def label(self) -> str:
        return self._label

    def __enter__(self) -> DirTree:
        """Within the block, each directory walked to (without following links, as always) is kept open and
        walked to once: a check that reads a few hundred files does not open every directory on each path."""
        self._dirs = {}
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        kept, self._dirs = self._dirs or {}, None
        for fd in kept.values():
            os.close(fd)

    def _parts(self, path: str) -> list[str] | None:
        """The components of ``path`` below ``root`` (None: outside ``strip_prefix``)."""
        if "\0" in path:
            return None  # no file system holds such a name
        parts = [p for p in path.split("/") if p not in ("", ".")]  # as PurePosixPath(path).parts, faster
        if path.startswith("/") or ".." in parts:
            raise ValueError(f"not a relative path inside the tree: {path!r}")
        if self.strip_prefix:
            rel = "/".join(parts)
            if not (rel + "/").startswith(self.strip_prefix):
                return None
            parts = [p for p in rel[len(self.strip_prefix) :].split("/") if p]
        return parts

    def _refuse(self, dir_fd: int, name: str, walked: list[str], path: str) -> None:
        """Raise LinkInPath if ``name`` in ``dir_fd`` is a symlink."""
        try:
            mode = os.lstat(name, dir_fd=dir_fd).st_mode
        except OSError:
            return
        if stat.S_ISLNK(mode):
            link = "/".join([*walked, name])
            raise LinkInPath(
                f"{self.root / link}: a symbolic link on the way to {path}; "
                f"sgpatch reads only files inside {self.root}, never through a link",
                hint="remove the link, or give a path that does not go through it",
            )

    def _open_dir(self, parts: list[str], path: str) -> int | None:
        """A descriptor of the directory ``root/parts``, each step without following links (None: missing);
        the caller closes it.  Inside ``with``, each directory on the way is opened once and kept."""
        kept = self._dirs
        if kept is None:
            fd = self._root_fd()
            for n, part in enumerate(parts):
                if fd is None:
                    return None
                try:
                    nxt = self._child(fd, part, parts[:n], path)
                finally:
                    os.close(fd)
                fd = nxt
            return fd
        fd = self._kept_dir(kept, parts, path)
        return None if fd is None else os.dup(fd)

    def _kept_dir(self, kept: dict[tuple[str, ...], int], parts: list[str], path: str) -> int | None:
        """The kept descriptor of ``root/parts`` (not to be closed), each directory on the way opened once."""
        found = kept.get(tuple(parts))
        if found is not None:
            return found
        for n in range(len(parts) + 1):
            here = tuple(parts[:n])
            if here not in kept:
                fd = self._root_fd() if n == 0 else self._child(kept[here[:-1]], parts[n - 1], parts[: n - 1], path)
                if fd is None:
                    return None
                kept[here] = fd
        return kept[tuple(parts)]

    def _root_fd(self) -> int | None:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None

    def _child(self, fd: int, part: str, walked: list[str], path: str) -> int | None:
        """The directory ``part`` in ``fd``, opened without following a link; None when missing; LinkInPath
        when it is a symbolic link."""
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                self._refuse(fd, part, walked, path)
            return None

    def _open_file(self, path: str) -> int | None:
        """A descriptor of the regular file ``path`` (opened without following links), or None."""
        parts = self._parts(path)
        if not parts:
            return None
        kept = self._dirs
        dir_fd = self._open_dir(parts[:-1], path) if kept is None else self._kept_dir(kept, parts[:-1], path)
        if dir_fd is None:
            return None
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError:
            return None  # missing, a symlink (ELOOP), or unreadable: not a file of the tree
        finally:
            if kept is None:
                os.close(dir_fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def read(self, path: str) -> bytes | None:
        fd = self._open_file(path)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def open(self, path: str) -> IO[bytes] | None:
        """The regular file ``path`` opened for reading (as :meth:`read` finds it), or None: for streaming."""
        fd = self._open_file(path)
        return None if fd is None else os.fdopen(fd, "rb")

    def read_at_most(self, path: str, limit: int) -> bytes | None:
        """Like :meth:`read`, but at most ``limit + 1`` bytes: a longer result means the file is over ``limit``."""
        fd = self._open_file(path)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read(limit + 1)

    def mode(self, path: str) -> str | None:
        """The git mode a regular file would get (100755 when its owner may execute it), or None."""
        fd = self._open_file(path)
        if fd is None:
            return None
        try:
            return "100755" if os.fstat(fd).st_mode & 0o100 else "100644"
        finally:
            os.close(fd)

    def list(self, prefix: str) -> list[str]:
        parts = self._parts(prefix.rstrip("/"))
        if parts is None:
            return []
        dir_fd = self._open_dir(parts, prefix)
        if dir_fd is None:
            return []
        os.close(dir_fd)  # checked: no link on the way; os.walk below never follows one
        top = self.root.joinpath(*parts)
        out = []
        for here, _dirs, files in os.walk(top):  # followlinks=False: a symlinked directory is not entered
            base = Path(here)
            for name in files:
                p = base / name
                if p.is_file() and not p.is_symlink():
                    out.append(self.strip_prefix + p.relative_to(self.root).as_posix())
        return sorted(out)


class ZipTree:
    """Files inside a wheel; ``python/`` paths map to the wheel's top level.

    A context manager: the archive stays open (read through sgpatch.source.archive, every
    member checked) until the ``with`` block ends, since the interface check reads a
    few hundred members and reopening the zip for each costs seconds.
    """

    def __init__(self, wheel: Path, *, digest: bool = False) -> None:
        from sgpatch.source.archive import open_archive  # only a wheel's view needs the archive reader

        self.wheel = wheel
        self.archive = open_archive(wheel, "wheel", digest=digest)  # digest: the sha256 of the bytes read

    @property
    def label(self) -> str:
        return f"wheel {self.wheel.name}"

    def close(self) -> None:
        self.archive.close()

    def __enter__(self) -> ZipTree:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def read(self, path: str) -> bytes | None:
        rel = str(_check_relative(path))
        if not rel.startswith(PYTHON_PREFIX):
            return None
        name = rel[len(PYTHON_PREFIX) :]
        if name not in self.archive:
            return None
        return self.archive.read(name)

    def list(self, prefix: str) -> list[str]:
        rel = str(_check_relative(prefix.rstrip("/")))
        if not rel.startswith(PYTHON_PREFIX):
            return []
        inner = rel[len(PYTHON_PREFIX) :].rstrip("/") + "/"
        return sorted(PYTHON_PREFIX + e.name for e in self.archive.entries if e.name.startswith(inner))


def site_packages_tree(site_packages: Path, *, label: str | None = None) -> DirTree:
    """An installed sglang: ``python/sglang/...`` maps to ``site-packages/sglang/...``."""
    return DirTree(site_packages, strip_prefix=PYTHON_PREFIX, label=label or f"installed {site_packages}")
