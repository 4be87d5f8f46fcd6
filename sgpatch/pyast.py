"""One parse per Python source per process: the landing check and the interface check share it.

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

_MAX_KEPT = 256
_parsed: dict[bytes, ast.Module] = {}


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
    """``ast.parse(data)``, shared with earlier callers that parsed the same bytes.

    Raises what ``ast.parse`` raises (SyntaxError, ValueError, RecursionError, MemoryError); failures are
    not remembered.
    """
    found = _parsed.get(data)
    if found is None:
        with collector_paused():
            found = ast.parse(data, filename=filename)
        if len(_parsed) >= _MAX_KEPT:
            del _parsed[next(iter(_parsed))]
        _parsed[data] = found
    return found
