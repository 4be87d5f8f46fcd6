"""The one reader of sdists (``.tar.gz``) and wheels (``.zip``): member checks, limits, streaming reads.

An archive from an index, or a wheel handed to ``verify --wheel``, may be crafted.
Opening one checks every member before anything is read: its path (no
traversal, no absolute path, no backslash, no ``.git``, no control character),
its kind (regular files and directories only: no links, no devices), each path
once and never both a file and a directory, and the limits below.  Members are
then read in chunks, so a large one is never held in memory to be hashed; a
member whose stream is corrupt (bad deflate data, CRC mismatch, short) is an
error naming it.  Every refusal is an ``ArchiveError`` (exit 2).

Memory stays bounded whatever an archive holds: members are extracted and hashed
in CHUNK pieces, one at a time, and only ``read`` (for a small file: METADATA, a
pyproject.toml, a source file a check reads) holds one member whole, never more
than MAX_MEMBER_BYTES and usually under a limit its caller sets, and ``deflated`` one
member's stored bytes (a deflate stream can be at most twice what it unpacks to, and a
bit: a member that claims more is refused before it is read).  Listing holds
one small record per member (at most MAX_MEMBERS).  So the peak is a few hundred
MiB at worst, far under a 24 GB host; MAX_TOTAL_BYTES bounds the disk an
extraction takes, not memory.

The limits leave a wide margin over SGLang's real files, which grow with each
release (measured: the 0.5.9 sdist has 2,166 members, 22.0 MB unpacked, the
largest 250 KB; the 0.5.9 wheel 1,942 members, 22.1 MB; the 0.5.15 manylinux
wheel 3,757 members, 48.6 MB, the largest 7.5 MB; the 0.5.23 one 6,396 members,
123 MB, the largest 24 MB; no member over 1 MiB packs better than 19:1).
"""

from __future__ import annotations

import calendar
import errno
import gzip
import hashlib
import io
import os
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Literal

from sgpatch.errors import ArchiveError, SourceError
from sgpatch.source.members import HOSTILE as _HOSTILE
from sgpatch.source.members import check_member_name, check_set
from sgpatch.source.zipraw import inflated, stored_bytes

Kind = Literal["sdist", "wheel"]

MAX_DOWNLOAD = 1 << 30  # bytes of one artifact, downloaded or kept; sglang's largest today is 39 MB (a 0.5.23 wheel)
MAX_MEMBER_BYTES = 256 << 20  # one member, unpacked (real: 24 MB)
MAX_TOTAL_BYTES = 2 << 30  # all members, unpacked (real: 123 MB)
MAX_MEMBERS = 50_000  # files and directories (real: 6,396)
MAX_RATIO = 200  # unpacked / packed, per member over RATIO_FLOOR and for the whole archive (real: 19 and 5.5)
RATIO_FLOOR = 1 << 20  # smaller members may compress better than MAX_RATIO without costing anything
MAX_DIRECTORY_BYTES = 16 << 20  # a zip's central directory (real: ~1 MB)
MAX_HEADER_READ = 4 << 20  # one read of tar header data (pax, long names); data is read in CHUNK pieces
MAX_DEFLATED_RATIO = 2  # a deflate stream over what it unpacks to: a literal costs 15 bits at most, and a block header
WHEEL_CHECKOUT_EPOCH = 315532800  # 1980-01-01, the earliest date a zip member can carry
CHUNK = 1 << 20

_ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}


@dataclass(frozen=True, slots=True)
class Entry:
    """One regular file of an archive."""

    name: str  # POSIX path inside the archive; for an sdist, below its top directory
    size: int
    executable: bool


def archive_kind(path: Path) -> Kind:
    return "sdist" if path.name.endswith(".tar.gz") else "wheel"


def open_archive(path: Path, kind: Kind | None = None, *, sha256: str | None = None, digest: bool = False) -> Archive:
    """The archive at ``path``, its members checked; use it as a context manager.  With ``sha256`` (a pin),
    the bytes read through the one open descriptor are hashed first: the archive read is the one checked,
    whatever happens to the path afterwards (SourceError, exit 2, on a mismatch).  With ``digest`` (or a pin)
    the archive's ``sha256`` is that digest: a key for what is read from this archive, never from the path."""
    return Archive(path, kind or archive_kind(path), sha256=sha256, digest=digest)


