"""Writing deterministic wheels with a fresh RECORD, copying unchanged members' compressed bytes as stored."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import re
import struct
import time
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sgpatch.source.archive import Archive, open_archive, sha256_record
from sgpatch.source.zipraw import LOCAL, LOCAL_SIGNATURE, stored_bytes

_ZIP_EPOCH_MIN = 315532800  # 1980-01-01, the earliest date a zip entry can carry


_FILE_MODE = 0o100644


_EXEC_MODE = 0o100755


def record_hash(data: bytes) -> str:
    return sha256_record(hashlib.sha256(data).digest())


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


def raw_members(source: Path | IO[bytes], *, where: str | None = None) -> list[RawMember]:
    """Every member of the zip at ``source`` (a path, or the open file an accepted archive was read through)
    with its stored bytes, directories included, in archive order; ``where`` names it in an error.

    Call on an archive sgpatch.source.archive has already accepted (it checks names, sizes, methods and CRCs)."""
    where = where or (str(source) if isinstance(source, Path) else "the wheel")
    with contextlib.ExitStack() as stack:
        fh = stack.enter_context(source.open("rb")) if isinstance(source, Path) else source
        return _raw_members(fh, stack.enter_context(zipfile.ZipFile(fh)), where)


def _raw_members(fh: IO[bytes], zf: zipfile.ZipFile, where: str) -> list[RawMember]:
    return [
        RawMember(
            info.filename,
            info.compress_type,
            info.CRC,
            info.file_size,
            stored_bytes(fh, info, where),
            info.date_time,
            info.external_attr,
            info.create_system,
        )
        for info in zf.infolist()
    ]


def deflated(name: str, data: bytes, date_time: tuple[int, int, int, int, int, int], *, executable: bool) -> RawMember:
    """A new member, deflated at zlib level 6 (what zipfile and setuptools write by default)."""
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    compressed = packer.compress(data) + packer.flush()
    mode = _EXEC_MODE if executable else _FILE_MODE
    return RawMember(name, zipfile.ZIP_DEFLATED, zlib.crc32(data), len(data), compressed, date_time, mode << 16)


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
            local = LOCAL.pack(
                LOCAL_SIGNATURE, version, flags, m.method, time_, date, m.crc, len(m.compressed), m.size, len(name), 0
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


_RECORD_SHA256 = re.compile(r"sha256=[A-Za-z0-9_-]{43}")


def _listed_hashes(archive: Archive, record_name: str) -> dict[str, tuple[str, int]]:
    """The sha256 field and size that ``record_name`` lists for each member: only well-formed rows
    (a member without one is hashed instead); nothing if RECORD is missing or unreadable."""
    if record_name not in archive:
        return {}
    listed: dict[str, tuple[str, int]] = {}
    try:
        for row in csv.reader(io.StringIO(archive.read(record_name).decode("utf-8"))):
            if len(row) == 3 and _RECORD_SHA256.fullmatch(row[1]) and row[2].isascii() and row[2].isdigit():
                listed[row[0]] = (row[1], int(row[2]))
    except (UnicodeDecodeError, csv.Error):
        return {}
    return listed


def rezip_wheel(
    built: Path,
    dest: Path,
    dist_info: str,
    epoch: int,
    replaced: Mapping[str, bytes] | Callable[[Archive], Mapping[str, bytes]],
    *,
    hashes_from_record: bool = False,
) -> None:
    """The wheel at ``built`` made deterministic, with ``replaced`` members (new bytes, or added): entries
    sorted (``.dist-info`` last, RECORD at the very end), one fixed timestamp, fixed permissions, a fresh
    RECORD.  The other members are not recompressed: their deflated bytes are copied (the backend's zlib
    level 6 is sgpatch's, so this is the wheel a full re-zip makes, in a third of the time).  A stored
    member is deflated.  ``replaced`` may be a function of the open archive (which is read once).

    ``hashes_from_record``: a copied member that ``built``'s own RECORD lists with a sha256 and its size
    keeps that row instead of being inflated and hashed again (the other members are hashed).  The result
    is the same wheel when the backend's RECORD is right; whoever asks for this must check the wheel it
    gets (sgpatch.wheel.check recomputes every member's sha256 and CRC against the new RECORD), so a
    wrong row fails that check instead of being corrected silently."""
    record_name = f"{dist_info}/RECORD"
    with open_archive(built, "wheel") as archive:  # names, limits and methods checked; CRCs where read
        if callable(replaced):
            replaced = replaced(archive)
        listed = _listed_hashes(archive, record_name) if hashes_from_record else {}
        regular: dict[str, tuple[bool, str, int]] = {}
        for e in archive.entries:
            if e.name in replaced or e.name == record_name:
                continue
            row = listed.get(e.name)
            field = row[0] if row is not None and row[1] == e.size else sha256_record(archive.digest(e.name))
            regular[e.name] = (e.executable, field, e.size)
    date_time = time.gmtime(max(epoch, _ZIP_EPOCH_MIN))[:6]
    out: dict[str, tuple[RawMember, str, int]] = {}
    for m in raw_members(built):
        if m.name not in regular:
            continue
        executable, field, size = regular[m.name]
        mode = (_EXEC_MODE if executable else _FILE_MODE) << 16
        if m.method == zipfile.ZIP_DEFLATED:
            member = RawMember(m.name, m.method, m.crc, m.size, m.compressed, date_time, mode)
        else:
            data = m.compressed if m.method == zipfile.ZIP_STORED else zlib.decompress(m.compressed, -15)
            member = deflated(m.name, data, date_time, executable=executable)
        out[m.name] = (member, field, size)
    for name, data in replaced.items():
        member = deflated(name, data, date_time, executable=False)
        out[name] = (member, record_hash(data), len(data))
    body = sorted(out, key=lambda n: (n.startswith(f"{dist_info}/"), n))
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for name in body:
        writer.writerow((name, out[name][1], out[name][2]))
    writer.writerow((record_name, "", ""))
    record = deflated(record_name, rows.getvalue().encode(), date_time, executable=False)
    write_raw_zip(dest, [*(out[n][0] for n in body), record])
