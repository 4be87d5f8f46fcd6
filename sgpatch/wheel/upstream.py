"""The pinned upstream wheel a built wheel is compared with, file by file: the one with the same tags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sgpatch.config import Artifact, Stack, wheel_tags
from sgpatch.results import Progress
from sgpatch.source.artifacts import fetch_artifact


def matching_upstream(stack: Stack, wheel: Path) -> Artifact | None:
    """The pinned upstream wheel a built wheel is compared with: the one with the same tags
    (a pure wheel built from the sdist matches upstream's pure wheel)."""
    tags = wheel_tags(wheel.name)
    return next((a for a in stack.wheels if wheel_tags(a.filename) == tags), None)


@dataclass(frozen=True, slots=True)
class PinnedWheel:
    """An upstream wheel in the download cache and its pinned sha256 (checked on the bytes read, when read)."""

    path: Path
    sha256: str


def upstream_wheel_for(stack: Stack, wheel: Path, progress: Progress | None = None) -> PinnedWheel | None:
    """``matching_upstream`` downloaded into the cache, with its pin, or None if none is pinned."""
    artifact = matching_upstream(stack, wheel)
    if artifact is None:
        return None
    path = fetch_artifact(artifact, stack.sglang_version, progress=progress)
    return PinnedWheel(path=path, sha256=artifact.sha256)
