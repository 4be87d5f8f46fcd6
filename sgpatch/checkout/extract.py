"""An artifact's files as a checkout holds them: which members it keeps (no packaging output, no compiled
extension of a wheel), each written under ``python/`` as upstream has it, and the pinned wheels compared.

Each file is dated as the commit made of them (``extract_archive``): an sdist's newest member, a wheel's fixed
1980 date, as ``unzip`` and ``tar`` date what they write by the archive.  A file dated the second its index is
written would be racily clean to git (``sgpatch.git.index``): the next git to write that index (the stop of a
port, moving its checkout) read and hashed all 2,642 files of an SGLang wheel again, 55 ms.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sgpatch.config import Artifact, Stack
from sgpatch.errors import SourceError
from sgpatch.git.index import IndexEntry
from sgpatch.git.pack import BlobPack
from sgpatch.results import Progress
from sgpatch.source.archive import WHEEL_CHECKOUT_EPOCH, Kind, open_archive
from sgpatch.source.artifacts import fetch_artifact

# Files an sdist or wheel has that upstream's git tree does not: packaging output.
_GENERATED_TOP = {"PKG-INFO", "setup.cfg"}
_GENERATED_SUFFIXES = (".egg-info", ".dist-info")
_VERSION_FILE = "sglang/_version.py"  # written by setuptools-scm at build time; upstream ignores it
# Compiled extension modules: the one part of a platform wheel that differs per CPython version and platform.
_EXTENSION = re.compile(r"\.(so|pyd|dylib)(\.[0-9.]+)?$")


def is_extension(name: str) -> bool:
    """Whether a wheel member is a compiled extension (``_core.cpython-311-x86_64-linux-gnu.so``)."""
    return bool(_EXTENSION.search(name))


# --------------------------------------------------------------------------- reading archives


@dataclass(frozen=True, slots=True)
class Member:
    """One regular file of an artifact, mapped into upstream's layout (its bytes are on disk)."""

    path: str  # checkout-relative, e.g. python/sglang/__init__.py
    executable: bool
    stat: os.stat_result | None = field(default=None, compare=False)  # the file's, as written and dated


def _keep(rel: PurePosixPath, *, wheel: bool = False) -> bool:
    """Drop packaging output that upstream's git tree does not carry (and, from a wheel, compiled extensions)."""
    if wheel and is_extension(rel.name):
        return False
    parts = rel.parts
    if not parts:
        return False
    if len(parts) == 1 and parts[0] in _GENERATED_TOP:
        return False
    if parts[0].endswith(_GENERATED_SUFFIXES):
        return False
    return str(rel) != _VERSION_FILE


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def extract_archive(
    path: Path, dest: Path, kind: Kind | None = None, *, sha256: str | None = None, blobs: BlobPack | None = None
) -> tuple[list[Member], int]:
    """Write the regular files of an sdist or wheel under ``dest/python/`` (packaging output left out),
    member by member in chunks, so no member is ever held whole in memory; returns them (each with its stat
    data) and the date of the commit made of them, which each file is given as its modification time (the
    newest member's, or a wheel's fixed one).  Every member is checked by sgpatch.source.archive before anything
    is written, and each file is created anew (never through a link, never over another).  ``sha256``: the pin,
    checked on the bytes the members are then read from.  ``blobs``: each file written as a git blob too, in
    order."""
    with open_archive(path, kind, sha256=sha256) as archive:
        wheel = archive.kind == "wheel"
        date = WHEEL_CHECKOUT_EPOCH if wheel else archive.newest
        stamp = (date * 1_000_000_000, date * 1_000_000_000)
        keep = {e.name for e in archive.entries if _keep(PurePosixPath(e.name), wheel=wheel)}
        members: list[Member] = []
        made: set[Path] = set()  # the directories made so far: each is made once, not once per file in it
        for entry in archive.entries:
            if entry.name not in keep:
                continue
            # From wheels, no executable bits: they vary between the wheels of one release (each CPython
            # version's build sets its own), so the checkout is the same whichever wheel it was made from.
            member = Member(f"python/{entry.name}", entry.executable and not wheel)
            target = dest / member.path
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            fd = os.open(target, _NEW_FILE, 0o755 if member.executable else 0o644)
            with os.fdopen(fd, "wb") as out:
                # A wheel's deflated member goes into the pack as it is stored: its bytes inflated from it here.
                stored = archive.deflated(entry.name) if blobs is not None else None
                if blobs is not None:
                    blobs.begin(entry.size, stored[0] if stored is not None else None)
                for chunk in stored[1] if stored is not None else archive.chunks(entry.name):
                    out.write(chunk)
                    if blobs is not None:
                        blobs.write(chunk)
                if blobs is not None:
                    blobs.end()
                out.flush()
                os.utime(fd if os.utime in os.supports_fd else target, ns=stamp)
                member = Member(member.path, member.executable, os.fstat(fd))
            members.append(member)
        return members, date


