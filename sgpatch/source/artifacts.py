"""The download cache: SGLang's files fetched by pin, checked by sha256 before any byte is used.

sgpatch downloads a pinned file itself, from the URL an index of pip's lists it
at (sgpatch.source.index: pip's index URL, extra indexes, certificate bundle
and proxy), never through ``pip download``: pip prepares an sdist's metadata by
running its build backend, which is code from the index running before the pin
is checked.  The file is streamed to disk within a byte cap and the request's
deadline, hashed as it arrives, and enters the cache
(``$XDG_CACHE_HOME/sgpatch/artifacts/<sha256>/<name>``) only after its sha256
matched the pin, so anything found there can be reused.  An index that lists the
file with another sha256 is refused before anything is downloaded.  What a killed
download left (``.download-*``) is removed by the next one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from sgpatch.cache import cache_root as cache_root
from sgpatch.cache import refused_dir
from sgpatch.config import Artifact, host_wheel
from sgpatch.errors import EnvironmentFailure, SourceError
from sgpatch.lock import exclusive, pause
from sgpatch.results import Progress
from sgpatch.source.archive import MAX_DOWNLOAD
from sgpatch.source.archive import sha256_file as sha256_file

PACKAGE = "sglang"


def artifacts_root() -> Path:
    return cache_root() / "artifacts"


def _cached_sha256(path: Path) -> str | None:
    """The sha256 of a cache entry that is a regular file (never through a link), else None (a miss)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        h = hashlib.sha256()
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def trusted_dir(*names: str) -> Path:
    """``cache_root()/names...``, each level (``sgpatch/``, then each name) created 0700 and trusted as the
    result cache's is: not a link, the user's own, not writable by others.  Else SourceError (exit 2) for a
    link, EnvironmentFailure (exit 3) otherwise: nothing is downloaded into, read from or locked in a
    directory others can change."""
    path = cache_root()
    for name in ("", *names):
        path = path / name if name else path
        why = refused_dir(path)
        if why is not None:
            # a link planted there is hostile input (exit 2, as for a lock); the rest is the environment (exit 3)
            error = SourceError if why == "is a symbolic link" else EnvironmentFailure
            raise error(
                f"the cache folder {path} {why}: sgpatch keeps no download or lock there",
                hint=f"make it yours alone (chmod 700 {path}; no link), or set XDG_CACHE_HOME to a directory that is",
            )
    return path


def download(artifact: Artifact, version: str, dest: Path, *, progress: Progress | None = None) -> Path:
    """The pinned ``artifact`` of ``sglang==version`` downloaded into the directory ``dest`` and checked
    against its sha256 (SourceError, exit 2, on a mismatch: the file is removed).

    Where from: the first index of pip's that lists it with the pinned sha256 (sgpatch.source.index.locate).
    """
    from sgpatch.source.http import shown  # the HTTP client and the index are loaded only to download
    from sgpatch.source.index import locate

    try:
        if progress:
            progress(f"finding {artifact.filename} on pip's indexes")
        found, base, client = locate(PACKAGE, version, artifact)
        if found.size is not None and found.size > MAX_DOWNLOAD:
            raise EnvironmentFailure(f"the index lists {found.size} bytes, over the limit of {MAX_DOWNLOAD}")
        if progress:
            progress(f"downloading {artifact.filename} from {shown(base)}")
        target = dest / artifact.filename
        with target.open("wb") as out:

            def write(chunk: bytes) -> None:
                out.write(chunk)

            answer = client.get(found.url, accept="*/*", max_bytes=MAX_DOWNLOAD, sink=write, what="the file")
    except EnvironmentFailure as exc:
        raise EnvironmentFailure(f"cannot download {artifact.filename}: {exc.message}", hint=exc.hint) from None
    if answer.sha256 != artifact.sha256:
        target.unlink()
        raise SourceError(
            f"{artifact.filename}: sha256 mismatch: expected {artifact.sha256}, got {answer.sha256}",
            hint=f"{shown(base)} served a different file than the one pinned in VERSIONS.toml",
        )
    return target


