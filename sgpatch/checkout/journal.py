"""The crash-safe move of a checkout and its recovery (SPEC §8).

An apply writes every object first, then records {old, new} in a journal in
the git directory, then moves index and files (``read-tree -m -u``) and HEAD
(``update-ref``), then removes the journal.  A kill before the journal leaves
only unreachable objects; a kill after it leaves a journal that the next
sgpatch command (under the checkout lock) finishes: it removes the git lock
files the killed run left (they are newer than the journal), checks that
every difference from ``old`` is its own, and completes the move to ``new``.
A journal whose move changed nothing (git refused it, or it was killed before
touching a file, and the user has edited since) is cleared instead: nothing
to finish, nothing lost, and the next command is not blocked.

``move_checkout`` is the one way sgpatch moves a checkout's HEAD.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from sgpatch.checkout.stop.record import read_json
from sgpatch.errors import CheckoutError, SgpatchError
from sgpatch.git.batch import read_blobs
from sgpatch.git.repo import Git, git_dirs

if TYPE_CHECKING:
    from sgpatch.lock import Held, Notify

# sgpatch.lock (signals, ctypes, sockets) is imported where a lock is taken: a read-only command on a
# checkout with no journal and no lock file never needs it.

JOURNAL = "sgpatch-apply.json"
_OID = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
LOCK = "sgpatch.lock"


def lock_checkout(g: Git, *, command: str, notify: Notify | None = None) -> AbstractContextManager[Held]:
    """The checkout's sgpatch lock (``.git/sgpatch.lock``): one writer at a time."""
    from sgpatch.lock import exclusive

    git_dir, _ = git_dirs(g)
    return exclusive(git_dir / LOCK, what=f"checkout {g.root}", command=command, notify=notify)


def journal_path(g: Git) -> Path:
    return git_dirs(g)[0] / JOURNAL


