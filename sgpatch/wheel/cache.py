"""The build cache: a built wheel, and the report of its checks, reused when every input is unchanged.

An entry (``.sgpatch/builds/<key>``) holds the wheel, its sha256, and one JSON report per place it was
checked from (the report names the wheel's and the checkout's paths); the rules of
:mod:`sgpatch.cache` apply: JSON, atomic writes, an entry that cannot be read whole is a miss."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sgpatch import __version__
from sgpatch.atomic import write_atomic
from sgpatch.cache import code_digest, digest, read_entry, write_entry
from sgpatch.config import Artifact, Stack
from sgpatch.series.patch import Series
from sgpatch.source.artifacts import sha256_file
from sgpatch.wheel.provenance import (
    BuildInputs,
)
from sgpatch.wheel.results import WheelReport, report_from_dict

WHEEL_FORMAT = 1  # bump whenever post-processing changes a wheel's bytes: invalidates cached wheels


def cache_key(inputs: BuildInputs) -> str:
    """The identity of a build: any change to what goes into the wheel changes it."""
    stack = inputs.stack
    doc = {
        "format": WHEEL_FORMAT,
        "sgpatch": __version__,
        "stack": stack.name,
        "version": inputs.version,
        "sglang_version": stack.sglang_version,
        "cuda": stack.cuda,
        "upstream": [stack.tag, stack.commit, stack.pypi_commit],
        "source": [stack.source_artifact.filename, stack.source_artifact.sha256] if stack.source_artifact else None,
        "code": code_digest(),
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


REPORT_PREFIX = "report-"


def _series_files(series: Series) -> list[str | bytes]:
    """The name and bytes of every file in the series directory (patches, anchors.toml, ...)."""
    parts: list[str | bytes] = []
    root = series.directory
    if root.is_dir():
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            parts += [str(path.relative_to(root)), path.read_bytes()]
    return parts


def report_cache_key(
    build_key: str,
    stack: Stack,
    series: Series,
    wheel: Path,
    wheel_sha256: str,
    upstream: Artifact | None,
    checkout: Path,
) -> str:
    """The identity of the checks on a wheel: the build's key, the wheel's bytes and path, the whole
    stack (its repr: every pin, override, recipe and interface table), every file of the series
    directory, the upstream wheel compared with, the checkout (its path; HEAD is in the build's key),
    and the checking code itself."""
    return digest(
        build_key,
        wheel_sha256,
        str(wheel),
        str(checkout),
        repr(stack),
        "" if upstream is None else f"{upstream.filename}\0{upstream.sha256}",
        code_digest(),
        *_series_files(series),
    )


def cached_report(entry: Path, key: str, stack: Stack, wheel: Path) -> WheelReport | None:
    """The stored report of the checks with identity ``key``, or None (none, unreadable or of the wrong shape)."""
    doc = read_entry(entry / f"{REPORT_PREFIX}{key[:24]}.json")
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    return report_from_dict(doc.get("report"), stack, wheel)


def store_report(entry: Path, key: str, report: WheelReport) -> None:
    write_entry(entry / f"{REPORT_PREFIX}{key[:24]}.json", {"key": key, "report": report.as_dict()})
