"""The shared parse (sgpatch/pyast/) under threads: fleet workers verify side by side, each in a thread."""

from __future__ import annotations

import ast
import gc
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sgpatch.pyast import collector_paused, parse_python, parses_shared, per_memo
from sgpatch.pyast.reparse import declares_encoding
from sgpatch.series.patch import split_lines
from sgpatch.series.statements import _items, items_of
from sgpatch.series.upstream import node_bytes, outline

SOURCE = b"def f(x):\n    return x + 1\n"


def test_one_tree_per_bytes_inside_and_none_kept_after() -> None:
    with parses_shared():
        assert parse_python(SOURCE) is parse_python(SOURCE)
    assert parse_python(SOURCE) is not parse_python(SOURCE)  # nothing kept once the memo is closed


def test_threads_that_open_their_own_memo_do_not_leave_one_behind() -> None:
    """Two threads open and close memos interleaved: afterwards no thread (and not the main one) still holds
    a memo, which the old module-level memo did (a later verify then got yesterday's trees)."""
    opened = threading.Barrier(2)
    closed_first = threading.Event()
    trees: dict[str, object] = {}

    def first() -> None:
        with parses_shared():
            opened.wait()
            trees["first"] = parse_python(SOURCE)
        closed_first.set()

    def second() -> None:
        with parses_shared():
            opened.wait()
            closed_first.wait()
            trees["second"] = parse_python(SOURCE)
        trees["after"] = parse_python(SOURCE)
        trees["after again"] = parse_python(SOURCE)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert trees["first"] is not trees["second"]  # each thread its own memo
    assert trees["after"] is not trees["after again"]  # the second thread kept nothing
    assert parse_python(SOURCE) is not parse_python(SOURCE)  # neither did the main thread


def test_a_pool_joins_its_callers_memo() -> None:
    with parses_shared() as memo:
        mine = parse_python(SOURCE)

        def work(_: int) -> object:
            with parses_shared(memo):
                return parse_python(SOURCE)

        with ThreadPoolExecutor(max_workers=4) as pool:
            found = list(pool.map(work, range(16)))
    assert all(tree is mine for tree in found)


def test_the_collector_is_back_on_when_the_last_thread_is_done() -> None:
    assert gc.isenabled()
    inside = threading.Barrier(2)
    release = threading.Event()

    def hold() -> None:
        with collector_paused():
            inside.wait()
            release.wait()

    t = threading.Thread(target=hold)
    t.start()
    with collector_paused():
        inside.wait()
    assert not gc.isenabled()  # the other thread still parses: not resumed under it
    release.set()
    t.join()
    assert gc.isenabled()


def test_what_is_made_from_a_tree_goes_with_its_memo() -> None:
    """``per_memo``: inside a memo, made once per key and let go with the memo (a port's worker keeps no file's
    outline into the next file); outside one, a small lru_cache of its own still serves."""
    made: list[bytes] = []

    @per_memo(maxsize=2)
    def names(data: bytes) -> list[str]:
        made.append(data)
        return sorted(n.name for n in ast.walk(parse_python(data)) if isinstance(n, ast.FunctionDef))

    with parses_shared():
        first = names(SOURCE)
        assert names(SOURCE) is first and made == [SOURCE]
    with parses_shared():
        again = names(SOURCE)
    assert again == first and again is not first and made == [SOURCE, SOURCE]  # nothing kept past the memo
    assert names(SOURCE) is names(SOURCE) and len(made) == 3  # outside a memo: its own cache
    other = b"def g():\n    pass\n"
    assert names(other) == ["g"] and names(SOURCE) == ["f"]


def test_the_real_outline_is_the_same_inside_and_outside_a_memo() -> None:
    with parses_shared():
        inside = outline(SOURCE)
        assert inside is outline(SOURCE)
    outside = outline(SOURCE)
    assert inside is not None and outside is not None and inside is not outside
    assert {q: [(d.start, d.end, d.dump) for d in ds] for q, ds in inside.definitions.items()} == {
        q: [(d.start, d.end, d.dump) for d in ds] for q, ds in outside.definitions.items()
    }


