"""``take-upstream`` where the code a conflicting hunk changes is gone from the release (issue 27).

The line and statement tests (``absorb``) prove that the release already does what a hunk does.  These two prove
instead that what the hunk changes no longer exists, read in the release's own code:

``gone upstream``     every line the hunk changes stands inside the body of one definition (function or class)
                      of the old file (an insertion: the lines it adds are indented into the body of the
                      definition ending before it, blank lines aside) that the release has nowhere: the file
                      neither defines that qualified name nor names its own name at all, no other file of the
                      release's package names it (``named_elsewhere``: defines, imports or uses it), and no
                      definition of the file holds half of its lines under another name (a rename).
``removed upstream``  the hunk only edits lines in place (as many lines added as removed, each the edit of the
                      one it replaces: same indentation, same first word), the definition that held them still
                      stands in the release, and neither the lines it edits (whitespace and line breaks aside)
                      nor a name it replaces (a dotted name by its last part) is left anywhere in the release's
                      file.

A hunk that adds a statement of its own, adds lines outside the definition's body, or works at module level is
never dropped so: it may carry behaviour the release still needs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from sgpatch.series.conflicts import norm, says_something
from sgpatch.series.hunkproof import changed_span
from sgpatch.series.patch import Hunk, split_lines
from sgpatch.series.upstream import Definition, Outline, innermost, outline

MIN_SHARED = 0.5  # the share of a definition's (a file's) lines another must hold to be taken for its new name
NamedElsewhere = Callable[[str], bool]  # whether another file of the release names this name (defines, uses...)

_TOKEN = re.compile(rb"[A-Za-z_][A-Za-z0-9_.]*|\"[^\"\n]*\"|'[^'\n]*'")
_FIRST = re.compile(rb"^([ \t]*)([A-Za-z_][A-Za-z0-9_]*|\S)")


def _lines(data: bytes) -> Counter[bytes]:
    return Counter(ln.strip() for ln in data.splitlines() if ln.strip())


def shared(old: bytes, new: bytes) -> float:
    """The share of ``old``'s non-blank lines (as a multiset, indentation ignored) that ``new`` has."""
    a, b = _lines(old), _lines(new)
    total = sum(a.values())
    return sum((a & b).values()) / total if total else 0.0


def gone(hunk: Hunk, before: bytes, new: bytes, named_elsewhere: NamedElsewhere | None) -> str | None:
    """The evidence that what ``hunk`` (made on ``before``) changes is gone from the release ``new``; None
    without proof.  ``named_elsewhere``: whether the release's other files name a name (None: unknown, so no
    definition counts as gone)."""
    o_before, o_new = outline(before), outline(new)
    if o_before is None or o_new is None:
        return None
    first, last = changed_span(hunk)
    if not any(ln not in hunk.new for ln in hunk.old):  # an insertion: the last line before it that is not blank
        lines = split_lines(before)
        while first > 1 and first <= len(lines) and not lines[first - 1].strip():
            first -= 1
        last = first
    scope = innermost(o_before, first, last)
    if not scope:
        return None
    if named_elsewhere is not None:
        found = _gone_definition(hunk, scope, o_before, new, o_new, named_elsewhere)
        if found is not None:
            return found
    return _edited_lines_gone(hunk, scope, new, o_new)


def _gone_definition(
    hunk: Hunk, scope: str, o_before: Outline, new: bytes, o_new: Outline, named_elsewhere: NamedElsewhere
) -> str | None:
    """``gone upstream``: the outermost definition around the hunk's change that the release defines nowhere."""
    parts = scope.split(".")
    bare_new = {q.rpartition(".")[2] for q in o_new.definitions}  # (a definition by its name is also a word)
    for k in range(1, len(parts) + 1):
        qual = ".".join(parts[:k])
        olds = o_before.definitions.get(qual, ())
        if qual in o_new.definitions or len(olds) != 1:
            continue
        old, name = olds[0], parts[k - 1]
        if name in bare_new or word(name.encode()).search(new) or named_elsewhere(name):
            return None  # defined or named in the file, or named in another file
        if not _inside_body(hunk, old):
            return None
        if any(_renamed(old, d) for defs in o_new.definitions.values() for d in defs):
            return None
        return (
            f"gone upstream: every line it changes is inside {qual}, which the release has nowhere (no file of it "
            f"names {name}, no definition here holds half of its lines)"
        )
    return None


def _inside_body(hunk: Hunk, d: Definition) -> bool:
    """Whether every line the hunk adds is indented deeper than ``d``'s own line (inside its body)."""
    lines = d.text.encode().splitlines()
    head = next((ln for ln in lines if ln.lstrip().startswith((b"def ", b"async ", b"class "))), lines[0])
    depth = len(head) - len(head.lstrip())
    return all(not text.strip() or len(text) - len(text.lstrip()) > depth for _, text in hunk.added)


def _renamed(old: Definition, d: Definition) -> bool:
    return d.kind == old.kind and shared(old.text.encode(), d.text.encode()) >= MIN_SHARED


def _edited_lines_gone(hunk: Hunk, scope: str, new: bytes, o_new: Outline) -> str | None:
    """``removed upstream``: the hunk edits lines in place, and what it edits is gone from the release's file."""
    if len(o_new.definitions.get(scope, ())) != 1:
        return None  # the definition itself is gone or doubled: not this proof
    kept = Counter(hunk.new)
    removed = []
    for line in hunk.old:
        if kept[line]:
            kept[line] -= 1
        elif line.strip():
            removed.append(line)
    added = [text for _, text in hunk.added if text.strip()]
    if not removed or len(removed) != len(added):
        return None
    said = [n for n in (norm(ln) for ln in split_lines(new)) if n]
    flat = b"".join(said)
    replaced: set[bytes] = set()
    for old_line, new_line in zip(removed, added, strict=True):
        a, b = _FIRST.match(old_line), _FIRST.match(new_line)
        if a is None or b is None or a.groups() != b.groups() or norm(old_line) == norm(new_line):
            return None  # not the same line edited: a statement replaced, or one added
        if not says_something(norm(old_line)) or norm(old_line) in flat or norm(new_line) in flat:
            return None
        gone_tokens = {m.group(0) for m in _TOKEN.finditer(old_line)} - {m.group(0) for m in _TOKEN.finditer(new_line)}
        if not gone_tokens or any(word(_last(t)).search(new) for t in gone_tokens):
            return None  # it edits nothing but spelling, or what it replaces is still named in the file
        replaced |= gone_tokens
    names = ", ".join(sorted({_last(t).decode(errors="replace") for t in replaced}))
    return (
        f"removed upstream: the {len(removed)} line(s) it edits in {scope} are gone from the release's file, "
        f"which names {names} nowhere"
    )


def _last(token: bytes) -> bytes:
    """A dotted name's last part (``tl.core.MAX`` -> ``MAX``: the release may import it another way); a string
    literal as it is."""
    return token if token[:1] in (b'"', b"'") else token.rpartition(b".")[2]


def word(text: bytes) -> re.Pattern[bytes]:
    return re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(text) + rb"(?![A-Za-z0-9_])")
