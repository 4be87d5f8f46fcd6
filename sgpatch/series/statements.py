"""``take-upstream`` by statements: every statement a hunk adds stands in the release's same definition, equal as a
Python AST, under the same enclosing statements and in the same order (issue 27).

The line test (``absorb``) asks each run of added lines to stand whole; a release that did the same thing with a
line more in between (a log call inside the same ``if``), or wrapped a condition differently, fails it.  This test
compares statements instead: a simple statement by its AST, a compound one (``if``, ``for``, ``while``, ``with``,
``try``) by its header's AST, each together with the headers of the compound statements around it in the
definition.  A statement the hunk changes only in part counts whole: the release must have it as the hunk leaves
it.  At least one of them must say something (``pass``, ``continue``, ``break`` prove nothing).

A call may stand in the release with more arguments than the hunk gives it (``f(a, b)`` where the hunk has
``f(a)``: the same function, the hunk's positional arguments first and in order, each of its keyword arguments
there with the same value): upstream wrote the same statements and went further in one of them.  Such statements
may be at most a third of the hunk's (the shape of its change must stand as it is: one call alone, extended, may
mean another intent), and none may be one the old definition already had (a hunk that takes an argument away from
a call the release still makes in full is not absorbed).  The evidence names those calls.
"""

from __future__ import annotations

import ast
import copy
import re
import textwrap
from collections import Counter
from collections.abc import Sequence

from sgpatch.pyast import dump_of, parse_python, per_memo
from sgpatch.series.conflicts import norm, says_something
from sgpatch.series.inside import definitions_after
from sgpatch.series.patch import Hunk, split_lines
from sgpatch.series.upstream import Definition, node_bytes, outline

_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar)
_BODIES = ("body", "orelse", "finalbody")
_TRIVIAL = (ast.Pass, ast.Continue, ast.Break)
_BRANCHES = {b"else:", b"try:", b"finally:"}  # lines no statement starts on: their statements' headers say it

Item = tuple[tuple[str, ...], str]  # (the headers around it, its AST dump)


def statements_absorbed(hunk: Hunk, scope: str, after_hunk: bytes, new: bytes, before: bytes) -> str | None:
    """The evidence that every statement ``hunk`` adds in definition ``scope`` (``after_hunk``: the old base
    ``before`` with the hunk alone applied) stands in the release ``new``'s definition of that name, and that no
    statement it takes out of the old definition (or moves under other enclosing statements) stands there as the
    old definition had it; None without proof."""
    o_before, o_new = outline(before), outline(new)
    if o_before is None or o_new is None:
        return None
    old, theirs = o_before.definitions.get(scope, ()), o_new.definitions.get(scope, ())
    if len(old) != 1 or len(theirs) != 1:
        return None  # (the hunk's text is parsed only when the other two allow a proof)
    mine = definitions_after(after_hunk, before, scope) or ()  # (its lines alone, where only they changed)
    if len(mine) != 1:
        return None
    touched = touched_statements(hunk, mine[0], after_hunk)
    if touched is None:
        return None
    have = items_of(theirs[0])
    was = Counter(item for item, *_ in items_of(old[0]))
    dropped = was - Counter(item for item, *_ in items_of(mine[0]))
    if not dropped.keys().isdisjoint(item for item, *_ in have):
        return None  # a statement it takes out (or moves) is still there
    said = (
        f"statements: its {len(touched)} added statement(s) stand in {scope} as Python ASTs, under the same enclosing"
    )
    if _subsequence([item for item, _ in touched], [item for item, *_ in have]):
        return f"{said} statements and in the same order, and no line it removes is left"
    calls = _extended_in_order(touched, have, set(was))
    if not calls:
        return None
    return (
        f"{said} statements and in the same order, the release calling "
        f"{', '.join(sorted(set(calls)))} with more arguments; no line it removes is left"
    )


def _extended_in_order(
    touched: Sequence[tuple[Item, ast.stmt]], have: Sequence[tuple[Item, ast.stmt, int, int]], old: set[Item]
) -> list[str]:
    """The calls the release makes with more arguments when every touched statement stands in ``have`` in order,
    equal or extended (``_extends``), at most a third of them extended, and no extended one of the release's is a
    statement of the old definition (``old``); [] otherwise (none extended: the exact test already said no)."""
    calls: list[str] = []
    extended = 0
    it = iter(have)
    for (around, dump), node in touched:
        for (their_around, their_dump), theirs, *_ in it:
            if their_around != around:
                continue
            if their_dump == dump:
                break
            found: list[str] = []
            if _extends(_head(node), _head(theirs), found) and (their_around, their_dump) not in old:
                calls += found
                extended += 1
                break
        else:
            return []
    return calls if 3 * extended <= len(touched) else []


