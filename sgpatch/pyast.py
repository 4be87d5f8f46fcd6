"""One parse per Python source: the landing check and the interface check of one verify share it.

The trees are read-only to both (nothing assigns to a node), so one ``ast.Module`` serves every reader
of the same bytes.  Parsing allocates hundreds of thousands of nodes that all stay alive, so the cyclic
collector is paused while parsing: it would only walk them again and again and free nothing.
"""

from __future__ import annotations

import ast
import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_parsed: dict[bytes, ast.Module] | None = None  # set only inside ``parses_shared()``


@contextmanager
def parses_shared() -> Iterator[None]:
    """Inside, :func:`parse_python` of the same bytes returns the same tree; after, they are let go
    (a tree kept to the end of the process costs more at exit, in the final collection, than it saved)."""
    global _parsed
    outer = _parsed
    _parsed = {} if outer is None else outer
    try:
        yield
    finally:
        _parsed = outer


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a burst of allocation that creates no garbage."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
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
    not remembered.
    """
    memo = _parsed
    found = memo.get(data) if memo is not None else None
    if found is None:
        with collector_paused():
            found = ast.parse(data, filename=filename)
        if memo is not None:
            memo[data] = found
    return found
