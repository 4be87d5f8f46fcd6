"""A release that is not pinned yet: its files as the index lists them, pinned by the sha256 it states.

``port`` needs the new release's source before VERSIONS.toml knows it.  The
index pip is configured with lists the release's files with their sha256
(sgpatch.source.index); those hashes become the new stack's pins, shown in the
report for review, and the files are downloaded by them
(sgpatch.source.artifacts) and read as archives: no build backend of the
release ever runs.  A file already in sgpatch's cache under the same pin is
reused: it entered the cache only after its hash was checked.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from sgpatch.config import Artifact, host_wheel
from sgpatch.errors import SourceError
from sgpatch.results import Progress
from sgpatch.source.archive import Archive, open_archive
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
        return self.metadata_file()[1]

    def metadata_file(self, opened: Archive | None = None) -> tuple[str, bytes]:
        """Where the core metadata comes from (``sglang-0.5.10.tar.gz: PKG-INFO``) and its bytes.  ``opened``: an
        archive the caller holds open; read through it when it is that very file, checked against the same pin
        (not opened and hashed again)."""
        wheel = self.file("wheel")
        if wheel is not None:
            artifact, path = wheel
            name = f"{PACKAGE}-{self.version}.dist-info/METADATA"
        else:
            sdist = self.file("sdist")
            assert sdist is not None
            artifact, path = sdist
            name = "PKG-INFO"
        if opened is not None and opened.path == path and opened.sha256 == artifact.sha256:
            data = opened.read(name, limit=MAX_METADATA_BYTES) if name in opened else None
        else:
            data = _member(path, name, artifact.sha256)
        if data is None:
            raise SourceError(f"{self.source[0].filename}: has no core metadata (METADATA or PKG-INFO)")
        return f"{artifact.filename}: {name}", data

    def build_system_requires(self) -> tuple[str, ...] | None:
        """``[build-system] requires`` of the sdist's pyproject.toml; None without an sdist."""
        sdist = self.file("sdist")
        if sdist is None:
            return None
        data = _member(sdist[1], "pyproject.toml", sdist[0].sha256)
        if data is None:
            return ()
        try:
            doc = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
            detail = "nested too deep" if isinstance(exc, RecursionError) else str(exc)[:120]
            raise SourceError(f"{sdist[0].filename}: pyproject.toml does not parse: {detail}") from None
        system = doc.get("build-system")
        requires = system.get("requires") if isinstance(system, dict) else None
        if requires is None:
            return ()
        if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
            raise SourceError(f"{sdist[0].filename}: pyproject.toml: build-system.requires is not a list of strings")
        return tuple(requires)


MAX_METADATA_BYTES = 4 << 20  # METADATA, PKG-INFO or pyproject.toml (sglang's are a few KB)


def _member(path: Path, name: str, sha256: str) -> bytes | None:
    """One small member of a wheel, or of an sdist (named below its top directory), read through the archive
    reader (at most MAX_METADATA_BYTES), from the bytes its pin ``sha256`` was checked on."""
    with open_archive(path, sha256=sha256) as archive:
        return archive.read(name, limit=MAX_METADATA_BYTES) if name in archive else None


def find_release(version: str, *, progress: Progress | None = None) -> Release:
    """The release's files as the index lists them (PEP 691, with their sha256): the sdist if PyPI ships
    one and every wheel a Linux x86_64/aarch64 CPython host may install; the sdist (else this host's
    wheel, else the first one) downloaded by the index's sha256 and checked against it."""
    if progress:
        progress(f"asking the package index for the files of {PACKAGE} {version}")
    files = release_files(PACKAGE, version)
    artifacts = as_artifacts(files)
    if not artifacts:
        raise SourceError(
            f"{PACKAGE} {version}: the package index has no sdist or wheel for it",
            hint="check the version (pip index versions sglang)",
        )
    spelled = sorted({f.version for f in files if f.version and f.version != version})
    if spelled:  # 0.5.9.0 is 0.5.9 to PEP 440, but the files (and the sdist's top directory) say 0.5.9
        raise SourceError(
            f"{PACKAGE} {version}: the index names this release {spelled[0]} ({artifacts[0].filename}, ...)",
            hint=f"give the version as the release spells it: {spelled[0]}",
        )
    return pinned_release(version, artifacts, progress=progress)


def pinned_release(version: str, artifacts: tuple[Artifact, ...], *, progress: Progress | None = None) -> Release:
    """The release of these pinned files, with the sdist (if any) and this host's wheel (else the first) downloaded."""
    sdists = [a for a in artifacts if a.kind == "sdist"]
    wheels = tuple(a for a in artifacts if a.kind == "wheel")
    wanted = [*sdists[:1], host_wheel(wheels) or wheels[0]] if wheels else sdists[:1]
    paths = tuple(fetch_artifact(a, version, progress=progress) for a in wanted)
    return Release(version, (*sdists[:1], *wheels), paths)
