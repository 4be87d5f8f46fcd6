"""The parse from where a text differs (``sgpatch.pyast.reparse``) against ``ast.parse`` of the whole text.

A faster path that can disagree with the slow one is a bug: each case compares the two trees with every position
(``ast.dump(..., include_attributes=True)``); a case where ``ast.parse`` fails must get no tree.  The texts are
the files of a real release edited by each hunk of slime's series alone and by random line edits chosen to cut
across statements (a line indented or dedented, a backslash, ``a; b``, an ``else:``, a decorator, a string
opened), and crafted cases for each refusal.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator

import pytest

from sgpatch.pyast import parse_python, parses_shared
from sgpatch.pyast.reparse import common_prefix, reparse
from sgpatch.series.engine import HunkFailure, apply_file
from sgpatch.series.hunks import only
from sgpatch.series.patch import parse_patch

from .helpers import DATA
from .smallrepo import HEADER


def _dump(tree: ast.AST) -> str:
    return ast.dump(tree, include_attributes=True)


def _full(data: bytes) -> ast.Module | None:
    try:
        return ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _check(data: bytes, base: bytes, tree: ast.Module) -> bool:
    """Whether ``reparse`` gave a tree (the same as ``ast.parse``'s; fails the test otherwise)."""
    got = reparse(data, base, tree)
    if got is None:
        return False
    want = _full(data)
    assert want is not None, f"reparse gave a tree where ast.parse fails: {data[:200]!r}"
    assert _dump(got) == _dump(want), f"reparse differs from ast.parse: {data[:200]!r}"
    return True


def series_edits(release_py: dict[str, bytes], *, pairs: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """(a release file, that file with one hunk of slime's series applied; with ``pairs``, also with two hunks
    in a row) for each Python file of the series the release has."""
    series = DATA / "series" / "slime-sglang-0.5.9.patch"
    patch = parse_patch(HEADER.format(desc="slime's series").encode() + series.read_bytes(), series)
    for fp in patch.files:
        old = release_py.get(fp.path)
        if old is None or not fp.path.endswith(".py"):
            continue
        sets = [(h,) for h in fp.hunks] + (list(zip(fp.hunks, fp.hunks[1:], strict=False)) if pairs else [])
        for hunks in sets:
            new = apply_file(old, only(fp, hunks))
            if not isinstance(new, HunkFailure):
                yield old, new


def test_each_hunk_of_a_real_series_alone(release_py: dict[str, bytes]) -> None:
    made = tried = 0
    trees: dict[bytes, ast.Module] = {}
    for old, new in series_edits(release_py):
        tried += 1
        made += _check(new, old, trees.setdefault(old, ast.parse(old)))
    assert tried > 100
    assert made > tried // 2  # most hunks land after the file's first statement: the rest is re-used


EDITS = [b"x = 1; y = 2", b"x = 1 \\", b"else:", b"@deco", b'"""', b"+ 2", b"pass", b"# c \\", b"def f(): pass", b"\\"]


def _edited(lines: list[bytes], rng: random.Random) -> bytes:
    out = list(lines)
    i = rng.randrange(len(out))
    kind = rng.randrange(8)
    if kind == 0:
        out.insert(i, out[rng.randrange(len(out))])
    elif kind == 1 and len(out) > 1:
        del out[i]
    elif kind == 2:
        out[i] = b"    " + out[i]
    elif kind == 3:
        out[i] = out[i][4:] if out[i].startswith(b"    ") else out[i][1:]
    elif kind == 4:
        out.insert(i, out[i][: len(out[i]) - len(out[i].lstrip())] + rng.choice(EDITS))
    elif kind == 5:
        out[i] += rng.choice([b" \\", b";", b":", b"  # note"])
    elif kind == 6:
        out[i:i] = out[rng.randrange(len(out)) :][: rng.randrange(1, 20)]
    else:
        out[i] = out[i].replace(b"'", b'"')
    return b"\n".join(out)


def random_edits(release_py: dict[str, bytes], seed: int, *, twice: float = 0.0) -> Iterator[tuple[bytes, bytes]]:
    """(a release file that parses, that file with a random line edit; with chance ``twice``, two edits apart):
    8 edits of each of 80 files chosen by ``seed``."""
    rng = random.Random(seed)
    for path in rng.sample(sorted(release_py), 80):
        old = release_py[path]
        if _full(old) is None:
            continue
        lines = old.split(b"\n")
        for _ in range(8):
            new = _edited(lines, rng)
            if twice and rng.random() < twice:
                new = _edited(new.split(b"\n"), rng)
            yield old, new


def test_random_line_edits_of_real_files(release_py: dict[str, bytes]) -> None:
    made = valid = 0
    trees: dict[bytes, ast.Module] = {}
    for old, new in random_edits(release_py, 27):
        valid += _full(new) is not None
        made += _check(new, old, trees.setdefault(old, ast.parse(old)))
    assert valid > 150
    assert made > valid // 2


BASE = (
    b'''"""Module doc.'''
    + b"Long enough to be kept with its kin.\n" * 60
    + b'''"""
import os

X = 1


class A:
    """Doc."""

    a = 1

    def f(self):
        return 1

    @property
    def g(self):
        return 2

    async def h(self):
        await x
        return 3


def top():
    pass
'''
)


def _with(old: bytes, new: bytes) -> bytes:
    assert old in BASE
    return BASE.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "made"),
    [
        (b"def top():\n    pass\n", b"def top():\n    return 9\n", True),  # the last statement
        (b"        return 2\n", b"        return 22\n", True),  # inside a method: two levels in
        (b"        return 3\n", b"        return 33\n", True),  # inside an async method
        (b"    @property\n", b"    @property\n    @cached\n", True),  # a decorator of the next member
        (b"def top():\n", b"top = 1\n\ndef top():\n", True),
        (b"        return 1\n", b"        return 1\n        x = 2\n", True),  # the method goes on
        (b"    a = 1\n", b"    a = 1\n    b = 2\n", True),
        (b"        return 1\n", b"        return (1 +\n", False),  # unbalanced: ast.parse fails
        (b"        return 1\n", b"        return 1\n            x = 2\n", False),  # unexpected indent
        (b"def top():\n    pass\n", b"else:\n    pass\n", False),  # no header may take an else
        (b"def top():\n    pass\n", b"  def top():\n    pass\n", False),
        (b"\n\ndef top():\n", b"\n\n    def i(self):\n        pass\n\ndef top():\n", True),  # a member of A, last
        (b"\n\ndef top():\n", b"\n        x = 4\n\ndef top():\n", True),  # h goes on
        (b"\n\ndef top():\n", b"\n      x = 4\n\ndef top():\n", False),  # at no level: ast.parse fails
        (b"        return 3\n", b"        return 3\n\n  x = 1\n", False),  # dedent to no level
        (b"X = 1\n", b"X = 1 \\\n+ 2\n", True),  # the changed line carries on
        (b"X = 1\n", b"X = 1; Y = 2\n", True),
        (b"X = 1\n", b'X = """\n', False),  # a string opened to the end
    ],
)
def test_crafted_cuts(old: bytes, new: bytes, made: bool) -> None:
    tree = ast.parse(BASE)
    data = _with(old, new)
    assert _check(data, BASE, tree) is made


