"""Parse a text that shares its beginning with one parsed before, re-using the statements of that beginning.

A port parses the same file again and again with one hunk's difference (the release's file, the old base, the
base with one hunk, a merge): most of each parse re-reads lines an earlier tree already holds.  Python's
grammar makes a statement's tree depend only on its own tokens, and where a statement ends is where the next
begins; so where the first line that differs lies after the end of a statement, every statement before that
point is the one the earlier tree has (same tokens, same lines, same columns), and only the rest is parsed.

The rest is parsed on its own, with the lines before it left blank (its line numbers are the file's) and, where
the cut is inside a class or function body, a one-line header of the same kind at the indentation of each
enclosing definition (``class _:``, ``def _():``, ``async def _():``), so the rest's members parse in a block.
What the header's block collects replaces the tail of each enclosing definition's body; new nodes are made for
the enclosing definitions (the earlier tree is never changed: trees are shared read-only).  Where the rest goes on
inside the last statement kept (a method that gains lines at its end), the cut moves inside that statement.

The answer must be ``ast.parse``'s, bit for bit, or no answer: :func:`reparse` returns None wherever that is not
shown (then the caller parses the whole text), and raises nothing of its own. Refused: a carriage return (the
tokenizer's line ends are not split here), a NUL, an encoding declaration, ``barry_as_FLUFL`` (the one future
import that changes the grammar: ``ast.parse`` ignores it today), a line before the rest that ends in a backslash,
a statement sharing the cut line (``;``), a first line of the rest that is not at the members' own indentation,
and any error parsing the rest (a whole parse decides what that error is). ``tests/test_reparse.py`` compares it
with ``ast.parse`` (``ast.dump`` with positions) on a real release's files changed by each hunk of a real series
alone and by random line edits, and on crafted cuts.
"""

from __future__ import annotations

import ast
import re

