"""Writing an edit back (``sgpatch export`` or ``sgpatch edit --continue`` during an edit).

The person's work (HEAD and the tracked files as they stand, what ``git commit -a`` would take) becomes the
edited patch's commit on the commit below it; each later patch is carried over it with a three-way merge
(``git merge-file``: its own change, from the series before the edit to the series with it).  When every
later patch carries, the checkout moves to the new series and ``export`` writes the patch files back (the
edited patch, and any later one whose change changed, get today's ``Last-Update``).  When one conflicts,
the checkout is left at that patch with the conflict marked diff3-style (a commit of its own, moved to as
one journalled step, HEAD and index then set to the patches carried so far), and the record says where
the edit stands; ``--continue`` takes the resolution the same way and goes on.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from sgpatch.checkout.edit import (
    HEAD_REF,
    STOP_REF,
    EditResult,
    clear_record,
    settle_entering,
    started,
    write_record,
)
from sgpatch.checkout.export import check_export, export_held
from sgpatch.checkout.journal import lock_checkout, move_checkout, recover
from sgpatch.checkout.state import open_checkout
from sgpatch.checkout.stop.kinds import Conflict, EditRecord
from sgpatch.checkout.stop.markers import marker_lines, reaches, refuse_markers
from sgpatch.checkout.stop.project import lock_project
from sgpatch.checkout.stop.recovery import Steps, clear_leftovers, finish_steps, recover_stop
from sgpatch.config import Config, Stack
from sgpatch.errors import CheckFailed, CheckoutError
from sgpatch.git.batch import read_blobs
from sgpatch.git.diff import merge_file
from sgpatch.git.repo import CommitSpec, Git
from sgpatch.git.worktree import delete_ref, reset_index, tracked_changes, untracked_files
from sgpatch.lock import pause
from sgpatch.series.patch import Series


def continue_edit(config: Config, stack: Stack, series: Series, checkout: Path) -> EditResult:
    """Write the edit in progress in ``checkout`` back (see the module docstring)."""
    with lock_project(config.root, command="edit --continue"):
        beside = clear_leftovers(checkout)
        g = open_checkout(checkout)
        with lock_checkout(g, command="edit --continue"):
            found = recover_stop(g, STEPS, finish=False)  # the record is checked against the series first
            record = found.record
            if record is None:
                raise CheckoutError(f"{g.root}: no edit in progress here", hint="'sgpatch edit PATCH' starts one")
            if record.stack != stack.name:
                raise CheckoutError(f"{g.root}: the edit in progress is of stack {record.stack}, not {stack.name}")
            if {p.name: p.sha256 for p in series.patches} != record.series and record.phase != "finishing":
                raise CheckoutError(
                    f"{series.directory}: the series changed since the edit of {record.patch} started",
                    hint="'sgpatch edit --abort' puts the files and the checkout back as they were",
                )
            if record.phase == "aborting":
                raise CheckoutError(
                    f"{g.root}: an abort of this edit was interrupted", hint="run 'sgpatch edit --abort'"
                )
            was = record.phase
            record, finished = finish_steps(g, STEPS, record)  # a kill's half-done step (entering, moving) first
            notes = (*beside, *found.notes, *finished)
            if was == "entering":  # killed before the person saw the edit: now it is ready for them
                return started(g, record, notes)
            if record.phase == "editing" or was == "stopped":  # the person's work, taken and carried
                record = _settle_moving(g, _take_and_carry(config, stack, g, series, record))
            if record.phase == "stopped":
                result = _stopped_result(g, stack, record)
            else:
                result = _finish(config, stack, series, g, record)
            return dataclasses.replace(result, notes=(*notes, *result.notes)) if notes else result


def _take_and_carry(config: Config, stack: Stack, g: Git, series: Series, record: EditRecord) -> EditRecord:
    """Take the person's work as the commit of the patch they are on, carry the later patches over it
    (objects only), and record where the checkout goes next (phase ``moving``)."""
    commits = list(record.commits)
    base = record.base
    date = g.commit_date(base)
    if record.phase == "editing":
        at = record.index
        below = commits[at - 1] if at > 0 else base
    else:
        assert record.conflict_index is not None and record.tip is not None  # a stopped record has both
        at = record.conflict_index
        below = record.tip
    head = g.head()
    if head is None or not reaches(g, head, below):
        raise CheckoutError(
            f"{g.root}: HEAD {str(head)[:12]} is not on top of {below[:12]}, where {series.patches[at].name} belongs",
            hint="put your work back on that commit (git reset --soft), or 'sgpatch edit --abort'",
        )
    tree, untracked = _worktree_tree(g, head)
    if record.phase == "stopped":
        refuse_markers(g, below, tree, resume="sgpatch edit --continue")
    if tree == g.tree_of(below):
        raise CheckFailed(
            f"{g.root}: with your work, {series.patches[at].name} changes nothing",
            hint="a patch must change something: keep its change, or 'sgpatch edit --abort'",
        )
    taken = g.commit_tree(CommitSpec(tree, (below,), series.patches[at].commit_message(), date))
    tip = taken

    def moving(
        *, tip: str, stop: str | None, conflict_index: int | None, conflicts: tuple[Conflict, ...]
    ) -> EditRecord:
        """The record of the move to ``tip`` (or to the ``stop`` for a person), written before anything moves."""
        return dataclasses.replace(
            record,
            phase="moving",
            moving_from=head,
            taken=taken,
            tip=tip,
            stop=stop,
            conflict_index=conflict_index,
            moved=False,
            conflicts=conflicts,
            untracked=tuple(untracked),
        )

    for j in range(at + 1, len(series.patches)):
        files, conflicts = _carry(g, series, commits, j, tip, edited=record.patch)
        before = read_blobs(g, tip, list(files))
        modes = g.modes(commits[j], [p for p, d in files.items() if d is not None])
        if conflicts:
            message = f"sgpatch edit: {series.patches[j].name} stopped for a person\n"
            stop = g.commit_files(tip, files, before, message, date, modes=modes)
            record = moving(tip=tip, stop=stop, conflict_index=j, conflicts=tuple(conflicts))
            write_record(g, record)
            return record
        tip = g.commit_files(tip, files, before, series.patches[j].commit_message(), date, modes=modes)
    try:  # every check apply runs, before anything moves: the person fixes the resolution where it is
        check_export(config, stack, series, g, tip)
    except CheckFailed as exc:
        raise CheckFailed(
            exc.message, hint=f"fix your work in {g.root} (it is as you left it), then 'sgpatch edit --continue'"
        ) from None
    record = moving(tip=tip, stop=None, conflict_index=None, conflicts=())
    write_record(g, record)
    return record


def _worktree_tree(g: Git, head: str) -> tuple[str, list[str]]:
    """HEAD's tree with the tracked files as they stand in the work tree; and the untracked files (left out)."""
    tracked, others = tracked_changes(g, head), untracked_files(g)
    tree = g.tree_of(head)
    changes: dict[str, tuple[str, str]] = {}
    removed: list[str] = []
    for path in tracked:
        full = g.root / path
        if full.is_symlink() or (full.exists() and not full.is_file()):
            raise CheckoutError(f"{full}: is not a regular file; a patch holds regular files only")
        if not full.exists():
            removed.append(path)
            continue
        mode = "100755" if os.stat(full).st_mode & 0o100 else "100644"
        changes[path] = (mode, g.hash_blob(full.read_bytes()))
    if removed:
        tree = g.tree_without(tree, removed)
    if changes:
        tree = g.tree_with(tree, changes)
    return tree, others


