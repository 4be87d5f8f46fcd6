"""Everything that can be said about a wheel from its bytes, against its stack, upstream's wheel and the checkout."""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from installer.records import InvalidRecordEntry, RecordEntry, parse_record_file
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from sgpatch.cache import Cache, key
from sgpatch.config import Stack, wheel_tags
from sgpatch.config.requirements import parse_requirement
from sgpatch.errors import BuildError, SgpatchError
from sgpatch.git.batch import read_blobs
from sgpatch.git.objectid import blob_id
from sgpatch.git.repo import Git
from sgpatch.series.anchors import Anchor, check_anchors, load_anchors
from sgpatch.series.fileset import file_set_problems, series_file_change
from sgpatch.series.patch import Series
from sgpatch.source.archive import Archive, open_archive, sha256_record
from sgpatch.source.tree import PYTHON_PREFIX, ZipTree
from sgpatch.verify.engine import verify_tree
from sgpatch.wheel.names import DIST_NAME, VERSION_FILE, repacked_filename, wheel_filename
from sgpatch.wheel.provenance import (
    PROVENANCE_NAME,
    parse_metadata,
    parse_overrides,
    parse_provenance,
    provenance_problems,
    requires_dist,
    rewrite_requires,
    wheel_version,
)
from sgpatch.wheel.recipe import recipe_conflicts
from sgpatch.wheel.results import WheelCheck, WheelReport
from sgpatch.wheel.upstream import PinnedWheel


def _check(name: str, problems: Sequence[str], ok_detail: str, *, shown: int = 3) -> WheelCheck:
    if problems:
        more = f" (and {len(problems) - shown} more)" if len(problems) > shown else ""
        return WheelCheck(name, False, "; ".join(problems[:shown]) + more)
    return WheelCheck(name, True, ok_detail)


@dataclass(frozen=True, slots=True)
class _Contents:
    """A wheel as the checks see it: each member's sha256 and size (read in chunks), small files on demand."""

    archive: Archive
    digests: Mapping[str, tuple[bytes, int]]

    def read(self, name: str | None) -> bytes | None:
        return self.archive.read(name) if name is not None and name in self.archive else None


def _contents(archive: Archive) -> _Contents:
    return _Contents(archive, {e.name: (archive.digest(e.name), e.size) for e in archive.entries})


def expected_names(stack: Stack, version: str) -> tuple[str, ...]:
    """The file names the stack's patched wheels carry: one pure wheel built from the sdist, or one
    repacked wheel per pinned upstream wheel (same tags)."""
    if stack.repacks:
        return tuple(repacked_filename(w, version) for w in stack.wheels)
    return (wheel_filename(version),)


def _check_name(stack: Stack, wheel: Path, version: str, contents: _Contents, dist_info: str) -> WheelCheck:
    problems = []
    names = expected_names(stack, version)
    expected = wheel.name if wheel.name in names else names[0]
    if wheel.name != expected:
        problems.append(f"file name is {wheel.name}, expected {' or '.join(names[:3])}")
    try:
        name, ver, _, tags = parse_wheel_filename(wheel.name)
        if name != DIST_NAME or str(ver) != version or tags != wheel_tags(expected):
            problems.append(f"file name says {name} {ver} {sorted(map(str, tags))}")
    except InvalidWheelFilename as exc:
        problems.append(str(exc))
    metadata = contents.read(f"{dist_info}/METADATA")
    if metadata is None:
        problems.append(f"no {dist_info}/METADATA")
    else:
        try:
            raw = parse_metadata(metadata)
            if raw.get("name") != DIST_NAME or raw.get("version") != version:
                problems.append(f"METADATA says {raw.get('name')} {raw.get('version')}")
        except ValueError as exc:
            problems.append(f"METADATA is unreadable: {exc}")
    version_py = contents.read(VERSION_FILE)
    if version_py is None:
        problems.append(f"no {VERSION_FILE}")
    elif f"version = '{version}'".encode() not in version_py and f'version = "{version}"'.encode() not in version_py:
        problems.append(f"{VERSION_FILE} does not carry version {version}")
    return _check("name", problems, f"{expected}; METADATA and {VERSION_FILE} agree")


