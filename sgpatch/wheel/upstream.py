"""The pinned upstream wheel a built wheel is compared with, file by file: the one with the same tags."""

from __future__ import annotations

from pathlib import Path

from sgpatch.config import Artifact, Stack, wheel_tags
from sgpatch.results import Progress
from sgpatch.source.artifacts import fetch_artifact


def matching_upstream(stack: Stack, wheel: Path) -> Artifact | None:
    """The pinned upstream wheel a built wheel is compared with: the one with the same tags
    (a pure wheel built from the sdist matches upstream's pure wheel)."""
    tags = wheel_tags(wheel.name)
    return next((a for a in stack.wheels if wheel_tags(a.filename) == tags), None)


def upstream_wheel_for(stack: Stack, wheel: Path, progress: Progress | None = None) -> Path | None:
    """``matching_upstream`` downloaded into the cache (sha256-checked), or None if none is pinned."""
    artifact = matching_upstream(stack, wheel)
    if artifact is None:
        return None
    return fetch_artifact(artifact, stack.sglang_version, progress=progress)