def _carry(
    g: Git, series: Series, commits: list[str], j: int, tip: str, *, edited: str
) -> tuple[dict[str, bytes | None], list[Conflict]]:
    """Patch ``j``'s files carried onto ``tip``: its change (the commit below it -> its commit) merged into
    ``tip``'s files; and the files that conflict."""
    before_j = commits[j - 1]
    paths = sorted(g.changed_paths(before_j, commits[j]))
    base, theirs, ours = (read_blobs(g, rev, paths) for rev in (before_j, commits[j], tip))
    labels = (f"the series with your edit of {edited}", "the series before the edit", series.patches[j].name)
    files: dict[str, bytes | None] = {}
    conflicts: list[Conflict] = []
    for path in paths:
        b, a, o = base[path], theirs[path], ours[path]
        if o in (b, a):
            files[path] = a
            continue
        merged, count = merge_file(g, o or b"", b or b"", a or b"", labels)
        files[path] = None if a is None and not merged else merged
        if count:
            lines = marker_lines(merged)
            conflicts.append(Conflict(path, lines[0] if lines else 1, count))
    return files, conflicts


def _settle_moving(g: Git, record: EditRecord) -> EditRecord:
    """Move the checkout to where ``_take_and_carry`` decided, from wherever a kill left it: HEAD and index
    to the taken commit (files stay: they are its tree), then files to the stop or the new series."""
    recover(g)
    source, taken, tip = str(record.moving_from), str(record.taken), str(record.tip)
    stop = record.stop
    head = g.head()
    if not record.moved:
        if head == source and source != taken:
            reset_index(g, taken)
            g.update_head(taken, old=source, reason=f"sgpatch edit: {record.patch} taken")
            head = taken
        pause("edit:taken")
        target = stop or tip
        if head == taken and taken != target:
            move_checkout(g, old=taken, new=target, reason="sgpatch edit: carrying the later patches")
        elif g.head() != target:
            raise CheckoutError(
                f"{g.root}: HEAD {str(head)[:12]} moved while the edit was being written back",
                hint="'sgpatch edit --abort' goes back to before the edit",
            )
        record = dataclasses.replace(record, moved=True)
        write_record(g, record)
    if stop:
        g.set_ref(STOP_REF, stop)
        reset_index(g, tip)
        if g.head() == stop:
            g.update_head(tip, old=stop, reason="sgpatch edit: stopped for a person")
    record = dataclasses.replace(record, phase="stopped" if stop else "finishing")
    write_record(g, record)
    return record