_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)
_BLOCKS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_HEADERS = {ast.ClassDef: b"class _:", ast.FunctionDef: b"def _():", ast.AsyncFunctionDef: b"async def _():"}


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes ``a`` and ``b`` share (a binary search of byte comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def statement_start(stmt: ast.stmt) -> int:
    """The first line of a statement, its decorators included."""
    decorators = getattr(stmt, "decorator_list", None)
    return min([stmt.lineno, *(d.lineno for d in decorators)]) if decorators else stmt.lineno


def statement_end(stmt: ast.stmt) -> int:
    return stmt.end_lineno if stmt.end_lineno is not None else stmt.lineno


def _kept(body: list[ast.stmt], first: int) -> int:
    """How many statements of ``body`` end before line ``first`` and leave their last line to themselves."""
    j = 0
    while j < len(body) and statement_end(body[j]) < first:
        j += 1
    while j > 0 and j < len(body) and statement_start(body[j]) <= statement_end(body[j - 1]):
        j -= 1  # ``a; b``: the cut would fall inside the line
    return j


def reparse(data: bytes, base: bytes, tree: ast.Module, shared: int | None = None) -> ast.Module | None:
    """``ast.parse(data)``, re-using ``tree`` (``ast.parse(base)``) up to the first line ``data`` changes;
    None where that cannot be done with the same answer.  ``shared``: ``common_prefix(data, base)`` if known."""
    if refused(data):
        return None
    n = common_prefix(data, base) if shared is None else shared
    lines = data.split(b"\n")
    first = data.count(b"\n", 0, n) + 1  # the line (1-based) of the first byte that differs
    levels: list[tuple[list[ast.stmt], int]] = []  # (a body, how many of its statements are kept)
    body = tree.body
    while True:
        j = _kept(body, first)
        if j == 0:
            break
        levels.append((body, j))
        nxt = body[j] if j < len(body) else None
        if nxt is None or not isinstance(nxt, _BLOCKS) or statement_start(nxt) > first or _kept(nxt.body, first) == 0:
            break
        body = nxt.body
    while levels:
        body, j = levels[-1]
        if j == 0:  # a level kept for the definition it encloses, left with nothing before the cut
            levels.pop()
            continue
        cut = statement_end(body[j - 1]) + 1  # the first line parsed again
        at = _rest(lines, cut)
        member = _indent(lines, statement_start(body[j - 1]))
        last = body[j - 1]
        if at is None or (at and _indent(lines, at) == member):
            if cut - 1 >= len(levels) - 1:
                break
        elif at and _deeper(_indent(lines, at), member) and isinstance(last, _BLOCKS):
            levels[-1] = (body, j - 1)  # the rest goes on inside the last statement kept: keep all of it, cut inside
            levels.append((last.body, len(last.body)))
            continue
        levels.pop()  # not here: one level out, before the enclosing definition
    if not levels:
        return None
    return _graft(lines, levels)


def refused(data: bytes) -> bool:
    """Whether ``data`` has what a parse in pieces cannot follow: a carriage return (the tokenizer's line ends are
    not split here), a NUL, ``barry_as_FLUFL`` or an encoding declaration in its first two lines."""
    if b"\r" in data or b"\0" in data or b"barry_as_FLUFL" in data:
        return True
    return declares_encoding(data)


def declares_encoding(data: bytes) -> bool:
    """Whether ``data`` declares its encoding (in its first two lines): its bytes alone do not say its text."""
    return _CODING.search(data, 0, _two_lines(data)) is not None


def _two_lines(data: bytes) -> int:
    end = data.find(b"\n")
    end = data.find(b"\n", end + 1) if end >= 0 else -1
    return len(data) if end < 0 else end


def _indent(lines: list[bytes], lineno: int) -> bytes:
    line = lines[lineno - 1]
    return line[: len(line) - len(line.lstrip(b" \t\f"))]


def _rest(lines: list[bytes], cut: int) -> int | None:
    """The line of the first statement from line ``cut`` on (None: there is none); 0 where the line before
    ``cut`` goes on into the rest (a backslash) or that statement's line begins with one."""
    if lines[cut - 2].rstrip(b" \t\f").endswith(b"\\"):
        return 0
    for k in range(cut - 1, len(lines)):
        stripped = lines[k].strip(b" \t\f")
        if not stripped or stripped.startswith(b"#"):
            continue
        return 0 if stripped.startswith(b"\\") else k + 1
    return None


def _deeper(indent: bytes, member: bytes) -> bool:
    return len(indent) > len(member) and indent.startswith(member)


def _graft(lines: list[bytes], levels: list[tuple[list[ast.stmt], int]]) -> ast.Module | None:
    body, j = levels[-1]
    cut = statement_end(body[j - 1]) + 1
    enclosing = [outer[k] for outer, k in levels[:-1]]  # the definitions the cut is inside, outermost first
    headers = [_indent(lines, stmt.lineno) + _HEADERS[type(stmt)] for stmt in enclosing]
    rest = b"\n".join(lines[cut - 1 :])
    text = b"\n" * (cut - 1 - len(headers)) + b"".join(h + b"\n" for h in headers) + rest
    try:
        parsed = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    tails: list[list[ast.stmt]] = []  # per level, what the rest adds to its body (outermost first)
    new = parsed.body
    for stmt in enclosing:
        if not new or type(new[0]) is not type(stmt):
            return None
        tails.append(new[1:])
        new = _body(new[0])
    tails.append(new)
    made: ast.stmt | None = None
    for depth in range(len(levels) - 1, -1, -1):
        outer, k = levels[depth]
        kept = outer[:k] + ([made] if made is not None else []) + tails[depth]
        if depth == 0:
            return ast.Module(body=kept, type_ignores=[])
        old = enclosing[depth - 1]
        dummy = _dummy_at(parsed, depth)
        fields = {name: getattr(old, name) for name in old._fields}
        fields["body"] = kept
        made = type(old)(
            **fields,
            lineno=old.lineno,
            col_offset=old.col_offset,
            end_lineno=dummy.end_lineno,
            end_col_offset=dummy.end_col_offset,
        )
    return None  # unreachable: depth 0 returns


def _dummy_at(parsed: ast.Module, depth: int) -> ast.stmt:
    """The header statement ``depth`` levels in (1: the outermost header)."""
    node: ast.stmt = parsed.body[0]
    for _ in range(depth - 1):
        node = _body(node)[0]
    return node


def _body(block: ast.stmt) -> list[ast.stmt]:
    assert isinstance(block, _BLOCKS)
    return block.body
