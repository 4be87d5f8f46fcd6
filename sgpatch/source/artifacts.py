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
import tempfile
from pathlib import Path

from sgpatch.cache import cache_root as cache_root
from sgpatch.config import Artifact
from sgpatch.errors import EnvironmentFailure, SourceError
from sgpatch.lock import exclusive, pause
from sgpatch.results import Progress
from sgpatch.source.http import shown

PACKAGE = "sglang"
MAX_DOWNLOAD = 1 << 30  # bytes; sglang's largest file today is 39 MB (a 0.5.23 manylinux wheel)


def artifacts_root() -> Path:
    return cache_root() / "artifacts"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_artifact(path: Path, artifact: Artifact) -> None:
    """Refuse a local artifact whose sha256 is not the pinned one (before any extraction)."""
    actual = sha256_file(path)
    if actual != artifact.sha256:
        raise SourceError(f"{path}: sha256 mismatch: expected {artifact.sha256}, got {actual}")


def download(artifact: Artifact, version: str, dest: Path, *, progress: Progress | None = None) -> Path:
    """The pinned ``artifact`` of ``sglang==version`` downloaded into the directory ``dest`` and checked
    against its sha256 (SourceError, exit 2, on a mismatch: the file is removed).

    Where from: the first index of pip's that lists it with the pinned sha256 (sgpatch.source.index.locate).
    """
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


def _cached_path(artifact: Artifact) -> Path:
    return artifacts_root() / artifact.sha256 / artifact.filename


def cached_artifact(artifact: Artifact) -> Path | None:
    """The pinned artifact if the cache already holds it (sha256-checked), without downloading it."""
    cached = _cached_path(artifact)
    return cached if cached.is_file() and sha256_file(cached) == artifact.sha256 else None


def fetch_artifact(artifact: Artifact, version: str, *, progress: Progress | None = None) -> Path:
    """The pinned artifact in the cache, downloaded (``download``) if missing.

    The file enters the cache only after its hash matched; an interrupted or
    refused download leaves nothing behind (and what a killed one left, the
    next one removes).
    """
    cached = _cached_path(artifact)
    if cached.is_file() and sha256_file(cached) == artifact.sha256:
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(
        cached.parent / ".lock", what=f"the download of {artifact.filename}", command="fetch", notify=progress
    ):
        if cached.is_file():
            if sha256_file(cached) == artifact.sha256:
                return cached  # another sgpatch downloaded it while we waited
            cached.unlink()  # a corrupted cache entry is never trusted
        for stale in cached.parent.glob(".download-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a killed run: we hold the lock
        with tempfile.TemporaryDirectory(prefix=".download-", dir=cached.parent) as tmp:
            got = download(artifact, version, Path(tmp), progress=progress)
            pause("fetch:downloaded")
            os.replace(got, cached)
    return cached
