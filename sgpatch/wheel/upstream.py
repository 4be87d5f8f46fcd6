"""The pinned upstream wheel a built wheel is compared with, file by file: the one with the same tags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sgpatch.config import Artifact, Stack, wheel_tags
from sgpatch.results import Progress


def matching_upstream(stack: Stack, wheel: Path) -> Artifact | None:
    """The pinned upstream wheel a built wheel is compared with: the one with the same tags
    (a pure wheel built from the sdist matches upstream's pure wheel)."""
    tags = wheel_tags(wheel.name)
    return next((a for a in stack.wheels if wheel_tags(a.filename) == tags), None)


@dataclass(frozen=True, slots=True)
class PinnedWheel:
    """An upstream wheel the stack pins (its sha256 checked on the bytes read, when read), downloaded into the
    cache by :meth:`fetch` only when its bytes are needed: member digests kept under the pin need none."""

    artifact: Artifact
    release: str  # the SGLang version it belongs to (where it is downloaded from)
    progress: Progress | None = None

    @property
    def sha256(self) -> str:
        return self.artifact.sha256

    def fetch(self) -> Path:
        """The wheel in the download cache (downloaded now if it is missing or damaged)."""
        # the download cache's lock (ctypes, socket) is kept off a rebuild's imports (tests/test_rebuild.py)
        from sgpatch.source.artifacts import fetch_artifact

        return fetch_artifact(self.artifact, self.release, progress=self.progress)


def upstream_wheel_for(stack: Stack, wheel: Path, progress: Progress | None = None) -> PinnedWheel | None:
    """``matching_upstream`` with its pin (not downloaded yet: :meth:`PinnedWheel.fetch`), or None if none is
    pinned."""
    artifact = matching_upstream(stack, wheel)
    if artifact is None:
        return None
    return PinnedWheel(artifact=artifact, release=stack.sglang_version, progress=progress)