def test_a_dump_kept_by_its_bytes_is_the_dump_of_every_node_with_those_bytes(
    release_tree: Callable[[str], Path],
) -> None:
    """``dump_of`` keeps a dump under the exact bytes of what it dumps: over two real releases' files (their
    definitions by their lines, their statements by their tokens' bytes), bytes seen twice always dumped the same,
    and inside a memo each definition's and statement's dump is ``ast.dump``'s."""
    seen: dict[bytes, str] = {}
    count = 0
    for version in ("0.5.9", "0.5.12.post1"):
        root = release_tree(version)
        for path in sorted(root.rglob("*.py"))[::3]:
            data = path.read_bytes()
            with parses_shared():
                found = outline(data)
                if found is None:
                    continue
                for defs in found.definitions.values():
                    for d in defs:
                        assert d.dump == ast.dump(d.node)
                        if d.source is not None:
                            assert seen.setdefault(d.source, d.dump) == d.dump, (path, d.qualname)
                            count += 1
                for scope in found.statements:
                    for _, node in found.statements._nodes[scope]:
                        key = found.statements._source(node)
                        if key is None:  # an encoding declared, or a byte-order mark
                            assert declares_encoding(data) or data.startswith(b"\xef\xbb\xbf"), path
                            continue
                        assert seen.setdefault(key, ast.dump(node)) == ast.dump(node), path
                        count += 1
                    assert found.statements[scope] == tuple(
                        sorted(ast.dump(n) for _, n in found.statements._nodes[scope])
                    )
    assert count > 20_000 and len(seen) < count  # most bytes come again (the two releases share most code)


def test_a_definitions_statements_dumped_by_their_bytes_are_as_ast_dump_dumps_them(
    release_tree: Callable[[str], Path],
) -> None:
    """The statement items of a definition (``statements.items_of``) dump each simple statement under its bytes: the
    same file of two real releases in one memo (their statements share bytes, and so dumps), every definition's
    items equal those made with ``ast.dump`` alone, and a decorated statement is never keyed by its bytes (its
    decorators stand before its position)."""
    old, new = release_tree("0.5.9"), release_tree("0.5.12.post1")
    count = decorated = 0
    for path in sorted(new.rglob("*.py"))[::4]:
        texts = [p.read_bytes() for p in (old / path.relative_to(new), path) if p.is_file()]
        with parses_shared():
            for data in texts:
                found = outline(data)
                for d in [d for ds in found.definitions.values() for d in ds] if found is not None else []:
                    made = items_of(d)
                    assert made == _items((d.node, None, d.start)), (path, d.qualname)
                    count += len(made)
                    for _, node, *_ in made:
                        decorated += bool(getattr(node, "decorator_list", None))
                        if d.source is not None and not isinstance(node, ast.If | ast.For | ast.While | ast.Try):
                            key = node_bytes(split_lines(d.source), node, d.start)
                            assert key is not None and key.strip() == key, (path, d.qualname)
    assert count > 20_000 and decorated > 100
    # Two methods alike but for their decorators: the same bytes from their positions on, not the same dump.
    twins = (
        b"class A:\n    @property\n    def f(self): return 1\n\n"
        b"class B:\n    @staticmethod\n    def f(self): return 1\n"
    )
    with parses_shared():
        a, b = ((outline(twins) or _none()).definitions[name][0] for name in ("A", "B"))
        (item_a, *_), (item_b, *_) = items_of(a)[0], items_of(b)[0]
        assert item_a != item_b and "property" in item_a[1] and "staticmethod" in item_b[1]


def test_a_text_whose_bytes_do_not_say_it_keeps_no_dump() -> None:
    latin = b"# -*- coding: latin-1 -*-\ndef f():\n    return '\xe9'\n"
    bom = b"\xef\xbb\xbfx = 1\n"
    with parses_shared():
        assert all(d.source is None for ds in (outline(latin) or _none()).definitions.values() for d in ds)
        assert (outline(bom) or _none()).statements._source(ast.parse(bom).body[0]) is None
        plain = outline(b"x = 1; y = 2\n") or _none()
        assert [plain.statements._source(n) for _, n in plain.statements._nodes[""]] == [b"x = 1", b"y = 2"]


def _none() -> Any:
    raise AssertionError("not parsed")