FLUFL = b"from __future__ import barry_as_FLUFL\n"


@pytest.mark.parametrize(
    ("base", "data"),
    [
        (b"x = 1\r\ny = 2\r\n", b"x = 1\r\ny = 3\r\n"),  # carriage returns
        (b"# -*- coding: latin-1 -*-\nx = 1\ny = 2\n", b"# -*- coding: latin-1 -*-\nx = 1\ny = 3\n"),
        (FLUFL + b"x = 1\ny = 1 != 2\n", FLUFL + b"x = 1\ny = 1 != 3\n"),
        (b"x = 1; y = 2\n", b"x = 1; y = 3\n"),  # the cut would split a line
        (b"x = 1 \\\n\ny = 2\n", b"x = 1 \\\n+ 2\ny = 2\n"),
        (b"x = 1\ny = 2\n", b"x = 1\ny = 2\0\n"),
        (b"x = 1\ny = 2\n", b"x = 2\ny = 2\n"),  # nothing before the first difference
    ],
)
def test_refused_where_the_rest_alone_may_differ(base: bytes, data: bytes) -> None:
    tree = _full(base)
    assert tree is not None
    assert reparse(data, base, tree) is None


def test_a_definition_that_goes_on_is_parsed_from_inside_it() -> None:
    base = b"def f():\n    return 1\nx = 2\n"
    assert _check(b"def f():\n    return 1\n    y = 3\nx = 2\n", base, ast.parse(base))
    assert not _check(b"def f():\n    return 1\n  y = 3\nx = 2\n", base, ast.parse(base))  # ast.parse fails


def test_the_memo_re_uses_statements_and_answers_as_ast_parse() -> None:
    edited = _with(b"def top():\n    pass\n", b"def top():\n    return 9\n")
    with parses_shared():
        base = parse_python(BASE)
        tree = parse_python(edited)
        again = parse_python(edited)
    assert again is tree
    assert _dump(tree) == _dump(ast.parse(edited))
    assert tree.body[0] is base.body[0] and tree.body[3] is base.body[3]  # the doc string and class A, shared
    assert tree.body[-1] is not base.body[-1]
    alone = parse_python(edited)  # outside a memo: a parse of its own
    assert alone is not tree and alone.body[0] is not base.body[0]


def test_common_prefix_is_the_shared_beginning() -> None:
    rng = random.Random(1)
    for _ in range(500):
        a = bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(40)))
        b = a[: rng.randrange(len(a) + 1)] + bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(5)))
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        assert common_prefix(a, b) == n
