"""The series commits on a checkout, for export: found below HEAD, matched to the series, checked (the path
rule apply uses, a size limit), and rendered as patch files with their DEP-3 headers."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sgpatch.checkout.state import trailers
from sgpatch.errors import CheckoutError, PatchError
from sgpatch.git.attributes import write_info_attributes
from sgpatch.git.diff import diff_patch
from sgpatch.git.repo import Git, object_sizes
from sgpatch.series.dep3 import forwarded_value, one_line, with_last_update
from sgpatch.series.patch import TRAILER_PATCH
from sgpatch.series.paths import path_refusal

MAX_COMMITS = 200  # how far below HEAD the base may be
MAX_FILE_BYTES = 8 << 20  # a file a patch touches, either side (SGLang's largest source file is 0.25 MB)
# A commit's trailers that become header fields; ``Obsolete-If`` is sgpatch's (``sgpatch.series.obsolete``).
DEP3_TRAILERS = (
    "Origin",
    "Author",
    "Bug",
    "Forwarded",
    "Upstream-Status",
    "Applied-Upstream",
    "Reviewed-by",
    "Obsolete-If",
)
_NUMBER = re.compile(r"^(\d{4})-")
_DIFF_START = re.compile(rb"^diff --git ", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ChainCommit:
    """One commit between the base and HEAD, and the patch its trailer names (None: a new commit)."""

    commit: str
    parent: str
    patch: str | None


def find_chain(
    g: Git, bases: Sequence[str], *, limit: int = MAX_COMMITS, head: str | None = None
) -> tuple[str, list[ChainCommit]]:
    """The base under HEAD (or ``head``) and the commits above it, oldest first; CheckoutError if there is none."""
    head = head or g.head()
    if head is None:
        raise CheckoutError(f"{g.root}: has no commits", hint="run 'sgpatch fetch' to create the checkout")
    chain: list[ChainCommit] = []
    commit = head
    for _ in range(limit + 1):
        if commit in bases:
            chain.reverse()
            return commit, chain
        parents = g.parents(commit)
        if len(parents) != 1:
            what = "a merge commit" if parents else "a root commit that is not the pinned base"
            raise CheckoutError(
                f"{g.root}: commit {commit[:12]} is {what}",
                hint="export needs the pinned base plus a straight line of commits (rebase instead of merging)",
            )
        chain.append(ChainCommit(commit, parents[0], trailers(g.message(commit)).get(TRAILER_PATCH)))
        commit = parents[0]
    pins = " or ".join(b[:12] for b in bases)
    raise CheckoutError(f"{g.root}: the pinned base ({pins}) is not within {limit} commits below HEAD")


def match_series(chain: Sequence[ChainCommit], names: Sequence[str], where: Path) -> None:
    """The trailer commits must carry the series' patches in order, before any new commit."""
    named = [c for c in chain if c.patch is not None]
    for i, c in enumerate(chain):
        if c.patch is None and any(later.patch is not None for later in chain[i + 1 :]):
            raise CheckoutError(
                f"{where}: commit {c.commit[:12]} has no {TRAILER_PATCH} trailer but series commits follow it",
                hint="new commits go on top of the series commits (git rebase -i to reorder)",
            )
    for c in named:
        if c.patch not in names:
            raise CheckoutError(f"{where}: commit {c.commit[:12]} carries {c.patch}, which the series does not list")
    carried = [c.patch for c in named]
    if carried != list(names):
        missing = [n for n in names if n not in carried]
        if missing:
            raise CheckoutError(
                f"{where}: no commit carries {missing[0]}",
                hint="export needs every patch of the series committed on the checkout ('sgpatch apply' first)",
            )
        raise CheckoutError(f"{where}: the commits carry the patches in another order than the series lists them")


# --------------------------------------------------------------------------- patch text


def header_of(data: bytes) -> bytes:
    """The bytes of a patch file before its first ``diff --git`` line (DEP-3 header and ``---``)."""
    m = _DIFF_START.search(data)
    return data[: m.start()] if m else data


