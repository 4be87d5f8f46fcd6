"""Where a wheel is built: a clean export of the patched checkout as a git work tree, never the checkout
itself (whose ``build/lib`` a second build would pack) and never ``git archive`` (whose missing ``.git``
hides package data from setuptools-scm).  A few exports are kept in the cache (``exports/`` under
:func:`sgpatch.cache.results_root`) and moved incrementally to the next commit, each proved clean before
it is used."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sgpatch.cache import digest
from sgpatch.errors import SgpatchError
from sgpatch.git.clone import clean_export, clone_shared, move_export


def export_commit(checkout: Path, commit: str, into: Path) -> None:
    """``commit`` as a fresh git work tree in ``into``: a local clone that shares the checkout's
    objects, without its tags (nothing for setuptools-scm to mistake for the version), and
    without the checkout's index, build output or untracked files.  The checkout is only read."""
    clone_shared(checkout, into, commit)


EXPORTS_KEPT = 4  # persistent exports kept in the cache (one per checkout built, most recent first)
EXPORT_MARK = "sgpatch-export.json"  # in the export's git directory: the checkout it was made from


_EXPORT_NAME = re.compile(r"[0-9a-f]{16}")


def export_place(checkout: Path, root: Path) -> Path:
    """Where the persistent export of ``checkout`` (an absolute path) lives under ``root`` (the cache's
    ``exports/``, :meth:`sgpatch.cache.Cache.directory`)."""
    return root / digest(str(checkout))[:16]


@contextlib.contextmanager
def clean_export_of(checkout: Path, commit: str, root: Path | None) -> Iterator[Path]:
    """A clean export of ``commit`` (see :func:`export_commit`) for the duration of the block.

    With ``root``, the export persists there between builds (one per checkout, the
    ``EXPORTS_KEPT`` most recent kept) and is moved to ``commit`` incrementally; it is
    owned by sgpatch: before each use everything git does not track is removed and the
    result proved clean (:func:`sgpatch.git.repo.move_export`), and an export that cannot be
    proved clean, or was not made from ``checkout``, is replaced by a fresh one.  Another
    build holding it, or ``root`` None (no cache): a fresh export in a temporary directory."""
    from sgpatch.lock import exclusive

    held = None
    if root is not None:
        place = export_place(checkout, root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            held = exclusive(place.with_name(place.name + ".lock"), what=f"the export {place}", timeout=0)
            held.__enter__()
        except (SgpatchError, OSError):
            held = None
    if held is None or root is None:
        with tempfile.TemporaryDirectory(prefix="sgpatch-export-") as tmp:
            export_commit(checkout, commit, Path(tmp) / "src")
            yield Path(tmp) / "src"
        return
    try:
        mark = place / ".git" / EXPORT_MARK
        expected = json.dumps({"checkout": str(checkout)})
        try:
            own = not place.is_symlink() and not mark.parent.is_symlink() and mark.parent.is_dir()
            reusable = own and mark.read_text() == expected and move_export(place, commit)
        except (OSError, UnicodeDecodeError):
            reusable = False
        if not reusable:
            if place.is_symlink() or place.is_file():
                place.unlink()  # never follow a link planted where the export lives
            shutil.rmtree(place, ignore_errors=True)
            export_commit(checkout, commit, place)
            mark.write_text(expected)
        os.utime(mark)
        _prune_exports(root, keep=place)
        try:
            yield place
        finally:
            clean_export(place)  # the build's output goes now; anything else, before the next use
    finally:
        held.__exit__(None, None, None)


def _prune_exports(root: Path, *, keep: Path) -> None:
    """Remove all but the ``EXPORTS_KEPT`` most recently used exports (skipping any another build holds).
    Only what :func:`clean_export_of` made is removed: a directory named like an export, not a link, that
    holds its mark (never through a link: ``shutil.rmtree`` does not follow one)."""
    from sgpatch.lock import exclusive

    def used(p: Path) -> float:
        try:
            return (p / ".git" / EXPORT_MARK).stat().st_mtime
        except OSError:
            return 0.0

    def ours(p: Path) -> bool:
        mark = p / ".git" / EXPORT_MARK
        return (
            _EXPORT_NAME.fullmatch(p.name) is not None
            and not p.is_symlink()
            and p.is_dir()
            and not mark.parent.is_symlink()
            and not mark.is_symlink()
            and mark.is_file()
        )

    others = sorted((p for p in root.iterdir() if p != keep and ours(p)), key=used, reverse=True)
    for old in others[EXPORTS_KEPT - 1 :]:
        with (
            contextlib.suppress(SgpatchError, OSError),
            exclusive(old.with_name(old.name + ".lock"), what=f"the export {old}", timeout=0),
        ):
            shutil.rmtree(old, ignore_errors=True)