def _record_entries(data: bytes, record_name: str) -> tuple[dict[str, RecordEntry], list[str]]:
    """RECORD's rows (read by ``installer.records``) by path, and what is wrong with it."""
    problems: list[str] = []
    listed: dict[str, RecordEntry] = {}
    try:
        rows = list(parse_record_file(data.decode("utf-8").splitlines()))
    except UnicodeDecodeError as exc:
        return {}, [f"{record_name} is not UTF-8: {exc.reason} at byte {exc.start}"]
    except InvalidRecordEntry as exc:
        return {}, [f"{record_name}: malformed row: {'; '.join(exc.issues)}"]
    except csv.Error as exc:
        return {}, [f"{record_name} is not a readable CSV file: {exc}"]
    for path, hash_, size in rows:
        try:
            entry = RecordEntry.from_elements(path, hash_, size)
        except InvalidRecordEntry as exc:
            problems.append(f"malformed row {path[:200]!r}: {'; '.join(exc.issues)}")
            continue
        if entry.path in listed:
            problems.append(f"{entry.path} listed twice")
        listed[entry.path] = entry
    return listed, problems


def _check_record(contents: _Contents, dist_info: str) -> WheelCheck:
    record_name = f"{dist_info}/RECORD"
    data = contents.read(record_name)
    if data is None:
        return WheelCheck("record", False, f"no {record_name}")
    listed, problems = _record_entries(data, record_name)
    for name, (digest, size) in contents.digests.items():
        if name == record_name:
            continue
        entry = listed.get(name)
        if entry is None:
            problems.append(f"{name} is not listed")
            continue
        if entry.hash_ is None or entry.hash_.name != "sha256" or entry.hash_.value != sha256_record(digest)[7:]:
            problems.append(f"{name}: sha256 differs from RECORD")
        elif entry.size != size:
            problems.append(f"{name}: size {size}, RECORD says {entry.size}")
    problems.extend(f"{name} is listed but not in the wheel" for name in listed if name not in contents.digests)
    return _check("record", problems, f"{len(contents.digests) - 1} files match their RECORD sha256 and size")


def _parsed_requires(metadata: bytes) -> list[tuple[str, Requirement]]:
    """Each ``Requires-Dist`` with its parsed requirement; ValueError naming the one that does not parse."""
    out = []
    for line in requires_dist(metadata):
        try:
            out.append((line, parse_requirement(line)))
        except InvalidRequirement as exc:
            raise ValueError(f"Requires-Dist {line[:200]!r} does not parse: {exc}") from None
    return out


def _check_requires(stack: Stack, metadata: bytes | None, upstream_metadata: bytes | None) -> WheelCheck:
    if metadata is None:
        return WheelCheck("requires", False, "no METADATA")
    try:
        parsed = _parsed_requires(metadata)
    except ValueError as exc:
        return WheelCheck("requires", False, f"METADATA: {exc}")
    found = [line for line, _ in parsed]
    problems: list[str] = []
    overrides = parse_overrides(stack)
    for line, req in parsed:
        want = overrides.get(canonicalize_name(req.name))
        if want is not None and req.specifier != want.specifier:
            problems.append(f"Requires-Dist {line} is not the stack's {want}")
    for o in stack.requires:
        if not any(canonicalize_name(req.name) == o.key for _, req in parsed):
            problems.append(f"no Requires-Dist for {o.dist}")
    conflicts = recipe_conflicts(stack, [req for _, req in parsed])
    problems.extend(f"install recipe: {c}" for c in conflicts)
    kept = ""
    if upstream_metadata is not None:
        expected = requires_dist(rewrite_requires(upstream_metadata, stack)[0])
        if found != expected:
            diff = [f"{a!r} vs upstream {b!r}" for a, b in zip(found, expected, strict=False) if a != b]
            problems.append(
                f"Requires-Dist differs from upstream's beyond the overrides: "
                f"{diff[0] if diff else f'{len(found)} vs {len(expected)} entries'}"
            )
        kept = f"; all {len(found)} Requires-Dist equal upstream's after the overrides"
    done = ", ".join(o.text for o in stack.requires) or "none (upstream's pins kept)"
    return _check("requires", problems, f"overrides: {done}{kept}")


