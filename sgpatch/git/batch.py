"""Many objects of a checkout in one ``git cat-file --batch`` (a port reads every file its series touches; a build
asks the blob ids of every file its series touches)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sgpatch.errors import CheckoutError
from sgpatch.git.objectid import blob_id
from sgpatch.git.repo import Git

_OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


def read_blobs(g: Git, rev: str, paths: Sequence[str]) -> dict[str, bytes | None]:
    """``path -> bytes`` of ``paths`` in ``rev`` (None: not there, or not a file)."""
    if rev.startswith("-") or any(c in rev for c in "\n\0:"):
        raise CheckoutError(f"refusing revision {rev!r}")
    return dict(zip(paths, read_objects(g, [f"{rev}:{p}" for p in paths]), strict=True))


def read_objects(g: Git, specs: Sequence[str]) -> list[bytes | None]:
    """The blobs ``specs`` name (``rev:path`` or an object id), in order; None: missing or not a blob."""
    if not specs:
        return []
    bad = next((s for s in specs if "\n" in s or "\0" in s or s.startswith("-")), None)
    if bad is not None:
        raise CheckoutError(f"{g.root}: cannot look up {bad!r}")
    data = "".join(f"{s}\n" for s in specs).encode("utf-8", "surrogateescape")
    out = g._run("cat-file", "--batch", input=data).stdout
    found: list[bytes | None] = []
    pos = 0
    for _ in specs:
        end = out.index(b"\n", pos)
        header = out[pos:end].split(b" ")
        pos = end + 1
        if len(header) != 3 or not header[2].isdigit():
            found.append(None)  # "<spec> missing" (or ambiguous)
            continue
        size = int(header[2])
        body = out[pos : pos + size]
        pos += size + 1
        found.append(body if header[1] == b"blob" else None)
    return found


def object_ids(g: Git, specs: Sequence[str]) -> list[str | None]:
    """What ``rev_parse`` gives for each ``rev:path`` spec (its object id; None if missing), in one process."""
    if not specs:
        return []
    if any("\n" in s or "\0" in s for s in specs):
        raise CheckoutError(f"{g.root}: a path with a newline or NUL cannot be looked up")
    data = "".join(f"{s}\n" for s in specs).encode("utf-8", "surrogateescape")
    lines = g._run("cat-file", "--batch-check=%(objectname)", input=data).stdout.decode().split("\n")
    return [line if _OID.fullmatch(line) else None for line in lines[: len(specs)]]


def blob_ids(g: Git, rev: str, paths: Sequence[str]) -> tuple[tuple[str, str | None], ...]:
    """``(path, blob id)`` of ``paths`` in ``rev`` (None: not there), asked of git once."""
    return blob_ids_at(g, (rev,), paths)[0]


def blob_ids_at(g: Git, revs: Sequence[str], paths: Sequence[str]) -> list[tuple[tuple[str, str | None], ...]]:
    """:func:`blob_ids` of ``paths`` in each of ``revs``, in their order, asked of git in one process."""
    ids = object_ids(g, [f"{rev}:{p}" for rev in revs for p in paths])
    n = len(paths)
    return [tuple(zip(paths, ids[i * n : (i + 1) * n], strict=True)) for i in range(len(revs))]


def read_blobs_known(
    g: Git, rev: str, paths: Sequence[str], known: Mapping[str, bytes | None]
) -> dict[str, bytes | None]:
    """``read_blobs(g, rev, paths)``, the texts of ``known`` taken where ``rev`` holds them byte for byte: the ids
    are asked first (no content read), and only the files whose blob is not the text known are read (a port's
    checkout holds the very files it judged from the release: 15 ms of reading saved at its stop)."""
    return read_known(g, blob_ids(g, rev, paths), known)


def read_known(
    g: Git, ids: Sequence[tuple[str, str | None]], known: Mapping[str, bytes | None]
) -> dict[str, bytes | None]:
    """Each path's blob (``ids``: ``(path, its object id)``, None: absent): ``known[path]`` where that text is the
    object, else read from git by its id (None: absent, or not a blob)."""
    out: dict[str, bytes | None] = {}
    unread: list[tuple[str, str]] = []
    for path, oid in ids:
        text = known.get(path)
        if path in known and oid == (None if text is None else blob_id(text)):
            out[path] = text
        elif oid is None:
            out[path] = None
        else:
            unread.append((path, oid))
    out.update(zip((p for p, _ in unread), read_objects(g, [oid for _, oid in unread]), strict=True))
    return {path: out[path] for path, _ in ids}
