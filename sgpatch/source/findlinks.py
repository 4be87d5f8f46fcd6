"""Air-gapped: a pinned file found in pip's ``find-links`` directories, with or without an index.

pip's ``find-links`` (``PIP_FIND_LINKS``, ``find-links`` in pip's configuration)
names directories (a path or a ``file://`` URL) holding distribution files;
``no-index`` (``PIP_NO_INDEX``) tells pip to ask no index at all.  A file sgpatch
fetches is always pinned by sha256 in VERSIONS.toml, so a plain directory is as
safe as an index: the file named like the pin is hashed before anything else is
done with it, a file with another sha256 is passed over (and named if nothing
else has the pin), and sgpatch.source.artifacts hashes the copy it takes again.
An ``http(s)`` find-links page is not read (said in the message when nothing is
found).
"""

from __future__ import annotations

import hashlib
import os
import stat
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sgpatch.source.http import shown

TRUE = ("1", "y", "yes", "t", "true", "on")  # pip's strtobool


def truthy(value: str) -> bool:
    return value.strip().lower() in TRUE


@dataclass(frozen=True, slots=True)
class LocalFile:
    """A pinned file found in a find-links directory."""

    path: Path
    location: str  # the find-links entry it was found through
    size: int

    @property
    def url(self) -> str:
        return self.path.as_uri()


def local_directory(location: str) -> Path | None:
    """The directory a find-links entry names (a path or a ``file://`` URL); None for a page on the web."""
    if location.startswith(("http://", "https://")):
        return None
    if location.startswith("file:"):
        return Path(urllib.request.url2pathname(urllib.parse.urlsplit(location).path))
    return Path(location).expanduser().absolute()


def _sha256(path: Path, limit: int) -> tuple[str, int] | None:
    """The sha256 and size of the regular file ``path`` (at most ``limit`` bytes), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        h = hashlib.sha256()
        while chunk := fh.read(1 << 20):
            h.update(chunk)
        return h.hexdigest(), info.st_size


def find_pinned(
    filename: str, sha256: str, locations: tuple[str, ...], *, limit: int
) -> tuple[LocalFile | None, list[str]]:
    """The first find-links directory holding ``filename`` with the pinned ``sha256``, and the ones holding it
    with another sha256 (``DIR holds sha256 X``)."""
    other: list[str] = []
    for location in locations:
        directory = local_directory(location)
        if directory is None or "/" in filename or filename in ("", ".", ".."):
            continue
        found = _sha256(directory / filename, limit)
        if found is None:
            continue
        digest, size = found
        if digest == sha256:
            return LocalFile(path=directory / filename, location=location, size=size), other
        other.append(f"find-links {location} holds sha256 {digest}")
    return None, other


def not_found(find_links: tuple[str, ...], indexes: tuple[str, ...], *, no_index: bool) -> str:
    """The message for a pinned file found nowhere: where it was looked for."""
    if not find_links and not no_index:
        return f"no package index lists it ({', '.join(shown(b) for b in indexes)})"
    places = [
        f"find-links {loc}" + (" (a web page: not read)" if local_directory(loc) is None else "") for loc in find_links
    ]
    if no_index:
        places.append("no index (pip's no-index is set)")
    else:
        places.extend(f"index {shown(b)}" for b in indexes)
    return "not found: looked in " + ", ".join(places)
