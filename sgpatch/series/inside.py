"""A definition of a text that is another, parsed text changed only inside that definition: its lines parsed by
themselves, not the whole text.

A port asks, for each conflicting hunk, what the definition around it is once the hunk alone is applied to the old
base (the statement test, ``statements.statements_absorbed``): the old base's file with a few lines changed inside
one method.  ``parse_python`` re-uses the beginning that text shares with the old base (``pyast.reparse``) but
parses all the rest of the file again.  Python's grammar makes a statement's tree depend only on its own tokens,
and where a statement begins the tokenizer holds nothing over but the indentation of the blocks around it.  So
where every line before the definition's first (its decorators included) and every line after its last are the
old base's, the definition's lines parsed alone, after one header line per class around it (``class _:`` at that
class's indentation) and blank lines that keep the line numbers, give the very tree ``ast.parse`` gives it in the
whole text (positions included) — when they parse into exactly one statement of the definition's kind and name,
from its first line to its last.  What follows it then follows it as in the old base (a line the old base began a
statement on, at the definition's indentation or less), so nothing else of the text changed: the definitions of
that name are the old base's one, now this.

Refused (the caller reads the whole text's outline, which decides what parses): a definition the old base does not
have exactly once, a change outside its lines, a carriage return, a NUL, a form feed, an encoding declaration,
``barry_as_FLUFL`` (as ``reparse`` refuses them), a byte-order mark, too few lines before the definition for its
headers, and anything else the lines' own parse does not show.  ``tests/test_inside.py`` holds it to the whole
outline on a real release's files changed by each hunk of a real series, by random line edits, and crafted cuts.
"""

from __future__ import annotations

import ast
from codecs import BOM_UTF8

from sgpatch.pyast import per_memo
from sgpatch.pyast.reparse import refused
from sgpatch.series.patch import split_lines
from sgpatch.series.upstream import Definition, Outline, outline

_KINDS = {ast.ClassDef: "class", ast.FunctionDef: "def", ast.AsyncFunctionDef: "def"}


def definitions_after(after: bytes, before: bytes, scope: str) -> tuple[Definition, ...] | None:
    """``outline(after).definitions.get(scope, ())``, or None where ``after`` is not Python that parses; read from the
    lines of ``scope`` alone where ``after`` is ``before`` changed only inside them (see the module's text)."""
    found = _changed_inside((after, before, scope))
    if found is not None:
        return (found,)
    whole = outline(after)
    return whole.definitions.get(scope, ()) if whole is not None else None


@per_memo(maxsize=16)
def _changed_inside(key: tuple[bytes, bytes, str]) -> Definition | None:
    """(the statement test and the renaming test ask for the same definition of the same text)"""
    after, before, scope = key
    o_before = outline(before)
    if o_before is None or refused(after) or b"\f" in after or after.startswith(BOM_UTF8):
        return None
    olds = o_before.definitions.get(scope, ())
    if len(olds) != 1:
        return None
    old = olds[0]
    la, lb = after.split(b"\n"), before.split(b"\n")
    if old.start - 1 > len(la) or la[: old.start - 1] != lb[: old.start - 1]:
        return None  # a line before the definition changed
    tail = len(lb) - old.end  # the lines after its last: the same, and as many, at the end of ``after``
    if tail >= len(la) or la[len(la) - tail :] != lb[len(lb) - tail :]:
        return None
    end = len(la) - tail  # its last line in ``after``
    headers = _headers(o_before, scope, lb)
    if headers is None or end < old.start or len(headers) > old.start - 1:
        return None
    text = b"\n" * (old.start - 1 - len(headers)) + b"".join(h + b"\n" for h in headers)
    text += b"\n".join(la[old.start - 1 : end]) + b"\n"
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for _ in headers:
        if len(body) != 1 or not isinstance(body[0], ast.ClassDef):
            return None
        body = body[0].body
    if len(body) != 1 or type(body[0]) is not type(old.node):
        return None
    node = body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    if node.name != old.name or start != old.start or node.end_lineno != end:
        return None
    chunk = b"".join(split_lines(after)[start - 1 : end])
    return Definition(scope, _KINDS[type(node)], start, end, chunk.decode("utf-8", "replace"), node, chunk)


def _headers(o: Outline, scope: str, lines: list[bytes]) -> list[bytes] | None:
    """A header line for each class ``scope`` stands in (outermost first), at that class's indentation; None where
    one is not a class the outline has once, or its line does not begin with its indentation."""
    parts = scope.split(".")
    out = []
    for k in range(1, len(parts)):
        found = o.definitions.get(".".join(parts[:k]), ())
        if len(found) != 1 or not isinstance(found[0].node, ast.ClassDef):
            return None
        node = found[0].node
        indent = lines[node.lineno - 1][: node.col_offset]
        if indent.strip(b" \t"):
            return None
        out.append(indent + b"class _:")
    return out