def _check_provenance(stack: Stack, series: Series, version: str, contents: _Contents, dist_info: str) -> WheelCheck:
    data = contents.read(f"{dist_info}/{PROVENANCE_NAME}")
    if data is None:
        return WheelCheck("provenance", False, f"no {dist_info}/{PROVENANCE_NAME}")
    try:
        doc = parse_provenance(data)
    except ValueError as exc:
        return WheelCheck("provenance", False, f"{PROVENANCE_NAME} is unreadable: {exc}")
    found = {}
    for path in series.touched:
        content = contents.read(path[len(PYTHON_PREFIX) :]) if path.startswith(PYTHON_PREFIX) else None
        found[path] = blob_id(content) if content is not None else None
    problems = provenance_problems(doc, stack, series, version, found)
    phase = (doc.get("checkout") or {}).get("phase")
    if phase != "patched" and series.patches:
        problems.append(f"built from a {phase} checkout, not a patched one")
    return _check("provenance", problems, f"stack {stack.name}, series {series.id}, {len(found)} file blobs match")


def _check_upstream(
    ours_digests: Mapping[str, tuple[bytes, int]],
    upstream: Mapping[str, tuple[bytes, int]],
    dist_info: str,
    series: Series,
) -> list[WheelCheck]:
    def split(names: Mapping[str, object]) -> tuple[set[str], set[str]]:
        inside = {n for n in names if n.split("/", 1)[0].endswith(".dist-info")}
        return set(names) - inside, {n.split("/", 1)[1] for n in inside}

    ours, our_meta = split(ours_digests)
    theirs, their_meta = split(upstream)
    change = series_file_change(series).inside(PYTHON_PREFIX)
    problems = file_set_problems(ours, theirs, change)
    meta_extra = our_meta - their_meta - {PROVENANCE_NAME}
    meta_missing = their_meta - our_meta
    problems += [f"stray {dist_info}/{n}" for n in sorted(meta_extra)]
    problems += [f"missing {dist_info}/{n}" for n in sorted(meta_missing)]
    beyond = f" plus {len(change.added)} the series adds" if change.added else ""
    beyond += f" minus {len(change.deleted)} it deletes" if change.deleted else ""
    file_set = _check("file-set", problems, f"{len(ours)} files outside .dist-info: upstream's wheel's{beyond}")

    patched = {p[len(PYTHON_PREFIX) :] for p in series.touched if p.startswith(PYTHON_PREFIX)}
    compared = sorted((ours & theirs) - patched - {VERSION_FILE})
    differ = [f"{n} differs from upstream's" for n in compared if ours_digests[n] != upstream[n]]
    same = _check(
        "upstream-bytes",
        differ,
        f"{len(compared)} files byte-equal to upstream's (excepted: {len(patched)} patched, {VERSION_FILE})",
    )
    return [file_set, same]


