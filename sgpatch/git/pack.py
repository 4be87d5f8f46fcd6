"""A checkout's thousands of files written as one pack of git objects, and the pack's index, by sgpatch itself
while they are laid out; the checkout's first commit and its trees go into the same pack (``BlobPack.commit``).

Why not git: ``git hash-object -w`` makes a loose object, a file of its own, for each file (on 1,942 files of an
SGLang wheel 0.2 s of user and 1.8 s of system time).  One ``git fast-import`` of them all made one pack, but it
deflated every file again and hashed each twice with git's collision-detecting SHA-1: 0.34 s of CPU for a 0.5.12
wheel, more than half of a layout's work outside the file system, on the critical path of a port.  A wheel's
members are deflate streams already, and a pack object is a zlib stream: the member's stream in zlib's frame (a
two-byte header, then the Adler-32 of the bytes).  So a wheel is packed without deflating anything; an sdist's files,
read out of one gzip stream, are deflated here at zlib's level 1, as fast-import was told to.

What git reads is written as git documents it (``gitformat-pack``): a version 2 pack of whole objects (no deltas)
and its version 2 index (fan-out, sorted ids, CRC-32s, offsets, 64-bit ones past 2 GiB); a tree object per
directory, its entries in git's order (a directory's name sorts as if it ended in ``/``); the commit as
``commit-tree`` writes it (sgpatch's identity, the date, no encoding header: the message is UTF-8).  Git decides
whether it agrees: ``tests/test_fetch.py`` has git make the commit of the same files itself (``add -A``,
``write-tree``, ``commit-tree``) and compares the ids, with ``fsck --strict``; ``tests/test_pack.py`` compares
every object with what ``git hash-object`` and ``cat-file`` make of it, and runs ``verify-pack``.

Bytes seen twice (two empty ``__init__.py`` files) are one object, written once; two files of other sizes or
CRC-32s with the same id (a SHA-1 collision, which git's own hashing refuses) are a CheckoutError.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from sgpatch.errors import CheckoutError
from sgpatch.git.fastimport import RAW_DATE
from sgpatch.git.objectid import object_id
from sgpatch.git.repo import IDENTITY_EMAIL, IDENTITY_NAME, Git

_COMMIT, _TREE, _BLOB = 1, 2, 3  # object types in a pack entry's header
_ZLIB_HEAD = b"\x78\x01"  # zlib's frame before a deflate stream: 32 KiB window, no dictionary (a valid check)
_TREE_MODE = b"40000"
_FILE_MODES = ("100644", "100755")
OFFSET32_LIMIT = 0x7FFFFFFF  # the index's 32-bit offsets: git's ``pack.indexVersion`` default
_LEVEL = 1  # what sgpatch deflates itself (an sdist's files, the trees, the commit)
_Folder = dict[bytes, "_Folder | tuple[bytes, bytes]"]  # a folder's names: a subfolder, or a file's (mode, id)


class BlobPack:
    """Blobs written into a pack one by one: ``begin(size, deflated)``, ``write`` its bytes, ``end()``; then, if
    asked, the commit of them all (``commit``).  ``blob_pack`` finishes the pack and its index."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._offset = out.tell()
        self._objects: dict[bytes, tuple[int, int]] = {}  # id -> (offset, CRC-32 of its entry)
        self._blobs: dict[bytes, tuple[int, int]] = {}  # id -> (size, CRC-32 of the bytes): a collision's tell
        self._committed = False
        self.ids: list[str] = []  # each blob's id, in the order the blobs were written
        self.commit_id: str | None = None  # the commit's, once the pack is done
        self.trees: dict[bytes, bytes] = {}  # each folder's path (b"": the top) -> its tree's id, once committed
        # the blob being written
        self._size = self._left = 0
        self._start = 0
        self._crc = 0  # of the entry's bytes in the pack
        self._data_crc = 0  # of the blob's bytes
        self._adler = 1
        self._hash = hashlib.sha1(usedforsecurity=False)
        self._deflater: zlib._Compress | None = None

    def begin(self, size: int, deflated: bytes | None = None) -> None:
        """A blob of ``size`` bytes; ``deflated``: those bytes as one raw deflate stream, checked by the caller to
        inflate to exactly them (``source.archive.Archive.deflated``), kept as they are; without it, deflated here."""
        self._size = self._left = size
        self._start, self._crc, self._data_crc, self._adler = self._offset, 0, 0, 1
        self._hash = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
        self._emit(_entry_header(_BLOB, size))
        if deflated is None:
            self._deflater = zlib.compressobj(_LEVEL)
        else:
            self._deflater = None
            self._emit(_ZLIB_HEAD)
            self._emit(deflated)

    def write(self, chunk: bytes) -> None:
        self._left -= len(chunk)
        if self._left < 0:
            raise CheckoutError("a file is longer than its size said; nothing was written to git")
        self._hash.update(chunk)
        self._data_crc = zlib.crc32(chunk, self._data_crc)
        if self._deflater is not None:
            self._emit(self._deflater.compress(chunk))
        else:
            self._adler = zlib.adler32(chunk, self._adler)

    def end(self) -> None:
        if self._left:
            raise CheckoutError("a file is shorter than its size said; nothing was written to git")
        self._emit(self._deflater.flush() if self._deflater is not None else struct.pack(">I", self._adler))
        oid = self._hash.digest()
        known = self._blobs.setdefault(oid, (self._size, self._data_crc))
        if known != (self._size, self._data_crc):
            raise CheckoutError(f"two files of other bytes have the same git id {oid.hex()} (a SHA-1 collision)")
        self._keep(oid)
        self.ids.append(oid.hex())

    def commit(self, files: Sequence[tuple[str, str]], message: str, date: str) -> None:
        """After the last blob: a commit without a parent whose tree holds the n-th blob at the n-th of ``files``
        (``(mode, path)``), by sgpatch's identity at ``date`` (``<unix seconds> <zone>``); its id in ``commit_id``.
        Its trees go into the same pack.  It is the commit ``commit-tree`` makes of that tree (an id is the digest
        of the bytes; ``tests/test_fetch.py`` compares)."""
        if len(files) != len(self.ids) or self._committed:
            raise ValueError("a commit names each blob once, after the last")
        if not RAW_DATE.fullmatch(date):
            raise ValueError(f"not a raw git date (<unix seconds> <zone>): {date!r}")
        root: _Folder = {}
        for (mode, path), oid in zip(files, self.ids, strict=True):
            if mode not in _FILE_MODES:
                raise ValueError(f"{path}: mode {mode} is not a file's")
            *dirs, name = path.encode("utf-8", "surrogateescape").split(b"/")
            node = root
            for part in dirs:
                found = node.setdefault(part, {})
                if not isinstance(found, dict):
                    raise ValueError(f"{path}: a file stands where its folder would")
                node = found
            if name in node:
                raise ValueError(f"{path}: named twice")
            node[name] = (mode.encode(), bytes.fromhex(oid))
        tree = self._tree(root)
        ident = f"{IDENTITY_NAME} <{IDENTITY_EMAIL}> {date}".encode()
        body = b"tree %s\nauthor %s\ncommitter %s\n\n" % (tree.hex().encode(), ident, ident) + message.encode("utf-8")
        self.commit_id = self._whole(_COMMIT, b"commit", body).hex()
        self._committed = True

    def finish(self, *, limit: int = OFFSET32_LIMIT) -> bytes:
        """The pack's last bytes (its object count, then its checksum) written; returns the index that goes with it
        (``limit``: see ``_index``)."""
        out = self._out
        out.seek(8)
        out.write(struct.pack(">I", len(self._objects)))
        out.flush()
        out.seek(0)
        digest = hashlib.sha1(usedforsecurity=False)
        for chunk in iter(lambda: out.read(1 << 20), b""):
            digest.update(chunk)
        checksum = digest.digest()
        out.seek(0, os.SEEK_END)
        out.write(checksum)
        out.flush()
        return _index(self._objects, checksum, limit)

    # ------------------------------------------------------------------ entries

    def _emit(self, data: bytes) -> None:
        if data:
            self._out.write(data)
            self._offset += len(data)
            self._crc = zlib.crc32(data, self._crc)

    def _keep(self, oid: bytes) -> None:
        """The entry just written is object ``oid``'s; one already written for it: this one is taken back."""
        if oid in self._objects:
            self._out.seek(self._start)
            self._out.truncate()
            self._offset = self._start
        else:
            self._objects[oid] = (self._start, self._crc)

    def _whole(self, kind: int, name: bytes, body: bytes) -> bytes:
        """An object given whole (a tree, the commit), deflated here; its id."""
        oid = object_id(name, body)
        self._start, self._crc = self._offset, 0
        self._emit(_entry_header(kind, len(body)) + zlib.compress(body, _LEVEL))
        self._keep(oid)
        return oid

    def _tree(self, root: _Folder) -> bytes:
        """The tree of ``root`` (names -> a subfolder's dict or a file's (mode, id)), each subtree written before the
        tree that names it; its id (each folder's in ``trees``).  Without recursion: a hostile archive may nest
        folders past Python's stack."""
        made = self.trees  # a folder's path -> its tree's id
        todo: list[tuple[_Folder, bytes, bool]] = [(root, b"", False)]
        while todo:
            node, path, ready = todo.pop()
            if not ready:
                todo.append((node, path, True))
                todo.extend(
                    (value, path + b"/" + name if path else name, False)
                    for name, value in reversed(node.items())
                    if isinstance(value, dict)
                )
                continue
            entries = [  # git's order: a folder's name as if it ended in "/"
                (name + b"/", _TREE_MODE, name, made[path + b"/" + name if path else name])
                if isinstance(value, dict)
                else (name, value[0], name, value[1])
                for name, value in node.items()
            ]
            made[path] = self._whole(_TREE, b"tree", b"".join(b"%s %s\0%s" % e[1:] for e in sorted(entries)))
        return made[b""]


