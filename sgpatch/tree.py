"""Read-only views of an sglang source tree, whatever holds it.

Every view is addressed with checkout-relative paths in upstream's layout
(``python/sglang/srt/models/kimi_k25.py``).  A wheel or an installed sglang
has no ``python/`` directory; their views strip it, so anchors, blob checks and
the interface check run unchanged against a checkout, a wheel or an install.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Protocol

from sgpatch.archive import open_archive

PYTHON_PREFIX = "python/"


def git_blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what ``git hash-object`` prints)."""
    header = b"blob %d\0" % len(data)
    return hashlib.sha1(header + data, usedforsecurity=False).hexdigest()


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


class DirTree:
    """Files on disk below ``root`` (a checkout's work tree)."""

    def __init__(self, root: Path, *, strip_prefix: str = "", label: str | None = None) -> None:
        self.root = root
        self.strip_prefix = strip_prefix
        self._label = label or f"checkout {root}"

    @property
    def label(self) -> str:
        return self._label

    def _local(self, path: str) -> Path | None:
        pure = _check_relative(path)
        rel = str(pure)
        if self.strip_prefix:
            if not rel.startswith(self.strip_prefix):
                return None
            rel = rel[len(self.strip_prefix) :]
        return self.root / rel

    def read(self, path: str) -> bytes | None:
        local = self._local(path)
        if local is None or local.is_symlink() or not local.is_file():
            return None
        return local.read_bytes()

    def mode(self, path: str) -> str | None:
        """The git mode a regular file would get (100755 when its owner may execute it), or None."""
        local = self._local(path)
        if local is None or local.is_symlink() or not local.is_file():
            return None
        return "100755" if local.stat().st_mode & 0o100 else "100644"

    def list(self, prefix: str) -> list[str]:
        local = self._local(prefix.rstrip("/"))
        if local is None or not local.is_dir():
            return []
        out = []
        for p in local.rglob("*"):
            if p.is_file() and not p.is_symlink():
                out.append(self.strip_prefix + p.relative_to(self.root).as_posix())
        return sorted(out)


class ZipTree:
    """Files inside a wheel; ``python/`` paths map to the wheel's top level.

    A context manager: the archive stays open (read through sgpatch.archive, every
    member checked) until the ``with`` block ends, since the interface check reads a
    few hundred members and reopening the zip for each costs seconds.
    """

    def __init__(self, wheel: Path) -> None:
        self.wheel = wheel
        self.archive = open_archive(wheel, "wheel")

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