_HUNK_RANGE = re.compile(rb"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.MULTILINE)
_INDEX_LINE = re.compile(rb"^index [0-9a-f]+\.\.[0-9a-f]+(?: [0-7]+)?\n", re.MULTILINE)


def change_of(data: bytes) -> bytes:
    """What a patch changes: its diff (from the first ``diff --git``) without hunk line numbers and ``index``
    lines, so a patch carried to new line numbers is the same change and one with other lines is not."""
    m = _DIFF_START.search(data)
    diff = data[m.start() :] if m else data
    return _HUNK_RANGE.sub(b"@@", _INDEX_LINE.sub(b"", diff))


def slug(subject: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    if len(words) > 48:
        words = words[:48].rsplit("-", 1)[0]
    return words or "local-change"


def dep3_header(message: str, author: str, date: str) -> bytes:
    """A DEP-3 header for a new patch from its commit message, author and date: DEP-3's fields only (an
    ``Upstream-Status`` trailer becomes ``Forwarded``; none: ``Forwarded: no``).

    Lines end at LF only (a CR LF pair counts as one); every value is written on its own line with any
    other line break or control character escaped (``one_line``), so ``parse_dep3`` reads back exactly
    the fields written here and no text of a commit can add one.
    """
    text = message.replace("\r\n", "\n").strip()
    paragraphs = [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
    fields: dict[str, str] = {}
    if paragraphs:
        last = paragraphs[-1].split("\n")
        parsed = [ln.split(":", 1) for ln in last]
        if all(len(p) == 2 and re.match(r"^[A-Za-z][A-Za-z0-9-]*$", p[0]) for p in parsed):
            paragraphs.pop()
            for key, value in parsed:
                canonical = next((k for k in DEP3_TRAILERS if k.lower() == key.lower()), None)
                if canonical and value.strip():
                    fields[canonical] = one_line(value.strip())
    subject = one_line(paragraphs[0].split("\n")[0].strip()) if paragraphs else "local change"
    body_lines: list[str] = []
    for i, para in enumerate(paragraphs):
        lines = para.split("\n")[1:] if i == 0 else para.split("\n")
        if i > 1 or (i == 1 and body_lines):
            body_lines.append(".")
        body_lines.extend(one_line(ln.rstrip()) or "." for ln in lines)
    out = [f"Description: {subject or 'local change'}"]
    out.extend(f" {ln}" for ln in body_lines)
    out.append(f"Origin: {fields.pop('Origin', 'vendor')}")
    named = fields.pop("Author", one_line(author.strip()))
    if named:  # a patch sgpatch imports may name no author
        out.append(f"Author: {named}")
    status = fields.pop("Upstream-Status", None)  # OpenEmbedded's field: written as DEP-3's Forwarded
    forwarded = fields.pop("Forwarded", None) or (forwarded_value(status) if status else "no")
    out.extend(f"{k}: {v}" for k, v in fields.items() if k != "Applied-Upstream")
    out.append(f"Forwarded: {forwarded}")
    if "Applied-Upstream" in fields:
        out.append(f"Applied-Upstream: {fields['Applied-Upstream']}")
    out.append(f"Last-Update: {one_line(date.strip())}")
    out.append("---")
    return ("\n".join(out) + "\n").encode()


def check_commit_files(g: Git, commit: ChainCommit) -> None:
    """Refuse a commit a patch cannot carry, before ``git diff`` runs: a path no patch may touch (the rule
    ``apply`` holds every patch to: git metadata, control characters), or a file over MAX_FILE_BYTES on
    either side (a patch is text a person reviews; a huge one would be built whole in memory)."""
    paths = sorted(g.changed_paths(commit.parent, commit.commit))
    where = f"{g.root}: commit {commit.commit[:12]}"
    for path in paths:
        problem = path_refusal(path)
        if problem is not None:
            hint = "sgpatch apply refuses such a patch: leave that file out of the commit"
            raise PatchError(f"{where}: {problem}", hint=hint)
    specs = [f"{rev}:{p}" for p in paths for rev in (commit.parent, commit.commit)]
    for spec, size in zip(specs, object_sizes(g, specs), strict=True):
        if size is not None and size > MAX_FILE_BYTES:
            raise PatchError(
                f"{where}: {spec.split(':', 1)[1]} is {size} bytes, over the limit of {MAX_FILE_BYTES >> 20} MiB "
                "for a file a patch touches",
                hint="a patch carries source code a person reviews; keep large files out of the series",
            )


@dataclass(frozen=True, slots=True)
class Rendered:
    """A patch file as the commits say it should be."""

    name: str
    commit: str
    data: bytes
    status: str  # "unchanged", "updated" or "new"


def render_chain(
    g: Git,
    chain: Sequence[ChainCommit],
    headers: Mapping[str, bytes],
    current: Mapping[str, bytes],
    used: Sequence[str],
    *,
    today: str | None = None,
) -> list[Rendered]:
    """Each commit's patch file: its header (kept, or made from the message) plus ``git diff``.

    With ``today`` (``YYYY-MM-DD``), a patch whose change differs from its file's (``change_of``) gets
    ``Last-Update: today``; a patch whose diff only moved (new line numbers, new blob ids) keeps its date.
    """
    write_info_attributes(g.git_dir())
    numbers = [int(m.group(1)) for n in used if (m := _NUMBER.match(n))]
    next_number = max(numbers, default=0) + 1
    taken = set(used)
    out: list[Rendered] = []
    for c in chain:
        check_commit_files(g, c)
        diff = diff_patch(g, c.parent, c.commit)
        if c.patch is not None:
            if not diff:
                raise PatchError(
                    f"{g.root}: commit {c.commit[:12]} ({c.patch}) changes nothing",
                    hint="drop the commit and remove the patch from the series by hand",
                )
            header = headers[c.patch]
            if today is not None and c.patch in current and change_of(current[c.patch]) != change_of(diff):
                header = with_last_update(header, today)
            data = header + diff
            status = "unchanged" if current.get(c.patch) == data else "updated"
            out.append(Rendered(c.patch, c.commit, data, status))
            continue
        if not diff:
            continue  # an empty commit carries nothing to export
        author, date, message = g.commit_info(c.commit)
        subject = message.strip().split("\n")[0] if message.strip() else ""
        name = f"{next_number:04d}-{slug(subject)}.patch"
        while name in taken:
            next_number += 1
            name = f"{next_number:04d}-{slug(subject)}.patch"
        taken.add(name)
        next_number += 1
        data = dep3_header(message, author, date) + diff
        out.append(Rendered(name, c.commit, data, "unchanged" if current.get(name) == data else "new"))
    return out


def series_text(original: str, names: Sequence[str], *, dropped: Mapping[str, str] | None = None) -> str:
    """The series file listing ``names``: known lines and comments kept, new names appended.

    A listed patch not in ``names`` is removed; with ``dropped`` it becomes a
    comment saying why.
    """
    out: list[str] = []
    listed: set[str] = set()
    for line in original.splitlines():
        entry = line.split("#", 1)[0].strip()
        if not entry:
            out.append(line)
        elif entry in names:
            out.append(line)
            listed.add(entry)
        elif dropped and entry in dropped:
            out.append(f"# {entry}: {dropped[entry]}")
    out.extend(n for n in names if n not in listed)
    return "\n".join(out) + "\n"
