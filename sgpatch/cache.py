"""The user's cache directory (``$XDG_CACHE_HOME/sgpatch``) and the results kept in it, keyed by content.

A cache is a correctness risk, so its rules live here once: an entry is JSON (never code), found by a
sha256 over its inputs, written atomically; an entry that is missing, unreadable, truncated, too large or
of the wrong shape is a miss (and is rewritten), never an error; a cache directory that cannot be written
costs speed, never the answer.  The code that computes a result is an input too (:func:`code_digest`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

MAX_ENTRY_BYTES = 64 << 20


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sgpatch"


def digest(*parts: str | bytes) -> str:
    """sha256 over ``parts``, each length-prefixed (so no two lists of parts collide by concatenation)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(b"%d\0" % len(data))
        h.update(data)
    return h.hexdigest()


_CODE: list[str] = []


def code_digest() -> str:
    """sgpatch's version and the source of every file of the package: a changed sgpatch never reads an old
    result, and no list of "the modules this result depends on" has to be kept by hand."""
    if not _CODE:
        import sgpatch

        root = Path(sgpatch.__file__).resolve().parent
        parts: list[str | bytes] = [sgpatch.__version__]
        for src in sorted(root.rglob("*.py")):
            parts += [src.relative_to(root).as_posix(), src.read_bytes()]
        _CODE.append(digest(*parts))
    return _CODE[0]


def read_entry(path: Path) -> Any | None:
    """The JSON value stored at ``path``; None when there is none or it cannot be read whole."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_ENTRY_BYTES + 1)
        if len(raw) > MAX_ENTRY_BYTES:
            return None
        return json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None


def write_entry(path: Path, value: Any) -> None:
    """Store ``value`` at ``path`` atomically; a failure to write is ignored (the next run recomputes)."""
    from sgpatch.atomic import write_atomic

    with contextlib.suppress(OSError, ValueError):
        write_atomic(path, json.dumps(value, sort_keys=True).encode())