def _check_checkout(
    contents: _Contents, checkout: Path, series: Series, head_blobs: Mapping[str, str | None] | None
) -> WheelCheck:
    """The patched files byte-equal to the checkout's HEAD: to its blobs' ids where the caller already asked
    git for them (``head_blobs``: a build, which built from that HEAD), else to the blobs read now."""
    problems = []
    if head_blobs is not None:
        for path in series.touched:
            inner = path[len(PYTHON_PREFIX) :] if path.startswith(PYTHON_PREFIX) else None
            ours = contents.read(inner)
            theirs = head_blobs.get(path)
            if (None if ours is None else blob_id(ours, like=theirs)) != theirs:
                problems.append(f"{path} is not byte-equal to the checkout's HEAD")
    else:
        g = Git(checkout)
        head = g.head()
        committed = read_blobs(g, head, series.touched) if head else {}
        for path in series.touched:
            inner = path[len(PYTHON_PREFIX) :] if path.startswith(PYTHON_PREFIX) else None
            if contents.read(inner) != committed.get(path):
                problems.append(f"{path} is not byte-equal to the checkout's HEAD")
    return _check("checkout-bytes", problems, f"{len(series.touched)} patched files byte-equal to {checkout} HEAD")


def _upstream_contents(upstream: PinnedWheel, cache: Cache | None) -> tuple[dict[str, tuple[bytes, int]], bytes | None]:
    """Each member's sha256 and size, and METADATA, of the pinned upstream wheel: as an earlier read kept them
    in ``cache`` under the pin (the sha256 of the bytes they were read from: the wheel is not even opened), or
    read now from the downloaded wheel, its bytes checked against the pin as they are read (never the path
    hashed first and read again), and kept."""
    if cache is not None:
        found = _digests_from(cache.get("wheel-digests", _digests_key(upstream.sha256)))
        if found is not None:
            return found
    with open_archive(upstream.fetch(), "wheel", sha256=upstream.sha256) as up:
        return _kept_or_read(up, cache)


def _digests_key(sha256: str) -> str:
    return key("wheel-digests", sha256)


def _kept_or_read(archive: Archive, cache: Cache | None) -> tuple[dict[str, tuple[bytes, int]], bytes | None]:
    """Each member's sha256 and size, and METADATA, of ``archive``: as an earlier read kept them in ``cache``
    under the archive's own bytes, or read now (and kept).  The key is the digest of the bytes read through
    the archive's one descriptor (``open_archive(digest=True)``), never a second read of its path: what is kept
    under a key, and what is used, is what was hashed."""
    entry = None
    if cache is not None and archive.sha256 is not None:
        entry = _digests_key(archive.sha256)
        found = _digests_from(cache.get("wheel-digests", entry))
        if found is not None:
            return found
    return _keep_digests(archive, cache, entry)


def _keep_digests(
    archive: Archive, cache: Cache | None, entry: str | None
) -> tuple[dict[str, tuple[bytes, int]], bytes | None]:
    """Each member's sha256 and size (every member's CRC checked), and METADATA, read through
    sgpatch.source.archive; kept in ``cache`` under ``entry``."""
    members = dict(_contents(archive).digests)
    metadata_name = next((e.name for e in archive.entries if e.name.endswith(".dist-info/METADATA")), None)
    metadata = archive.read(metadata_name) if metadata_name else None
    if cache is not None and entry is not None:
        stored = {n: [d.hex(), s] for n, (d, s) in members.items()}
        cache.put("wheel-digests", entry, {"members": stored, "metadata": None if metadata is None else metadata.hex()})
    return members, metadata


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _digests_from(doc: Any) -> tuple[dict[str, tuple[bytes, int]], bytes | None] | None:
    """A kept entry's members and METADATA, if it has exactly that shape (64 hex digits, a size, per name)."""
    if not isinstance(doc, dict) or set(doc) != {"members", "metadata"} or not isinstance(doc["members"], dict):
        return None
    members: dict[str, tuple[bytes, int]] = {}
    try:
        for name, row in doc["members"].items():
            sha, size = row
            if not isinstance(sha, str) or not _SHA256.fullmatch(sha) or type(size) is not int or size < 0:
                return None
            members[name] = (bytes.fromhex(sha), size)
        meta = doc["metadata"]
        return members, None if meta is None else bytes.fromhex(meta)
    except (TypeError, ValueError):
        return None


