"""One parse per Python source: the landing check and the interface check of one verify share it.

The trees are read-only to both (nothing assigns to a node), so one ``ast.Module`` serves every reader
of the same bytes.  Parsing allocates hundreds of thousands of nodes that all stay alive, so the cyclic
collector is paused while parsing: it would only walk them again and again and free nothing.

Threads: the memo belongs to the thread that opened it (fleet workers run verifies side by side); a pool's
workers join their caller's memo explicitly (``parses_shared(memo)``), so identical files on many hosts are
parsed once.  The collector is paused while any thread parses and resumed when the last one is done.
"""

from __future__ import annotations

import ast
import functools
import gc
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
K = TypeVar("K", bound=Hashable)


_HEAD = 2048  # texts kept under their first bytes: a file's versions share them, other files mostly do not


class ParseMemo:
    """The trees parsed inside one ``parses_shared()``, by their bytes; safe to share between threads."""

    __slots__ = ("_kin", "_lock", "_made", "_trees")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trees: dict[bytes, ast.Module] = {}
        self._kin: dict[bytes, list[bytes]] = {}  # data[:_HEAD] -> the texts kept that begin so
        self._made: dict[tuple[Callable[[Any], Any], Hashable], Any] = {}  # (func, key) -> func(key): ``per_memo``

    def made(self, func: Callable[[K], R], key: K) -> R:
        """``func(key)``, made once in this memo (another thread's answer for the same key wins, as in ``keep``)."""
        with self._lock:
            if (func, key) in self._made:
                found: R = self._made[func, key]
                return found
        value = func(key)
        with self._lock:
            kept: R = self._made.setdefault((func, key), value)
            return kept

    def get(self, data: bytes) -> ast.Module | None:
        with self._lock:
            return self._trees.get(data)

    def kin(self, data: bytes) -> list[tuple[bytes, ast.Module]]:
        """The texts kept that begin with the same bytes as ``data``, with their trees."""
        with self._lock:
            return [(text, self._trees[text]) for text in self._kin.get(data[:_HEAD], ())]

    def keep(self, data: bytes, tree: ast.Module) -> ast.Module:
        """``tree``, or the tree another thread kept for the same bytes meanwhile (one tree per bytes)."""
        with self._lock:
            kept = self._trees.setdefault(data, tree)
            if kept is tree:
                self._kin.setdefault(data[:_HEAD], []).append(data)
            return kept


_thread = threading.local()  # .memo: this thread's ParseMemo, set only inside ``parses_shared()``


def _current() -> ParseMemo | None:
    memo: ParseMemo | None = getattr(_thread, "memo", None)
    return memo


@contextmanager
def parses_shared(memo: ParseMemo | None = None) -> Iterator[ParseMemo]:
    """Inside, in this thread, :func:`parse_python` of the same bytes returns the same tree; after, they are
    let go (a tree kept to the end of the process costs more at exit, in the final collection, than it saved).
    Nested, the outer memo serves; ``memo`` joins a memo another thread opened (a pool's workers)."""
    outer = _current()
    _thread.memo = memo if memo is not None else outer if outer is not None else ParseMemo()
    try:
        yield _thread.memo
    finally:
        _thread.memo = outer


def per_memo(maxsize: int = 16) -> Callable[[Callable[[K], R]], Callable[[K], R]]:
    """``func(key)`` kept as long as the trees it is made of: in the memo of the ``parses_shared()`` around the
    call, else in an ``lru_cache(maxsize)`` of its own.  What a tree is read into (a file's outline, which holds its
    nodes; the lines and names of its text) then goes with the memo, instead of keeping a task's trees and texts
    alive into the next one: a port's worker judges one file after another, and the memory of what it let go is
    used again for the next file, where what was kept on would have it take fresh pages from the system (on a
    virtual machine, a few microseconds each).  ``func`` must depend on ``key`` alone (bytes, or a node: a parsed
    tree is never changed)."""

    def decorate(func: Callable[[K], R]) -> Callable[[K], R]:
        outside = functools.lru_cache(maxsize=maxsize)(func)

        @functools.wraps(func)
        def wrapper(key: K) -> R:
            memo = _current()
            return outside(key) if memo is None else memo.made(func, key)

        return wrapper

    return decorate


def _dumps(_: str) -> dict[bytes, str]:
    """A memo's table of dumps by the bytes they were parsed from (``dump_of``)."""
    return {}


def dump_of(node: ast.AST, source: bytes | None) -> str:
    """``ast.dump(node)``, kept in the memo of the ``parses_shared()`` around the call under ``source``: the exact
    bytes ``node`` was parsed from (a statement's tree depends on its own tokens alone: the same bytes, the same
    dump).  A port dumps the same definitions and statements of a file's versions again and again (the old base,
    the release, each hunk's text).  ``source`` None (a text whose bytes alone do not say it or whose columns do not
    count them: an encoding declaration, a byte-order mark), or no memo: dumped each time."""
    memo = _current()
    if memo is None or source is None:
        return ast.dump(node)
    table = memo.made(_dumps, "dumps")
    found = table.get(source)
    if found is None:
        found = table[source] = ast.dump(node)  # another thread may do the same meanwhile: the same string
    return found


_pauses = 0  # threads inside collector_paused(), under _pause_lock
_resume = False  # the collector was on when the first of them paused it
_pause_lock = threading.Lock()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a burst of allocation that creates no garbage; with threads,
    it is resumed (if it was on) when the last of them is done."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


def without_collector(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` runs with the cyclic collector paused (see :func:`collector_paused`)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with collector_paused():
            return func(*args, **kwargs)

    return wrapper


def parse_python(data: bytes, *, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(data)``, shared with earlier callers that parsed the same bytes (in ``parses_shared()``).

    Raises what ``ast.parse`` raises (SyntaxError, ValueError, RecursionError, MemoryError); failures are
    not remembered.  A text that begins as a kept one does is parsed from where they differ (``sgpatch.pyast.reparse``:
    the same tree, its unchanged statements shared).
    """
    memo = _current()
    found = memo.get(data) if memo is not None else None
    if found is None:
        with collector_paused():
            found = _from_kin(memo, data) if memo is not None else None
            if found is None:
                found = ast.parse(data, filename=filename)
        if memo is not None:
            found = memo.keep(data, found)
    return found


def _from_kin(memo: ParseMemo, data: bytes) -> ast.Module | None:
    """``data``'s tree from the kept text that shares the most of its beginning (``pyast.reparse``), or None."""
    kin = memo.kin(data)
    if not kin:
        return None
    from sgpatch.pyast.reparse import common_prefix, reparse  # only a text with kin needs it (not a verify's start)

    best, shared = None, 0
    for text, tree in kin:
        n = common_prefix(data, text)
        if n > shared:
            best, shared = (text, tree), n
    if best is None or shared < len(data) // 8:
        return None  # little to re-use: a whole parse costs about the same
    return reparse(data, best[0], best[1], shared)