def in_cache(artifact: Artifact) -> bool:
    """Whether the cache holds a regular file where ``artifact`` goes (its sha256 is not read: ``fetch_artifact``
    checks it when the file is used)."""
    try:
        return stat.S_ISREG(os.lstat(trusted_dir("artifacts", artifact.sha256) / artifact.filename).st_mode)
    except OSError:
        return False


def fetch_artifact(artifact: Artifact, version: str, *, progress: Progress | None = None) -> Path:
    """The pinned artifact in the cache, downloaded (``download``) if missing.

    The file enters the cache only after its hash matched; an interrupted or
    refused download leaves nothing behind (and what a killed one left, the
    next one removes).
    """
    cached = trusted_dir("artifacts", artifact.sha256) / artifact.filename
    if _cached_sha256(cached) == artifact.sha256:
        return cached
    with exclusive(
        cached.parent / ".lock", what=f"the download of {artifact.filename}", command="fetch", notify=progress
    ):
        if _cached_sha256(cached) == artifact.sha256:
            return cached  # another sgpatch downloaded it while we waited
        if os.path.isdir(cached) and not os.path.islink(cached):
            shutil.rmtree(cached)  # a directory where the file goes: in our own 0700 directory, never followed
        elif os.path.lexists(cached):
            os.unlink(cached)  # a corrupted entry, a link or a FIFO planted there: never trusted, never followed
        for stale in cached.parent.glob(".download-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a killed run: we hold the lock
        with tempfile.TemporaryDirectory(prefix=".download-", dir=cached.parent) as tmp:
            got = download(artifact, version, Path(tmp), progress=progress)
            pause("fetch:downloaded")
            os.replace(got, cached)
    return cached


def cached_source(version: str) -> tuple[Artifact, Path] | None:
    """A guess, from the cache alone, at the file ``find_release(version)`` will make a checkout from: the one
    sdist of ``sglang==version`` the cache holds, else its wheel for this host (``host_wheel``); None when the
    cache holds none, or two files of that name.  Only a guess: an index may list another file, another sha256,
    or an sdist the cache lacks.  Its bytes are checked against the sha256 it is filed under when read
    (``open_archive``), and what is read through it counts only where the index named the same file
    (``port.ahead``)."""
    try:
        root = trusted_dir("artifacts")
        entries = [(d.name, f.name) for d in os.scandir(root) if _is_digest(d) for f in os.scandir(d.path)]
    except (OSError, SourceError, EnvironmentFailure):
        return None
    sdist, prefix = f"{PACKAGE}-{version}.tar.gz", f"{PACKAGE}-{version}-"
    found: dict[str, list[Artifact]] = {}
    for digest, name in entries:
        if name == sdist or (name.startswith(prefix) and name.endswith(".whl")):
            kind = "sdist" if name == sdist else "wheel"
            found.setdefault(name, []).append(Artifact(kind, name, digest))
    if sdist in found:
        chosen: Artifact | None = found[sdist][0]
    else:
        chosen = host_wheel([a for name, arts in found.items() for a in arts])
    if chosen is None or len(found[chosen.filename]) != 1:
        return None
    try:  # a regular file in a folder trusted as every read of the cache is (``in_cache``)
        return (chosen, trusted_dir("artifacts", chosen.sha256) / chosen.filename) if in_cache(chosen) else None
    except (SourceError, EnvironmentFailure):
        return None


def _is_digest(entry: os.DirEntry[str]) -> bool:
    """A folder of the artifacts cache named as a sha256 is (never through a link)."""
    return (
        len(entry.name) == 64
        and all(c in "0123456789abcdef" for c in entry.name)
        and entry.is_dir(follow_symlinks=False)
    )
