"""A wheel member's bytes as the zip stores them, for writers that keep them as they are (a repacked wheel, a git
pack), and their inflating, checked harder than ``zipfile`` checks it: the stored bytes must be one whole deflate
stream and nothing after it, since whoever inflates them later (git) reads them as such.

Called on an archive ``sgpatch.source.archive`` accepted (names, sizes, methods and limits checked).
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import IO

from sgpatch.errors import ArchiveError
from sgpatch.source.members import HOSTILE

LOCAL = struct.Struct("<IHHHHHIIIHH")  # a member's local header, before its name and extra field
LOCAL_SIGNATURE = 0x04034B50
_UTF8 = 0x800  # a flag bit: the member's name is UTF-8 (else code page 437)


def stored_bytes(fh: IO[bytes], info: zipfile.ZipInfo, where: str) -> bytes:
    """Member ``info``'s stored bytes, read through ``fh`` after its local header (checked as zipfile checks it:
    its signature, and the name the central directory gives)."""
    try:
        fh.seek(info.header_offset)
        head = fh.read(LOCAL.size)
        fields = LOCAL.unpack(head) if len(head) == LOCAL.size else None
        if fields is None or fields[0] != LOCAL_SIGNATURE:
            raise ArchiveError(f"{where}: member {info.filename!r} is corrupt: bad local header", hint=HOSTILE)
        said = fh.read(fields[-2]).decode("utf-8" if fields[2] & _UTF8 else "cp437", "replace")
        if said != info.orig_filename:
            raise ArchiveError(
                f"{where}: member {info.filename!r} is corrupt: its local header names {said!r}", hint=HOSTILE
            )
        fh.seek(fields[-1], io.SEEK_CUR)
        data = fh.read(info.compress_size)
    except OSError as exc:
        raise ArchiveError(f"{where}: member {info.filename!r} cannot be read: {exc}") from None
    if len(data) != info.compress_size:
        raise ArchiveError(f"{where}: member {info.filename!r} is corrupt: truncated", hint=HOSTILE)
    return data


def inflated(info: zipfile.ZipInfo, data: bytes, where: str, chunk: int) -> Iterator[bytes]:
    """Deflated member ``info``'s bytes, inflated from ``data`` (its stored bytes) in pieces of at most ``chunk``:
    ArchiveError where the stream is corrupt, where it unpacks to another size or CRC-32 than the central directory
    says, and where it does not end exactly at the end of ``data``."""
    name, size = info.filename, info.file_size
    inflate = zlib.decompressobj(-15)
    got, crc = 0, 0
    try:
        pending = data
        while pending and not inflate.eof:
            piece = inflate.decompress(pending, chunk)
            pending = inflate.unconsumed_tail
            got += len(piece)
            if got > size:
                break
            crc = zlib.crc32(piece, crc)
            if piece:
                yield piece
    except zlib.error as exc:
        raise ArchiveError(f"{where}: member {name!r} is corrupt: {exc}", hint=HOSTILE) from None
    if got != size:
        raise ArchiveError(f"{where}: member {name!r} is corrupt: {got} bytes, its header says {size}", hint=HOSTILE)
    if not inflate.eof or inflate.unused_data or inflate.unconsumed_tail:
        raise ArchiveError(
            f"{where}: member {name!r} is corrupt: its deflate stream does not end where its data ends", hint=HOSTILE
        )
    if crc != info.CRC:
        raise ArchiveError(f"{where}: member {name!r} is corrupt: bad CRC-32", hint=HOSTILE)
