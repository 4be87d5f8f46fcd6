"""One commit on a parent, written by one ``git fast-import``: the stream that says it.  (A laid-out checkout's first
commit is written with its blobs, by ``sgpatch.git.pack``.)

``Git.commit_files`` made a commit of a few changed files with five git processes (the blobs by ``hash-object``
from temporary files, a temporary index by ``read-tree``, the changes by ``update-index``, then ``write-tree`` and
``commit-tree``): 50-95 ms for the 48 files of a port's stop, where one ``fast-import`` of the same blobs, trees
and commit takes 12-48 ms.  The objects are the same, and so is the commit's id (an id is the digest of the
bytes): a tree's bytes are fixed by its entries, and the commit's by its tree, parent, identity, date and
message.  ``tests/test_fastimport.py`` compares both ways on real files, removals, modes and odd names.

The commit is made on a scratch branch the stream empties again (``reset`` with no ``from``): fast-import moves no
reference (it still opens a reference transaction at its end, with nothing in it), and the caller reads the
commit's id from the marks it exports.  Each such commit is a pack of its own: past ``MAX_PACKS`` the caller rolls
the small ones into one (``ROLL_UP``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from sgpatch.errors import CheckoutError

# How fast-import writes a pack (never what it holds: an object's id is the digest of its bytes).  No deltas:
# fast-import tries each blob against the one before it, and a release's files in archive order are unrelated (on an
# SGLang wheel the deltas cost 0.4 of its 1.0 s and left the pack no smaller).  zlib level 1, what ``git add`` writes
# a loose object with (``core.looseCompression``): 0.35 s in all, the pack 8.3 MB instead of 7.1.
PACKING = ("-c", "pack.depth=0", "-c", "pack.compression=1")
# One commit's objects kept as the pack fast-import writes (by default, fewer than 100 are exploded into loose
# files, one by one, by one more process).
COMMITTING = (*PACKING, "-c", "fastimport.unpackLimit=0")
# The packs a checkout may gather before the small ones are rolled into one: each commit written so is a pack of its
# own, and every object lookup asks each pack's index in turn.  ``repack --geometric``: the release's large pack stays
# as it is; every object of the packs rolled up is kept, reachable or not, and so is every loose one.
MAX_PACKS = 50
ROLL_UP = ("repack", "-d", "-q", "--geometric=2")
OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")

SCRATCH = "refs/sgpatch/fast-import"  # the branch the stream commits on, deleted by the same stream
RAW_DATE = re.compile(r"[0-9]+ [+-][0-9]{4}")  # what fast-import reads (its default ``--date-format=raw``)
INLINE_MODES = frozenset({"100644", "100755", "120000"})  # what a ``M <mode> inline`` command can write


def quoted(path: str) -> bytes:
    """``path`` as a fast-import path: C-style quoted (always accepted; needed for a quote or a line break)."""
    raw = path.encode("utf-8", "surrogateescape")
    return b'"' + raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") + b'"'


def commit_stream(
    parent: str,
    written: Mapping[str, tuple[str, bytes]],
    removed: Sequence[str],
    message: str,
    date: str,
    ident: str,
) -> bytes | None:
    """The fast-import stream of one commit on ``parent`` (mark ``:1``): ``removed`` deleted, then ``written``
    (``path -> (mode, bytes)``) written; ``ident`` is ``Name <email>``, both author and committer, at ``date``.
    None where fast-import cannot say it as ``commit-tree`` would: a date not in git's raw form (``<unix> <tz>``),
    or a mode that is not a file's or a link's."""
    if not RAW_DATE.fullmatch(date) or any(mode not in INLINE_MODES for mode, _ in written.values()):
        return None
    out = [b"feature done\n", *_commit(1, message, date, ident), f"from {parent}\n".encode()]
    out += [b"D " + quoted(path) + b"\n" for path in removed]
    for path, (mode, data) in written.items():
        out += [f"M {mode} inline ".encode() + quoted(path) + b"\n", b"data %d\n" % len(data), data, b"\n"]
    out += [f"reset {SCRATCH}\n".encode(), b"done\n"]
    return b"".join(out)


def _commit(mark: int, message: str, date: str, ident: str) -> list[bytes]:
    """A commit command's head on the scratch branch: its mark, ``ident`` (``Name <email>``) as author and committer
    at ``date``, and the message."""
    text = message.encode("utf-8")
    who = f"{ident} {date}\n".encode()
    return [
        f"commit {SCRATCH}\nmark :{mark}\n".encode(),
        b"author " + who,
        b"committer " + who,
        b"data %d\n" % len(text),
        text,
        b"\n",
    ]


def packs_past_bound(root: Path) -> bool:
    """Whether the checkout at ``root`` holds more than ``MAX_PACKS`` packs: counted in ``.git/objects/pack``, without
    a process (False where its git directory is elsewhere)."""
    count = 0
    try:
        with os.scandir(root / ".git" / "objects" / "pack") as entries:
            for entry in entries:  # read only as far as the bound: a folder of a million names is not read whole
                count += entry.name.endswith(".pack")
                if count > MAX_PACKS:
                    return True
    except OSError:
        pass
    return False


def read_marks(marks: Path, root: Path) -> dict[str, str]:
    """The ids of the marks fast-import exported to ``marks`` (``:N -> id``), for the repository ``root``; a line that
    is not a mark and an object id is a CheckoutError."""
    ids = {}
    for line in (marks.read_text("ascii") if marks.exists() else "").splitlines():
        mark, _, oid = line.partition(" ")
        if not OID.fullmatch(oid):
            raise CheckoutError(f"{root}: git fast-import wrote an unexpected mark line {line!r}")
        ids[mark] = oid
    return ids
