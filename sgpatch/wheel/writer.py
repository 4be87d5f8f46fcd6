"""Reading a built wheel's members and writing a deterministic wheel with a fresh RECORD."""

from __future__ import annotations

import csv
import hashlib
import io
import struct
import time
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sgpatch.archive import open_archive, sha256_record

_ZIP_EPOCH_MIN = 315532800  # 1980-01-01, the earliest date a zip entry can carry


_FILE_MODE = 0o100644


_EXEC_MODE = 0o100755


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    data: bytes
    executable: bool


def read_zip(path: Path) -> list[Entry]:
    """The regular files of a wheel, in archive order; ArchiveError (exit 2) if it is unreadable or unsafe."""
    with open_archive(path, "wheel") as archive:
        return [Entry(e.name, data, e.executable) for e, data in archive.files()]


def record_hash(data: bytes) -> str:
    return sha256_record(hashlib.sha256(data).digest())


def _record(entries: Sequence[Entry], record_name: str) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for e in entries:
        writer.writerow((e.name, record_hash(e.data), len(e.data)))
    writer.writerow((record_name, "", ""))
    return buf.getvalue().encode()


def write_wheel(dest: Path, entries: Sequence[Entry], dist_info: str, epoch: int) -> None:
    """A deterministic wheel: sorted entries (``.dist-info`` last, RECORD at the very end),
    one fixed timestamp, fixed permissions, a fresh RECORD."""
    record_name = f"{dist_info}/RECORD"
    body = [e for e in entries if e.name != record_name]
    body.sort(key=lambda e: (e.name.startswith(f"{dist_info}/"), e.name))
    date_time = time.gmtime(max(epoch, _ZIP_EPOCH_MIN))[:6]
    with zipfile.ZipFile(dest, "w") as zf:
        for e in [*body, Entry(record_name, _record(body, record_name), False)]:
            info = zipfile.ZipInfo(e.name, date_time=date_time)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix: external_attr carries the mode
            info.external_attr = (_EXEC_MODE if e.executable else _FILE_MODE) << 16
            zf.writestr(info, e.data, compresslevel=6)


# --------------------------------------------------------------------------- raw members (repacking a wheel)


@dataclass(frozen=True, slots=True)
class RawMember:
    """A zip member as stored: its compressed bytes are copied as they are, never recompressed."""

    name: str
    method: int  # zipfile.ZIP_STORED or ZIP_DEFLATED
    crc: int
    size: int
    compressed: bytes
    date_time: tuple[int, int, int, int, int, int]
    external_attr: int
    create_system: int = 3


def raw_members(path: Path) -> list[RawMember]:
    """Every member of the zip at ``path`` (directories included) with its stored bytes, in archive order.

    Call on an archive sgpatch.archive has already accepted (it checks names, sizes, methods and CRCs)."""
    out: list[RawMember] = []
    with path.open("rb") as fh, zipfile.ZipFile(fh) as zf:
        for info in zf.infolist():
            fh.seek(info.header_offset)
            header = fh.read(_LOCAL.size)
            fields = _LOCAL.unpack(header)
            if fields[0] != _LOCAL_SIG:
                raise ValueError(f"{info.filename}: bad local header")
            fh.seek(fields[-2] + fields[-1], 1)  # name and extra field
            compressed = fh.read(info.compress_size)
            out.append(
                RawMember(
                    info.filename,
                    info.compress_type,
                    info.CRC,
                    info.file_size,
                    compressed,
                    info.date_time,
                    info.external_attr,
                    info.create_system,
                )
            )
    return out


def deflated(name: str, data: bytes, date_time: tuple[int, int, int, int, int, int], *, executable: bool) -> RawMember:
    """A new member, deflated the way ``write_wheel`` does (level 6)."""
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    compressed = packer.compress(data) + packer.flush()
    mode = _EXEC_MODE if executable else _FILE_MODE
    return RawMember(name, zipfile.ZIP_DEFLATED, zlib.crc32(data), len(data), compressed, date_time, mode << 16)


_LOCAL_SIG = 0x04034B50
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")
_UTF8 = 0x800


def _dos(date_time: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    y, mo, d, h, mi, s = date_time
    return (h << 11) | (mi << 5) | (s // 2), ((max(y, 1980) - 1980) << 9) | (mo << 5) | d


def write_raw_zip(dest: Path, members: Sequence[RawMember]) -> None:
    """A zip of ``members`` in the given order, each stored as given (no data descriptors, no extra
    fields, no comment): the same members make the same bytes."""
    if len(members) >= 0xFFFF:
        raise ValueError(f"{len(members)} members need zip64, which sgpatch does not write")
    central: list[bytes] = []
    with dest.open("wb") as out:
        offset = 0
        for m in members:
            name = m.name.encode("utf-8")
            flags = 0 if m.name.isascii() else _UTF8
            time_, date = _dos(m.date_time)
            version = 20
            local = _LOCAL.pack(
                _LOCAL_SIG, version, flags, m.method, time_, date, m.crc, len(m.compressed), m.size, len(name), 0
            )
            if offset + len(local) + len(name) + len(m.compressed) > 0xFFFFFFFF:
                raise ValueError("the wheel would be over 4 GiB, which needs zip64")
            out.write(local + name)
            out.write(m.compressed)
            central.append(
                _CENTRAL.pack(
                    0x02014B50,
                    (m.create_system << 8) | version,
                    version,
                    flags,
                    m.method,
                    time_,
                    date,
                    m.crc,
                    len(m.compressed),
                    m.size,
                    len(name),
                    0,
                    0,
                    0,
                    0,
                    m.external_attr,
                    offset,
                )
                + name
            )
            offset += len(local) + len(name) + len(m.compressed)
        directory = b"".join(central)
        out.write(directory)
        out.write(_END.pack(0x06054B50, 0, 0, len(members), len(members), len(directory), offset, 0))
