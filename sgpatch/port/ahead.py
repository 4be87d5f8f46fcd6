"""The release read ahead: while pip and the index are asked which file the release is, the port reads the file
the cache guesses it is, and keeps that read only where the index named the same file.

Which file a release is, only the index says (``source.release.find_release``: ``pip config list``, then the index;
about a quarter of a second on a 2-core machine, most of it pip's start-up, with the other core idle).  The cache
can guess (``source.artifacts.cached_source``): the release's sdist, else this host's wheel, filed under its
sha256.  Meanwhile the port opens that file (its bytes checked against the sha256), reads the files the series
touches and the package the series' missing files are looked for in (``moved.read_package``), the work the port
does next anyway.  When the index answers, the read is taken only if the release's source is that very file (the
same name, sha256 and path); otherwise it is closed, and the port reads the file the index named, as without a
guess.  A guess never decides anything: an index that lists another file, another sha256 or an sdist the cache
lacks costs the read ahead, not an answer.  Whatever fails while reading ahead is dropped: the port reads again
after the index answered, where an error is raised as it is without a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sgpatch.config import Artifact
from sgpatch.port.moved import KeptFiles, read_package
from sgpatch.port.rebase import ArchiveFiles, Files, OldSeries
from sgpatch.source.artifacts import cached_source
from sgpatch.source.release import Release


@dataclass
class ReadAhead:
    """The guessed file opened, what the port reads first read from it."""

    artifact: Artifact
    path: Path
    files: ArchiveFiles  # open: the caller closes it, or ``take`` does
    touched: Files  # the files the series touches, as the release has them
    release: KeptFiles  # the release's files read once for the port, the package read into it

    def take(self, release: Release) -> ReadAhead | None:
        """This read, if ``release``'s source is the file guessed; else None, and the file is closed."""
        if release.source == (self.artifact, self.path):
            return self
        self.files.close()
        return None


def read_ahead(version: str, old: OldSeries, touched: Sequence[str]) -> ReadAhead | None:
    """The file the cache guesses ``version``'s release is, read as the port starts reading it; None without a
    guess or where reading it failed (the port then reads the file the index names)."""
    guess = cached_source(version)
    if guess is None:
        return None
    artifact, path = guess
    files = ArchiveFiles(path, artifact)
    try:
        current = files.read(touched)
        kept = KeptFiles(files.names, files.read)
        warm(kept, old, current)
    except Exception:
        files.close()
        return None
    return ReadAhead(artifact, path, files, current, kept)


def warm(release: KeptFiles, old: OldSeries, current: Files) -> None:
    """Read what the first patch's judging reads of the package first (``moved.read_package``, for its first
    Python file the release lacks), so that the workers forked for it share it."""
    patches = old.series.patches
    if not patches:
        return
    before = old.states[0]
    missing = [f.path for f in patches[0].files if before.get(f.path) is not None and current.get(f.path) is None]
    python = next((p for p in missing if p.endswith(".py")), None)
    if python is not None:
        read_package(release, python, current)
