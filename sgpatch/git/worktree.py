"""The index and work tree beside HEAD, as a port that stopped for a person reads and sets them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from sgpatch.errors import CheckoutError
from sgpatch.git.batch import read_known
from sgpatch.git.repo import Git


def reset_index(g: Git, rev: str) -> None:
    """Load ``rev``'s tree into the repository's own index, refreshed; HEAD and files stay (guarded).

    A one-tree ``read-tree -m`` keeps the file stats of each entry whose content ``rev`` has too, so the refresh
    reads again only the files that changed (on an SGLang checkout, a plain ``read-tree`` left all 2,650 files
    to be read and hashed again: 0.15 s).  An index that cannot be merged from (unmerged entries) is read whole."""
    if g._run("read-tree", "-m", "--end-of-options", rev, guarded=True, check=False).returncode != 0:
        g._run("read-tree", "--end-of-options", rev, guarded=True)
    g.refresh_index()


def worktree_changes(g: Git, rev: str) -> list[str]:
    """What ``git add -A`` would change against ``rev``: tracked paths whose work-tree file differs (or is
    gone) and untracked files, ignored ones left out; sorted, no renames."""
    args = ("diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", "--end-of-options")
    tracked = g._run(*args, rev, "--").stdout
    untracked = g._run("ls-files", "-z", "--others", "--exclude-standard").stdout
    return sorted({p.decode("utf-8", "surrogateescape") for p in (tracked + b"\0" + untracked).split(b"\0") if p})


def delete_ref(g: Git, ref: str) -> None:
    g._run("update-ref", "-d", "--end-of-options", ref)


def tracked_changes(g: Git, rev: str) -> list[str]:
    """What ``git commit -a`` would take against ``rev``: tracked paths whose work-tree file or index entry
    differs from ``rev`` (new files only once ``git add`` staged them); sorted, no renames."""
    args = ("--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", "--end-of-options", rev, "--")
    found = g._run("diff", *args).stdout + b"\0" + g._run("diff", "--cached", *args).stdout
    return sorted({p.decode("utf-8", "surrogateescape") for p in found.split(b"\0") if p})


def untracked_files(g: Git) -> list[str]:
    """Untracked files, ignored ones left out; sorted."""
    found = g._run("ls-files", "-z", "--others", "--exclude-standard").stdout
    return sorted(p.decode("utf-8", "surrogateescape") for p in found.split(b"\0") if p)


_PLAIN = {b"100644": 0o666, b"100755": 0o777}  # what git creates a file with (the umask applies)


def write_changes(g: Git, old: str, new: str, known: Mapping[str, bytes | None]) -> bool:
    """The files of a clean work tree at ``old`` made ``new``'s, index and HEAD left at ``old``: what
    ``read-tree -m -u old new`` does to the files, for a checkout nobody else uses (a port's own staging copy,
    which a kill removes whole), without the index written and read again and the journal a checkout in use
    needs.  Each file the trees differ in is written from its text in ``known`` when that text is the blob
    (its id checked), else from git.  Only files added or changed (regular, executable or not) are done here:
    with a file removed, a link, a mode other than a file's or a file where a folder goes, nothing is written and
    False is returned (the caller moves the checkout the journalled way).  ``tests/test_worktree.py`` holds it to
    git's own move."""
    raw = g._run("diff-tree", "-r", "-z", "--no-renames", "--end-of-options", old, new).stdout.split(b"\0")
    changes: list[tuple[str, int, str, bool]] = []  # (path, mode, blob id, whether the file exists already)
    for head, name in zip(raw[0:-1:2], raw[1::2], strict=True):
        fields = head[1:].split(b" ")  # ":<old mode> <new mode> <old id> <new id> <status>"
        if len(fields) != 5 or fields[4] not in (b"A", b"M") or fields[1] not in _PLAIN:
            return False
        path = name.decode("utf-8", "surrogateescape")
        exists = fields[4] == b"M"
        if exists and fields[0] not in _PLAIN:
            return False
        changes.append((path, _PLAIN[fields[1]], fields[3].decode(), exists))
    root = g.root
    for path, _, _, exists in changes:  # every place checked before any file is written
        where = root / path
        if exists != where.is_file() or where.is_symlink():
            return False
    if not _folders_free(root, [path for path, *_ in changes]):
        return False
    blobs = read_known(g, [(p, oid) for p, _, oid, _ in changes], known)
    lost = next((p for p, _, _, _ in changes if blobs[p] is None), None)
    if lost is not None:
        raise CheckoutError(f"{g.root}: the blob of {lost} in {new[:12]} is missing")
    for path, mode, _, exists in changes:
        where = root / path
        if exists:
            where.unlink()  # a new file, as git writes one (its mode from the tree, the umask applied)
        where.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(blobs[path] or b"")
    return True


def _folders_free(root: Path, paths: list[str]) -> bool:
    """Whether every folder on the way to ``paths`` under ``root`` is a real folder or absent (none a file or a
    link); each folder looked at once, however many of the paths it holds."""
    folders = {folder for path in paths for folder in Path(path).parents if folder != Path(".")}
    for folder in folders:
        at = root / folder
        if at.is_symlink() or (at.exists() and not at.is_dir()):
            return False
    return True
