"""The release worked on ahead: while pip and the index are asked which file the release is, the port lays out and
reads the file the cache guesses it is, and keeps that work only where the index named the same file.

Which file a release is, only the index says (``source.release.find_release``: ``pip config list``, then the index;
about a quarter of a second on a 2-core machine, most of it pip's start-up, with the other core idle).  The cache
can guess (``source.artifacts.cached_source``): the release's sdist, else this host's wheel, filed under its
sha256.  Meanwhile the port starts on that file what it does next anyway: a child lays it out as the new checkout
(``stack.lay_out_ahead``: all but the commit, whose message names every wheel the index lists), and this process
opens it (its bytes checked against the sha256), reads the files the series touches and the package the series'
missing files are looked for in (``carry.read_lacking_package``).  When the index answers, the work is kept only if the
release's source is that very file (the same name, sha256 and path): the child is then handed the commit's message.
Otherwise the child is stopped (it leaves nothing), the file closed, and the port starts on the file the index
named, as without a guess.  A guess never decides anything: an index that lists another file, another sha256 or an
sdist the cache lacks costs the work done ahead, not an answer.  Whatever fails while reading ahead is dropped: the
port reads again after the index answered, where an error is raised as it is without a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sgpatch.checkout.fetch import remove_staging
from sgpatch.config import Artifact, Stack
from sgpatch.port.carry import lacking_files, read_lacking_package
from sgpatch.port.moved import KeptFiles
from sgpatch.port.parallel import Forked, Later, can_fork
from sgpatch.port.rebase import ArchiveFiles, Files, OldSeries
from sgpatch.port.stack import lay_out_ahead
from sgpatch.source.artifacts import cached_source
from sgpatch.source.release import Release


@dataclass
class Ahead:
    """The guessed file, laid out by a child and read here."""

    artifact: Artifact
    path: Path
    laying: Forked[tuple[str, str, str | None]]
    message: Later[str]  # the commit message the child waits for
    files: ArchiveFiles  # open (``close``)
    read: tuple[Files, KeptFiles] | None  # the files the series touches, and the release's files read for the port
    into: Path  # where the child lays the checkout out

    def is_source_of(self, release: Release) -> bool:
        """Whether the index named the file guessed: ``release``'s source is that very file."""
        return release.source == (self.artifact, self.path)

    def close(self) -> None:
        """Stop the child if it has not answered (it removes what it made; what it could not, killed before it
        unwound, is removed here once it is reaped), close the file; idempotent."""
        self.laying.close()
        remove_staging(self.into, self.laying.pid)
        self.message.close()
        self.files.close()


def start_ahead(version: str, old: OldSeries, touched: Sequence[str], stack: Stack, into: Path) -> Ahead | None:
    """The work on the file the cache guesses ``version``'s release is, started: its layout in ``into`` by a forked
    child (``stack``: the old stack ``renamed``), its reading here; None without a guess, or where no child can be
    forked (``parallel.can_fork``: the port then lays out after the index answered, as a thread would have to wait
    for the message with no way to be stopped)."""
    if not can_fork():
        return None
    guess = cached_source(version)
    if guess is None:
        return None
    artifact, path = guess
    try:
        message: Later[str] = Later()
    except OSError:  # no pipe to be had: the port lays out after the index answered
        return None
    try:
        laying = Forked(lay_out_ahead, stack, artifact, path, into, message, handed=message)
    except OSError:  # no process to be had: the same
        message.close()
        return None
    files = ArchiveFiles(path, artifact)
    ahead = Ahead(artifact, path, laying, message, files, None, into)
    try:
        current = files.read(touched)
        kept = KeptFiles(files.names, files.read)
        warm(kept, old, current)
        ahead.read = (current, kept)
    except Exception:  # the port reads again after the index answered, and raises there
        files.close()
    return ahead


def warm(release: KeptFiles, old: OldSeries, current: Files) -> None:
    """Read what the first patch's judging reads of the package first (``carry.read_lacking_package``), so that
    the workers forked for it share it."""
    if old.series.patches:
        first = old.series.patches[0]
        read_lacking_package(release, first, lacking_files(first, old.states[0], current), current)
