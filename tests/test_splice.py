"""The statements of a text made from a parsed kin and the lines it changes (``sgpatch.pyast.splice``) against
``ast.parse`` of the whole text, and the readers that use them (a name defined twice, a resolution offered).

A faster path that can disagree with the slow one is a bug: each case compares every top-level statement as
``ast.dump`` shows it (no positions: the splice does not claim them); a case where ``ast.parse`` fails must get
nothing.  The texts are the files of a real release edited by each hunk of slime's series (and by two hunks at
once) and by random line edits chosen to cut across statements, and crafted cases for each refusal.
"""

from __future__ import annotations

import ast

import pytest

from sgpatch.pyast import parses_shared
from sgpatch.pyast.splice import unplaced_body
from sgpatch.series.conflicts import sound
from sgpatch.series.engine import _duplicates, defines_each_once, duplicate_definitions, new_duplicates

from .test_reparse import BASE, FLUFL, _full, random_edits, series_edits


def _check(data: bytes, base: bytes, at_most: float = 1.0) -> bool:
    """Whether the splice gave an answer: statements (those of ``ast.parse``) or that it does not parse (where
    ``ast.parse`` fails); fails the test otherwise."""
    want = _full(data)
    try:
        got = unplaced_body(data, base, at_most=at_most)
    except SyntaxError:
        assert want is None, f"the splice says it does not parse where ast.parse parses it: {data[:200]!r}"
        return True
    if got is None:
        return False
    assert want is not None, f"the splice gave statements where ast.parse fails: {data[:200]!r}"
    assert [ast.dump(s) for s in got] == [ast.dump(s) for s in want.body], f"the splice differs: {data[:200]!r}"
    return True


def test_hunks_of_a_real_series_alone_and_in_pairs(release_py: dict[str, bytes]) -> None:
    made = tried = 0
    for old, new in series_edits(release_py, pairs=True):
        tried += 1
        made += _check(new, old)
        if _full(new) is not None:  # and back: the release's file made from the patched one
            tried += 1
            made += _check(old, new)
    assert tried > 200
    assert made > tried * 3 // 4  # a hunk changes lines between two top-level statements' first lines


def test_random_line_edits_of_real_files(release_py: dict[str, bytes]) -> None:
    made = valid = 0
    for old, new in random_edits(release_py, 47, twice=0.3):  # two edits apart: one run from the first to the last
        valid += _full(new) is not None
        made += _check(new, old)
    assert valid > 150
    assert made > valid // 2


def _with(old: bytes, new: bytes) -> bytes:
    assert old in BASE
    return BASE.replace(old, new, 1)


STATEMENTS, FAILS = "statements", "does not parse"  # None: not shown (the caller parses the whole text)


@pytest.mark.parametrize(
    ("old", "new", "shown"),
    [
        (b"def top():\n    pass\n", b"def top():\n    return 9\n", STATEMENTS),  # the last statement
        (b"        return 2\n", b"        return 22\n", STATEMENTS),  # inside a method: class A is parsed again
        (b"    @property\n", b"    @property\n    @cached\n", STATEMENTS),
        (b"def top():\n", b"top = 1\n\ndef top():\n", STATEMENTS),
        (b"X = 1\n", b"X = 1 \\\n+ 2\n", STATEMENTS),  # the changed line carries on: parsed with the rest of its run
        (b"X = 1\n", b"X = 1; Y = 2\n", STATEMENTS),
        (b"import os\n", b"import os\nimport sys\n", STATEMENTS),
        (b"\n\ndef top():\n", b"\n\n    def i(self):\n        pass\n\ndef top():\n", STATEMENTS),  # A gains a member
        (b"X = 1\n\n\nclass A:", b"X = 1\n\n\nclass A:  # note\n", STATEMENTS),  # the run ends on the kept line
        (b"        return 1\n", b"        return (1 +\n", None),  # unbalanced
        (b"def top():\n    pass\n", b"else:\n    pass\n", None),  # an else after class A
        (b"def top():\n    pass\n", b"  def top():\n    pass\n", None),  # at no level
        (b"X = 1\n", b'X = """\n', None),  # a string opened to the end
        (b"def top():\n    pass\n", b"def top():\n    pass\n@deco\n", None),  # a decorator with nothing after it
        (b"def top():\n", b"\x0c    def top():\n", None),  # a form feed first: not followed
        (b"X = 1\n", b"<<<<<<< a\nX = 1\n=======\nX = 2\n>>>>>>> b\n", FAILS),  # a conflict: the rest shows it
        (b"X = 1\n", b'X = """\n<<<<<<< a\n"""\n', STATEMENTS),  # a marker inside a string: the rest parses
    ],
)
def test_crafted_cuts(old: bytes, new: bytes, shown: str | None) -> None:
    data = _with(old, new)
    assert _check(data, BASE) is (shown is not None)
    if shown is not None:
        assert (_full(data) is not None) is (shown == STATEMENTS)


