"""The state of one port: the old series with its exact files, and the new checkout it is carried onto.

sgpatch knows the old release's files exactly (the pinned artifact), so a hunk
that no longer applies is merged three ways: old base, new base, old patched
(``carry``).  A kept patch is committed on the new checkout at once, so the
commits between the new base and ``Rebase.tip`` are the new series.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sgpatch.cache import Cache, key
from sgpatch.checkout.chain import ChainCommit
from sgpatch.checkout.state import trailers
from sgpatch.config import Artifact, Config, Stack
from sgpatch.errors import SourceError
from sgpatch.git.batch import read_blobs
from sgpatch.git.objectid import blob_id
from sgpatch.git.repo import Git
from sgpatch.project import Project, load_project
from sgpatch.results import Progress
from sgpatch.series.engine import apply_in_order, apply_modes
from sgpatch.series.patch import TRAILER_PATCH, Patch, Series
from sgpatch.source.archive import Archive, Kind, open_archive
from sgpatch.source.artifacts import fetch_artifact

if TYPE_CHECKING:
    from sgpatch.series.verdict import PortedPatch

Files = dict[str, bytes | None]
ARTIFACT_FILES = "artifact-files"  # the cache kind of ``read_files``


# --------------------------------------------------------------------------- the old release


@dataclass(frozen=True, slots=True)
class OldSeries:
    """The old stack's series and the exact files before and after each patch."""

    stack: Stack
    series: Series
    states: tuple[Files, ...]  # states[0]: the pinned base; states[k]: after patch k


def read_files(path: Path, artifact: Artifact, wanted: Sequence[str], *, cache: Cache | None = None) -> Files:
    """The ``wanted`` checkout-relative files of a pinned artifact (sha256 checked first), None if absent.

    Every member is checked (sgpatch.source.archive); only the wanted ones are read.  ``cache`` keeps what was
    read under the artifact's sha256 and the wanted paths (work: an sdist is a gzip stream, read whole twice to
    reach a few members), so the next port of the series skips the archive.
    """
    entry = key(ARTIFACT_FILES, artifact.sha256, *wanted)
    found = _kept_files(cache.get(ARTIFACT_FILES, entry), wanted) if cache is not None else None
    if found is not None:
        return found
    with open_archive(path, "sdist" if artifact.kind == "sdist" else "wheel", sha256=artifact.sha256) as archive:
        found = _read_members(archive, wanted)
    if cache is not None:  # read from the checked bytes of the pinned artifact
        kept = {p: None if d is None else base64.b64encode(d).decode() for p, d in found.items()}
        cache.put(ARTIFACT_FILES, entry, kept)
    return found


def _kept_files(doc: object, wanted: Sequence[str]) -> Files | None:
    """A kept ``read_files`` result, or None (a miss) unless it has exactly the wanted paths, each None or base64."""
    if not isinstance(doc, dict) or set(doc) != set(wanted):
        return None
    found: Files = {}
    try:
        for p in wanted:
            value = doc[p]
            if value is not None and not isinstance(value, str):
                return None
            found[p] = None if value is None else base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return found


def _read_members(archive: Archive, wanted: Sequence[str]) -> Files:
    found: Files = dict.fromkeys(wanted)
    inner = {p[len("python/") :] for p in wanted if p.startswith("python/")}
    for entry, data in archive.files(inner):
        found[f"python/{entry.name}"] = data
    return found


def load_old(
    config: Config, stack_name: str | None, *, progress: Progress | None, cache: Cache | None = None
) -> tuple[OldSeries, Project]:
    """The old stack's series with the exact files before and after each patch (from its pinned artifact;
    ``cache``: see ``read_files``)."""
    project = load_project(config, stack_name)
    stack, series = project.stack, project.series
    artifact = stack.source_artifact
    assert artifact is not None
    path = fetch_artifact(artifact, stack.sglang_version, progress=progress)
    # A kept read stands in for the archive only when every file it gives is then checked against its pin.
    pinned_paths = {f.path for f in stack.files}
    base = read_files(path, artifact, series.touched, cache=cache if pinned_paths.issuperset(series.touched) else None)
    for pinned in stack.files:
        data = base.get(pinned.path)
        if data is None or blob_id(data) != pinned.pristine:
            raise SourceError(f"{artifact.filename}: {pinned.path} is not the pinned blob {pinned.pristine[:12]}")
    stages = apply_in_order(base, series.patches)
    if isinstance(stages, tuple):
        patch, failure = stages
        raise SourceError(
            f"{patch.name} does not apply to its own pinned base ({stack.name}): {failure.describe()}",
            hint=f"run 'sgpatch verify {stack.name}' and fix the series first",
        )
    return OldSeries(stack, series, (dict(base), *stages)), project


