"""A release that is not pinned yet: find its PyPI files through pip and pin them by sha256.

``port`` needs the new release's source before VERSIONS.toml knows it.  pip
downloads it (so the user's index, mirrors, proxy and certificates apply),
and the sha256 of what it served becomes the new stack's pin, shown in the
report for review.  A file already in sgpatch's cache under the same name is
reused: it entered the cache only after its hash was checked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from sgpatch.config import Artifact
from sgpatch.errors import EnvironmentFailure, SourceError
from sgpatch.results import Progress
from sgpatch.source import cache_root, sha256_file

PACKAGE = "sglang"


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


def _pip_download(version: str, kind: str, progress: Progress | None) -> tuple[Artifact, Path] | None:
    """Download the ``kind`` file of the release with pip into the cache; None if PyPI has none."""
    if progress:
        progress(f"asking pip for the {kind} of {PACKAGE} {version}")
    root = cache_root() / "artifacts"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=root) as tmp:
        binary = ["--no-binary", ":all:"] if kind == "sdist" else ["--only-binary", ":all:"]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", *binary]
        cmd += ["--dest", tmp, f"{PACKAGE}=={version}"]
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        err = proc.stderr.decode("utf-8", "replace")
        if proc.returncode != 0:
            if "No matching distribution" in err or "Could not find a version" in err:
                return None
            tail = err.strip().splitlines()
            detail = tail[-1] if tail else f"pip exited {proc.returncode}"
            raise EnvironmentFailure(
                f"cannot download {PACKAGE} {version} ({kind}): {detail}",
                hint="check the package index configured for pip (pip config list)",
            )
        got = [p for p in Path(tmp).iterdir() if p.is_file()]
        if len(got) != 1:
            raise SourceError(f"pip download of {PACKAGE}=={version} ({kind}) produced {len(got)} files, expected 1")
        sha = sha256_file(got[0])
        final = root / sha / got[0].name
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(got[0], final)
    return Artifact(kind, final.name, sha), final


def find_release(version: str, *, progress: Progress | None = None) -> Release:
    """The release's sdist (if PyPI ships one) and wheel, downloaded and pinned by their sha256."""
    found: list[tuple[Artifact, Path]] = []
    sdist = _cached(f"{PACKAGE}-{version}.tar.gz") or _pip_download(version, "sdist", progress)
    if sdist:
        found.append(sdist)
    wheel = _cached_wheel(version) or _pip_download(version, "wheel", progress)
    if wheel:
        found.append(wheel)
    if not found:
        raise SourceError(
            f"{PACKAGE} {version}: the package index has no sdist or wheel for it",
            hint="check the version (pip index versions sglang)",
        )
    return Release(version, tuple(a for a, _ in found), tuple(p for _, p in found))
