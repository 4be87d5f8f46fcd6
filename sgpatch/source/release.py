"""A release that is not pinned yet: find its PyPI files through pip and pin them by sha256.

``port`` needs the new release's source before VERSIONS.toml knows it.  pip
downloads it (so the user's index, mirrors, proxy and certificates apply),
and the sha256 of what it served becomes the new stack's pin, shown in the
report for review.  A file already in sgpatch's cache under the same name is
reused: it entered the cache only after its hash was checked.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from sgpatch.config import Artifact, host_wheel
from sgpatch.errors import SourceError
from sgpatch.results import Progress
from sgpatch.source.archive import open_archive
from sgpatch.source.artifacts import PACKAGE, fetch_artifact
from sgpatch.source.index import as_artifacts, release_files


@dataclass(frozen=True, slots=True)
class Release:
    """The PyPI files of one release: the sdist when PyPI has one, and every served wheel (one per
    CPython version and platform for platform wheels); ``paths`` are the local copies downloaded
    (the sdist and this host's wheel: the source and the metadata)."""

    version: str
    artifacts: tuple[Artifact, ...]
    paths: tuple[Path, ...]

    def _local(self, artifact: Artifact) -> tuple[Artifact, Path] | None:
        path = next((p for p in self.paths if p.name == artifact.filename and p.parent.name == artifact.sha256), None)
        if path is None:
            path = next((p for p in self.paths if p.name == artifact.filename), None)
        return (artifact, path) if path is not None else None

    @property
    def source(self) -> tuple[Artifact, Path]:
        """What a checkout is made from: the sdist if there is one, else a downloaded wheel."""
        for artifact in self.artifacts:
            local = self._local(artifact)
            if local is not None:
                return local
        raise SourceError(f"{PACKAGE} {self.version}: none of its files was downloaded")

    @property
    def wheels(self) -> tuple[Artifact, ...]:
        return tuple(a for a in self.artifacts if a.kind == "wheel")

    def file(self, kind: str) -> tuple[Artifact, Path] | None:
        """A downloaded file of ``kind``."""
        return next((x for a in self.artifacts if a.kind == kind and (x := self._local(a)) is not None), None)

    def metadata(self) -> bytes:
        """The release's core metadata: the wheel's METADATA, else the sdist's PKG-INFO."""
        wheel = self.file("wheel")
        if wheel is not None:
            name = f"{PACKAGE}-{self.version}.dist-info/METADATA"
            data = _member(wheel[1], name)
        else:
            sdist = self.file("sdist")
            assert sdist is not None
            data = _member(sdist[1], "PKG-INFO")
        if data is None:
            raise SourceError(f"{self.source[0].filename}: has no core metadata (METADATA or PKG-INFO)")
        return data

    def build_system_requires(self) -> tuple[str, ...] | None:
        """``[build-system] requires`` of the sdist's pyproject.toml; None without an sdist."""
        sdist = self.file("sdist")
        if sdist is None:
            return None
        data = _member(sdist[1], "pyproject.toml")
        if data is None:
            return ()
        try:
            doc = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SourceError(f"{sdist[0].filename}: pyproject.toml does not parse: {exc}") from None
        requires = (doc.get("build-system") or {}).get("requires") or []
        return tuple(str(r) for r in requires)


def _member(path: Path, name: str) -> bytes | None:
    """One member of a wheel, or of an sdist (named below its top directory), read through the archive reader."""
    with open_archive(path) as archive:
        return archive.read(name) if name in archive else None


def find_release(version: str, *, progress: Progress | None = None) -> Release:
    """The release's files as the index lists them (PEP 691, with their sha256): the sdist if PyPI ships
    one and every wheel a Linux x86_64/aarch64 CPython host may install; the sdist (else this host's
    wheel, else the first one) downloaded through pip and checked against the index's sha256."""
    if progress:
        progress(f"asking the package index for the files of {PACKAGE} {version}")
    artifacts = as_artifacts(release_files(PACKAGE, version))
    if not artifacts:
        raise SourceError(
            f"{PACKAGE} {version}: the package index has no sdist or wheel for it",
            hint="check the version (pip index versions sglang)",
        )
    return pinned_release(version, artifacts, progress=progress)


def pinned_release(version: str, artifacts: tuple[Artifact, ...], *, progress: Progress | None = None) -> Release:
    """The release of these pinned files, with the sdist (if any) and this host's wheel (else the first) downloaded."""
    sdists = [a for a in artifacts if a.kind == "sdist"]
    wheels = tuple(a for a in artifacts if a.kind == "wheel")
    wanted = [*sdists[:1], host_wheel(wheels) or wheels[0]] if wheels else sdists[:1]
    paths = tuple(fetch_artifact(a, version, progress=progress) for a in wanted)
    return Release(version, (*sdists[:1], *wheels), paths)
