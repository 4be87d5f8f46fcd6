"""Crafting hostile zip files for the tests: header fields zipfile will not write, streamed bombs."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Collection
from pathlib import Path

# Offsets of the fields we patch, in a local file header and a central directory header.
_LOCAL = {"flags": (6, "<H"), "method": (8, "<H"), "crc": (14, "<I"), "size": (22, "<I")}
_CENTRAL = {"flags": (8, "<H"), "method": (10, "<H"), "crc": (16, "<I"), "size": (24, "<I")}


def zip_bytes(
    members: dict[str, bytes], *, compression: int = zipfile.ZIP_DEFLATED, deflate: Collection[str] = ()
) -> bytes:
    """A zip of ``members``; those named in ``deflate`` deflated whatever ``compression`` says."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED if name in deflate else None)
    return buf.getvalue()


def patch_member(data: bytes, name: str, *, strict: bool = True, **fields: int) -> bytes:
    """``data`` (a zip) with header fields of member ``name`` set in both its local and central header
    (``strict``: exactly one of each must be found; otherwise every one found is patched)."""
    buf = bytearray(data)
    raw = name.encode()
    for sig, offsets, name_at, length_at in ((b"PK\x03\x04", _LOCAL, 30, 26), (b"PK\x01\x02", _CENTRAL, 46, 28)):
        at = buf.find(sig)
        hits = 0
        while at >= 0:
            (length,) = struct.unpack_from("<H", buf, at + length_at)
            if length == len(raw) and buf[at + name_at : at + name_at + length] == raw:
                for field, value in fields.items():
                    offset, fmt = offsets[field]
                    struct.pack_into(fmt, buf, at + offset, value)
                hits += 1
            at = buf.find(sig, at + 1)
        assert hits == 1 or not strict, (name, sig, hits)
    return bytes(buf)


def deflate_offset(data: bytes, name: str) -> int:
    """Where member ``name``'s compressed bytes start in ``data``."""
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(name)
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    return info.header_offset + 30 + name_len + extra_len


def zeros_bomb(path: Path, name: str, size: int, *, extra: dict[str, bytes] | None = None) -> None:
    """A wheel whose member ``name`` is ``size`` zero bytes (under 4 GiB), deflated into a few MB.

    The deflate stream is one compressed 16 MiB block repeated (a full flush makes each
    identical), so the file is made in well under a second instead of compressing gigabytes.
    """
    chunk = 1 << 24
    assert size % chunk == 0 and size < 1 << 32
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)
    stream = block * (size // chunk) + zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    crc = 0
    zero = bytes(chunk)
    for _ in range(size // chunk):
        crc = zlib.crc32(zero, crc)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for member, data in (extra or {}).items():
            zf.writestr(member, data)
        zf.writestr(zipfile.ZipInfo(name), stream)  # stored: the bytes are already a deflate stream
    path.write_bytes(patch_member(buf.getvalue(), name, method=zipfile.ZIP_DEFLATED, crc=crc, size=size))