# What an edit registers with the room's one recovery: a kill while the checkout moves (into the patch, or
# to the carried series or its stop) is finished from the record; ``aborting`` is ``edit --abort``'s own.
STEPS = Steps(
    record=EditRecord,
    finish={"entering": settle_entering, "moving": _settle_moving},
    doing={"entering": "the edit's move into its patch", "moving": "the edit's write-back move"},
)


def _stopped_result(g: Git, stack: Stack, record: EditRecord) -> EditResult:
    names = list(record.series)
    stopped = names[record.conflict_index or 0]
    conflicts = record.conflicts
    first = conflicts[0] if conflicts else None
    where = f"{first.path}:{first.line}" if first else "?"
    steps = (
        f"{stopped} no longer applies over your edit of {record.patch}: conflict in {where}"
        + (f" (and {len(conflicts) - 1} more file(s))" if len(conflicts) > 1 else ""),
        f"resolve the marked lines in {g.root} (diff3 style: <<<<<<< the series with your edit, ||||||| before "
        f"the edit, ======= {stopped}, >>>>>>>)",
        "then run 'sgpatch edit --continue' (or 'sgpatch edit --abort' to go back to before the edit)",
    )
    return EditResult(
        stack.name,
        g.root,
        record.patch,
        "stopped",
        str(g.head()),
        stopped=stopped,
        conflicts=conflicts,
        next_steps=steps,
    )


def _finish(config: Config, stack: Stack, series: Series, g: Git, record: EditRecord) -> EditResult:
    """Export the new series from the checkout (Last-Update bumped where a change changed), then drop the
    record: the checkout is exactly patched again."""
    before = {p.name: p.data for p in series.patches}
    exported = export_held(config, stack, series, g)
    pause("edit:exported")
    bumped = tuple(
        p.name
        for p in exported.patches
        if p.status != "unchanged" and _last_update(series.directory / p.name) != _last_update_of(before.get(p.name))
    )
    for ref in (HEAD_REF, STOP_REF):
        if g.rev_parse(ref) is not None:
            delete_ref(g, ref)
    clear_record(g)
    notes = list(exported.notes)
    if record.untracked:
        shown = ", ".join(record.untracked[:3]) + (" …" if len(record.untracked) > 3 else "")
        notes.append(f"untracked files were left out of {record.patch} ({shown}); 'git add' is how a new file joins")
    return EditResult(
        stack.name,
        g.root,
        record.patch,
        "written",
        exported.new_head,
        written=exported.changed,
        bumped=bumped,
        notes=tuple(notes),
    )


def _last_update(path: Path) -> str | None:
    return _last_update_of(path.read_bytes() if path.is_file() else None)


def _last_update_of(data: bytes | None) -> str | None:
    if data is None:
        return None
    for line in data.split(b"\ndiff --git ", 1)[0].split(b"\n"):
        if line.lower().startswith(b"last-update:"):
            return line.split(b":", 1)[1].strip().decode("utf-8", "replace")
    return None
