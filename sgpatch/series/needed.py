"""A ``take-upstream`` drop and the hunks that still need what it defines (issue 27: precision first).

A hunk dropped as ``take-upstream`` takes with it the names it defines.  When another hunk of the same patch that
is carried (``take-patch``, ``combine``, no suggestion in a file ``--resolve suggested`` would settle, or a
clean automatic merge) uses such a name, and no hunk kept by the patch defines it and the release names it
nowhere (or, for an attribute a drop proved the release removed from its class, has nowhere as that attribute),
the resolved tree would fail at run time (an unknown keyword argument, a missing attribute).  Nothing
is settled then without a person:

- a carried hunk in a conflicting file loses its suggestion (the file is left marked by ``--resolve``), its
  evidence naming the name and the dropped hunk;
- a carried hunk in a file merged automatically has no suggestion to lose, so the drop loses its
  ``take-upstream`` instead, its evidence naming the name and the hunk that uses it.

The user is held rather than the drop where both are possible: the drop is proved (what it changes is gone
from the release), the use is not, and a person who keeps the drop must still fix the use.

A name a hunk defines, read in the Python AST of the file with the whole patch applied, on the lines it adds:
a function or class; a field or assignment in a class body or at module level; an attribute assigned
(``obj.name = ...``).  A function's local names are not visible elsewhere and do not count.  A name a hunk uses:
any identifier on the lines it adds, strings and comments aside.
"""

from __future__ import annotations

import ast
import dataclasses
import keyword
import re
from collections.abc import Callable, Mapping, Sequence

from sgpatch.pyast import parse_python
from sgpatch.series.conflicts import TAKE_UPSTREAM
from sgpatch.series.hunks import FileVerdict, HunkVerdict
from sgpatch.series.patch import FilePatch, Hunk
from sgpatch.series.unkept import PREFIX as UNKEPT

HELD = "withheld"  # how the evidence of a hunk whose suggestion was withdrawn starts
ReleaseNames = Callable[[str, str], bool]  # (name, path): whether the release names ``name``, in path or elsewhere
CARRIED = ("conflict", "applies", "merged")
_IDENT = re.compile(rb"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|#.*|([A-Za-z_][A-Za-z0-9_]*)")
_SHOWN = 3


def used(hunk: Hunk) -> set[str]:
    """The identifiers on the lines ``hunk`` adds (strings, comments and keywords aside)."""
    out: set[str] = set()
    for _, text in hunk.added:
        for m in _IDENT.finditer(text):
            if m.group(1) and not keyword.iskeyword(name := m.group(1).decode()):
                out.add(name)
    return out


def defined_lines(after: bytes | None) -> dict[int, set[str]]:
    """Line -> the names a statement starting there defines for other code (see the module's text); {} for text
    that is not Python."""
    if after is None:
        return {}
    try:
        tree = parse_python(after)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    out: dict[int, set[str]] = {}

    def add(line: int, name: str) -> None:
        out.setdefault(line, set()).add(name)

    def visit(body: Sequence[ast.stmt], *, visible: bool) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                add(node.lineno, node.name)
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            for t in targets:
                for part in ast.walk(t):
                    if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store):
                        add(node.lineno, part.attr)
                    elif visible and isinstance(part, ast.Name) and isinstance(part.ctx, ast.Store):
                        add(node.lineno, part.id)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    stmts = [s for s in inner if isinstance(s, ast.stmt)]
                    stmts += [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body]
                    in_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                    visit(stmts, visible=(isinstance(node, ast.ClassDef) or visible) and not in_function)

    visit(tree.body, visible=True)
    return out


def defines(hunk: Hunk, lines: Mapping[int, set[str]]) -> set[str]:
    """The names the statements starting on ``hunk``'s added lines define."""
    return {name for number, _ in hunk.added for name in lines.get(number, ())}


@dataclasses.dataclass(frozen=True, slots=True)
class _At:
    path: str
    hunk: Hunk
    verdict: HunkVerdict

    @property
    def label(self) -> str:
        return f"{self.path} #{self.hunk.index}"


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _nowhere(names: Sequence[str], removed: set[str]) -> str:
    """How the release lacks ``names``: named nowhere, or (an attribute a drop proved removed) had nowhere."""
    it = "it" if len(names) == 1 else "them"
    return f"has {it} nowhere as an attribute" if removed.intersection(names) else f"names {it} nowhere"


