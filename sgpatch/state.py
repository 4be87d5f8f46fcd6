"""What state a checkout is in relative to its stack and series (SPEC §6).

``pristine``: HEAD is the pinned base.  ``patched``: HEAD is the base plus
exactly the series, one commit per patch, each with trailers naming the patch
file and its sha256.  Anything else is described precisely and refused.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from sgpatch.checkout import Git, git_dirs, run_guarded
from sgpatch.config import Stack
from sgpatch.errors import CheckoutError, SgpatchError
from sgpatch.lock import Held, Notify, exclusive, pause, signals_deferred
from sgpatch.patchset import TRAILER_PATCH, TRAILER_SHA, Series

JOURNAL = "sgpatch-apply.json"
LOCK = "sgpatch.lock"
_TRAILER = re.compile(rf"^({TRAILER_PATCH}|{TRAILER_SHA}):\s*(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class CheckoutState:
    phase: str  # "pristine", "patched" or "other"
    head: str
    base: str | None
    series_commits: tuple[str, ...]
    dirty: tuple[str, ...]
    problem: str | None

    @property
    def clean(self) -> bool:
        return not self.dirty


def open_checkout(path: Path) -> Git:
    """The git repository at ``path``; CheckoutError if there is none."""
    g = Git(path)
    if not path.is_dir():
        raise CheckoutError(f"{path}: no such checkout", hint="run 'sgpatch fetch' first, or pass --checkout DIR")
    if not g.is_repo():
        raise CheckoutError(f"{path}: not the top of a git work tree", hint="a checkout is a git clone of sglang")
    return g


def base_candidates(stack: Stack) -> tuple[str, ...]:
    return tuple(c for c in (stack.commit, stack.pypi_commit) if c)


def trailers(message: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in _TRAILER.finditer(message)}


def inspect(g: Git, stack: Stack, series: Series, *, notify: Notify | None = None) -> CheckoutState:
    """Find the base under HEAD and compare the commits above it with the series.

    An apply that was killed part-way is finished first (``recover``).
    """
    done = recover(g, notify=notify)
    if done and notify is not None:
        notify(done)
    head = g.head()
    if head is None:
        raise CheckoutError(f"{g.root}: has no commits", hint="run 'sgpatch fetch' to create the checkout")
    dirty = tuple(g.status())
    bases = base_candidates(stack)
    chain: list[str] = []
    commit = head
    base: str | None = None
    for _ in range(len(series.patches) + 1):
        if commit in bases:
            base = commit
            break
        chain.append(commit)
        parents = g.parents(commit)
        if len(parents) != 1:
            break
        commit = parents[0]
    if base is None:
        pins = " or ".join(b[:12] for b in bases)
        return CheckoutState(
            "other",
            head,
            None,
            (),
            dirty,
            f"HEAD {head[:12]} is neither the pinned base ({pins}) nor the base plus the series of {stack.name}",
        )
    chain.reverse()
    problem = _compare_series(g, chain, series)
    if problem:
        return CheckoutState("other", head, base, tuple(chain), dirty, problem)
    phase = "pristine" if not chain else "patched"
    return CheckoutState(phase, head, base, tuple(chain), dirty, None)


def _compare_series(g: Git, chain: list[str], series: Series) -> str | None:
    for i, commit in enumerate(chain):
        found = trailers(g.message(commit))
        if i >= len(series.patches):
            return f"commit {commit[:12]} is beyond the series"
        patch = series.patches[i]
        name, sha = found.get(TRAILER_PATCH), found.get(TRAILER_SHA)
        if name is None:
            return f"commit {commit[:12]} is not an sgpatch commit (no {TRAILER_PATCH} trailer): a foreign commit"
        if name != patch.name:
            return f"commit {commit[:12]} carries {name}, but position {i + 1} of the series is {patch.name}"
        if sha != patch.sha256:
            return (
                f"commit {commit[:12]} carries {name} at sha256 {str(sha)[:12]}, "
                f"but the patch file is now {patch.sha256[:12]}"
            )
    if chain and len(chain) != len(series.patches):
        return f"only {len(chain)} of {len(series.patches)} patches are applied"
    return None


def check_base_files(g: Git, stack: Stack, base: str) -> None:
    """The touched files at the base must be the pinned blobs: otherwise it is the wrong source."""
    for pinned in stack.files:
        if any(ord(c) < 32 or ord(c) == 127 for c in pinned.path):
            raise CheckoutError(f"{stack.name}: pinned file {pinned.path!r} has a control character in its path")
        found = g.blob_id(base, pinned.path)
        if found != pinned.pristine:
            raise CheckoutError(
                f"{g.root}: {pinned.path} at base {base[:12]} is blob {found or 'missing'}, "
                f"{stack.name} pins {pinned.pristine[:12]}",
                hint="the checkout is not the pinned source",
            )


# --------------------------------------------------------------------------- locking and crash recovery
#
# An apply writes every object first, then records {old, new} in a journal in
# the git directory, then moves index and files (``read-tree -m -u``) and HEAD
# (``update-ref``), then removes the journal.  A kill before the journal leaves
# only unreachable objects; a kill after it leaves a journal that the next
# sgpatch command (under the checkout lock) finishes: it removes the git lock
# files the killed run left (they are newer than the journal), checks that
# every difference from ``old`` is its own, and completes the move to ``new``.


def lock_checkout(g: Git, *, command: str, notify: Notify | None = None) -> AbstractContextManager[Held]:
    """The checkout's sgpatch lock (``.git/sgpatch.lock``): one writer at a time."""
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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
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
    moved: the journal goes and the error is raised.
    """
    _refuse_git_locks(g)
    with signals_deferred():
        write_journal(g, old=old, new=new)
        pause("apply:journal")
        try:
            run_guarded(g, "read-tree", "-m", "-u", old, new)
        except SgpatchError as exc:
            if g.head() == old and not g.status():
                clear_journal(g)
                raise
            raise CheckoutError(
                f"{exc.message}; the checkout is part-way to {new[:12]}",
                hint="fix the cause; the next sgpatch command finishes the apply",
            ) from exc
        pause("apply:tree")
        try:
            run_guarded(g, "update-ref", "-m", reason, "HEAD", new, old)
        except SgpatchError as exc:
            try:
                run_guarded(g, "read-tree", "-m", "-u", new, old)
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
    journal = path.exists() or _journal_tmp(path).exists()
    if not journal and not path.with_name(LOCK).exists():
        return None
    try:
        with lock_checkout(g, command="recover", notify=notify):
            return _recover_locked(g, path)
    except CheckoutError:
        if journal:
            raise
        return None  # only a lock file, and we may not write here (a read-only checkout): nothing to finish


def _recover_locked(g: Git, path: Path) -> str | None:
    _journal_tmp(path).unlink(missing_ok=True)  # a journal never renamed into place: nothing moved
    if not path.exists():
        return None  # the apply we waited for finished
    try:
        entry = json.loads(path.read_text())
        old, new = str(entry["old"]), str(entry["new"])
        journal_time = path.stat().st_mtime_ns
    except (ValueError, KeyError, TypeError, OSError) as exc:
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
    _refuse_foreign_changes(g, old, new, path)
    with signals_deferred():
        run_guarded(g, "read-tree", "--reset", "-u", new)
        pause("recover:tree")
        if head == old:
            run_guarded(g, "update-ref", "-m", "sgpatch apply (finished after an interruption)", "HEAD", new, old)
        path.unlink(missing_ok=True)
    note = f" (removed {', '.join(p.name for p in removed)} left by the killed run)" if removed else ""
    return f"finished an interrupted apply: HEAD {old[:12]} -> {new[:12]}{note}"


def _remove_stale_git_locks(g: Git, *, since: int) -> list[Path]:
    """Remove git lock files the killed apply left; refuse one that predates it.

    The apply's git children die with it (``run_guarded``) and we hold the
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


def _refuse_foreign_changes(g: Git, old: str, new: str, journal: Path) -> None:
    """Every difference from ``old`` must be the interrupted move's own; never overwrite the user's."""
    out = g.run("diff-tree", "-r", "-z", "--no-renames", "--name-only", old, new).stdout
    changed = {p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p}
    foreign = [e[3:] for e in g.status() if not e.startswith("??") and e[3:] not in changed]
    for rel in sorted(changed):
        local = g.root / rel
        if local.is_symlink() or (local.exists() and not local.is_file()):
            foreign.append(rel)
        elif local.exists():
            data = local.read_bytes()
            before, after = g.read_blob(old, rel), g.read_blob(new, rel)
            # Ours: the old file, the new one, or the new one cut short by the kill.
            if data != before and (after is None or not after.startswith(data)):
                foreign.append(rel)
    if foreign:
        shown = ", ".join(foreign[:3]) + (" …" if len(foreign) > 3 else "")
        raise CheckoutError(
            f"{g.root}: an apply was interrupted ({old[:12]} -> {new[:12]}) and these files changed since: {shown}; "
            "sgpatch will not overwrite them",
            hint=f"save your changes elsewhere and restore the files with git, or remove {journal} to give up",
        )
