"""A git object's id made here, without git: the digest of its kind, its size and its bytes (what
``git hash-object`` prints).  SHA-1 for the repositories git makes by default; SHA-256 for one made with
``--object-format=sha256``.  Standard library only: the verify paths that hash files import it."""

from __future__ import annotations

import hashlib


def object_id(kind: bytes, data: bytes) -> bytes:
    """The SHA-1 id (raw digest) of a ``kind`` object (``blob``, ``tree``, ``commit``) whose body is ``data``."""
    return hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data, usedforsecurity=False).digest()


def blob_id(data: bytes, *, like: str | None = None) -> str:
    """The git blob id of ``data`` in hex; ``like``: an id of the object format wanted (SHA-256's 64 digits, else
    SHA-1's)."""
    if like is not None and len(like) == 64:
        return hashlib.sha256(b"blob %d\0" % len(data) + data).hexdigest()
    return object_id(b"blob", data).hex()
