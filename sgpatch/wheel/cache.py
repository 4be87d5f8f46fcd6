"""The build cache: a built wheel, reused when every input is unchanged (its checks always run again).

An entry (``.sgpatch/builds/<key>``) holds the wheel and its sha256; the key is :func:`sgpatch.cache.key`
over everything that goes into the wheel (and sgpatch's own code).  A wheel whose bytes no longer match the
sha256 beside it is never used: the entry is removed and the wheel built again."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sgpatch.atomic import write_atomic
from sgpatch.cache import key
from sgpatch.config.projectfiles import read_regular
from sgpatch.source.archive import MAX_DOWNLOAD
from sgpatch.wheel.provenance import BuildInputs

WHEEL_FORMAT = 1  # bump whenever post-processing changes a wheel's bytes: invalidates cached wheels


def cache_key(inputs: BuildInputs) -> str:
    """The identity of a build: any change to what goes into the wheel (or to sgpatch) changes it."""
    stack = inputs.stack
    doc = {
        "format": WHEEL_FORMAT,
        "stack": stack.name,
        "version": inputs.version,
        "sglang_version": stack.sglang_version,
        "cuda": stack.cuda,
        "upstream": [stack.tag, stack.commit, stack.pypi_commit],
        "source": [stack.source_artifact.filename, stack.source_artifact.sha256] if stack.source_artifact else None,
        "base": inputs.base,
        "head": inputs.head,
        "tree": inputs.tree,
        "phase": inputs.phase,
        "series": [inputs.series.id, [[p.name, p.sha256] for p in inputs.series.patches]],
        "requires": [[o.dist, o.text] for o in stack.requires],
        "source_date_epoch": inputs.source_date_epoch,
        "isolated": inputs.isolated,
        "build_requires": list(stack.build_requires) if inputs.isolated else None,
        "python": inputs.python if not inputs.isolated else None,
    }
    if inputs.repacked is not None:
        doc["repacked"] = [inputs.repacked.filename, inputs.repacked.sha256]
    return key("wheel", json.dumps(doc, sort_keys=True))


def cached_wheel(entry: Path, name: str) -> bytes | None:
    """The bytes of the cached wheel ``name``, read once (never through a link) and checked against the
    sha256 beside it: the bytes checked are the bytes returned (None: no entry, or a damaged one, removed)."""
    wheel, stamp = entry / name, entry / "sha256"
    try:
        data = read_regular(wheel, limit=MAX_DOWNLOAD, follow=False)
        want = read_regular(stamp, limit=1024, follow=False)
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != want.decode("ascii", "replace").strip():
        shutil.rmtree(entry, ignore_errors=True)  # a damaged entry is never trusted
        return None
    return data


def store_wheel(entry: Path, wheel: Path, *, checked: str | None) -> None:
    """Keep ``wheel`` in ``entry`` with the sha256 of the very bytes kept (read once), only when they are the
    bytes its checks read (``checked``: their sha256; a wheel changed since is not kept)."""
    data = read_regular(wheel, limit=MAX_DOWNLOAD)
    digest = hashlib.sha256(data).hexdigest()
    if checked is not None and digest != checked:
        return
    write_atomic(entry / wheel.name, data)
    write_atomic(entry / "sha256", (digest + "\n").encode())