def _open_regular(path: Path, *, follow: bool) -> IO[bytes]:
    """``path`` opened for reading: a regular file (never a FIFO or device); through a link at its last
    component only with ``follow`` (a wheel a user names may be a link; a cached pinned file may not)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise ArchiveError(f"{path}: cannot read: {why}") from None
    raw = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raw.close()
        raise ArchiveError(f"{path}: not a regular file")
    return raw


def sha256_file(path: Path) -> str:
    """The sha256 of the file at ``path``, read in chunks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _sha256_of(raw: IO[bytes]) -> str:
    """The sha256 of every byte behind ``raw`` (read now, through it); then back to the start."""
    h = hashlib.sha256()
    for chunk in iter(lambda: raw.read(1 << 20), b""):
        h.update(chunk)
    raw.seek(0)
    return h.hexdigest()


def sha256_record(digest: bytes) -> str:
    """A RECORD hash field: ``sha256=`` and the urlsafe base64 digest without padding."""
    import base64

    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class _Limits:
    """Running totals against the limits while members are listed."""

    def __init__(self, where: str, packed: int) -> None:
        self.where = where
        self.packed = packed
        self.count = 0
        self.total = 0

    def add(self, name: str, size: int, compressed: int | None = None) -> None:
        self.count += 1
        if self.count > MAX_MEMBERS:
            raise ArchiveError(f"{self.where}: more than {MAX_MEMBERS} members", hint=_HOSTILE)
        if size > MAX_MEMBER_BYTES:
            raise ArchiveError(
                f"{self.where}: member {name!r} is {size} bytes unpacked, over the limit of {MAX_MEMBER_BYTES}",
                hint=_HOSTILE,
            )
        if compressed is not None and size > RATIO_FLOOR and size > MAX_RATIO * max(compressed, 1):
            raise ArchiveError(
                f"{self.where}: member {name!r} unpacks {size // max(compressed, 1)} times its packed size "
                f"(limit {MAX_RATIO})",
                hint=_HOSTILE,
            )
        self.total += size
        if self.total > MAX_TOTAL_BYTES:
            raise ArchiveError(
                f"{self.where}: members unpack to more than {MAX_TOTAL_BYTES} bytes (at {name!r})", hint=_HOSTILE
            )
        if self.total > RATIO_FLOOR and self.total > MAX_RATIO * max(self.packed, 1):
            raise ArchiveError(
                f"{self.where}: members unpack to more than {MAX_RATIO} times the archive's size (at {name!r})",
                hint=_HOSTILE,
            )


class _BoundedStream(io.RawIOBase):
    """The decompressed tar stream, refusing huge header reads and reading past the size limit."""

    def __init__(self, inner: gzip.GzipFile, where: str) -> None:
        self.inner = inner
        self.where = where

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0 or n > MAX_HEADER_READ + CHUNK:
            raise ArchiveError(f"{self.where}: a tar header asks for {n} bytes at once; refusing", hint=_HOSTILE)
        data = self.inner.read(n)
        self._bound()
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        pos = self.inner.seek(offset, whence)
        self._bound()
        return pos

    def tell(self) -> int:
        return self.inner.tell()

    def _bound(self) -> None:
        if self.inner.tell() > MAX_TOTAL_BYTES + (64 << 20):
            raise ArchiveError(f"{self.where}: unpacks to more than {MAX_TOTAL_BYTES} bytes", hint=_HOSTILE)


_TAR_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error)
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError, ValueError)


# --------------------------------------------------------------------------- the archive


