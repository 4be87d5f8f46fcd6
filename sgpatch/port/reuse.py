"""Resolutions are kept and reused (issue 27): what a person made of each conflict, replayed by later ports.

At ``port --continue`` each diff3 conflict the stop left (the release's lines, the old base's, the patch's) is
cut out of the person's resolution, by the plain text around it, and kept in the project's
``.sgpatch-resolutions/`` directory (committed with the project, beside ``patches/``): one JSON file per
conflict, named by the sha256 of its three sides (``key``), holding the sides and the resolution.  A later
port of the series (another stack of the same line, a port given up and made again, ``watch``) that meets the
same conflict, byte for byte, writes the kept resolution in place of its markers; the resolution then goes
through every check ``port --continue`` runs, like any other.

A reject file (a file the release lacks: its hunks wait in ``<path>.rej``) is decided per hunk as well: at
``port --continue`` each hunk of it is kept, by the sha256 of its path and its two sides (``reject_key``), with
what the person made of its file: left ``absent``, ``recreated`` (the file's text kept), or ``moved`` (its added
lines now stand in other files the resolution changed: kept, named, never replayed, since the change went
elsewhere).  A later port that meets the same missing file with the same hunks, each kept with one and the same
``absent`` or ``recreated`` decision, settles it so (no reject file; the recreated file written).

A conflict that cannot be cut out (the person also changed the lines around it: their own new work) is not lost:
the file is then kept whole, by the sha256 of its path and the exact text the stop left (``file_key``), and a
later port that stops with that same text, byte for byte, writes the person's whole file.

A kept file is data from outside: it is read only when it is a regular file of at most ``MAX_ENTRY`` bytes
whose sides hash to its name; anything else is a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from sgpatch.atomic import write_atomic
from sgpatch.checkout.stop.kinds import PortRecord
from sgpatch.git.batch import read_blobs
from sgpatch.git.repo import Git
from sgpatch.series.conflicts import Piece, Region, norm, regions_of, says_something
from sgpatch.series.patch import FilePatch, Hunk, split_lines

STORE = ".sgpatch-resolutions"
MAX_ENTRY = 1 << 20
_SCHEMA = 1


def key(r: Region) -> str:
    """The content key of one conflict: its old base, patch and release sides."""
    h = hashlib.sha256(b"sgpatch-resolution-1\0")
    for side in (r.base, r.theirs, r.ours):
        joined = b"".join(side)
        h.update(str(len(joined)).encode() + b"\0" + joined)
    return h.hexdigest()


def _cut(pieces: Sequence[Piece], resolved: bytes) -> list[tuple[Region, bytes]]:
    """Each conflict of ``pieces`` with what stands in its place in ``resolved``, found by the plain text around
    it: a conflict is cut out only where the runs before and after it can stand in one place only (the earliest
    and the latest way to find them in order agree); the others are left out."""
    runs: list[list[bytes]] = [[]]
    regions: list[Region] = []
    for piece in pieces:
        if isinstance(piece, Region):
            regions.append(piece)
            runs.append([])
        else:
            runs[-1].append(piece)
    lines = split_lines(resolved)
    lead, mids, tail = runs[0], runs[1:-1], runs[-1]
    if lines[: len(lead)] != lead or (tail and lines[len(lines) - len(tail) :] != tail):
        return []
    end = len(lines) - len(tail)

    def at(run: list[bytes], i: int) -> bool:
        return lines[i : i + len(run)] == run

    early: list[int] = []
    pos = len(lead)
    for run in mids:
        found = next((i for i in range(pos, end - len(run) + 1) if at(run, i)), None)
        if found is None:
            return []
        early.append(found)
        pos = found + len(run)
    late: list[int] = []
    pos = end
    for run in reversed(mids):
        found = next((i for i in range(pos - len(run), -1, -1) if at(run, i)), None)
        if found is None:
            return []
        late.append(found)
        pos = found
    late.reverse()
    fixed = [a if a == b and mids[k] else None for k, (a, b) in enumerate(zip(early, late, strict=True))]
    out: list[tuple[Region, bytes]] = []
    for k, region in enumerate(regions):
        before = fixed[k - 1] if k else None
        start = len(lead) if k == 0 else None if before is None else before + len(mids[k - 1])
        stop = end if k == len(regions) - 1 else fixed[k]
        if start is not None and stop is not None and start <= stop:
            out.append((region, b"".join(lines[start:stop])))
    return out


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def learn(root: Path, stopped: Mapping[str, bytes | None], resolved: Mapping[str, bytes | None]) -> int:
    """Keep what the person made of each conflict in ``stopped`` (path -> the text the stop left) as ``resolved``
    has it; returns how many were kept."""
    store = root / STORE
    kept = 0
    for path, text in stopped.items():
        after = resolved.get(path)
        pieces = regions_of(text) if text is not None else None
        if not pieces or after is None:
            continue
        cut = _cut(pieces, after)
        if len(cut) < sum(isinstance(p, Region) for p in pieces) and text is not None:
            kept += _keep_file(store, path, text, after)
        for region, resolution in cut:
            sides = [_text(b"".join(s)) for s in (region.ours, region.base, region.theirs)]
            shown = _text(resolution)
            if shown is None or any(s is None for s in sides):
                continue
            entry = {
                "schema_version": _SCHEMA,
                "path": path,
                "release": sides[0],
                "base": sides[1],
                "patch": sides[2],
                "resolution": shown,
            }
            if store.is_symlink():
                return kept
            store.mkdir(exist_ok=True)
            write_atomic(store / f"{key(region)}.json", (json.dumps(entry, indent=1) + "\n").encode())
            kept += 1
    return kept


def file_key(path: str, stopped: bytes) -> str:
    """The content key of a whole conflicting file: its path and the text the stop left."""
    h = hashlib.sha256(b"sgpatch-file-1\0")
    for part in (path.encode(), stopped):
        h.update(str(len(part)).encode() + b"\0" + part)
    return h.hexdigest()


def _keep_file(store: Path, path: str, stopped: bytes, resolved: bytes) -> int:
    """Keep the person's whole ``resolved`` file for the exact text the stop left; 1 when kept."""
    shown, was = _text(resolved), _text(stopped)
    if shown is None or was is None or store.is_symlink():
        return 0
    entry = {"schema_version": _SCHEMA, "kind": "file", "path": path, "stopped": was, "resolution": shown}
    data = (json.dumps(entry, indent=1) + "\n").encode()
    if len(data) > MAX_ENTRY:
        return 0
    store.mkdir(exist_ok=True)
    write_atomic(store / f"{file_key(path, stopped)}.json", data)
    return 1


