"""What upstream absorbed: for a hunk that conflicts, what to take, and the evidence (issue 27).

Pure functions over file contents (the three-way merge is the caller's).  A conflicting hunk gets one
suggestion, or none:

``take-upstream``  the release already does what the hunk does, shown one of these ways, in the
                   definition the hunk changes (module level: where its context now stands):
                   every run of lines it adds is there (whitespace, line breaks and comments aside) and
                   no line it removes is left (``normalised``); or it only removes lines and none of them
                   is left (``removed upstream``); or, in a definition, every statement it adds stands
                   there as a Python AST, in the same nesting and order (``statements``, in
                   ``series.statements``), or so up to a consistent renaming of the function's local names
                   (``series.renamed``).  Lines without a name or number in them (``)``, ``else:``)
                   prove nothing: at least one added or removed line must say something.
                   Or what the hunk changes is gone from the release: the definition holding it is named
                   nowhere in the release, or the lines it edits in place and the names it replaces are left
                   nowhere in the file (``gone upstream``, ``removed upstream``, in ``series.gone``).
                   For a file the release lacks, the same against the one file its definitions went to
                   (``absorbed_moved``): its imports imported there, its runs standing there once, or its
                   statements in the function of that name.
``take-patch``,    the same choice for each conflict the hunk alone makes (``series.combine``).
``combine``

Precision first: a ``take-upstream`` that drops a needed change is worse than none, so every test
asks for presence in the same definition and for the absence of what the hunk removes.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections import Counter
from collections.abc import Callable, Sequence

from sgpatch.series.combine import chooser
from sgpatch.series.conflicts import (
    NONE,
    TAKE_UPSTREAM,
    Piece,
    Region,
    Suggestion,
    norm,
    regions_of,
    resolve_regions,
    says_something,
    sound,
)
from sgpatch.series.engine import HunkFailure, apply_file
from sgpatch.series.gone import NamedElsewhere, TextsNaming, gone
from sgpatch.series.hunkproof import changed_span
from sgpatch.series.hunks import HunkVerdict, Merge, only
from sgpatch.series.inside import definitions_after
from sgpatch.series.patch import FilePatch, Hunk, split_lines
from sgpatch.series.renamed import renamed_absorbed
from sgpatch.series.statements import imports_present, statements_absorbed
from sgpatch.series.unkept import unkept
from sgpatch.series.upstream import innermost, outline

_DEFINES = re.compile(rb"^[ \t]*(?:async[ \t]+def|def|class)[ \t]")


# --------------------------------------------------------------------------- take-upstream


def _runs(hunk: Hunk) -> list[list[bytes]]:
    """The runs of lines the hunk adds (consecutive on its new side)."""
    runs: list[list[bytes]] = []
    last = -2
    for number, text in hunk.added:
        if number == last + 1 and runs:
            runs[-1].append(text)
        else:
            runs.append([text])
        last = number
    return runs


def _removed(hunk: Hunk) -> list[bytes]:
    """The normalised lines the hunk removes.  A line it only re-indents counts as removed: in Python the
    indentation is what the line does."""
    kept = Counter(hunk.new)
    out = []
    for line in hunk.old:
        if kept[line]:
            kept[line] -= 1
        elif norm(line):
            out.append(norm(line))
    return out


def _landing(hunk: Hunk, lines: Sequence[bytes]) -> tuple[int, int] | None:
    """Where a module-level hunk would land in ``lines``: around the one place its context stands."""
    context = [ln for ln in hunk.old if ln in hunk.new and says_something(norm(ln))]
    normalised = [norm(ln) for ln in lines]
    for probe in context:
        hits = [i for i, ln in enumerate(normalised) if ln == norm(probe)]
        if len(hits) == 1:
            reach = len(hunk.old) + len(hunk.new)
            return max(0, hits[0] - reach), min(len(lines), hits[0] + reach)
    return None


def absorbed(hunk: Hunk, before: bytes, new: bytes, after_hunk: bytes | None = None) -> str | None:
    """The evidence that ``new`` already does what ``hunk`` (made on ``before``; ``after_hunk``: ``before`` with
    it alone applied) does; None without proof.

    A definition the hunk adds must stand in the release under its qualified name, once, equal as a Python AST
    (a definition of that name with another body proves nothing: the hunk's version may still be needed).
    """
    added = _added_definitions(hunk, before, after_hunk)
    if added is None:
        return None
    if added:
        return (
            f"ast-equal: {', '.join(added)} stand(s) in the release, equal as Python ASTs"
            if _all_equal(added, before, after_hunk, new)
            else None
        )
    return _lines_absorbed(hunk, before, new, after_hunk)


def _added_definitions(hunk: Hunk, before: bytes, after_hunk: bytes | None) -> list[str] | None:
    """The qualified names of the definitions ``after_hunk`` has that ``before`` lacks ([] when none, or for a file
    that is not Python); None when only one side parses."""
    if after_hunk is None or not any(_DEFINES.match(ln) for _, ln in hunk.added):
        return []  # no def or class line added: no definition either (and nothing to parse)
    o_before, o_after = outline(before), outline(after_hunk)
    if o_before is None or o_after is None:
        return [] if o_before is None and o_after is None else None
    return [q for q in o_after.definitions if q not in o_before.definitions]


def _all_equal(names: Sequence[str], before: bytes, after_hunk: bytes | None, new: bytes) -> bool:
    o_after, o_new = outline(after_hunk), outline(new)
    if o_after is None or o_new is None:
        return False
    for q in names:
        mine, theirs = o_after.definitions.get(q, ()), o_new.definitions.get(q, ())
        if len(mine) != 1 or len(theirs) != 1 or mine[0].dump != theirs[0].dump:
            return False
    return True


def _lines_absorbed(hunk: Hunk, before: bytes, new: bytes, after_hunk: bytes | None = None) -> str | None:
    """The line evidence: where the hunk would land, every run it adds stands (whitespace, line breaks and
    comments aside, from the start of a line to the end of one) and no line it removes is left."""
    first, last = changed_span(hunk)
    o_before, o_new = outline(before), outline(new)
    lines = split_lines(new)
    scope = innermost(o_before, first, last) if o_before is not None else ""
    if scope:
        theirs = o_new.definitions.get(scope) if o_new is not None else None
        if not theirs or len(theirs) != 1:
            return None  # the definition is gone or doubled: nothing to compare with here
        window = lines[theirs[0].start - 1 : theirs[0].end]
        where = f"in {scope}"
    else:
        span = _landing(hunk, lines)
        if span is None:
            return None
        window = lines[span[0] : span[1]]
        where = f"where it lands (lines {span[0] + 1}-{span[1]})"
    left, proof = _in_window(hunk, window, where)
    if proof is not None:
        return proof
    if left and not _reindented_only(hunk, window):
        return None
    if not scope or after_hunk is None:
        return None
    found = statements_absorbed(hunk, scope, after_hunk, new, before)
    return found if found is not None or left else _renamed_in(hunk, scope, after_hunk, new, before)


def _reindented_only(hunk: Hunk, window: Sequence[bytes]) -> bool:
    """Whether every line the hunk removes that is left in ``window`` is one it adds back, indented otherwise (a
    statement moved under an ``if``): the lines cannot tell where it stands, the statements test can."""
    present = {norm(ln) for ln in window}
    again = {norm(text) for _, text in hunk.added}
    return all(n in again for n in _removed(hunk) if says_something(n) and n in present)


def _in_window(hunk: Hunk, window: Sequence[bytes], where: str) -> tuple[bool, str | None]:
    """(whether a line the hunk removes is left in ``window``, the line evidence there or None)."""
    present = {norm(ln) for ln in window}
    said = [n for n in (norm(ln) for ln in window) if n]
    flat = b"".join(said)
    bounds = set(itertools.accumulate((len(n) for n in said), initial=0))
    removed = _removed(hunk)
    if any(n in present for n in removed if says_something(n)):
        return True, None  # a line it removes is still there
    runs = [[n for n in (norm(ln) for ln in run) if n] for run in _runs(hunk)]
    runs = [r for r in runs if r]
    if not runs:
        if any(says_something(n) for n in removed):
            return False, f"removed upstream: none of the {len(removed)} line(s) it removes is left {where}"
        return False, None
    if not any(says_something(n) for r in runs for n in r):
        return False, None
    if all(_stands(b"".join(r), flat, bounds) for r in runs):
        return False, f"normalised: its {len(runs)} added run(s) stand {where}, and no line it removes is left"
    return False, None


def _renamed_in(hunk: Hunk, scope: str, after_hunk: bytes, new: bytes, before: bytes) -> str | None:
    o_new = outline(new)
    theirs = o_new.definitions.get(scope, ()) if o_new is not None else ()
    if len(theirs) != 1:
        return None
    mine = definitions_after(after_hunk, before, scope) or ()  # (its lines alone, where only they changed)
    if len(mine) != 1:
        return None
    return renamed_absorbed(hunk, after_hunk, mine[0], theirs[0])


def absorbed_moved(hunk: Hunk, before: bytes, after_hunk: bytes, target: bytes, where: str) -> str | None:
    """For a file the release lacks: the evidence that ``target`` (``where``: the release file its definitions
    moved to) already does what ``hunk`` does; None without proof.  Its imports are all imported there; or
    every run it adds stands there and no line it removes is left; or, in a function, every statement it adds
    stands in the one function of that name there (Python ASTs, up to a consistent renaming of local names)."""
    imports = imports_present(hunk, before, after_hunk, target)
    if imports is not None:
        return imports
    lines = split_lines(target)
    left, proof = _in_window(hunk, lines, f"in {where}, the file its definitions moved to")
    if left:
        return None
    if proof is not None and proof.startswith("normalised") and _runs_placed(hunk, before, target):
        return f"{proof}; each stands there once, and stood nowhere in the old file"
    o_before, o_after, o_target = outline(before), outline(after_hunk), outline(target)
    if o_before is None or o_after is None or o_target is None:
        return None
    first, last = changed_span(hunk)
    scope = innermost(o_before, first, last)
    mine = o_after.definitions.get(scope, ())
    bare = scope.rpartition(".")[2]
    theirs = [d for q, defs in o_target.definitions.items() if q.rpartition(".")[2] == bare for d in defs]
    if not scope or len(mine) != 1 or len(theirs) != 1:
        return None
    return renamed_absorbed(hunk, after_hunk, mine[0], theirs[0])


def _runs_placed(hunk: Hunk, before: bytes, target: bytes) -> bool:
    """Whether each run ``hunk`` adds stands exactly once in ``target`` and nowhere in ``before`` (from a line's
    start to a line's end, whitespace and comments aside): without a definition to look in, the whole file must
    point at one place, and the run must be the hunk's own."""
    texts = []
    for text in (target, before):
        said = [n for n in (norm(ln) for ln in split_lines(text)) if n]
        texts.append((b"".join(said), set(itertools.accumulate((len(n) for n in said), initial=0))))
    (flat, bounds), (old_flat, old_bounds) = texts
    for run in _runs(hunk):
        joined = b"".join(n for n in (norm(ln) for ln in run) if n)
        if joined and (_count(joined, flat, bounds) != 1 or _count(joined, old_flat, old_bounds)):
            return False
    return True


def _count(run: bytes, flat: bytes, bounds: set[int]) -> int:
    """How often ``run`` occurs in ``flat`` from a line's start to a line's end."""
    found, at = 0, flat.find(run)
    while at >= 0:
        found += at in bounds and at + len(run) in bounds
        at = flat.find(run, at + 1)
    return found


def _stands(run: bytes, flat: bytes, bounds: set[int]) -> bool:
    """Whether ``run`` occurs in ``flat`` from a line's start to a line's end (``bounds``: where lines start)."""
    at = flat.find(run)
    while at >= 0:
        if at in bounds and at + len(run) in bounds:
            return True
        at = flat.find(run, at + 1)
    return False


def lone_choice(pieces: Sequence[Piece], choose: Callable[[Region], Suggestion]) -> Suggestion:
    """The suggestion for a hunk from the conflicts it makes alone (``pieces``: its merge cut by ``regions_of``,
    ``choose``: their ``chooser``): the same one for each."""
    if not pieces:
        return NONE
    found = {choose(p) for p in pieces if isinstance(p, Region)}
    if len(found) == 1:
        (one,) = found
        return one
    choices = {s.choice for s in found}
    if len(choices) == 1 and "" not in choices:
        return Suggestion(choices.pop(), "; ".join(sorted(s.evidence for s in found)))
    return NONE


def suggest(
    fp: FilePatch,
    verdicts: Sequence[HunkVerdict],
    before: bytes,
    new: bytes,
    merge: Merge,
    named_elsewhere: NamedElsewhere | None = None,
    naming: TextsNaming | None = None,
) -> list[HunkVerdict]:
    """``verdicts`` with a suggestion and its evidence on each conflicting hunk that has one (``named_elsewhere``:
    whether another file of the release names a name, for ``series.gone``; ``naming``: the release's other files
    that name a word, for ``series.unkept``)."""
    out = list(verdicts)
    for k, (hunk, v) in enumerate(zip(fp.hunks, verdicts, strict=True)):
        if v.state != "conflict":
            continue
        other = apply_file(before, only(fp, (hunk,)))
        if isinstance(other, HunkFailure):
            continue
        proof = absorbed(hunk, before, new, other)
        if proof is None and fp.path.endswith(".py"):
            proof = gone(hunk, before, new, named_elsewhere, naming)
        if proof is None and fp.path.endswith(".py"):
            others = b"".join(text for h in fp.hunks if h is not hunk for _, text in h.added)
            proof = unkept(hunk, before, new, others, naming)
        if proof is not None:
            out[k] = dataclasses.replace(v, suggestion=TAKE_UPSTREAM, evidence=proof)
            continue
        merged, conflicts = merge(new, before, other)
        if not conflicts:
            continue  # it conflicts only with the file's other hunks: a person combines them
        pieces = regions_of(merged)
        if pieces is None:
            continue  # a marker outside a complete triple: nothing to suggest
        choose = chooser(pieces)
        one = lone_choice(pieces, choose)
        if one.choice:
            text, _, left = resolve_regions(pieces, choose)
            if not left and sound(fp.path, new, text):
                out[k] = dataclasses.replace(v, suggestion=one.choice, evidence=one.evidence)
    return out
