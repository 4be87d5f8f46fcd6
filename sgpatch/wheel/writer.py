"""Reading a built wheel's members and writing a deterministic wheel with a fresh RECORD."""

from __future__ import annotations

import csv
import hashlib
import io
import time
import zipfile
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