def extract_artifact(path: Path, artifact: Artifact, dest: Path) -> tuple[list[Member], int]:
    """``extract_archive`` of a pinned artifact, its sha256 checked first (on the bytes then extracted)."""
    return extract_archive(path, dest, "sdist" if artifact.kind == "sdist" else "wheel", sha256=artifact.sha256)


def wheel_tree(path: Path, *, sha256: str | None = None) -> dict[str, bytes]:
    """What a checkout made from the wheel at ``path`` holds: each kept member's sha256 (``sha256``: the pin,
    checked on the bytes read)."""
    with open_archive(path, "wheel", sha256=sha256) as archive:
        return {e.name: archive.digest(e.name) for e in archive.entries if _keep(PurePosixPath(e.name), wheel=True)}


TreeOf = Callable[[Artifact, Path], dict[str, bytes]]


def check_wheels_agree(
    stack: Stack, *, progress: Progress | None = None, tree_of: TreeOf | None = None
) -> tuple[str, ...]:
    """Every pinned wheel downloaded (sha256-checked) and compared: their files other than
    compiled extensions must be the same, so the checkout is one whichever wheel a host makes it from.
    ``tree_of`` reads a wheel's ``wheel_tree`` (a cache may keep it, keyed by the wheel's sha256).

    Returns the wheels compared; SourceError naming the first file that differs (or is missing)."""
    wheels = sorted(stack.wheels, key=lambda a: a.filename)
    if len(wheels) < 2:
        return tuple(a.filename for a in wheels)
    first: tuple[Artifact, dict[str, bytes]] | None = None
    for artifact in wheels:
        path = fetch_artifact(artifact, stack.sglang_version, progress=progress)
        if progress:
            progress(f"comparing the files of {artifact.filename}")
        tree = tree_of(artifact, path) if tree_of is not None else wheel_tree(path, sha256=artifact.sha256)
        if first is None:
            first = (artifact, tree)
            continue
        ref_artifact, ref = first
        for name in sorted(set(ref) | set(tree)):
            if ref.get(name) != tree.get(name):
                ref_name = ref_artifact.filename
                if name not in tree:
                    what = f"lacks {name}, which {ref_name} carries"
                elif name not in ref:
                    what = f"carries {name}, which {ref_name} lacks"
                else:
                    what = f"{name} differs from {ref_name}'s"
                raise SourceError(
                    f"{artifact.filename}: {what}",
                    hint="the pinned wheels must carry the same files but for compiled extensions; "
                    "pin only wheels of one build",
                )
    return tuple(a.filename for a in wheels)


def index_entry(member: Member, oid: str) -> IndexEntry:
    """``member``'s entry in the index of the checkout it was written into (``oid``: its blob id)."""
    if member.stat is None:
        raise ValueError(f"{member.path}: no stat data: not written by extract_archive")
    mode = 0o100755 if member.executable else 0o100644
    return IndexEntry(member.path.encode("utf-8", "surrogateescape"), mode, bytes.fromhex(oid), member.stat)
