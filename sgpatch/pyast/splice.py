"""The top-level statements of a text that is another, parsed text with one run of lines changed: the parsed
text's statements before and after the run, and the run parsed by itself.  For readers of what a file defines and
whether it parses (a name defined twice, a resolution offered), not of where: line numbers are not the text's.

A port asks of many texts that are the release's file with a hunk merged in (each file's result, each resolution
it offers) whether they parse and what they define twice.  ``parse_python`` re-uses the beginning such a text
shares with the release's file (``reparse``), but parses all the rest, however little of it changed.  Python's
grammar makes a top-level statement's tree depend only on its own tokens, and at the first line of a top-level
statement the tokenizer holds nothing over (no bracket or string open, no indentation, no line going on).  So cut
``data`` where ``base`` has such a line before the first byte they differ in (``data`` has the same bytes before
it, so the same nothing held over): if the first line of code from the cut on is not indented, the cut is one of
``data``'s statement boundaries too.  Cut again where ``base`` has such a line after the last byte they differ in,
the lines between ending a line: where those lines parse alone, ``ast.parse(data).body`` is ``base``'s statements
before the first cut, theirs, and ``base``'s from the second cut on.  That is shown only where the lines between
are at most half of the rest (else ``parse_python``, which also re-uses the beginning of a class, does as well).
A text left for a person (a conflict marker in the rest) does not parse: the rest from the first cut parsed alone
shows it at once (``SyntaxError``, its message not ``ast.parse``'s), since it fails alone exactly when ``data``
fails whole.  Where the first cut's first line of code is indented (a class gains a member at its end), the cut
before it is taken.  Nothing is shown (None: the caller parses the text) where ``base`` does not parse, for a
carriage return, a NUL, an encoding declaration (in the first two lines of either text or of a piece parsed alone),
``barry_as_FLUFL`` (as ``reparse`` refuses them), a byte-order mark beginning a piece, a line before a cut going on
(a backslash), and a first line of code that begins with a backslash or a form feed.  ``tests/test_splice.py``
holds it to ``ast.parse`` (``ast.dump`` of each statement, and failing where it fails) on a real release's files
changed by each hunk of a real series, by random line edits, and on crafted cuts.
"""

from __future__ import annotations

import ast
from bisect import bisect_right
from codecs import BOM_UTF8
from itertools import accumulate

from sgpatch.pyast import parse_python, per_memo
from sgpatch.pyast.reparse import common_prefix, refused, statement_end, statement_start

_MARKER = b"\n<<<<<<< "  # a merge's conflict (not parsed twice: see ``_between``)


def unplaced_body(data: bytes, base: bytes, *, at_most: float = 0.5) -> list[ast.stmt] | None:
    """``ast.parse(data).body`` as ``ast.dump`` shows it (positions are not ``data``'s), made from ``base``'s tree
    (``parse_python``: the memo's) and the lines ``data`` changes; SyntaxError where ``data`` is shown not to parse;
    None where neither is shown.  ``at_most``: the largest share of the rest the lines between may be."""
    found = _cuts(base)
    if found is None or refused(data):
        return None
    body, cuts, offsets = found
    if data == base:
        return list(body)
    i = bisect_right(offsets, common_prefix(data, base)) - 1  # the last cut both share
    k_first, first = cuts[i]
    lead = _lead(data, first)
    if lead is None and i > 0:  # the change goes on the block before the cut: the cut before it (base's bytes)
        i -= 1
        k_first, first = cuts[i]
        lead = _lead(data, first)
    if not lead or _continued(base, first):
        return None
    between = _between(data, base, body, cuts, i, at_most)
    if between is not None:
        return [*body[:k_first], *between]
    rest = data[first:]
    if not _conflicted(rest) or rest.startswith(BOM_UTF8) or refused(rest):
        return None  # parsed whole by the caller (``parse_python`` re-uses the kin's beginning, inside a class too)
    try:
        parsed = ast.parse(rest)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = data.count(b"\n", 0, first) + 1
        raise SyntaxError(f"does not parse from its line {line} on: {exc}") from None
    return [*body[:k_first], *parsed.body]


