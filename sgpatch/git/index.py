"""A new checkout's index written by sgpatch, with each file's stat data, as ``git read-tree`` of its commit and
``git update-index --refresh`` leave it.

Why not git: the refresh reads and hashes every file again (the files sgpatch has just written and hashed itself),
80 ms of CPU for the 2,642 files of an SGLang wheel, in the layout a port runs beside its own work.

What is written is what git documents (``gitformat-index``) and writes: the signature ``DIRC``, version 2, the
number of entries; each entry the file's ctime and mtime (seconds, nanoseconds), device, inode, mode, user,
group and size, each in 32 bits as git truncates them, its blob id, its flags (the path's length, at most 0xFFF),
the path, and one to eight NULs that end the entry on a multiple of eight bytes; the entries sorted by path, byte
by byte.  Then the cache-tree extension ``read-tree`` primes (``TREE``: each directory's path component, how many
entries it holds, how many subdirectories, its tree id, then theirs, ordered by the length of the name and then
its bytes), then the SHA-1 of all before it.  ``tests/test_index.py`` compares the bytes with the index git itself
writes for the same files.

The files must not be racily clean (``racy-git``): a file written in the second its index is written has to be
hashed again by the next git that writes the index, since git (built without ``USE_NSEC``) compares seconds.  A
checkout sgpatch lays out dates its files as its commit (``checkout.extract``), years before.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sgpatch.errors import CheckoutError

_MASK = 0xFFFFFFFF
_NAME_MASK = 0xFFF
_FIXED = 62  # an entry's bytes before its path


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One file of the index: its path (bytes, ``/``-separated), mode (0o100644 or 0o100755), blob id (20 bytes)
    and the stat data read from the file as it was left."""

    path: bytes
    mode: int
    oid: bytes
    stat: os.stat_result


def index_file(entries: Sequence[IndexEntry], trees: Mapping[bytes, bytes]) -> bytes:
    """The index of ``entries`` with the cache tree of ``trees`` (each directory's path, ``b""`` the top, ->
    its tree id; every directory of the entries must have one)."""
    ordered = sorted(entries, key=lambda e: e.path)
    parts = [b"DIRC" + struct.pack(">II", 2, len(ordered))]
    for e in ordered:
        st = e.stat
        ctime, mtime = divmod(st.st_ctime_ns, 1_000_000_000), divmod(st.st_mtime_ns, 1_000_000_000)
        fields = (*ctime, *mtime, st.st_dev, st.st_ino, e.mode, st.st_uid, st.st_gid, st.st_size)
        head = struct.pack(">10I", *(v & _MASK for v in fields))
        length = _FIXED + len(e.path)
        pad = 8 - length % 8
        parts.append(head + e.oid + struct.pack(">H", min(len(e.path), _NAME_MASK)) + e.path + b"\0" * pad)
    parts.append(_cache_tree([e.path for e in ordered], trees))
    body = b"".join(parts)
    return body + hashlib.sha1(body, usedforsecurity=False).digest()


def _cache_tree(paths: Sequence[bytes], trees: Mapping[bytes, bytes]) -> bytes:
    """The ``TREE`` extension of the index of ``paths`` (sorted)."""
    counts: dict[bytes, int] = {b"": 0}
    subs: dict[bytes, set[bytes]] = {b"": set()}
    for path in paths:
        folder = b""
        counts[b""] += 1
        for part in path.split(b"/")[:-1]:
            inner = folder + b"/" + part if folder else part
            if inner not in counts:
                counts[inner], subs[inner] = 0, set()
                subs[folder].add(part)
            counts[inner] += 1
            folder = inner
    out: list[bytes] = []
    todo: list[tuple[bytes, bytes]] = [(b"", b"")]  # (the directory's path, its name)
    while todo:  # depth first, without recursion: a hostile archive may nest past Python's stack
        folder, name = todo.pop()
        tree = trees.get(folder)
        if tree is None:
            raise CheckoutError(f"{folder.decode('utf-8', 'replace') or '.'}: no tree id for the index's cache tree")
        names = sorted(subs[folder], key=lambda n: (len(n), n))
        out.append(name + b"\0%d %d\n" % (counts[folder], len(names)) + tree)
        todo.extend((folder + b"/" + n if folder else n, n) for n in reversed(names))
    data = b"".join(out)
    return b"TREE" + struct.pack(">I", len(data)) + data


def write_index(git_dir: Path, data: bytes) -> None:
    """``data`` as the repository's index: written to ``index.lock``, taken as git takes it (a lock another git
    holds is an error), then renamed over ``index``."""
    lock = git_dir / "index.lock"
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise CheckoutError(f"{lock}: exists: another git process is writing the index") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.rename(lock, git_dir / "index")
    except BaseException:
        lock.unlink(missing_ok=True)
        raise