def check_wheel(
    stack: Stack,
    series: Series,
    wheel: Path,
    *,
    upstream: PinnedWheel | None = None,
    checkout: Path | None = None,
    cache: Cache | None = None,
    anchors: Sequence[Anchor] | None = None,
    head_blobs: Mapping[str, str | None] | None = None,
) -> WheelReport:
    """Every check on ``wheel``: name and version, RECORD, Requires-Dist, provenance, the
    patched anchors, verify's report on its files; with ``upstream`` (a pinned wheel, its bytes
    checked against the pin as they are read) the file set and the unpatched bytes; with
    ``checkout`` the patched files' bytes (against ``head_blobs``, the blob ids of the series' files at its
    HEAD, when the caller already asked them: a build; else read from the checkout).

    ``anchors``: the stack's, as the caller read them with its series (``Project.anchors``), so that one
    run reads anchors.toml once; None: read here.

    The wheel is read through sgpatch.source.archive: a member that is unsafe, over a limit,
    encrypted, compressed with another method than deflate, or corrupt is an
    ArchiveError (exit 2) naming it.  Members are hashed in chunks; only the few
    files the checks read whole (METADATA, RECORD, provenance, patched files) are.

    Every check runs each time; ``cache`` (None: none) keeps only expensive parts by the bytes they come
    from: the member digests of the wheel and of the upstream wheel (each by its own sha256), each source
    file's interface facts, each file's landing results."""
    if not wheel.is_file():
        raise BuildError(f"{wheel}: no such wheel file")
    version = wheel_version(stack, series)
    dist_info = f"{DIST_NAME}-{version}.dist-info"
    theirs: dict[str, tuple[bytes, int]] | None = None
    upstream_metadata = None
    if upstream is not None:
        theirs, upstream_metadata = _upstream_contents(upstream, cache)
    with ZipTree(wheel, digest=True) as tree:
        # every member's CRC checked before any check reads it (or by an earlier run, on these same bytes:
        # the key is the digest of the bytes the tree reads, through its one descriptor)
        digests = _kept_or_read(tree.archive, cache)[0]
        contents = _Contents(tree.archive, digests)
        checks = [
            _check_name(stack, wheel, version, contents, dist_info),
            _check_record(contents, dist_info),
            _check_requires(stack, contents.read(f"{dist_info}/METADATA"), upstream_metadata),
            _check_provenance(stack, series, version, contents, dist_info),
        ]
        if anchors is None:
            anchors = load_anchors(stack.series_dir / "anchors.toml")
        patched = check_anchors(anchors, tree, "patched")
        checks.append(
            _check(
                "anchors",
                [
                    f"{r.anchor.id} {r.status} ({r.anchor.file}:{r.anchor.start}-{r.anchor.end})"
                    for r in patched
                    if not r.ok
                ],
                f"{len(patched)} patched-phase anchors hold",
                shown=len(patched),
            )
        )
        if theirs is not None:
            checks.extend(_check_upstream(contents.digests, theirs, dist_info, series))
        if checkout is not None:
            checks.append(_check_checkout(contents, checkout, series, head_blobs))
        report = verify_tree(stack, series, anchors, tree, require_patched=True, cache=cache)
    return WheelReport(wheel, stack.name, version, tuple(checks), report, sha256=tree.archive.sha256)


def read_provenance(wheel: Path) -> dict[str, Any] | None:
    """The provenance document inside ``wheel`` (e.g. to pick its stack), or None if it has no
    readable one (check_wheel then says why)."""
    try:
        with open_archive(wheel, "wheel") as archive:
            suffix = f".dist-info/{PROVENANCE_NAME}"
            name = next((e.name for e in archive.entries if e.name.endswith(suffix)), None)
            return parse_provenance(archive.read(name)) if name else None
    except (SgpatchError, ValueError):
        return None
