"""``take-upstream`` by statements: every statement a hunk adds stands in the release's same definition, equal as a
Python AST, under the same enclosing statements and in the same order (issue 27).

The line test (``absorb``) asks each run of added lines to stand whole; a release that did the same thing with a
line more in between (a log call inside the same ``if``), or wrapped a condition differently, fails it.  This test
compares statements instead: a simple statement by its AST, a compound one (``if``, ``for``, ``while``, ``with``,
``try``) by its header's AST, each together with the headers of the compound statements around it in the
definition.  A statement the hunk changes only in part counts whole: the release must have it as the hunk leaves
it.  At least one of them must say something (``pass``, ``continue``, ``break`` prove nothing).
"""

from __future__ import annotations

import ast
import copy
import re
import textwrap
from collections.abc import Sequence

from sgpatch.pyast import parse_python
from sgpatch.series.conflicts import norm, says_something
from sgpatch.series.patch import Hunk, split_lines
from sgpatch.series.upstream import Definition, outline

_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar)
_BODIES = ("body", "orelse", "finalbody")
_TRIVIAL = (ast.Pass, ast.Continue, ast.Break)
_BRANCHES = {b"else:", b"try:", b"finally:"}  # lines no statement starts on: their statements' headers say it

Item = tuple[tuple[str, ...], str]  # (the headers around it, its AST dump)


def statements_absorbed(hunk: Hunk, scope: str, after_hunk: bytes, new: bytes) -> str | None:
    """The evidence that every statement ``hunk`` adds in definition ``scope`` (``after_hunk``: the old base with
    the hunk alone applied) stands in the release ``new``'s definition of that name; None without proof."""
    o_after, o_new = outline(after_hunk), outline(new)
    if o_after is None or o_new is None:
        return None
    mine, theirs = o_after.definitions.get(scope, ()), o_new.definitions.get(scope, ())
    if len(mine) != 1 or len(theirs) != 1:
        return None
    touched = touched_statements(hunk, mine[0], after_hunk)
    if touched is None:
        return None
    if not _subsequence([item for item, _ in touched], [item for item, *_ in _items(theirs[0].node)]):
        return None
    return (
        f"statements: its {len(touched)} added statement(s) stand in {scope} as Python ASTs, under the same "
        "enclosing statements and in the same order, and no line it removes is left"
    )


def touched_statements(hunk: Hunk, mine: Definition, after_hunk: bytes) -> list[tuple[Item, ast.stmt]] | None:
    """The statements of ``mine`` (in ``after_hunk``) that ``hunk`` adds or changes; None when it adds a line
    outside the definition or outside every statement (a decorator...), or none of them says anything."""
    lines = split_lines(after_hunk)
    top = hunk.old_start if hunk.old_count else hunk.old_start + 1  # where its new side starts, applied alone
    added = {  # its lines in ``after_hunk`` that are not blank or a comment
        top + (n - hunk.new_start) for n, text in hunk.added if norm(text)
    }
    items = _items(mine.node)
    spans = [(first, last) for *_, first, last in items]
    for n in added:
        inside = mine.start <= n <= mine.end
        if not inside or not (any(a <= n <= b for a, b in spans) or norm(lines[n - 1]) in _BRANCHES):
            return None
    touched = [(item, node) for item, node, first, last in items if any(first <= n <= last for n in added)]
    if not any(_says(node, lines) for _, node in touched):
        return None
    return touched


def _items(definition: ast.AST) -> list[tuple[Item, ast.stmt, int, int]]:
    """Each statement in ``definition``'s body, in order: (its item, the node, its first and last line); a compound
    statement is its header (down to the line before its body), followed by the statements it holds."""
    out: list[tuple[Item, ast.stmt, int, int]] = []

    def walk(body: Sequence[ast.stmt], around: tuple[str, ...]) -> None:
        for node in body:
            if not isinstance(node, _COMPOUND):
                decorated = getattr(node, "decorator_list", [])
                first = min([node.lineno, *(d.lineno for d in decorated)])
                out.append(((around, ast.dump(node)), node, first, node.end_lineno or node.lineno))
                continue
            head = copy.copy(node)
            for name in (*_BODIES, "handlers"):
                if hasattr(head, name):
                    setattr(head, name, [])
            header = ast.dump(head)
            out.append(((around, header), node, node.lineno, node.body[0].lineno - 1))
            for name in _BODIES:
                walk(getattr(node, name, []), (*around, f"{header}.{name}"))
            for handler in getattr(node, "handlers", []):
                caught = ast.dump(handler.type) if handler.type is not None else ""
                walk(handler.body, (*around, f"{header}.except {caught} as {handler.name}"))

    walk(getattr(definition, "body", []), ())
    return out