@pytest.mark.parametrize(
    ("base", "data"),
    [
        (b"x = 1\r\ny = 2\r\n", b"x = 1\r\ny = 3\r\n"),  # carriage returns
        (b"# -*- coding: latin-1 -*-\nx = 1\ny = 2\n", b"# -*- coding: latin-1 -*-\nx = 1\ny = 3\n"),
        (b"x = 1\ny = 2\n", b"# coding: latin-1\nx = 1\ny = 2\n"),  # a declaration the run would take alone
        (FLUFL + b"x = 1\ny = 1 != 2\n", FLUFL + b"x = 1\ny = 1 != 3\n"),
        (b"x = 1\ny = 2\n", b"x = 1\ny = 2\0\n"),
        (b"x = 1\ny = 2\n", b"x = 1\n\xef\xbb\xbfz = 3\ny = 2\n"),  # a byte-order mark: the run alone drops it
        (b"x = 1 \\\n\n", b"x = 1 \\\n+ 2\n\n"),  # the line before the cut goes on into the run
    ],
)
def test_refused_where_the_run_alone_may_differ(base: bytes, data: bytes) -> None:
    assert _full(base) is not None
    assert unplaced_body(data, base) is None


def test_the_same_text_is_its_kin() -> None:
    tree = ast.parse(BASE)
    assert [ast.dump(s) for s in unplaced_body(BASE, BASE) or []] == [ast.dump(s) for s in tree.body]


TWICE = b"class A:\n    def f(self):\n        pass\n\n\ndef g():\n    pass\n"


@pytest.mark.parametrize(
    ("after", "twice"),
    [
        (TWICE.replace(b"def g", b"def f(self):\n    pass\n\n\ndef g"), []),  # a module f beside A.f: not twice
        (TWICE.replace(b"\n\n\ndef g", b"\n    def f(self):\n        return 1\n\n\ndef g"), ["f in class A"]),
        (TWICE + b"\n\ndef g():\n    return 2\n", ["g in module"]),
        (TWICE + b"\n\ng = 1\n", []),  # not a definition
        (TWICE + b"\n\ndef g(:\n", None),  # does not parse
    ],
)
def test_what_a_change_defines_twice_and_whether_it_parses(after: bytes, twice: list[str] | None) -> None:
    """The readers give what a whole parse gives, with the splice (the release's file parsed in the memo) and
    without (no memo: each text parsed whole)."""
    whole = _duplicates.__wrapped__  # type: ignore[attr-defined]
    if twice is not None:
        assert sorted(f"{n} in {s}" for s, n in whole(after) - whole(TWICE)) == twice
    for shared in (True, False):
        if shared:
            with parses_shared():
                got, ok = duplicate_definitions(TWICE, after), sound("m.py", TWICE, after)
        else:
            got, ok = duplicate_definitions(TWICE, after), sound("m.py", TWICE, after)
        assert got == (twice or [])
        assert ok is (twice == [])


def test_lines_between_that_are_most_of_the_rest_are_left_to_a_whole_parse() -> None:
    """By default the splice answers only where it parses at most half of what follows the first cut: else
    ``parse_python``, which re-uses the beginning of a class too, does as well (class A changed: A is most of the
    rest; the last function changed: it is all of it)."""
    inside = _with(b"        return 2\n", b"        return 22\n")
    assert unplaced_body(inside, BASE) is None
    assert _check(inside, BASE, at_most=1.0)
    longer = BASE + b"".join(b"\n\ndef f%d():\n    return %d\n" % (k, k) for k in range(40))
    assert unplaced_body(longer.replace(b"return 2\n", b"return 22\n", 1), longer) is not None


def test_a_text_whose_words_define_each_name_once_defines_none_twice(release_py: dict[str, bytes]) -> None:
    """``defines_each_once`` (no name after ``def`` or ``class`` twice in the text) answers only where a parse would
    find no name defined twice in any scope: over a real release's files, each edited by every hunk of slime's series
    and by random line edits, ``duplicate_definitions`` is what it is without it."""
    whole = _duplicates.__wrapped__  # type: ignore[attr-defined]
    said = tried = 0
    texts = [(old, new) for old, new in series_edits(release_py)] + list(random_edits(release_py, 41, twice=0.3))
    texts += [(old, old) for old in list(release_py.values())[::5]]
    for old, new in texts:
        tried += 1
        if defines_each_once(new):
            said += 1
            assert _full(new) is None or not whole(new), new[:200]
        assert duplicate_definitions(old, new) == (new_duplicates(old, new) or [])
    assert tried > 1000 and 200 < said < tried


@pytest.mark.parametrize(
    ("text", "once"),
    [
        (b"def f():\n    pass\n\n\nclass A:\n    def g(self):\n        pass\n", True),
        (b"def f():\n    pass\n\n\nclass A:\n    def f(self):\n        pass\n", False),  # in two scopes: says no
        (b"def f():\n    '''def f'''\n", True),  # not at a line's start
        (b"def f():\n    '''\ndef f\n'''\n", False),  # in a string: says no
        (b"def f():\n    pass\n\n\ndef \\\n  f():\n    pass\n", False),  # the name on the next line
        (b"async \\\n def f():\n    pass\n\n\nasync def f():\n    pass\n", False),
        (b"def f():\n    pass\rdef f():\n    pass\n", False),  # a carriage return: a line break to the parser
        (b"\xef\xbb\xbfdef f():\n    pass\n", False),  # a byte-order mark
        (b"def f():\n    pass\n\n\ndef \xef\xbd\x86():\n    pass\n", False),  # a fullwidth f: the parser's f
        (b"\x0cdef f():\n    pass\n\n\x0cdef f():\n    pass\n", False),  # a form feed before: still a line's start
        (b"class A:\n\tasync  def f(self):\n\t\tpass\n\tdef f(self):\n\t\tpass\n", False),
    ],
)
def test_which_texts_define_each_name_once(text: bytes, once: bool) -> None:
    assert defines_each_once(text) is once
    if once:
        assert not _duplicates.__wrapped__(text)  # type: ignore[attr-defined]