def _journal_tmp(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def write_journal(g: Git, *, old: str, new: str) -> None:
    """Record the move atomically and durably (temp file, fsync, rename)."""
    path = journal_path(g)
    tmp = _journal_tmp(path)
    tmp.unlink(missing_ok=True)  # we hold the checkout lock: a file (or link) here is a leftover, never followed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, json.dumps({"old": old, "new": new, "pid": os.getpid()}).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def clear_journal(g: Git) -> None:
    journal_path(g).unlink(missing_ok=True)


def _git_locks(g: Git) -> list[Path]:
    """The lock files git takes to move index and HEAD in this checkout."""
    git_dir, common = git_dirs(g)
    locks = [git_dir / "index.lock", git_dir / "HEAD.lock", common / "packed-refs.lock"]
    branch = g.current_branch()
    if branch:
        locks.append(common / f"{branch}.lock")
    return locks


def _refuse_git_locks(g: Git) -> None:
    for lock in _git_locks(g):
        if lock.exists():
            raise CheckoutError(
                f"{g.root}: {lock} exists: a git command is running in the checkout, or one was killed",
                hint=f"if no git command is running there, remove {lock}",
            )


def move_checkout(g: Git, *, old: str, new: str, reason: str) -> None:
    """Move index, files and HEAD from ``old`` to ``new`` as one step a kill cannot split.

    Signals wait until the step is done; git runs tied to this process; a kill
    leaves the journal that ``recover`` finishes.  If git refuses, nothing has
    moved: the journal goes and the error is raised.  When ``new`` has
    ``old``'s tree only HEAD moves (one ``update-ref``: index and files stay).
    """
    from sgpatch.lock import pause, signals_deferred

    _refuse_git_locks(g)
    if g.tree_of(new) == g.tree_of(old):
        with signals_deferred():
            g.update_head(new, old=old, reason=reason)
        return
    with signals_deferred():
        write_journal(g, old=old, new=new)
        pause("apply:journal")
        try:
            g.read_tree_update(old, new)
        except SgpatchError as exc:
            if _moved_nothing(g, old, new):
                clear_journal(g)
                raise CheckoutError(
                    f"{exc.message} Nothing changed: the move stopped before touching a file",
                    hint="commit or stash your changes to the files the series patches, then run it again",
                ) from exc
            raise CheckoutError(
                f"{exc.message}; the checkout is part-way to {new[:12]}",
                hint="fix the cause; the next sgpatch command finishes the apply",
            ) from exc
        pause("apply:tree")
        try:
            g.update_head(new, old=old, reason=reason)
        except SgpatchError as exc:
            try:
                g.read_tree_update(new, old)
            except SgpatchError:
                raise CheckoutError(
                    f"{exc.message}; the files are at {new[:12]} but HEAD is not",
                    hint="fix the cause; the next sgpatch command finishes the apply",
                ) from exc
            clear_journal(g)
            raise
        pause("apply:ref")
        clear_journal(g)


def recover(g: Git, *, notify: Notify | None = None) -> str | None:
    """Finish an apply that was killed while moving the checkout; returns what was done.

    Without a journal or lock file this only looks at three paths: read-only
    commands on a read-only checkout stay read-only.  Otherwise it waits for
    the checkout lock (a running apply finishes first; a killed one's lock
    file is cleared) and then finishes the move the journal records.
    """
    path = journal_path(g)
    journal = os.path.lexists(path) or os.path.lexists(_journal_tmp(path))
    if not journal and not os.path.lexists(path.with_name(LOCK)):
        return None
    from sgpatch.lock import UnsafeLock

    try:
        with lock_checkout(g, command="recover", notify=notify):
            return _recover_locked(g, path)
    except UnsafeLock:
        raise
    except CheckoutError:
        if journal:
            raise
        return None  # only a lock file, and we may not write here (a read-only checkout): nothing to finish


def _recover_locked(g: Git, path: Path) -> str | None:
    from sgpatch.lock import pause, signals_deferred

    _journal_tmp(path).unlink(missing_ok=True)  # a journal never renamed into place: nothing moved
    if not os.path.lexists(path):
        return None  # the apply we waited for finished
    try:
        entry = read_json(path, limit=4096)  # read like every record: no link, no FIFO, bounded
        if not isinstance(entry, dict) or not all(_OID.match(str(entry.get(k))) for k in ("old", "new")):
            raise ValueError("not a journal sgpatch wrote")
        old, new = str(entry["old"]), str(entry["new"])
        journal_time = path.lstat().st_mtime_ns
    except (ValueError, OSError) as exc:
        raise CheckoutError(
            f"{g.root}: cannot read the journal of an interrupted apply ({path}): {exc}",
            hint=f"check the checkout with 'git status', then remove {path}",
        ) from None
    head = g.head()
    if head not in (old, new) or g.rev_parse(f"{new}^{{commit}}") is None:
        path.unlink(missing_ok=True)
        return f"dropped the journal of an interrupted apply: HEAD {str(head)[:12]} has moved since"
    pause("recover:start")
    removed = _remove_stale_git_locks(g, since=journal_time)
    foreign = _foreign_changes(g, old, new)
    if foreign and head == old and _moved_nothing(g, old, new):
        path.unlink(missing_ok=True)
        return (
            f"cleared the journal of an interrupted apply ({old[:12]} -> {new[:12]}): it moved nothing, "
            f"nothing changed; your edits ({_shown(foreign)}) are kept"
        )
    if foreign:
        raise CheckoutError(
            f"{g.root}: an apply was interrupted ({old[:12]} -> {new[:12]}) and these files changed since: "
            f"{_shown(foreign)}; sgpatch will not overwrite them",
            hint=f"save your changes elsewhere and restore the files with git, or remove {path} to give up",
        )
    with signals_deferred():
        g.read_tree_update(old, new, reset=True)
        pause("recover:tree")
        if head == old:
            g.update_head(new, old=old, reason="sgpatch apply (finished after an interruption)")
        path.unlink(missing_ok=True)
    note = f" (removed {', '.join(p.name for p in removed)} left by the killed run)" if removed else ""
    return f"finished an interrupted apply: HEAD {old[:12]} -> {new[:12]}{note}"


def _remove_stale_git_locks(g: Git, *, since: int) -> list[Path]:
    """Remove git lock files the killed apply left; refuse one that predates it.

    The apply's git children die with it (``Git.read_tree_update``, ``Git.update_head``) and we hold the
    checkout lock, so a lock file written after the journal is the killed run's.
    """
    removed = []
    for lock in _git_locks(g):
        try:
            made = lock.stat().st_mtime_ns
        except FileNotFoundError:
            continue
        if made < since:
            raise CheckoutError(
                f"{g.root}: an interrupted apply needs finishing, but {lock} is older than it: "
                "another git command holds it",
                hint=f"if no git command is running in the checkout, remove {lock}",
            )
        lock.unlink(missing_ok=True)
        removed.append(lock)
    return removed


def _shown(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (" …" if len(paths) > 3 else "")


def _foreign_changes(g: Git, old: str, new: str) -> list[str]:
    """The differences from ``old`` that are not the interrupted move's own (never overwritten)."""
    changed = g.changed_paths(old, new)
    foreign = [e[3:] for e in g.status() if not e.startswith("??") and e[3:] not in changed]
    olds, news = read_blobs(g, old, sorted(changed)), read_blobs(g, new, sorted(changed))
    for rel in sorted(changed):
        local = g.root / rel
        if local.is_symlink() or (local.exists() and not local.is_file()):
            foreign.append(rel)
        elif local.exists():
            data = local.read_bytes()
            before, after = olds[rel], news[rel]
            # Ours: the old file, the new one, or the new one cut short by the kill.
            if data != before and (after is None or not after.startswith(data)):
                foreign.append(rel)
    return foreign


def _moved_nothing(g: Git, old: str, new: str) -> bool:
    """Whether the move ``old`` -> ``new`` has not touched the checkout at all.

    HEAD and the index are still ``old``'s, and no file the move changes holds
    its new content (or the start of it) or is missing: every such file is
    ``old``'s or an edit of the user's.
    """
    if g.head() != old or not g.index_matches(old):
        return False
    changed = sorted(g.changed_paths(old, new))
    olds, news = read_blobs(g, old, changed), read_blobs(g, new, changed)
    for rel in changed:
        local = g.root / rel
        before, after = olds[rel], news[rel]
        if local.is_symlink() or not local.exists():
            if before is not None:
                return False  # removed: by the move, or by the user; either way not provably untouched
            continue
        if not local.is_file():
            continue
        data = local.read_bytes()
        if data != before and after is not None and after.startswith(data):
            return False  # the new content, or the start of it
    return True
