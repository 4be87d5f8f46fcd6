"""``take-patch`` and ``combine`` for one conflict of a three-way merge, with the evidence (issue 27).

``take-patch``  the release's side differs from the old base only in formatting, or every line the release
                added there is on the patch's side too and no line it removed is: the patch's side already
                holds the release's change.
``combine``     both sides only insert lines at the same place: the release's lines, then the patch's, when
                they have no line in common, or every line they share is boilerplate (the file has it at
                least ``BOILERPLATE`` times outside its conflicts, like ``parser.add_argument(``) and no name
                or string the file has nowhere else stands on both sides (``"--x"`` twice), or each
                side inserts only whole definitions, none named as one of the other's; or the patch only
                adds import lines or list names before (after) the old lines, which the release changed; or
                the release's side already holds, as Python statements, what the patch's side changed
                (``statements.region_holds``): the release's lines; or all three sides are import statements
                only (``imports-union``): the release's imports with the names the patch adds that the
                release lacks (none is removed: a name the release still imports, its code may use).
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence

from sgpatch.pyast import parse_python
from sgpatch.series.conflicts import COMBINE, NONE, TAKE_PATCH, Piece, Region, Suggestion, norm, says_something
from sgpatch.series.statements import region_holds

_LISTED = re.compile(rb"^[ \t]*(?:(?:import|from)[ \t]+\S.*|[A-Za-z_][A-Za-z0-9_.]*,)[ \t]*\r?\n?$")
Known = frozenset[bytes] | Callable[[], frozenset[bytes]]
Common = Counter[bytes] | Callable[[], Counter[bytes]]

BOILERPLATE = 3  # times a line stands in the file outside its conflicts to prove nothing about an insertion


def chooser(pieces: Sequence[Piece]) -> Callable[[Region], Suggestion]:
    """``region_choice`` for the conflicts of one file (``pieces``), knowing the lines it has outside them."""
    plain = [p for p in pieces if isinstance(p, bytes)]
    # the file's lines and names, read only for two insertions (a few conflicts of a port; most never ask)
    common = functools.cache(lambda: Counter(n for n in (norm(p) for p in plain) if n))
    known = functools.cache(lambda: _tokens(plain))
    return lambda r: region_choice(r, common, known)


def region_choice(r: Region, common: Common | None = None, known: Known = frozenset()) -> Suggestion:
    """``take-patch`` or ``combine`` for one conflict, with its evidence; ``NONE`` without one.  ``common``: how
    often each normalised line stands in the file outside its conflicts, or what counts them when it is needed
    (none known: no line is boilerplate);
    ``known``: the names and strings the file has outside them (or what makes them when they are needed)."""
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
    if not base and ours and theirs:
        return _insertions(r, ours, theirs, Counter() if common is None else common, known)
    union = imports_union(r)
    if union is not None:
        return union
    held = region_holds(r.base, r.ours, r.theirs)
    if held is not None:
        return Suggestion(COMBINE, held, r.ours)
    return _around(r, ours)


def _insertions(r: Region, ours: Sequence[bytes], theirs: Sequence[bytes], common: Common, known: Known) -> Suggestion:
    """``combine`` (the release's lines, then the patch's) for two insertions at one place that are not the same
    insertion twice: no line in common but boilerplate, or whole definitions with other names."""
    shared = [n for n in set(ours) & set(theirs) if says_something(n)]
    if not shared:
        return Suggestion(COMBINE, "both sides only add lines here, none in common: the release's, then the patch's")
    outside = known if isinstance(known, frozenset) else known()
    rare = (_tokens(r.ours) & _tokens(r.theirs)) - outside  # names and strings new to the file, on both sides
    counts = common if isinstance(common, Counter) else common()
    if all(counts[n] >= BOILERPLATE for n in shared) and not rare:
        return Suggestion(
            COMBINE,
            f"both sides only add lines here; the {len(shared)} line(s) they share stand at least {BOILERPLATE} "
            "times elsewhere in the file (boilerplate): the release's, then the patch's",
        )
    mine, yours = _defined(r.ours), _defined(r.theirs)
    if mine and yours and not (set(mine) & set(yours)):
        return Suggestion(
            COMBINE,
            f"both sides only add whole definitions here, with other names ({', '.join(mine)}; {', '.join(yours)}): "
            "the release's, then the patch's",
        )
    return NONE


_TOKEN = re.compile(rb"\"[^\"\n]*\"|'[^'\n]*'|[A-Za-z_][A-Za-z0-9_]*")


def _tokens(lines: Sequence[bytes]) -> frozenset[bytes]:
    """The names and one-line string literals in ``lines`` (no match crosses a line break: one scan of them all)."""
    return frozenset(_TOKEN.findall(b"\n".join(lines)))


def _defined(lines: Sequence[bytes]) -> list[str]:
    """The names ``lines`` define when they are nothing but whole definitions (dedented, they parse as a module
    of ``def``/``class`` statements); [] otherwise."""
    try:
        tree = parse_python(textwrap.dedent(b"".join(lines).decode()).encode())
    except (SyntaxError, ValueError, RecursionError, UnicodeDecodeError):
        return []
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    if not tree.body or not all(isinstance(node, kinds) for node in tree.body):
        return []
    return [node.name for node in tree.body if isinstance(node, kinds)]


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


def imports_union(r: Region) -> Suggestion | None:
    """``combine`` for a conflict where every side is import statements only: the release's lines, with each name
    the patch's side imports and the old base did not, unless the release binds that name already; None when
    a side is anything else, or the patch adds no name."""
    sides = [_imports(side) for side in (r.base, r.ours, r.theirs)]
    base, ours, theirs = sides
    if base is None or ours is None or theirs is None or not r.ours:
        return None
    bound = {alias.asname or alias.name.split(".")[0] for _, alias in ours}
    seen = {(module, alias.name, alias.asname) for module, alias in base}
    new = [
        (module, alias)
        for module, alias in theirs
        if (module, alias.name, alias.asname) not in seen and (alias.asname or alias.name.split(".")[0]) not in bound
    ]
    if not new:
        return None
    lines = _with_names(list(r.ours), new)
    names = ", ".join(alias.name if not alias.asname else f"{alias.name} as {alias.asname}" for _, alias in new)
    why = f"imports-union: both sides changed these imports; the release's, with the name(s) the patch adds ({names})"
    return Suggestion(COMBINE, why, tuple(lines))


def _imports(lines: Sequence[bytes]) -> list[tuple[str | None, ast.alias]] | None:
    """(module, alias) for each name ``lines`` import (module None: ``import x``); None when they hold anything but
    import statements (``from . import x``: module ``.``)."""
    try:
        tree = parse_python(textwrap.dedent(b"".join(lines).decode()).encode())
    except (SyntaxError, ValueError, RecursionError, UnicodeDecodeError):
        return None
    out: list[tuple[str | None, ast.alias]] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            out.extend(("." * node.level + (node.module or ""), alias) for alias in node.names)
        elif isinstance(node, ast.Import):
            out.extend((None, alias) for alias in node.names)
        else:
            return None
    return out


def _with_names(lines: list[bytes], new: list[tuple[str | None, ast.alias]]) -> list[bytes]:
    """The release's import ``lines`` with ``new`` names: into its parenthesised ``from MODULE import (`` list, one
    a line before the closing ``)``, where there is one for that module; else as statements of their own after
    the release's lines, indented like its first line."""
    indent = re.match(rb"[ \t]*", next((ln for ln in lines if ln.strip()), b""))
    pad = indent.group(0) if indent else b""
    newline = b"\r\n" if lines and lines[-1].endswith(b"\r\n") else b"\n"
    if lines and not lines[-1].endswith(b"\n"):
        lines[-1] += newline
    tail: list[bytes] = []
    for module, alias in new:
        spelled = (alias.name if not alias.asname else f"{alias.name} as {alias.asname}").encode()
        opening = re.compile(
            rb"^[ \t]*from[ \t]+" + re.escape((module or "").encode()) + rb"[ \t]+import[ \t]*\([ \t]*\r?\n$"
        )
        start = next((k for k, ln in enumerate(lines) if module is not None and opening.match(ln)), None)
        close = (
            next((k for k in range(start + 1, len(lines)) if lines[k].strip() == b")"), None)
            if start is not None
            else None
        )
        if start is not None and close is not None:
            inner = re.match(rb"[ \t]*", lines[start + 1]) if close > start + 1 else None
            last = lines[close - 1].rstrip()
            if close > start + 1 and last and not last.endswith(b","):
                lines[close - 1] = last + b"," + newline  # ``a`` before ``)``: ``a,`` before the name added
            lines.insert(close, (inner.group(0) if inner else pad + b"    ") + spelled + b"," + newline)
        elif module is None:
            tail.append(pad + b"import " + spelled + newline)
        else:
            tail.append(pad + b"from " + module.encode() + b" import " + spelled + newline)
    return lines + tail
