"""Is one hunk already upstream, or superseded?  The tests of ``upstream`` at the size of a hunk (SPEC §9).

A hunk inside one function is compared as that function alone: its text in the old file with the hunk
applied is parsed by itself (the rest of the file is the old base's, already parsed), and its AST set
beside the new release's function of the same qualified name.  Any other hunk (class bodies, module
statements, several definitions) is compared as ``upstream`` compares a patch, over the whole file.
The answers are the same; the first way parses a function where the second parses a file.
"""

from __future__ import annotations

import ast
from pathlib import Path

from sgpatch.pyast import parse_python
from sgpatch.series.patch import FilePatch, Hunk, Patch, split_lines
from sgpatch.series.upstream import (
    AST_EQUAL,
    VERBATIM,
    Definition,
    Outline,
    Verdict,
    _ast_equal,
    _enclosing,
    _superseded,
    _verbatim,
    outline,
)

_UNDECIDED = object()


def hunk_upstream(one: FilePatch, before: bytes, after_hunk: bytes, after: bytes, new: bytes) -> str | None:
    """Why one hunk's change is already in ``new``: as Python ASTs or verbatim; None if neither proves it.

    ``one`` is the file section with that hunk only; ``after_hunk`` is ``before`` with it applied, and
    ``after`` the file after the whole patch (the hunk's added line numbers are that file's).  Exact reverse
    apply, the strongest test, is the caller's.  A verbatim proof also needs every line the hunk removes
    to be gone from the definition it stood in: the added lines alone may stand anywhere.
    """
    o_before, o_new = outline(before), outline(new)
    if o_before is not None and o_new is not None:
        found = _within_one_function(one, o_before, after_hunk, o_new)
        if found is _UNDECIDED:
            o_after = outline(after_hunk)
            found = _ast_equal(one.path, o_before, o_after, o_new) if o_after is not None else None
        if isinstance(found, str):
            return f"{AST_EQUAL}: {found}"
    proof = _verbatim(one, after, new)
    if proof is None or _removed_lines_remain(one, new, o_before, o_new):
        return None
    return f"{VERBATIM}: {proof}"


def changed_span(hunk: Hunk) -> tuple[int, int]:
    """The old-side lines the hunk changes (an insertion: the line before it), 1-based and inclusive."""
    prefix = 0
    while prefix < min(len(hunk.old), len(hunk.new)) and hunk.old[prefix] == hunk.new[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < min(len(hunk.old), len(hunk.new)) - prefix
        and hunk.old[len(hunk.old) - 1 - suffix] == hunk.new[len(hunk.new) - 1 - suffix]
    ):
        suffix += 1
    first = hunk.old_start + prefix
    last = hunk.old_start + len(hunk.old) - suffix - 1
    return (first, last) if last >= first else (first - 1, first - 1)


def _within_one_function(one: FilePatch, o_before: Outline, after_hunk: bytes, o_new: Outline) -> object:
    """The AST-equal proof (or None) when the hunk changes one function only; ``_UNDECIDED`` otherwise."""
    (hunk,) = one.hunks
    first, last = changed_span(hunk)
    inside: Definition | None = None
    for defs in o_before.definitions.values():
        for d in defs:
            if d.kind == "def" and d.start <= first and last <= d.end and (inside is None or d.start >= inside.start):
                inside = d
    if inside is None or len(o_before.definitions[inside.qualname]) != 1:
        return _UNDECIDED
    lines = split_lines(after_hunk)
    end = inside.end + len(hunk.new) - len(hunk.old)
    text = b"".join(lines[inside.start - 1 : end])
    head = lines[inside.start - 1]
    indented = head[:1] in (b" ", b"\t")
    try:
        tree = parse_python(b"if 1:\n" + text if indented else text)
    except (SyntaxError, ValueError, RecursionError):
        return _UNDECIDED
    body = tree.body[0].body if indented and isinstance(tree.body[0], ast.If) else tree.body
    if len(tree.body) != 1 or len(body) != 1 or not isinstance(body[0], ast.FunctionDef | ast.AsyncFunctionDef):
        return _UNDECIDED
    if body[0].name != inside.name:
        return _UNDECIDED  # renamed: one definition gone, another added
    ours = ast.dump(body[0])
    if ours == inside.dump:
        return None  # nothing the AST can see (comments only): no proof either way
    theirs = o_new.definitions.get(inside.qualname)
    if not theirs or len(theirs) != 1 or theirs[0].dump != ours:
        return None
    return f"{inside.qualname} equal as Python ASTs ({one.path.rsplit('/', 1)[-1]})"


def _removed_lines_remain(one: FilePatch, new: bytes, o_before: Outline | None, o_new: Outline | None) -> bool:
    """Whether a non-blank line the hunk removes still stands in the definition it was removed from."""
    (hunk,) = one.hunks
    kept = set(hunk.new)
    removed = [ln for ln in hunk.old if ln not in kept and ln.strip()]
    if not removed:
        return False
    lines = split_lines(new)
    scope = _enclosing(o_before, hunk.old_start) if o_before is not None else ""
    where = o_new.definitions.get(scope) if o_new is not None and scope else None
    if where:
        lines = lines[where[-1].start - 1 : where[-1].end]
    present = set(lines)
    return any(ln in present for ln in removed)


def hunk_superseded(one: FilePatch, before: bytes, after_hunk: bytes, new: bytes) -> Verdict:
    """``superseded`` when every definition one hunk adds exists in ``new``, in its scope, with another body
    (and the rest of the hunk is upstream); ``duplicates`` names what the hunk would define twice."""
    path = one.path
    return _superseded(Patch("hunk", Path(path), "", (), (one,)), {path: before}, {path: after_hunk}, {path: new})
