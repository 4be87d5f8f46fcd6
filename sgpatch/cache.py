"""The one cache: expensive intermediate results, kept by the bytes they were computed from.

A cache is a correctness risk in a tool whose job is to tell the truth, so it keeps work, never an answer:
the parsed interface facts of one source file, the landing result of one file's hunks, the member digests
of one upstream wheel, the files a series touches read from one pinned artifact, a clean export to build in.
No command's output or exit code is ever kept; every check runs each time, over these parts.

- **One key** (:func:`key`): sha256 over the kind, :func:`code_digest` (one digest of the whole sgpatch
  package: a changed sgpatch never reads an old entry, and no list of "the modules this depends on" is kept
  by hand) and the content the result was computed from (length-prefixed, so no two lists of parts collide).
- **One reader** (:meth:`Cache.get`): a bounded read of a regular file that is not a link, parsed as JSON;
  anything else (missing, a link, a FIFO, too large, truncated, not JSON) is a miss.  What it returns is
  data from disk: the caller re-validates its shape and treats a bad shape as a miss too.
- **Atomic writes** (:meth:`Cache.put`): a temporary file renamed over the entry; a failure is ignored (it
  costs time, never the answer), and nothing ever says an entry was kept.
- **Pruning** (:meth:`Cache.prune`): removes only regular files named like its own entries, in a kind's
  directory opened without following a link.

The cache root (:func:`results_root`, ``$XDG_CACHE_HOME/sgpatch/results``) is created 0700.  A root (or
the ``sgpatch`` directory above it) that is a symbolic link, not owned by the user, or writable by group or
others is not used: :func:`open_cache` says so in one line through ``warn`` and returns None, and the
command runs uncached, exactly as with ``--no-cache``.  Downloads (``artifacts/``, checked by sha256) and
``fetch``'s locks live beside it under :func:`cache_root`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_ENTRY_BYTES = 16 << 20

# What the cache holds, one directory each, and how many entries of each pruning keeps (most recent first).
KEEP: dict[str, int] = {
    "interface-facts": 20000,  # one source file's facts (a release is ~120 entries)
    "landing": 2000,  # one file's hunks checked against its bytes
    "wheel-digests": 64,  # one upstream wheel's member digests
    "wheel-trees": 64,  # one pinned wheel's checkout files and their digests (port compares a release's wheels)
    "artifact-files": 64,  # the files a series touches, read from one pinned artifact (port's old release)
}
# A kind that holds directories its owner manages itself (kept from, and pruned by, sgpatch.wheel.export).
EXPORTS = "exports"

_ENTRY = re.compile(r"[0-9a-f]{64}\.json")
_TEMP = re.compile(r"\.tmp-[0-9a-f]{64}-[0-9]+-[0-9a-f]{8}")
_STALE_TEMP_S = 3600  # a temporary file this old was left by a killed run
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def cache_root() -> Path:
    """The user's sgpatch cache directory: ``$XDG_CACHE_HOME/sgpatch`` (default ``~/.cache/sgpatch``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sgpatch"


def results_root() -> Path:
    """Where :class:`Cache` keeps its entries by default: ``results/`` under :func:`cache_root`, apart from
    the downloads (so a test session can be given its own results while sharing the downloads)."""
    return cache_root() / "results"


