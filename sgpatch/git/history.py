"""A line of history read in one git process: a commit, its first parents, their messages and blob ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sgpatch.errors import CheckoutError
from sgpatch.git.repo import Git


@dataclass(frozen=True, slots=True)
class LineCommit:
    """One commit of a first-parent line, its tree and committer date, and the blob ids of the paths asked for
    (None: not there)."""

    oid: str
    parents: tuple[str, ...]
    message: str
    blobs: Mapping[str, str | None]
    tree: str = ""
    committed: str = ""  # the committer date as ``<unix> <tz>`` (``git log --date=raw``'s %cd)


def first_parent_line(g: Git, rev: str, depth: int, paths: Sequence[str] = ()) -> list[LineCommit]:
    """``rev`` and up to ``depth`` first parents below it, each with its parents, message, tree, committer
    date and the blob ids of ``paths``, in one ``cat-file --batch-command``; empty when ``rev`` names no commit.

    The line stops at a commit that is missing or is not a commit.  A path with a control
    character is left out of ``blobs`` (the batch protocol is line-based)."""
    if rev.startswith("-") or any(ord(c) < 32 or ord(c) == 127 for c in rev):
        raise CheckoutError(f"refusing revision {rev!r}")
    asked = [p for p in paths if not any(ord(c) < 32 or ord(c) == 127 for c in p)]
    specs = [f"{rev}~{k}" for k in range(depth + 1)]
    lines = []
    for spec in specs:
        lines.append(f"contents {spec}")
        lines.extend(f"info {spec}:{p}" for p in asked)
    out = g._run("cat-file", "--batch-command", input="".join(f"{x}\n" for x in lines).encode()).stdout
    pos = 0

    def header(spec: str) -> tuple[str, str, int] | None:
        nonlocal pos
        end = out.index(b"\n", pos)
        line = out[pos:end].decode("utf-8", "surrogateescape")
        pos = end + 1
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].isdigit() or line.startswith(spec + " "):
            return None  # "<spec> missing" / "<spec> ambiguous"
        return parts[0], parts[1], int(parts[2])

    found: list[LineCommit] = []
    for spec in specs:
        head = header(spec)
        body = b""
        if head is not None:
            body = out[pos : pos + head[2]]
            pos += head[2] + 1
        blobs: dict[str, str | None] = {}
        for p in asked:
            info = header(f"{spec}:{p}")
            blobs[p] = info[0] if info else None
        if head is None or head[1] != "commit":
            break
        meta, _, message = body.partition(b"\n\n")
        fields = meta.split(b"\n")
        parents = tuple(line[7:].decode() for line in fields if line.startswith(b"parent "))
        tree = next((line[5:].decode() for line in fields if line.startswith(b"tree ")), "")
        committer = next((line for line in fields if line.startswith(b"committer ")), b"")
        committed = " ".join(committer.decode("utf-8", "replace").rsplit(" ", 2)[1:]) if committer else ""
        text = message.decode("utf-8", "replace")
        found.append(LineCommit(head[0], parents, text, blobs, tree=tree, committed=committed))
        if len(parents) != 1:
            break
    return found
