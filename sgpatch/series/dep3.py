"""DEP-3 patch headers (https://dep-team.pages.debian.net/deps/dep3/): read (``parse_dep3``), written one
field a line (``one_line``), and dated (``with_last_update``).

sgpatch writes DEP-3's own fields only (``Description``, ``Origin``, ``Bug``, ``Forwarded``, ``Author``,
``Reviewed-by``, ``Applied-Upstream``, ``Last-Update``); it still reads headers that carry OpenEmbedded's
``Upstream-Status`` (older sgpatch wrote it), and ``forwarded_value`` says what it means in DEP-3 terms.
"""

from __future__ import annotations

import re

from sgpatch.errors import PatchError

# DEP-3: a Description (or Subject), and an Origin unless an Author is named.
REQUIRED_FIELDS = ("Description",)
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):\s?(.*)$")

# What ``str.splitlines`` breaks a line at besides LF: in a DEP-3 header each is refused, so that no
# reader (sgpatch's or another tool's) can see a field the writer did not write.
LINE_BREAKS = frozenset("\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def one_line(value: str) -> str:
    """``value`` as a DEP-3 header value: every line break (``LINE_BREAKS``, LF too) and control character
    but tab escaped as Python writes it (``\\u2028``, ``\\r``), so the value stays on its line and
    ``parse_dep3`` reads back exactly what was written."""
    return "".join(
        c.encode("unicode_escape").decode() if c in LINE_BREAKS or (ord(c) < 32 and c != "\t") or ord(c) == 127 else c
        for c in value
    )


def parse_dep3(text: str, where: str) -> tuple[tuple[str, str], ...]:
    """DEP-3 fields (``Key: value`` with space-indented continuations); lines end at LF only, and a line
    with another line break or a control character (but tab) is refused."""
    return tuple((k, v) for k, v, _line in parse_dep3_lines(text, where))


def parse_dep3_lines(text: str, where: str) -> tuple[tuple[str, str, int], ...]:
    """``parse_dep3`` with each field's line (1-based, the line of its key), for errors that name it."""
    fields: list[list[str]] = []
    starts: list[int] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        bad = next((c for c in line if c in LINE_BREAKS or (ord(c) < 32 and c != "\t") or ord(c) == 127), None)
        if bad is not None:
            raise PatchError(
                f"{where}:{lineno}: a line break or control character (U+{ord(bad):04X}) in the DEP-3 header",
                hint="a header field is one line; continuation lines start with a space",
            )
        if not line.strip():
            continue
        if line[0] in " \t":
            if not fields:
                raise PatchError(f"{where}:{lineno}: continuation line before any DEP-3 field")
            fields[-1][1] += "\n" + line.strip()
            continue
        m = _FIELD.match(line)
        if not m:
            raise PatchError(f"{where}:{lineno}: not a DEP-3 'Field: value' line: {line[:60]!r}")
        fields.append([m.group(1), m.group(2).strip()])
        starts.append(lineno)
    result = tuple((k, v, line) for (k, v), line in zip(fields, starts, strict=True))
    present = {k.lower() for k, _v, _line in result}
    if "subject" in present:
        present.add("description")
    for req in REQUIRED_FIELDS:
        if req.lower() not in present:
            raise PatchError(f"{where}:1: DEP-3 header lacks {req!r}", hint="see SPEC §5 for the header fields")
    if "origin" not in present and "author" not in present and "from" not in present:
        raise PatchError(
            f"{where}:1: DEP-3 header lacks 'Origin' (required unless an 'Author' is named)",
            hint="e.g. 'Origin: vendor' for a local change, 'Origin: backport, <upstream URL>' for a backport",
        )
    return result


def forwarded_value(upstream_status: str) -> str:
    """DEP-3's ``Forwarded`` for an OpenEmbedded ``Upstream-Status`` (``Pending``, ``Submitted [where]``,
    ``Accepted``, ``Backport [version]``, ``Inappropriate [why]``, ``Denied``)."""
    status = upstream_status.strip()
    kind = status.split("[", 1)[0].strip().lower()
    inside = status.split("[", 1)[1].rsplit("]", 1)[0].strip() if "[" in status else ""
    if kind == "submitted":
        return inside if inside.startswith(("http://", "https://")) else "yes"
    if kind in ("accepted", "denied"):
        return "yes"
    if kind in ("backport", "inappropriate"):
        return "not-needed"
    return "no"


_LAST_UPDATE = re.compile(rb"^Last-Update:[^\n]*\n", re.MULTILINE | re.IGNORECASE)
_HEADER_END = re.compile(rb"^---[ \t]*\n", re.MULTILINE)


def with_last_update(header: bytes, date: str) -> bytes:
    """``header`` (a patch file's bytes before its diff) with ``Last-Update: date``: the field replaced where
    it stands, or added as the last field (before the ``---`` line); every other byte kept."""
    line = f"Last-Update: {one_line(date)}\n".encode()
    if _LAST_UPDATE.search(header):
        return _LAST_UPDATE.sub(lambda _m: line, header, count=1)
    end = _HEADER_END.search(header)
    if end is not None:
        return header[: end.start()] + line + header[end.start() :]
    return header + (b"" if not header or header.endswith(b"\n") else b"\n") + line


_DIFFSTAT = re.compile(r"^ \S.* \| +(\d+ ?[+-]*|Bin .*)$|^ \d+ files? changed")


def _format_patch(lines: list[str]) -> tuple[str, list[str], dict[str, str]] | None:
    """Subject, body and fields of a ``git format-patch`` mail, or None if it is not one."""
    if not lines or not (lines[0].startswith("From ") or lines[0].startswith("From: ")):
        return None
    fields: dict[str, str] = {}
    i = 1 if lines[0].startswith("From ") and not lines[0].startswith("From: ") else 0
    key = ""
    while i < len(lines) and lines[i].strip():
        if lines[i][:1] in " \t" and key:
            fields[key] += " " + lines[i].strip()
        elif ":" in lines[i]:
            key, _, value = lines[i].partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        i += 1
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", fields.get("subject", ""))
    if not subject:
        return None
    body = lines[i + 1 :] if i < len(lines) else []
    meta = {"Author": fields["from"]} if fields.get("from") else {}
    return subject, body, meta


def describe(prose: str, fallback: str) -> tuple[str, str, dict[str, str]]:
    """Subject, body and DEP-3 fields (``Origin``, ``Author``, ...) from the text before a patch's first section:
    a DEP-3 header, a ``git format-patch`` mail, or leading prose; ``fallback`` when it says nothing."""
    head = prose.split("\n---\n", 1)[0] if "\n---\n" in "\n" + prose else prose
    head = head.removeprefix("---\n") if prose.startswith("---\n") else head
    lines = [ln for ln in head.split("\n") if not _DIFFSTAT.match(ln)]
    try:
        fields = parse_dep3("\n".join(lines), "header")
    except PatchError:
        fields = ()
    if fields:
        described = dict((k.title(), v) for k, v in fields)
        text = described.pop("Description", None) or described.pop("Subject", "") or fallback
        first, _, rest = text.partition("\n")
        body = "\n".join("" if ln.strip() == "." else ln for ln in rest.split("\n"))
        return first.strip(), body.strip("\n"), described
    mail = _format_patch(lines)
    if mail is not None:
        subject, mail_body, meta = mail
        return subject, "\n".join(mail_body).strip("\n"), meta
    kept = [ln.rstrip() for ln in lines if not ln.startswith(("diff ", "Only in ", "Index: ", "====="))]
    text = "\n".join(kept).strip("\n")
    if not text.strip():
        return fallback, "", {}
    first, _, rest = text.strip().partition("\n")
    return first.strip(), rest.strip("\n"), {}