def dropped(hv: HunkVerdict) -> bool:
    """Whether a hunk is left for ``take-upstream`` to drop (a conflict with that suggestion)."""
    return hv.state == "conflict" and hv.suggestion == TAKE_UPSTREAM


def hold_needed(
    files: Sequence[tuple[FilePatch, FileVerdict]],
    after: Mapping[str, bytes | None],
    release_names: ReleaseNames,
    *,
    known: Mapping[str, dict[int, set[str]]] | None = None,
    ask_ahead: Callable[[Sequence[tuple[str, str]]], None] | None = None,
) -> list[FileVerdict]:
    """The file verdicts of one patch with no suggestion settling a carried hunk that uses a name only a
    ``take-upstream`` drop defines (``after``: the files with the whole patch applied on its old base;
    ``release_names``: whether the release, as the series so far left it, names a name; ``known``: the
    ``defined_lines`` of some of ``after``'s files, read already; ``ask_ahead``: told the ``(name, path)`` pairs
    about to be asked of ``release_names``, which may find them together)."""
    verdicts = [fv for _, fv in files]
    parsed: dict[str, dict[int, set[str]]] = dict(known or {})

    def lines(path: str) -> dict[int, set[str]]:
        if path not in parsed:
            parsed[path] = defined_lines(after.get(path)) if path.endswith(".py") else {}
        return parsed[path]

    drops: list[_At] = []
    kept: list[tuple[_At, bool]] = []  # (a hunk kept by the patch, whether its file is settled automatically)
    for fp, fv in files:
        for hunk, hv in zip(fp.hunks, fv.hunks, strict=True):
            if dropped(hv):
                drops.append(_At(fp.path, hunk, hv))
            elif hv.state in CARRIED and not fv.gone:
                kept.append((_At(fp.path, hunk, hv), fv.state != "conflict"))
    if not drops:
        return verdicts
    only_dropped: dict[str, list[_At]] = {}
    for d in drops:
        for name in defines(d.hunk, lines(d.path)):
            only_dropped.setdefault(name, []).append(d)
    if not only_dropped:
        return verdicts
    # An attribute the release removed (``unkept``) may still be a word of it: it counts as named nowhere.
    removed = {n for d in drops if d.verdict.evidence.startswith(UNKEPT) for n in defines(d.hunk, lines(d.path))}
    uses = [(k, settled, sorted(used(k.hunk) & set(only_dropped))) for k, settled in kept]
    wanted = {n for _, _, names in uses for n in names}
    for k, _ in kept:  # a name a hunk the patch keeps defines too is not the drop's alone
        if not wanted.isdisjoint(used(k.hunk)):
            wanted -= defines(k.hunk, lines(k.path))
    named: dict[tuple[str, str], bool] = {}
    held: dict[tuple[str, int], str] = {}
    if ask_ahead is not None:
        ask_ahead([(n, k.path) for k, _, names in uses for n in names if n in wanted])
    for k, settled, names in uses:
        for n in names:
            if n in wanted and (n, k.path) not in named:
                named[n, k.path] = release_names(n, k.path)
        needed = [n for n in names if n in wanted and (n in removed or not named[n, k.path])]
        if not needed:
            continue
        by = sorted({d.label for n in needed for d in only_dropped[n]})
        if not settled:
            held[k.path, k.hunk.index] = (
                f"{HELD}: it uses {_names(needed)}, which the series defines only in {', '.join(by)}, dropped as "
                f"take-upstream; the release {_nowhere(needed, removed)}"
            )
            continue
        for d in {d.label: d for n in needed for d in only_dropped[n]}.values():
            mine = [n for n in needed if d in only_dropped[n]]
            held.setdefault(
                (d.path, d.hunk.index),
                f"{HELD}: it defines {_names(mine)}, which {k.label}, carried, uses; the release "
                f"{_nowhere(mine, removed)} (take-upstream was: {d.verdict.evidence})",
            )
    if not held:
        return verdicts
    return [
        dataclasses.replace(
            fv,
            hunks=tuple(
                dataclasses.replace(h, suggestion="", evidence=held[fv.path, h.index])
                if (fv.path, h.index) in held
                else h
                for h in fv.hunks
            ),
        )
        for fv in verdicts
    ]