def _recall_file(store: Path, path: str, stopped: bytes) -> bytes | None:
    """The person's whole file kept for the exact text ``stopped``, or None (absent, unreadable, not its name's)."""
    entry = _entry(store, file_key(path, stopped), "file")
    if entry is None:
        return None
    was, where, resolution = entry.get("stopped"), entry.get("path"), entry.get("resolution")
    if not isinstance(was, str) or not isinstance(where, str) or not isinstance(resolution, str):
        return None
    if where != path or was.encode() != stopped:
        return None
    return resolution.encode()


def _entry(store: Path, name: str, kind: str | None) -> dict[str, object] | None:
    """The kept entry ``name`` of ``kind`` (None: a conflict's, which has no kind), or None: absent, not a regular
    file of at most ``MAX_ENTRY`` bytes, not JSON, or of another schema or kind.  Whether it is what its name says
    is the caller's to check."""
    path = store / f"{name}.json"
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY:
            return None
        entry = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("schema_version") != _SCHEMA or entry.get("kind") != kind:
        return None
    return entry


def _lines(text: object) -> tuple[bytes, ...] | None:
    return tuple(split_lines(text.encode())) if isinstance(text, str) else None


def _recall(store: Path, r: Region) -> bytes | None:
    """The kept resolution of conflict ``r``, or None (absent, unreadable, or not what its name says)."""
    k = key(r)
    entry = _entry(store, k, None)
    if entry is None:
        return None
    sides = [_lines(entry.get(f)) for f in ("release", "base", "patch")]
    resolution = entry.get("resolution")
    if any(s is None for s in sides) or not isinstance(resolution, str):
        return None
    ours, base, theirs = sides
    assert ours is not None and base is not None and theirs is not None
    if key(Region(ours, base, theirs)) != k:
        return None
    return resolution.encode()


def replay(root: Path, files: Mapping[str, bytes | None]) -> tuple[dict[str, bytes | None], tuple[str, ...]]:
    """``files`` with each conflict a resolution is kept for replaced by it; and the files now free of markers
    that had some."""
    store = root / STORE
    if not store.is_dir() or store.is_symlink():
        return dict(files), ()
    out: dict[str, bytes | None] = dict(files)
    cleared: list[str] = []
    for path, text in files.items():
        pieces = regions_of(text) if text is not None else None
        if not pieces or not any(isinstance(p, Region) for p in pieces):
            continue
        assert text is not None
        whole = _recall_file(store, path, text)
        if whole is not None:
            out[path] = whole
            cleared.append(path)
            continue
        parts: list[bytes] = []
        left = 0
        for piece in pieces:
            if isinstance(piece, bytes):
                parts.append(piece)
                continue
            kept = _recall(store, piece)
            if kept is None:
                parts.extend([piece.marks[0], *piece.ours, piece.marks[1], *piece.base, piece.marks[2]])
                parts.extend([*piece.theirs, piece.marks[3]])
                left += 1
            else:
                parts.append(kept)
        new = b"".join(parts)
        if new != text:
            out[path] = new
            if not left:
                cleared.append(path)
    return out, tuple(cleared)