def _head(node: ast.stmt) -> ast.stmt:
    """A compound statement without the statements it holds (its header); any other statement as it is."""
    if not isinstance(node, _COMPOUND):
        return node
    head = copy.copy(node)
    for name in (*_BODIES, "handlers"):
        if hasattr(head, name):
            setattr(head, name, [])
    return head


def _extends(mine: object, theirs: object, calls: list[str]) -> bool:
    """Whether ``theirs`` is ``mine`` with calls given more arguments (their names added to ``calls``)."""
    if isinstance(mine, list) and isinstance(theirs, list):
        return len(mine) == len(theirs) and all(_extends(a, b, calls) for a, b in zip(mine, theirs, strict=True))
    if not isinstance(mine, ast.AST) or type(mine) is not type(theirs):
        return mine == theirs
    if isinstance(mine, ast.Call) and isinstance(theirs, ast.Call):
        keywords = {k.arg: k.value for k in theirs.keywords if k.arg is not None}
        more = len(theirs.args) > len(mine.args) or len(theirs.keywords) > len(mine.keywords)
        if (
            len(mine.args) > len(theirs.args)
            or not _extends(mine.func, theirs.func, calls)
            or not _extends(mine.args, theirs.args[: len(mine.args)], calls)
            or not _extends(_spread(mine), _spread(theirs), calls)  # ``**kwargs``: the same ones
        ):
            return False
        for k in mine.keywords:
            if k.arg is not None and (k.arg not in keywords or not _extends(k.value, keywords[k.arg], calls)):
                return False
        if more:
            calls.append(ast.unparse(mine.func))
        return True
    return all(_extends(value, getattr(theirs, field), calls) for field, value in ast.iter_fields(mine))


def _spread(call: ast.Call) -> list[ast.expr]:
    return [k.value for k in call.keywords if k.arg is None]


def touched_statements(hunk: Hunk, mine: Definition, after_hunk: bytes) -> list[tuple[Item, ast.stmt]] | None:
    """The statements of ``mine`` (in ``after_hunk``) that ``hunk`` adds or changes; None when it adds a line
    outside the definition or outside every statement (a decorator...), or none of them says anything."""
    lines = split_lines(after_hunk)
    top = hunk.old_start if hunk.old_count else hunk.old_start + 1  # where its new side starts, applied alone
    added = {  # its lines in ``after_hunk`` that are not blank or a comment
        top + (n - hunk.new_start) for n, text in hunk.added if norm(text)
    }
    items = items_of(mine)
    spans = [(first, last) for *_, first, last in items]
    for n in added:
        inside = mine.start <= n <= mine.end
        if not inside or not (any(a <= n <= b for a, b in spans) or norm(lines[n - 1]) in _BRANCHES):
            return None
    touched = [(item, node) for item, node, first, last in items if any(first <= n <= last for n in added)]
    if not any(_says(node, lines) for _, node in touched):
        return None
    return touched


def items_of(definition: Definition) -> tuple[tuple[Item, ast.stmt, int, int], ...]:
    """``_items`` of a definition of a parsed file, its statements dumped by their bytes (``pyast.dump_of``: the
    same statement in the old base, the hunk's text and the release is dumped once)."""
    return _items((definition.node, definition.source, definition.start))


@per_memo(maxsize=64)
def _items(key: tuple[ast.AST, bytes | None, int]) -> tuple[tuple[Item, ast.stmt, int, int], ...]:
    """Each statement in the body of ``key``'s definition, in order: (its item, the node, its first and last line); a
    compound statement is its header (down to the line before its body), followed by the statements it holds.
    ``key``: the definition's node, the bytes of its lines where they alone say its text (``Definition.source``;
    else None) and its first line.  Kept for the node (a parsed tree is never changed): a file's hunks are each
    tested against the same release definition, and a hunk's own definition is asked for twice."""
    definition, source, first_line = key
    lines = split_lines(source) if source is not None else None
    out: list[tuple[Item, ast.stmt, int, int]] = []

    def dump(node: ast.stmt) -> str:
        # A simple statement's tree depends on its own tokens alone; a decorated one's begin before its position.
        if lines is None or getattr(node, "decorator_list", None):
            return ast.dump(node)
        return dump_of(node, node_bytes(lines, node, first_line))

    def walk(body: Sequence[ast.stmt], around: tuple[str, ...]) -> None:
        for node in body:
            if not isinstance(node, _COMPOUND):
                decorated = getattr(node, "decorator_list", [])
                first = min([node.lineno, *(d.lineno for d in decorated)])
                out.append(((around, dump(node)), node, first, node.end_lineno or node.lineno))
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
    return tuple(out)


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
    b, o, t = ([item for item, *_ in _items((tree, None, 1))] for tree in (tb, to, tt))
    spare = list(b)
    added = []
    for item in t:
        if item in spare:
            spare.remove(item)
        else:
            added.append(item)
    dropped = [item for item in b if item not in t]
    nodes = {item: node for item, node, *_ in _items((tt, None, 1))}
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