class Archive:
    """An sdist or a wheel with every member checked; members read by name, in chunks.

    ``entries`` are the regular files in archive order; ``newest`` is the newest
    member timestamp (for an sdist counting directories too), which a pypi
    checkout's commit date is made from.
    """

    def __init__(self, path: Path, kind: Kind, *, sha256: str | None = None, digest: bool = False) -> None:
        self.path = path
        self.kind: Kind = kind
        self.where = str(path)
        self._zip: zipfile.ZipFile | None = None
        self._tar: tarfile.TarFile | None = None
        self._gz: gzip.GzipFile | None = None
        self._infos: dict[str, zipfile.ZipInfo | tarfile.TarInfo] = {}
        self.newest = 0
        self.sha256: str | None = None  # the digest of the bytes this archive reads (with a pin or ``digest``)
        self._raw = _open_regular(path, follow=sha256 is None)
        try:
            if sha256 is not None or digest:
                self.sha256 = _sha256_of(self._raw)
            if sha256 is not None and self.sha256 != sha256:
                raise SourceError(f"{path}: sha256 mismatch: expected {sha256}, got {self.sha256}")
            entries = self._scan_sdist() if kind == "sdist" else self._scan_wheel()
            check_set(entries, self.where)
        except BaseException:
            self.close()
            raise
        self.entries: tuple[Entry, ...] = tuple(entries)
        self._by_name = {e.name: e for e in entries}

    @property
    def raw(self) -> IO[bytes]:
        """The open file the archive is read through (its sha256 checked when a pin was given), at its start:
        for readers of the stored bytes (a repack), so that they read what was checked."""
        self._raw.seek(0)
        return self._raw

    # ------------------------------------------------------------------ context

    def close(self) -> None:
        for closer in (self._zip, self._tar, self._gz, getattr(self, "_raw", None)):
            if closer is not None:
                closer.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ listing

    def _scan_wheel(self) -> list[Entry]:
        self._check_directory_size()
        try:
            self._zip = zipfile.ZipFile(self._raw)
            infos = self._zip.infolist()
        except _ZIP_ERRORS as exc:
            raise ArchiveError(f"{self.where}: not a readable wheel: {exc}") from None
        limits = _Limits(self.where, os.fstat(self._raw.fileno()).st_size)
        entries: list[Entry] = []
        stamps: dict[tuple[int, int, int, int, int, int], int] = {}
        for info in infos:
            check_member_name(info.filename, self.where)
            if info.is_dir():
                limits.add(info.filename, 0)  # counted: each costs memory to list
                continue
            mode = (info.external_attr >> 16) & 0o170000
            if mode not in (0, 0o100000):
                raise ArchiveError(f"{self.where}: member {info.filename!r} is a link or device; refusing to extract")
            if info.flag_bits & 0x1:
                raise ArchiveError(f"{self.where}: member {info.filename!r} is encrypted", hint=_HOSTILE)
            if info.compress_type not in _ZIP_METHODS:
                raise ArchiveError(
                    f"{self.where}: member {info.filename!r} uses compression method {info.compress_type}; "
                    f"a wheel uses stored or deflate",
                    hint=_HOSTILE,
                )
            limits.add(info.filename, info.file_size, info.compress_size)
            stamp = stamps.get(info.date_time)
            if stamp is None:  # most members share one date (SOURCE_DATE_EPOCH): converted once
                try:
                    stamp = calendar.timegm((*info.date_time, 0, 0, 0))
                except (ValueError, OverflowError):
                    stamp = 0
                stamps[info.date_time] = stamp
            self.newest = max(self.newest, stamp)
            entries.append(Entry(info.filename, info.file_size, bool((info.external_attr >> 16) & 0o111)))
            self._infos[info.filename] = info
        return entries

    def _check_directory_size(self) -> None:
        """Refuse a central directory too large to list (before zipfile builds an object per entry)."""
        fh = self._raw
        size = fh.seek(0, io.SEEK_END)
        tail_len = min(size, (1 << 16) + 22)
        fh.seek(size - tail_len)
        tail = fh.read(tail_len)
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or at + 22 > len(tail):
            return  # zipfile says what is wrong
        directory = struct.unpack_from("<I", tail, at + 12)[0]
        if directory == 0xFFFFFFFF and at >= 20 and tail[at - 20 : at - 16] == b"PK\x06\x07":
            fh.seek(struct.unpack_from("<Q", tail, at - 12)[0])
            record = fh.read(56)
            if len(record) == 56 and record[:4] == b"PK\x06\x06":
                directory = struct.unpack_from("<Q", record, 40)[0]
        if directory > MAX_DIRECTORY_BYTES:
            raise ArchiveError(
                f"{self.where}: its central directory is {directory} bytes, over the limit of {MAX_DIRECTORY_BYTES}",
                hint=_HOSTILE,
            )
        fh.seek(0)

    def _scan_sdist(self) -> list[Entry]:
        limits = _Limits(self.where, os.fstat(self._raw.fileno()).st_size)
        entries: list[Entry] = []
        top: str | None = None
        try:
            self._gz = gzip.GzipFile(fileobj=self._raw, mode="rb")
            self._tar = tarfile.open(fileobj=_BoundedStream(self._gz, self.where), mode="r:")  # noqa: SIM115
            for info in self._tar:  # each header is checked before the next is read
                parts = check_member_name(info.name, self.where)
                if not (info.isfile() or info.isdir()):
                    raise ArchiveError(f"{self.where}: member {info.name!r} is a link or device; refusing to extract")
                if top is None:
                    top = parts[0]
                if parts[0] != top:
                    raise ArchiveError(f"{self.where}: member {info.name!r} is outside the top directory {top!r}")
                self.newest = max(self.newest, int(info.mtime))
                if info.isdir():
                    limits.add(info.name, 0)  # counted: tarfile keeps each header listed
                    continue
                if len(parts) < 2:
                    raise ArchiveError(f"{self.where}: member {info.name!r} is outside the top directory {top!r}")
                limits.add(info.name, info.size)
                name = "/".join(parts[1:])  # as str(PurePosixPath(*parts[1:])): no empty or "." part
                entries.append(Entry(name, info.size, bool(info.mode & 0o111)))
                self._infos[name] = info
        except _TAR_ERRORS as exc:
            raise ArchiveError(f"{self.where}: not a readable sdist: {exc}") from None
        return entries

    # ------------------------------------------------------------------ reading

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def entry(self, name: str) -> Entry | None:
        return self._by_name.get(name)

    def chunks(self, name: str) -> Iterator[bytes]:
        """The bytes of member ``name`` in pieces of at most CHUNK; ArchiveError if its stream is corrupt."""
        entry = self._by_name[name]
        got = 0
        try:
            with self._open(name) as fh:
                while True:
                    chunk = fh.read(min(CHUNK, entry.size - got + 1))
                    if not chunk:
                        break
                    got += len(chunk)
                    if got > entry.size:
                        break
                    yield chunk
        except ArchiveError:
            raise
        except (*_ZIP_ERRORS, *_TAR_ERRORS) as exc:
            raise ArchiveError(f"{self.where}: member {name!r} is corrupt: {exc}", hint=_HOSTILE) from None
        if got != entry.size:
            raise ArchiveError(
                f"{self.where}: member {name!r} is corrupt: {got} bytes, its header says {entry.size}", hint=_HOSTILE
            )

    def deflated(self, name: str) -> tuple[bytes, Iterator[bytes]] | None:
        """A wheel member stored as deflate data: those bytes as the zip holds them, and the member's bytes
        inflated from them in pieces of at most CHUNK, for a writer that keeps the deflated bytes (a git pack:
        ``sgpatch.git.pack``); None for a stored member or an sdist's.  The pieces are checked as ``chunks`` checks
        them, and more (``zipraw.inflated``): an ArchiveError from the last piece means the bytes must not be used.
        An empty member with no stored byte (not a deflate stream at all) is None too."""
        info = self._infos[name]
        if (
            not isinstance(info, zipfile.ZipInfo)
            or info.compress_type != zipfile.ZIP_DEFLATED
            or not info.compress_size
        ):
            return None
        if info.compress_size > MAX_DEFLATED_RATIO * info.file_size + 1024:  # held whole: read no more than that
            raise ArchiveError(
                f"{self.where}: member {name!r} is corrupt: {info.compress_size} stored bytes for {info.file_size}",
                hint=_HOSTILE,
            )
        data = stored_bytes(self._raw, info, self.where)
        return data, inflated(info, data, self.where, CHUNK)

    def _open(self, name: str) -> IO[bytes]:
        info = self._infos[name]
        if isinstance(info, zipfile.ZipInfo):
            assert self._zip is not None
            return self._zip.open(info)
        assert self._tar is not None
        fh = self._tar.extractfile(info)
        assert fh is not None  # a regular file
        return fh

    def read(self, name: str, *, limit: int = MAX_MEMBER_BYTES) -> bytes:
        """The whole of member ``name``, for small files: ArchiveError when its header says it is over
        ``limit`` bytes (at most MAX_MEMBER_BYTES, which every member is checked against when listed)."""
        entry = self._by_name[name]
        if entry.size > limit:
            raise ArchiveError(
                f"{self.where}: member {name!r} is {entry.size} bytes, over the limit of {limit} for it",
                hint=_HOSTILE,
            )
        return b"".join(self.chunks(name))

    def digest(self, name: str) -> bytes:
        """The sha256 digest of member ``name``, read in chunks."""
        h = hashlib.sha256()
        for chunk in self.chunks(name):
            h.update(chunk)
        return h.digest()

    def files(self, names: Collection[str] | None = None) -> Iterator[tuple[Entry, bytes]]:
        """The members (all, or those in ``names``) with their bytes, in archive order (one pass of an sdist)."""
        for entry in self.entries:
            if names is None or entry.name in names:
                yield entry, self.read(entry.name)
