"""``take-patch`` and ``combine`` for one conflict of a three-way merge, with the evidence (issue 27).

``take-patch``  the release's side differs from the old base only in formatting, or every line the release
                added there is on the patch's side too and no line it removed is: the patch's side already
                holds the release's change.
``combine``     both sides only insert lines at the same place, with no line in common: the release's lines,
                then the patch's; or the patch only adds import lines or list names before (after) the old
                lines, which the release changed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from sgpatch.series.conflicts import COMBINE, NONE, TAKE_PATCH, Region, Suggestion, norm, says_something

_LISTED = re.compile(rb"^[ \t]*(?:(?:import|from)[ \t]+\S.*|[A-Za-z_][A-Za-z0-9_.]*,)[ \t]*\r?\n?$")


def region_choice(r: Region) -> Suggestion:
    """``take-patch`` or ``combine`` for one conflict, with its evidence; ``NONE`` without one."""
    ours = [n for n in (norm(ln) for ln in r.ours) if n]
    base = [n for n in (norm(ln) for ln in r.base) if n]
    theirs = [n for n in (norm(ln) for ln in r.theirs) if n]
    if ours == base:
        return Suggestion(TAKE_PATCH, "the release changed only the formatting of these lines")
    added = Counter(ours) - Counter(base)
    gone = Counter(base) - Counter(ours)
    have = Counter(theirs)
    if any(says_something(n) for n in added) and not (added - have) and not any(have[n] for n in gone):
        return Suggestion(TAKE_PATCH, "the patch's side already holds every line the release changed here")
    if not base and ours and theirs and not _shared(ours, theirs):
        return Suggestion(COMBINE, "both sides only add lines here, none in common: the release's, then the patch's")
    return _around(r, ours)


def _shared(ours: Sequence[bytes], theirs: Sequence[bytes]) -> bool:
    """Whether both sides hold a line that says something (the same insertion twice, perhaps reformatted)."""
    return any(says_something(n) for n in set(ours) & set(theirs))


def _around(r: Region, ours: Sequence[bytes]) -> Suggestion:
    """``combine`` when the patch only adds import lines or names of a list (``name,``) before (or after) the old
    base's, which the release changed: the release's lines with the patch's added before (or after) them (an
    import list whose neighbour went).  Added code is not offered so: it may lean on what the release changed."""
    base, theirs = list(r.base), list(r.theirs)
    k = len(theirs) - len(base)
    if k <= 0 or not base:
        return NONE
    if not all(_LISTED.match(ln) for ln in theirs if ln.strip() and ln not in base):
        return NONE
    if theirs[k:] == base:
        added, before = theirs[:k], True
    elif theirs[:-k] == base:
        added, before = theirs[-k:], False
    else:
        return NONE
    said = [n for n in (norm(ln) for ln in added) if n]
    if not any(says_something(n) for n in said) or any(n in set(ours) for n in said):
        return NONE
    lines = (*added, *r.ours) if before else (*r.ours, *added)
    where = "before" if before else "after"
    why = f"the patch only adds lines {where} the old ones, which the release changed: the release's, with them"
    return Suggestion(COMBINE, why, lines)