def _entry_header(kind: int, size: int) -> bytes:
    """A pack entry's header: the type and the size, seven bits a byte after the first four, lowest first."""
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def _index(objects: dict[bytes, tuple[int, int]], checksum: bytes, limit: int) -> bytes:
    """The version 2 index of a pack whose objects are ``objects`` (id -> (offset, CRC-32 of its entry)): the one
    ``git index-pack --index-version=2,<limit>`` writes (an offset past ``limit`` in the 64-bit table; git's default
    and ours is the largest 31-bit one)."""
    ids = sorted(objects)
    fanout = [0] * 256
    for oid in ids:
        fanout[oid[0]] += 1
    total = 0
    for k in range(256):
        total += fanout[k]
        fanout[k] = total
    small: list[int] = []
    large: list[int] = []
    for oid in ids:
        offset = objects[oid][0]
        if offset <= limit:
            small.append(offset)
        else:  # past 2 GiB (or the limit a test sets): the 64-bit table holds it
            small.append(0x80000000 | len(large))
            large.append(offset)
    head = b"\xfftOc" + struct.pack(">I", 2) + struct.pack(">256I", *fanout)
    body = b"".join(
        [
            head,
            *ids,
            b"".join(struct.pack(">I", objects[oid][1]) for oid in ids),
            struct.pack(f">{len(small)}I", *small),
            struct.pack(f">{len(large)}Q", *large),
            checksum,
        ]
    )
    return body + hashlib.sha1(body, usedforsecurity=False).digest()


