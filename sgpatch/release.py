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

from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from sgpatch.archive import open_archive
from sgpatch.artifacts import PACKAGE, cache_root, download_unpinned, sha256_file
from sgpatch.config import Artifact
from sgpatch.errors import SourceError
from sgpatch.results import Progress


@dataclass(frozen=True, slots=True)
class Release:
    """The PyPI files of one release: the sdist when PyPI has one, and the wheel."""

    version: str
    artifacts: tuple[Artifact, ...]
    paths: tuple[Path, ...]

    @property
    def source(self) -> tuple[Artifact, Path]:
        """What a checkout is made from: the sdist if there is one, else the wheel."""
        return self.artifacts[0], self.paths[0]

    def file(self, kind: str) -> tuple[Artifact, Path] | None:
        return next(((a, p) for a, p in zip(self.artifacts, self.paths, strict=True) if a.kind == kind), None)

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


def _cached(filename: str) -> tuple[Artifact, Path] | None:
    root = cache_root() / "artifacts"
    kind = "sdist" if filename.endswith(".tar.gz") else "wheel"
    for path in sorted(root.glob(f"*/{filename}")):
        if sha256_file(path) == path.parent.name:
            return Artifact(kind, filename, path.parent.name), path
    return None


def _cached_wheel(version: str) -> tuple[Artifact, Path] | None:
    """The cached wheel of ``version`` that pip would pick here (the best-ranked compatible tags)."""
    ranks = {tag: i for i, tag in enumerate(sys_tags())}
    best: tuple[int, str] | None = None
    for path in (cache_root() / "artifacts").glob(f"*/{PACKAGE}-{version}-*.whl"):
        try:
            _, wheel_version, _, tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if str(wheel_version) != version:
            continue
        rank = min((ranks[t] for t in tags if t in ranks), default=None)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, path.name)
    return _cached(best[1]) if best else None


def find_release(version: str, *, progress: Progress | None = None) -> Release:
    """The release's sdist (if PyPI ships one) and wheel, downloaded and pinned by their sha256."""
    found: list[tuple[Artifact, Path]] = []
    sdist = _cached(f"{PACKAGE}-{version}.tar.gz") or download_unpinned(version, "sdist", progress=progress)
    if sdist:
        found.append(sdist)
    wheel = _cached_wheel(version) or download_unpinned(version, "wheel", progress=progress)
    if wheel:
        found.append(wheel)
    if not found:
        raise SourceError(
            f"{PACKAGE} {version}: the package index has no sdist or wheel for it",
            hint="check the version (pip index versions sglang)",
        )
    return Release(version, tuple(a for a, _ in found), tuple(p for _, p in found))
