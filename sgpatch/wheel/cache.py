"""The build cache: a built wheel is reused when every input of the build is unchanged."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sgpatch import __version__
from sgpatch.artifacts import sha256_file
from sgpatch.atomic import write_atomic
from sgpatch.provenance import (
    BuildInputs,
)

WHEEL_FORMAT = 1  # bump whenever post-processing changes a wheel's bytes: invalidates cached wheels


def cache_key(inputs: BuildInputs) -> str:
    """The identity of a build: any change to what goes into the wheel changes it."""
    stack = inputs.stack
    doc = {
        "format": WHEEL_FORMAT,
        "sgpatch": __version__,
        "stack": stack.name,
        "version": inputs.version,
        "upstream": [stack.tag, stack.commit],
        "source": stack.source_artifact.sha256 if stack.source_artifact else None,
        "base": inputs.base,
        "head": inputs.head,
        "tree": inputs.tree,
        "phase": inputs.phase,
        "series": [inputs.series.id, [[p.name, p.sha256] for p in inputs.series.patches]],
        "requires": [list(r) for r in stack.requires],
        "source_date_epoch": inputs.source_date_epoch,
        "isolated": inputs.isolated,
        "build_requires": list(stack.build_requires) if inputs.isolated else None,
        "python": inputs.python if not inputs.isolated else None,
    }
    if inputs.repacked is not None:
        doc["repacked"] = [inputs.repacked.filename, inputs.repacked.sha256]
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def cached_wheel(entry: Path, name: str) -> Path | None:
    wheel, stamp = entry / name, entry / "sha256"
    if not (wheel.is_file() and stamp.is_file()):
        return None
    if sha256_file(wheel) != stamp.read_text().strip():
        shutil.rmtree(entry, ignore_errors=True)  # a damaged entry is never trusted
        return None
    return wheel


def store_wheel(entry: Path, wheel: Path) -> None:
    write_atomic(entry / wheel.name, wheel)
    (entry / "sha256").write_text(sha256_file(wheel) + "\n")