def replay_stop(root: Path, files: Mapping[str, bytes | None]) -> tuple[dict[str, bytes | None], tuple[str, ...]]:
    """``replay`` for the files a port is about to stop with (the caller's ``stop_at`` commits them)."""
    return replay(root, files)


def learn_from(root: Path, g: Git, record: PortRecord, resolution: str, gone: Sequence[FilePatch] = ()) -> int:
    """``learn`` (and ``learn_rejects`` for the sections ``gone`` of the files the release lacks) from a port stopped
    as ``record`` says and the commit of the person's ``resolution``."""
    stop = record.stop
    paths = [f.path for f in record.conflicted.files if f.regions]
    kept = learn(root, read_blobs(g, stop, paths), read_blobs(g, resolution, paths)) if paths else 0
    if gone:
        changed = sorted(g.changed_paths(stop, resolution) | {fp.path for fp in gone})
        kept += learn_rejects(root, gone, read_blobs(g, stop, changed), read_blobs(g, resolution, changed))
    return kept


# --------------------------------------------------------------------------- reject files

ABSENT, RECREATED, MOVED = "absent", "recreated", "moved"


def reject_key(path: str, hunk: Hunk) -> str:
    """The content key of one hunk of a file the release lacks: its path and its two sides."""
    h = hashlib.sha256(b"sgpatch-reject-1\0")
    for part in (path.encode(), b"".join(hunk.old), b"".join(hunk.new)):
        h.update(str(len(part)).encode() + b"\0" + part)
    return h.hexdigest()


def learn_rejects(
    root: Path, gone: Sequence[FilePatch], stopped: Mapping[str, bytes | None], resolved: Mapping[str, bytes | None]
) -> int:
    """Keep the person's decision for each hunk of the sections ``gone`` (files the release lacks); ``stopped`` and
    ``resolved``: every file the resolution changed, at the stop and in the resolution."""
    store = root / STORE
    kept = 0
    for fp in gone:
        text = resolved.get(fp.path)
        shown = _text(text) if text is not None else None
        if text is not None and shown is None:
            continue
        for hunk in fp.hunks:
            into: list[str] = []
            if text is None:
                into = _moved_into(hunk, fp.path, stopped, resolved)
            sides = [_text(b"".join(side)) for side in (hunk.old, hunk.new)]
            if any(side is None for side in sides) or store.is_symlink():
                continue
            entry = {
                "schema_version": _SCHEMA,
                "kind": "reject",
                "path": fp.path,
                "old": sides[0],
                "new": sides[1],
                "decision": RECREATED if text is not None else MOVED if into else ABSENT,
                "file": shown,
                "into": into,
            }
            store.mkdir(exist_ok=True)
            write_atomic(store / f"{reject_key(fp.path, hunk)}.json", (json.dumps(entry, indent=1) + "\n").encode())
            kept += 1
    return kept


def _moved_into(
    hunk: Hunk, path: str, stopped: Mapping[str, bytes | None], resolved: Mapping[str, bytes | None]
) -> list[str]:
    """The other files the resolution gave a line the hunk adds (one that says something) that they lacked."""
    wanted = {norm(ln) for _, ln in hunk.added} - {b""}
    wanted = {n for n in wanted if says_something(n)}
    into = []
    for other, after in resolved.items():
        if other == path or other.endswith(".rej") or after is None:
            continue
        had = {norm(ln) for ln in split_lines(stopped.get(other) or b"")}
        if any(n in wanted and n not in had for n in (norm(ln) for ln in split_lines(after))):
            into.append(other)
    return sorted(into)


def _recall_reject(store: Path, path: str, hunk: Hunk) -> tuple[str, str | None] | None:
    """(decision, the recreated file's text) kept for one hunk of a missing file, or None."""
    k = reject_key(path, hunk)
    entry = _entry(store, k, "reject")
    if entry is None:
        return None
    old, new, where = _lines(entry.get("old")), _lines(entry.get("new")), entry.get("path")
    if old is None or new is None or not isinstance(where, str):
        return None
    if reject_key(where, dataclasses.replace(hunk, old=old, new=new)) != k:
        return None
    decision, text = entry.get("decision"), entry.get("file")
    if decision == ABSENT and text is None:
        return ABSENT, None
    if decision == RECREATED and isinstance(text, str):
        return RECREATED, text
    return None


def replay_rejects(root: Path, gone: Sequence[FilePatch]) -> dict[str, bytes | None]:
    """The files the release lacks that kept decisions settle: path -> the recreated text, or None (left absent).
    A file is settled only when each of its hunks is kept with one and the same decision."""
    store = root / STORE
    if not store.is_dir() or store.is_symlink():
        return {}
    out: dict[str, bytes | None] = {}
    for fp in gone:
        found = {_recall_reject(store, fp.path, hunk) for hunk in fp.hunks}
        if len(found) != 1 or None in found:
            continue
        ((decision, text),) = found  # type: ignore[misc]
        out[fp.path] = text.encode() if decision == RECREATED and text is not None else None
    return out