@contextmanager
def blob_pack(g: Git, *, limit: int = OFFSET32_LIMIT) -> Iterator[BlobPack]:
    """A ``BlobPack`` into ``g``'s repository: written beside its packs under a temporary name, and only when the
    block ends without an error made a pack (the index last: git sees a pack by its index).  An error inside
    leaves nothing.  ``limit``: the largest offset the index writes in 32 bits (tests set it low)."""
    where = g.git_dir() / "objects" / "pack"
    fd, tmp = tempfile.mkstemp(prefix="tmp_pack_", dir=where)
    made: list[str] = [tmp]
    try:
        with os.fdopen(fd, "w+b") as out:
            out.write(b"PACK" + struct.pack(">II", 2, 0))
            pack = BlobPack(out)
            yield pack
            try:
                index = pack.finish(limit=limit)
            except OSError as exc:
                raise CheckoutError(f"{where}: cannot write the pack: {exc}") from None
        try:
            _publish(where, made, index)
        except OSError as exc:
            raise CheckoutError(f"{where}: cannot write the pack: {exc}") from None
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _publish(where: Path, made: list[str], index: bytes) -> None:
    """The pack ``made[0]`` and its ``index`` under their names in ``where`` (the index last: git sees a pack by
    its index); ``made`` keeps what is still to be removed if this fails."""
    checksum = index[-40:-20].hex()
    fd, tmp = tempfile.mkstemp(prefix="tmp_idx_", dir=where)
    made.append(tmp)
    with os.fdopen(fd, "wb") as out:
        out.write(index)
    for path in made:
        os.chmod(path, 0o444)  # as git leaves its packs
    pack = made[0]
    os.rename(pack, where / f"pack-{checksum}.pack")
    made.remove(pack)
    os.rename(tmp, where / f"pack-{checksum}.idx")
    made.remove(tmp)