def _says(node: ast.stmt, lines: Sequence[bytes]) -> bool:
    """Whether a statement can prove anything: not ``pass``/``continue``/``break``, and a line of it says something."""
    if isinstance(node, _TRIVIAL):
        return False
    last = node.body[0].lineno - 1 if isinstance(node, _COMPOUND) else node.end_lineno or node.lineno
    return any(says_something(norm(ln)) for ln in lines[node.lineno - 1 : last])


def _subsequence(wanted: Sequence[Item], have: Sequence[Item]) -> bool:
    """Whether ``wanted`` stands in ``have`` in the same order (not necessarily next to each other)."""
    it = iter(have)
    return all(any(w == h for h in it) for w in wanted)


def region_holds(base: Sequence[bytes], ours: Sequence[bytes], theirs: Sequence[bytes]) -> str | None:
    """The evidence that the release's side of a conflict (``ours``) already holds what the patch's side
    (``theirs``) changed from the old base: each side parses alone (dedented) as whole statements, every statement
    of the patch's side stands in the release's (Python ASTs, under the same enclosing statements, in the same
    order), at least one of them new to the old base, and none the patch drops is left there; None without
    proof."""
    tb, to, tt = _block(base), _block(ours), _block(theirs)
    if tb is None or to is None or tt is None:
        return None
    b, o, t = ([item for item, *_ in _items(tree)] for tree in (tb, to, tt))
    spare = list(b)
    added = []
    for item in t:
        if item in spare:
            spare.remove(item)
        else:
            added.append(item)
    dropped = [item for item in b if item not in t]
    nodes = {item: node for item, node, *_ in _items(tt)}
    if not any(not isinstance(nodes[item], _TRIVIAL) for item in added):
        return None
    if any(item in o for item in dropped) or not _subsequence(t, o):
        return None  # a statement it drops is still there, or one of its own (or their order) is not
    return (
        f"the release's side already holds the {len(added)} statement(s) the patch adds here (Python ASTs, in the "
        "same order and nesting) and none it removes: the release's lines"
    )


def _block(lines: Sequence[bytes]) -> ast.Module | None:
    """``lines`` dedented and parsed as a module; None when they are not whole statements."""
    try:
        return parse_python(textwrap.dedent(b"".join(lines).decode()).encode())
    except (SyntaxError, ValueError, RecursionError, UnicodeDecodeError):
        return None


def imports_present(hunk: Hunk, before: bytes, after_hunk: bytes, target: bytes) -> str | None:
    """The evidence that ``target`` already imports what ``hunk`` imports: the hunk changes module-level import
    statements only (``after_hunk``: ``before`` with it alone applied), adds at least one name, removes none, and
    ``target`` imports each name it adds from the same module under the same name; None without proof."""
    if not all(_IMPORTISH.match(text) for _, text in hunk.added if text.strip()):
        return None  # a line no import statement has: no need to parse the files
    mine, old, theirs = _module_imports(after_hunk), _module_imports(before), _module_imports(target)
    if mine is None or old is None or theirs is None:
        return None
    top = hunk.old_start if hunk.old_count else hunk.old_start + 1
    added = [top + (n - hunk.new_start) for n, text in hunk.added if norm(text)]
    if not added or not all(any(a <= n <= b for a, b in mine[1]) for n in added):
        return None  # a line it adds is not part of an import statement
    new_names, old_names = set(mine[0]), set(old[0])
    gained = sorted(new_names - old_names, key=str)
    if not gained or old_names - new_names or any(name not in theirs[0] for name in gained):
        return None
    spelled = ", ".join(name if not alias else f"{name} as {alias}" for _, name, alias in gained)
    return f"imports: the release's file imports each name it adds ({spelled}) from the same module"


ImportName = tuple[str, str, str]  # (module, name, as-name)
_IMPORTISH = re.compile(
    rb"^[ \t]*(?:(?:from|import)[ \t].*|\(?[ \t]*[A-Za-z_][\w.]*(?:[ \t]+as[ \t]+\w+)?[ \t]*,?[ \t]*\)?|\)|\()[ \t]*"
    rb"(?:#.*)?\r?\n?$"
)


def _module_imports(source: bytes) -> tuple[list[ImportName], list[tuple[int, int]]] | None:
    """The names ``source``'s module-level import statements import, and the lines each statement spans."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    names: list[ImportName] = []
    spans: list[tuple[int, int]] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names.extend((module, a.name, a.asname or "") for a in node.names)
        elif isinstance(node, ast.Import):
            names.extend(("", a.name, a.asname or "") for a in node.names)
        else:
            continue
        spans.append((node.lineno, node.end_lineno or node.lineno))
    return names, spans