@per_memo(maxsize=4)
def _cuts(base: bytes) -> tuple[list[ast.stmt], list[tuple[int, int]], list[int]] | None:
    """``base``'s top-level statements and where a cut may fall: the first line of a statement that does not share
    a line with the one before (``a; b``), as (how many statements come before it, the byte it begins at), in
    order; and the end, after the last statement; and the cuts' bytes alone.  None where ``base`` does not parse
    or is refused."""
    if refused(base):
        return None
    try:
        body = parse_python(base).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    starts = [0, *accumulate(len(line) + 1 for line in base.split(b"\n"))]  # each line's first byte (1-based lines)
    size = len(base)

    def at(line: int) -> int:
        return min(starts[line - 1], size) if line - 1 < len(starts) else size

    cuts = [(0, 0)]
    cuts += [
        (k, at(statement_start(body[k])))
        for k in range(1, len(body))
        if statement_start(body[k]) > statement_end(body[k - 1])
    ]
    if body:
        cuts.append((len(body), at(statement_end(body[-1]) + 1)))
    cuts.append((len(body), size))
    return body, cuts, [off for _, off in cuts]


def _lead(data: bytes, cut: int) -> bool | None:
    """Whether the first line of code from byte ``cut`` on may begin a statement: True when it begins in its first
    column (or there is none), None when it is indented (it goes on a block), False when it begins with a backslash
    or a form feed (not followed here)."""
    at = cut
    while at < len(data):
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        line = data[at:end]
        code = line.lstrip(b" \t\f")
        if code and not code.startswith(b"#"):
            if line[:1] in (b"\\", b"\f"):
                return False
            return None if line[:1] in (b" ", b"\t") else True
        at = end + 1
    return True


def _between(
    data: bytes, base: bytes, body: list[ast.stmt], cuts: list[tuple[int, int]], i: int, at_most: float
) -> list[ast.stmt] | None:
    """From cut ``cuts[i]`` on, ``data``'s statements as the lines between the cuts parsed alone and ``base``'s
    statements (``body``) from the second cut on; None where that is not shown."""
    size = len(base)
    k_first, first = cuts[i]
    tail = min(common_prefix(data[::-1], base[::-1]), len(data) - first, size - first)  # the end both share
    for k_last, last in cuts[i:]:
        if size - last <= tail and k_last >= k_first:
            break
    else:  # the last cut (the end of ``base``) always qualifies: nothing after it to share
        return None
    if _continued(base, last):
        return None  # the line before the second cut goes on (a backslash)
    middle = data[first : len(data) - (size - last)]
    if middle and last < size and not middle.endswith(b"\n"):
        return None  # the first line kept after the change would go on the middle's last line
    if len(middle) > at_most * (len(data) - first):
        return None  # most of the rest: ``parse_python``, which re-uses what it can inside a class too, does better
    if middle.startswith(BOM_UTF8) or refused(middle) or _conflicted(middle):
        return None  # (a conflict left for a person: the rest, parsed next, shows at once that it does not parse)
    try:
        parsed = ast.parse(middle)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return [*parsed.body, *body[k_last:]]


def _conflicted(text: bytes) -> bool:
    """Whether ``text`` holds a line that begins a merge's conflict (``<<<<<<< ``)."""
    return text.startswith(_MARKER[1:]) or _MARKER in text


def _continued(text: bytes, cut: int) -> bool:
    """Whether the line before byte ``cut`` (a line's first) ends in a backslash: it goes on into the next."""
    if cut <= 0 or cut >= len(text):
        return False
    line = text[text.rfind(b"\n", 0, cut - 1) + 1 : cut - 1]
    return line.rstrip(b" \t\f").endswith(b"\\")
