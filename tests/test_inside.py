"""A definition of a text changed only inside it, read from its own lines (``sgpatch.series.inside``), against the
whole text's outline.

A faster path that can disagree with the slow one is a bug: each case compares every field of the definition the
whole outline has (name, kind, lines, text, bytes) and its tree with positions (``ast.dump`` with attributes);
where the whole text does not parse the answer must be None.  The texts are the files of a real release edited
by each hunk of slime's series (and by two hunks at once) and by random line edits, asked for the definitions
around each change and a few others; and crafted cases for each refusal.
"""

from __future__ import annotations

import ast
import random

from sgpatch.pyast import parses_shared
from sgpatch.series.inside import _changed_inside, definitions_after
from sgpatch.series.upstream import Definition, outline

from .test_reparse import BASE, random_edits, series_edits


def _fields(d: Definition) -> tuple[object, ...]:
    return d.qualname, d.kind, d.start, d.end, d.text, d.source, ast.dump(d.node, include_attributes=True)


def _check(after: bytes, before: bytes, scopes: list[str]) -> int:
    """How many of ``scopes`` were read from their own lines; fails the test where one differs from the whole
    outline's (or has an answer where the whole text does not parse)."""
    with parses_shared():  # as a port asks: the old base's outline kept while its definitions are asked for
        fast = [_changed_inside((after, before, scope)) for scope in scopes]
        got = [definitions_after(after, before, scope) for scope in scopes]
    whole = outline(after)  # outside the memo: a whole parse
    if whole is None:
        assert fast == [None] * len(scopes) and got == [None] * len(scopes), scopes
        return 0
    for scope, one, found in zip(scopes, fast, got, strict=True):
        want = [_fields(d) for d in whole.definitions.get(scope, ())]
        assert found is not None and [_fields(d) for d in found] == want, scope
        assert one is None or [_fields(one)] == want, scope
    return sum(one is not None for one in fast)


def _scopes(after: bytes, before: bytes, rng: random.Random) -> list[str]:
    """The definitions of ``before`` around its first changed line, and three others."""
    o = outline(before)
    if o is None:
        return []
    a, b = after.split(b"\n"), before.split(b"\n")
    first = next((i + 1 for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    around = [q for q, ds in o.definitions.items() if any(d.start <= first <= d.end for d in ds)]
    others = sorted(set(o.definitions) - set(around))
    return around + rng.sample(others, min(3, len(others)))


def test_each_hunk_of_a_real_series(release_py: dict[str, bytes]) -> None:
    rng = random.Random(5)
    made = tried = 0
    for before, after in series_edits(release_py, pairs=True):
        scopes = _scopes(after, before, rng)
        tried += len(scopes)
        made += _check(after, before, scopes)
    assert tried > 300 and made > 60


def test_random_line_edits_of_real_files(release_py: dict[str, bytes]) -> None:
    rng = random.Random(11)
    made = tried = 0
    for before, after in random_edits(release_py, 31, twice=0.3):
        scopes = _scopes(after, before, rng)
        tried += len(scopes)
        made += _check(after, before, scopes)
    assert tried > 1000 and made > 200


def _edit(old: bytes, new: bytes, text: bytes = BASE) -> bytes:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_crafted_changes_inside_and_out() -> None:
    inside = [
        (b"        return 1\n", b"        x = 1\n        return x\n", "A.f"),  # a method grows
        (b"    @property\n", b"    @property  # kept\n", "A.g"),  # its decorator's line
        (b"        await x\n", b"        await y\n", "A.h"),
        (b"    pass\n", b"    return None\n", "top"),
        (b'    """Doc."""\n', b'    """Doc, longer."""\n', "A"),  # the class itself
    ]
    for old, new, scope in inside:
        assert _check(_edit(old, new), BASE, [scope]), scope
    refused = [
        (b"        return 1\n", b"        return 1\n\n    def f2(self):\n        return 5\n", "A.f"),  # a sibling after
        (b"        return 1\n", b"        return (1\n", "A.f"),  # does not parse
        (b"        return 1\n", b'        return """1\n', "A.f"),  # a string left open into the rest
        (b"        return 1\n", b"        return 1 + \\\n", "A.f"),  # a line going on into the rest
        (b"X = 1\n", b"X = 2\n", "A.f"),  # a change before it
        (b"def top():\n    pass\n", b"def top():\n    pass\n\nY = 1\n", "A.f"),  # a change after it
        (b"        return 1\n", b"        return 1\r\n", "A.f"),
        (b"        return 1\n", b"        return 1\f\n", "A.f"),
        (b"        return 1\n", b"    return 1\n", "A.f"),  # dedented out of the method
        (b"    def f(self):\n", b"    def f2(self):\n", "A.f"),  # renamed
        (b"    def f(self):\n", b"    async def f(self):\n", "A.f"),  # another kind
    ]
    for old, new, scope in refused:
        assert not _check(_edit(old, new), BASE, [scope]), (old, new)


def test_crafted_nesting_and_indentation() -> None:
    tabs = b"class A:\n\tclass B:\n\t\tdef f(self):\n\t\t\treturn 1\n\n\tx = 2\n"
    assert _check(tabs.replace(b"return 1", b"return 2"), tabs, ["A.B.f"])
    assert _check(tabs.replace(b"return 1", b"y = 1\n\t\t\treturn y"), tabs, ["A.B"])
    tight = b"class A:\n    def f(self):\n        return 1\n"  # its class's header takes the class's own line
    assert _check(tight.replace(b"return 1", b"return 2"), tight, ["A.f"])
    coding = b"# -*- coding: latin-1 -*-\n\n\ndef f():\n    return 1\n"
    assert not _check(coding.replace(b"return 1", b"return 2"), coding, ["f"])
    twice = b"\n\ndef f():\n    return 1\n\n\ndef f():\n    return 2\n"  # the old base defines it twice
    assert not _check(twice.replace(b"return 1", b"return 3"), twice, ["f"])
    flufl = b"from __future__ import barry_as_FLUFL\n\n\ndef f():\n    return 1\n"
    assert not _check(flufl.replace(b"return 1", b"return 2"), flufl, ["f"])