def digest(*parts: str | bytes) -> str:
    """sha256 over ``parts``, each length-prefixed (so no two lists of parts collide by concatenation)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(b"%d\0" % len(data))
        h.update(data)
    return h.hexdigest()


_CODE: list[str] = []


def code_digest() -> str:
    """sgpatch's version and the source of every file of the package: a changed sgpatch never reads an old
    result, and no list of "the modules this result depends on" has to be kept by hand."""
    if not _CODE:
        import sgpatch

        parts: list[str | bytes] = [sgpatch.__version__]
        for rel, path in sorted(_sources(os.path.dirname(os.path.realpath(sgpatch.__file__)), "")):
            with open(path, "rb") as fh:
                parts += [rel, fh.read()]
        _CODE.append(digest(*parts))
    return _CODE[0]


def _sources(folder: str, rel: str) -> list[tuple[str, str]]:
    """Every ``*.py`` below ``folder``: its path relative to the package (``/``-separated), and on disk.
    (``os.scandir`` rather than ``Path.rglob``: this runs on every cached command's start.)"""
    out: list[tuple[str, str]] = []
    with os.scandir(folder) as found:
        for e in found:
            if e.is_dir(follow_symlinks=False):
                out += _sources(e.path, f"{rel}{e.name}/")
            elif e.name.endswith(".py"):
                out.append((rel + e.name, e.path))
    return out


def key(kind: str, *parts: str | bytes) -> str:
    """The one key function: the identity of a ``kind`` result computed from ``parts`` (the content itself,
    or digests of it, and whatever else the computation reads) by this sgpatch."""
    return digest("sgpatch-cache", kind, code_digest(), *parts)


class Cache:
    """A trusted cache directory (made by :func:`open_cache`): one subdirectory per kind of result."""

    def __init__(self, root: Path, *, identity: tuple[int, int] | None = None) -> None:
        self.root = root
        self.identity = identity  # (st_dev, st_ino) of the root checked by open_cache: a swapped root is not used
        self.hits = 0  # entries read whole this session (for tests and benchmarks: never shown)
        self.misses = 0
        self._pruned: set[str] = set()

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"

    def _kind_fd(self, kind: str, *, create: bool) -> int:
        """The kind's directory, opened without following a link (at the root or the kind)."""
        if kind not in KEEP and kind != EXPORTS:
            raise ValueError(f"unknown cache kind {kind!r}")
        root = os.open(self.root, _DIR_FLAGS)
        try:
            if self.identity is not None:
                st = os.fstat(root)
                if (st.st_dev, st.st_ino) != self.identity:
                    raise OSError(errno.ESTALE, "the cache directory was replaced since it was checked")
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(kind, 0o700, dir_fd=root)
            return os.open(kind, _DIR_FLAGS, dir_fd=root)
        finally:
            os.close(root)

    def get(self, kind: str, entry: str) -> Any | None:
        """The JSON value kept as ``kind``/``entry`` (a :func:`key`), or None: missing, not a regular file,
        a link, over :data:`MAX_ENTRY_BYTES`, unreadable or not JSON.  The value is data: validate it."""
        value = self._read(kind, entry)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def _read(self, kind: str, entry: str) -> Any | None:
        if not _ENTRY.fullmatch(f"{entry}.json"):
            return None
        try:
            folder = self._kind_fd(kind, create=False)
        except OSError:
            return None
        try:
            fd = os.open(f"{entry}.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        except OSError:
            return None
        finally:
            os.close(folder)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
                return None
            chunks = []
            left = MAX_ENTRY_BYTES + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            raw = b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(raw) > MAX_ENTRY_BYTES:
            return None
        try:
            return json.loads(raw)
        except (ValueError, RecursionError, MemoryError):
            return None

    def put(self, kind: str, entry: str, value: Any) -> None:
        """Keep ``value`` (plain JSON data) as ``kind``/``entry``, atomically; any failure is ignored.  The
        first write of a kind in a session prunes that kind to its :data:`KEEP` most recent entries."""
        if not _ENTRY.fullmatch(f"{entry}.json"):
            raise ValueError(f"not a cache key: {entry!r}")
        try:
            data = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError, RecursionError):
            return
        if len(data) > MAX_ENTRY_BYTES:
            return
        try:
            folder = self._kind_fd(kind, create=True)
        except OSError:
            return
        tmp = f".tmp-{entry}-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, f"{entry}.json", src_dir_fd=folder, dst_dir_fd=folder)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            return
        finally:
            os.close(folder)
        if kind not in self._pruned:
            self._pruned.add(kind)
            self.prune(kind, keep=KEEP[kind])

    def prune(self, kind: str, *, keep: int) -> int:
        """Remove all but the ``keep`` most recently written entries of ``kind`` (and temporary files a killed
        run left); the number removed.  Only regular files named like this cache's own entries are touched,
        in the kind's directory opened without following a link: a link there, or anything else, is left."""
        try:
            folder = self._kind_fd(kind, create=False)
        except OSError:
            return 0
        removed = 0
        try:
            with os.scandir(folder) as found:
                names = [e.name for e in found if _ENTRY.fullmatch(e.name) or _TEMP.fullmatch(e.name)]
            temps = [n for n in names if n.startswith(".")]
            entries = [n for n in names if not n.startswith(".")]
            if len(entries) <= keep and not temps:
                return 0
            aged: list[tuple[int, str]] = []
            stale = time.time() - _STALE_TEMP_S
            for name in names:
                try:
                    st = os.stat(name, dir_fd=folder, follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if name.startswith("."):
                    if st.st_mtime < stale and _unlink(name, folder):
                        removed += 1
                else:
                    aged.append((st.st_mtime_ns, name))
            aged.sort(reverse=True)
            for _, name in aged[keep:]:
                removed += _unlink(name, folder)
        except OSError:
            pass
        finally:
            os.close(folder)
        return removed

    def directory(self, kind: str) -> Path | None:
        """The kind's directory, created 0700, for a kind that keeps directories (:data:`EXPORTS`); None when
        it cannot be made or is not a real directory (a link, a file)."""
        try:
            os.close(self._kind_fd(kind, create=True))
        except (OSError, ValueError):
            return None
        return self.root / kind


def _unlink(name: str, folder: int) -> bool:
    try:
        os.unlink(name, dir_fd=folder)
    except OSError:
        return False
    return True


def _untrusted(path: Path) -> tuple[str, bool] | None:
    """Why the directory ``path`` must not hold a cache, and whether to say so (a link, another owner, write
    access for others: yes; it cannot be created or is a file: no, that costs time only); None if it may.
    It is created 0700 if missing."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot be created ({exc.strerror or type(exc).__name__})", False
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})", False
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link", True
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory", False
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})", True
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})", True
    return None


def refused_dir(path: Path) -> str | None:
    """Why the directory ``path`` must not hold cached data (a link, not the user's, writable by others,
    not a directory, cannot be made), or None; created 0700 if missing.  The downloads use it as the
    result cache does (:func:`open_cache`)."""
    refused = _untrusted(path)
    return refused[0] if refused is not None else None


def open_cache(*, warn: Callable[[str], None], root: Path | None = None) -> Cache | None:
    """The result cache at ``root`` (default :func:`results_root`), or None when it must not be used.

    The root, and the ``sgpatch`` directory above it when it is the default one, is created 0700 if
    missing.  A root that is a symbolic link, not owned by the user, or writable by group or others is
    refused with one line through ``warn``; one that cannot be created or is not a directory is simply not
    used (it costs time, never the answer).  Either way the command runs as with ``--no-cache``."""
    root = root if root is not None else results_root()
    chain = [root.parent, root] if root == results_root() else [root]
    for path in chain:
        refused = _untrusted(path)
        if refused is not None:
            why, say = refused
            if say:
                warn(f"the cache directory {path} {why}: not used, running without a cache")
            return None
    try:
        st = os.lstat(root)
    except OSError:
        return None
    return Cache(root, identity=(st.st_dev, st.st_ino))
