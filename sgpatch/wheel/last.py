"""The last wheel ``build`` made of each stack, recorded beside the build cache (``.sgpatch/builds/last/``)
for ``status``: its path, sha256, version and whether its checks passed.  A record is a hint about the
past, never an answer: ``status`` says whether the wheel is still there and of the current series."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sgpatch.atomic import write_atomic
from sgpatch.config.projectfiles import read_project_file
from sgpatch.source.archive import sha256_file
from sgpatch.wheel.results import BuildResult

RECORD_FORMAT = 1
MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class BuiltWheel:
    path: Path
    sha256: str
    ok: bool


@dataclass(frozen=True, slots=True)
class LastBuild:
    """The wheels of the stack's last build and when it was recorded (UTC, ISO 8601)."""

    version: str
    wheels: tuple[BuiltWheel, ...]
    recorded: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "recorded": self.recorded,
            "wheels": [
                {"wheel": str(w.path), "sha256": w.sha256, "ok": w.ok, "exists": w.path.is_file()} for w in self.wheels
            ],
        }


def record_path(root: Path, stack: str) -> Path:
    """Where the last build of ``stack`` (a name VERSIONS.toml accepted: no ``/``) is recorded."""
    return root / ".sgpatch" / "builds" / "last" / f"{stack}.json"


def record_build(root: Path, stack: str, results: Sequence[BuildResult]) -> None:
    """Record ``results`` as the last build of ``stack`` in the project at ``root``."""
    if not results:
        return
    doc = {
        "format": RECORD_FORMAT,
        "stack": stack,
        "version": results[0].version,
        "wheels": [
            {"wheel": str(r.wheel), "sha256": r.checks.sha256 or sha256_file(r.wheel), "ok": r.checks.ok}
            for r in results
        ],
    }
    path = record_path(root, stack)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(doc, indent=1).encode())


def last_build(root: Path, stack: str) -> LastBuild | None:
    """The recorded last build of ``stack``; None without a record or with one of another shape."""
    path = record_path(root, stack)
    try:
        data = read_project_file(path, limit=MAX_RECORD_BYTES)
        doc = json.loads(data)
        recorded = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")
        if doc["format"] != RECORD_FORMAT or doc["stack"] != stack or not isinstance(doc["version"], str):
            return None
        wheels = tuple(BuiltWheel(Path(str(w["wheel"])), str(w["sha256"]), w["ok"] is True) for w in doc["wheels"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return LastBuild(doc["version"], wheels, recorded) if wheels else None
