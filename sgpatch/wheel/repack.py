"""Repack upstream's platform wheel with the series (SPEC §8): for releases PyPI ships only as wheels.

There is no source to build from (0.5.11 on: platform wheels with compiled
extensions), so the patched wheel is upstream's own with exactly these
changes: the patched files replaced by the checkout's, the version forced
(``.dist-info`` name, METADATA ``Version``, ``sglang/_version.py``, file
name) to the local label, the stack's ``Requires-Dist`` overrides, the
provenance added and RECORD rewritten.  Every other member, compiled
extensions included, is copied as upstream stored it (its compressed bytes,
CRC, date and mode), so it stays byte-identical and nothing is recompressed.
Members keep upstream's order; the same inputs make the same bytes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from sgpatch.config import Artifact, Stack, wheel_tags
from sgpatch.errors import BuildError
from sgpatch.source.archive import open_archive, sha256_record
from sgpatch.source.tree import PYTHON_PREFIX
from sgpatch.wheel.names import DIST_NAME, VERSION_FILE, wheel_tag
from sgpatch.wheel.provenance import (
    PROVENANCE_NAME,
    BuildInputs,
    RequirementChange,
    dump_provenance,
    make_provenance,
    rewrite_requires,
)
from sgpatch.wheel.writer import RawMember, deflated, raw_members, record_hash, write_raw_zip

_VERSION_LINE = re.compile(rb"^(__version__ = version = )(['\"])([^'\"\n]*)\2$", re.M)
_TUPLE_LINE = re.compile(rb"^(__version_tuple__ = version_tuple = )\(([^)\n]*)\)$", re.M)


def select_wheels(stack: Stack, platforms: tuple[str, ...] = ()) -> tuple[Artifact, ...]:
    """The pinned wheels to repack: all, or those whose tag (``cp311-cp311-manylinux_2_34_x86_64``) or
    platform (``manylinux_2_34_x86_64``) is asked for; BuildError for a tag no pinned wheel has."""
    wheels = stack.wheels
    if not platforms:
        return wheels
    out: list[Artifact] = []
    for asked in platforms:
        hit = [w for w in wheels if asked in (wheel_tag(w.filename), *(t.platform for t in wheel_tags(w.filename)))]
        if not hit:
            known = ", ".join(wheel_tag(w.filename) for w in wheels) or "none"
            raise BuildError(f"{stack.name}: no pinned wheel has the tag {asked!r}", hint=f"pinned: {known}")
        out.extend(w for w in hit if w not in out)
    return tuple(out)


def _forced_version_py(data: bytes, version: str) -> bytes:
    v = Version(version)
    parts = [str(n) for n in v.release] + ([repr(v.local)] if v.local else [])
    new, count = _VERSION_LINE.subn(lambda m: m.group(1) + b"'" + version.encode() + b"'", data)
    new, tuples = _TUPLE_LINE.subn(lambda m: m.group(1) + b"(" + ", ".join(parts).encode() + b")", new)
    if count != 1 or tuples != 1:
        raise BuildError(f"{VERSION_FILE}: no single '__version__ = version = ...' and version tuple line to force")
    return new


def _forced_metadata(data: bytes, version: str, name: str) -> bytes:
    lines = data.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.startswith(b"Version:")]
    end = next((i for i, line in enumerate(lines) if line in (b"\n", b"\r\n")), len(lines))
    hits = [i for i in hits if i < end]
    if len(hits) != 1:
        raise BuildError(f"{name}: expected one Version header, found {len(hits)}")
    ending = lines[hits[0]][len(lines[hits[0]].rstrip(b"\r\n")) :]
    lines[hits[0]] = b"Version: " + version.encode() + ending
    return b"".join(lines)


def repack_wheel(
    upstream_path: Path,
    upstream: Artifact,
    dest: Path,
    inputs: BuildInputs,
    patched: Mapping[str, bytes | None],
) -> None:
    """Write the patched wheel of ``upstream`` (at ``upstream_path``, sha256-checked) to ``dest``.

    ``patched`` maps each file the series touches (checkout path, ``python/...``)
    to its bytes at the checkout's HEAD (None: the series deletes it).
    """
    version = inputs.version
    # every member checked (names, limits, CRCs), the pin checked on the bytes then repacked (one descriptor)
    with open_archive(upstream_path, "wheel", sha256=upstream.sha256) as archive:
        digests = {e.name: (archive.digest(e.name), e.size) for e in archive.entries}
        try:
            members = raw_members(archive.raw, where=archive.where)
        except (OSError, ValueError) as exc:
            raise BuildError(f"{upstream.filename}: cannot read its members: {exc}") from None
    tops = {m.name.split("/", 1)[0] for m in members if "/" in m.name}
    infos = sorted(t for t in tops if t.endswith(".dist-info"))
    _, up_version, _, _ = parse_wheel_filename(upstream.filename)
    old_info = f"{DIST_NAME}-{up_version}.dist-info"
    if infos != [old_info]:
        raise BuildError(f"{upstream.filename}: expected one {old_info}, found {', '.join(infos) or 'none'}")
    new_info = f"{DIST_NAME}-{version}.dist-info"
    inside = {p[len(PYTHON_PREFIX) :]: data for p, data in patched.items() if p.startswith(PYTHON_PREFIX)}
    out: list[RawMember] = []
    hashes: dict[str, tuple[str, int]] = {}
    metadata_date = members[0].date_time
    changes: tuple[RequirementChange, ...] = ()

    def keep(m: RawMember, name: str, source: str) -> None:
        out.append(dataclasses.replace(m, name=name))
        if source in digests:
            digest, size = digests[source]
            hashes[name] = (sha256_record(digest), size)

    def put(m: RawMember, data: bytes) -> None:
        mode = (m.external_attr >> 16) & 0o777
        new = deflated(m.name, data, m.date_time, executable=bool(mode & 0o111))
        out.append(dataclasses.replace(new, external_attr=m.external_attr, create_system=m.create_system))
        hashes[m.name] = (record_hash(data), len(data))

    for m in members:
        name = m.name
        if name == old_info + "/" or name.startswith(old_info + "/"):
            inner = name[len(old_info) + 1 :]
            renamed = f"{new_info}/{inner}"
            if inner in ("RECORD", PROVENANCE_NAME):
                continue
            if inner == "METADATA":
                metadata_date = m.date_time
                forced = _forced_metadata(archive_read(upstream_path, name), version, name)
                metadata, changes = rewrite_requires(forced, inputs.stack)
                put(dataclasses.replace(m, name=renamed), metadata)
            else:
                keep(m, renamed, name)
        elif name == VERSION_FILE:
            put(m, _forced_version_py(archive_read(upstream_path, name), version))
        elif name in inside:
            replaced = inside.pop(name)
            if replaced is not None:
                put(m, replaced)
        else:
            keep(m, name, name)
    for name, added in sorted(inside.items()):  # files the series adds
        if added is not None:
            put(RawMember(name, 8, 0, 0, b"", metadata_date, 0o100644 << 16), added)
    provenance = dump_provenance(make_provenance(inputs, changes))
    put(RawMember(f"{new_info}/{PROVENANCE_NAME}", 8, 0, 0, b"", metadata_date, 0o100644 << 16), provenance)
    record_name = f"{new_info}/RECORD"
    rows = [f"{_csv(m.name)},{hashes[m.name][0]},{hashes[m.name][1]}\n" for m in out if not m.name.endswith("/")]
    record = ("".join(rows) + f"{_csv(record_name)},,\n").encode()
    put(RawMember(record_name, 8, 0, 0, b"", metadata_date, 0o100644 << 16), record)
    try:
        write_raw_zip(dest, out)
    except ValueError as exc:
        raise BuildError(f"{dest.name}: {exc}") from None


def archive_read(path: Path, name: str) -> bytes:
    with open_archive(path, "wheel") as archive:
        return archive.read(name)


def _csv(name: str) -> str:
    return f'"{name.replace(chr(34), chr(34) * 2)}"' if any(c in name for c in ',"\r\n') else name