# --------------------------------------------------------------------------- classification


class ReleaseFiles(Protocol):
    """The new release's files, where a port looks for a file the series touches that the release moved."""

    def names(self, top: str) -> list[str]: ...

    def read(self, paths: Sequence[str]) -> Files: ...


class CheckoutFiles:
    """The files of one commit of the new checkout."""

    def __init__(self, g: Git, rev: str) -> None:
        self.g, self.rev = g, rev

    def names(self, top: str) -> list[str]:
        return self.g.list_files(self.rev, top)

    def read(self, paths: Sequence[str]) -> Files:
        return read_blobs(self.g, self.rev, paths)


class ArchiveFiles:
    """The files of the pinned artifact the new checkout is being made from (checked by its sha256 first).

    Opened once for the whole port (the series' files, the listing, the files a moved hunk is looked for in);
    ``close`` when done.  A forked worker (``port.parallel``) opens it anew: a descriptor shared across a fork
    shares its offset, and two processes reading through one would read each other's bytes."""

    def __init__(self, path: Path, artifact: Artifact) -> None:
        self.path, self.artifact = path, artifact
        self._names: list[str] | None = None
        self._archive: Archive | None = None
        self._opened_by = 0  # the process that opened ``_archive``

    def _open(self) -> Archive:
        if self._archive is not None and self._opened_by != os.getpid():
            self.close()  # this process's copy of the descriptor only
        if self._archive is None:
            kind: Kind = "sdist" if self.artifact.kind == "sdist" else "wheel"
            self._archive = open_archive(self.path, kind, sha256=self.artifact.sha256)
            self._opened_by = os.getpid()
        return self._archive

    def archive(self) -> Archive:
        """The artifact, open (its sha256 checked), in this process."""
        return self._open()

    def names(self, top: str) -> list[str]:
        if self._names is None:
            self._names = sorted(f"python/{e.name}" for e in self._open().entries)
        return [n for n in self._names if n.startswith(f"{top}/")]

    def read(self, paths: Sequence[str]) -> Files:
        return _read_members(self._open(), paths)

    def close(self) -> None:
        if self._archive is not None:
            self._archive.close()
            self._archive = None


@dataclass
class Rebase:
    """Mutable state of one port run over the new checkout.

    Kept patches wait in ``pending`` until ``commit_kept`` commits them on ``tip`` (the checkout may still
    be in the making while the series is judged)."""

    g: Git
    base: str
    tip: str
    current: Files
    ported: list[PortedPatch]
    kept: list[str]
    release: ReleaseFiles | None = None
    pending: list[tuple[Patch, Files, Files]] = field(default_factory=list)  # (patch, its files, the files before)


def commit_kept(run: Rebase, *, date: str) -> None:
    """Commit the patches kept so far on ``run.tip``, in order (objects only: the checkout does not move)."""
    for patch, files, before in run.pending:
        run.tip = run.g.commit_files(run.tip, files, before, patch.commit_message(), date, modes=apply_modes({}, patch))
    run.pending.clear()


class CommitTree:
    """The files of one commit, as a read-only SourceTree (verify without touching the work tree)."""

    def __init__(self, g: Git, commit: str) -> None:
        self.g = g
        self.commit = commit

    @property
    def label(self) -> str:
        return f"commit {self.commit[:12]} of {self.g.root}"

    def read(self, path: str) -> bytes | None:
        return self.g.read_blob(self.commit, path)

    def list(self, prefix: str) -> list[str]:
        return self.g.list_files(self.commit, prefix)


def series_chain(g: Git, base: str, tip: str) -> list[ChainCommit]:
    out: list[ChainCommit] = []
    commit = tip
    while commit != base:
        parent = g.parents(commit)[0]
        out.append(ChainCommit(commit, parent, _trailer_name(g, commit)))
        commit = parent
    out.reverse()
    return out


def _trailer_name(g: Git, commit: str) -> str | None:
    return trailers(g.message(commit)).get(TRAILER_PATCH)
