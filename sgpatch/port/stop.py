"""Stopping for a person, and taking the person's resolution back (``port``, ``port --continue``).

At a stop the new checkout's HEAD is the last kept patch (``tip``), its index
too, and its files are the conflicting patch carried as far as it goes: clean
hunks applied, upstream hunks dropped, conflicts marked diff3-style against the
old base, and for each file the release lacks a reject file
(``<path>.rej``) holding that file's hunks.  The stop is a commit of its own
(``stop``, kept reachable by ``refs/sgpatch/port-stop``), so the move to it is
one journalled ``move_checkout`` and a killed run is finished from the record.  A
port's first stop is made in its own staging copy, which nobody else sees and a kill
leaves to be removed whole: there its files are written directly (``enter_stop``).

The resolution is the checkout as the person leaves it: what ``git add -A``
would take (committed or not), with no conflict marker and no reject file left.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path

from sgpatch.checkout.journal import move_checkout, recover
from sgpatch.checkout.stop.kinds import PortRecord
from sgpatch.checkout.stop.markers import reaches, refuse_markers
from sgpatch.checkout.stop.recovery import Steps, aside_of
from sgpatch.errors import CheckFailed, CheckoutError
from sgpatch.git.repo import CommitSpec, Git
from sgpatch.git.worktree import reset_index, worktree_changes, write_changes
from sgpatch.lock import pause
from sgpatch.port.outputs import Plan, PortContext, move_checkout_into_place
from sgpatch.port.rebase import Files, Rebase
from sgpatch.port.record import STOP_REF, write_record
from sgpatch.port.result import PortResult
from sgpatch.port.reuse import replay_rejects
from sgpatch.series.engine import apply_modes
from sgpatch.series.hunks import reject_text
from sgpatch.series.patch import Patch
from sgpatch.series.verdict import PortedPatch
from sgpatch.source.tree import DirTree, LinkInPath

# Left out of a resolution: what running Python or a merge tool leaves beside the files.
EXCLUDES = ("__pycache__/", "*.py[cod]", "*.orig")


def exclude_droppings(g: Git) -> None:
    """List in ``.git/info/exclude`` what a resolution never takes (the port made this checkout)."""
    info = g.git_dir() / "info"
    info.mkdir(exist_ok=True)
    path = info / "exclude"
    if info.is_symlink() or path.is_symlink():
        raise CheckoutError(f"{path}: is a symbolic link; sgpatch does not write through links")
    have = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    missing = [e for e in EXCLUDES if e not in have.splitlines()]
    if missing:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write("# sgpatch port: never part of a resolution\n" + "".join(f"{e}\n" for e in missing))


def _section(patch: Patch, index: int) -> bytes:
    """The bytes of the ``index``-th file section of the patch file (from its ``diff --git`` line)."""
    lines = patch.data.split(b"\n")
    start = patch.files[index].patch_line - 1
    end = patch.files[index + 1].patch_line - 1 if index + 1 < len(patch.files) else len(lines)
    body = b"\n".join(lines[start:end])
    return body if body.endswith(b"\n") else body + b"\n"


def stop_commit(
    g: Git,
    patch: Patch,
    ported: PortedPatch,
    files: Files,
    current: Files,
    tip: str,
    *,
    release: str,
    date: str,
    settled: Files | None = None,
) -> tuple[str, list[str], Files]:
    """The commit of the conflict as left for the person (on ``tip``), its reject files, and the texts it was made
    of.  ``settled``: the files the release lacks that kept decisions settle (``reuse.replay_rejects``): no reject
    file; a text is written."""
    texts: dict[str, bytes | None] = dict(files)
    rejects: list[str] = []
    verdicts = {f.path: f for f in ported.files}
    for i, fp in enumerate(patch.files):
        verdict = verdicts.get(fp.path)
        if verdict is None or not verdict.gone:
            continue
        if settled is not None and fp.path in settled:
            if settled[fp.path] is not None:
                texts[fp.path] = settled[fp.path]
            continue
        reject = f"{fp.path}.rej"
        texts[reject] = reject_text(fp, _section(patch, i), release=release, renamed=verdict.renamed)
        rejects.append(reject)
    message = f"sgpatch port: {patch.name} stopped for a person\n"
    commit = g.commit_files(tip, texts, current, message, date, modes=apply_modes({}, patch))
    return commit, rejects, texts


def enter_stop(
    g: Git,
    record: PortRecord,
    *,
    head: str,
    tip: str,
    stop: str,
    rejects: list[str],
    staged: Files | None = None,
) -> PortRecord:
    """Move the checkout from ``head`` to the stop (recorded first, so a kill is finished by ``settle``).

    ``staged``: the checkout is the port's own staging copy (nobody else sees it; a kill leaves it to be removed
    whole), and these are the texts the stop was made of: its files are moved by ``worktree.write_changes``, the
    index and HEAD left at ``head`` (or set to ``tip``), not by the journalled move a checkout in use needs
    (which wrote the index twice and read it back: 0.1 s of a port's tail).  A change it does not do (a file
    removed, a link) goes the journalled way."""
    record = dataclasses.replace(
        record, phase="stopping", head=head, tip=tip, stop=stop, rejects=tuple(rejects), moved=False
    )
    write_record(g, record)
    pause("port:stopping")
    if staged is not None and write_changes(g, head, stop, staged):
        g.set_ref(STOP_REF, stop)
        if tip != head:
            reset_index(g, tip)
            g.update_head(tip, old=head, reason=f"sgpatch port: stop at {record.conflict}")
        record = dataclasses.replace(record, moved=True, phase="stopped")
        write_record(g, record)
        return record
    return settle_stop(g, record)


def settle_stop(g: Git, record: PortRecord) -> PortRecord:
    """Finish the move to a stop, from wherever a kill left it."""
    recover(g)
    head, stop, tip = g.head(), record.stop, record.tip
    if not record.moved:
        if head == record.head:
            move_checkout(g, old=record.head, new=stop, reason=f"sgpatch port: stop at {record.conflict}")
        elif head != stop:
            raise CheckoutError(
                f"{g.root}: HEAD {str(head)[:12]} moved while the port was stopping at {record.conflict}",
                hint=f"'sgpatch port --abort --checkout {g.root}' gives the port up",
            )
        record = dataclasses.replace(record, moved=True)
        write_record(g, record)
    g.set_ref(STOP_REF, stop)
    reset_index(g, tip)
    if g.head() == stop:
        g.update_head(tip, old=stop, reason=f"sgpatch port: stop at {record.conflict}")
    record = dataclasses.replace(record, phase="stopped")
    write_record(g, record)
    return record


# What a port registers with the room's one recovery: a kill between recording a stop and resting there is
# finished from the record (``finishing`` writes the project: ``port --continue`` itself finishes it).
STEPS = Steps(
    record=PortRecord,
    finish={"stopping": settle_stop},
    doing={"stopping": "the port's move to its stop"},
)


def take_resolution(g: Git, record: PortRecord, patch: Patch, *, date: str) -> tuple[str, bool]:
    """The checkout as the person left it, as the commit of ``patch`` on the stop's tip (HEAD and index moved
    there, files untouched); and whether it carries anything (False: resolved to the release's text)."""
    tip = record.tip
    head = g.head()
    if head is None or not reaches(g, head, tip):
        raise CheckoutError(
            f"{g.root}: HEAD {str(head)[:12]} is not the stop's {tip[:12]} or a commit on top of it",
            hint="put the resolution on top of the kept patches (or 'sgpatch port --abort')",
        )
    left = [r for r in record.rejects if os.path.lexists(g.root / r)]
    if left:
        raise CheckFailed(
            f"{g.root / left[0]}: the reject file is still there ({len(left)} left)",
            hint="move its hunks, recreate the file or leave it absent; then delete the reject file",
        )
    tree = g.tree_of(head)
    local = DirTree(g.root)
    changes: dict[str, tuple[str, str]] = {}
    removed: list[str] = []
    for path in worktree_changes(g, head):
        full = g.root / path
        if full.is_symlink() or (full.exists() and not full.is_file()):
            raise CheckoutError(f"{full}: is not a regular file; a resolution holds regular files only")
        try:
            data = local.read(path)
        except LinkInPath as exc:
            raise CheckoutError(f"{full}: {exc.message}; a resolution holds regular files only") from None
        if data is None:
            removed.append(path)
            continue
        mode = "100755" if os.stat(full).st_mode & 0o100 else "100644"
        changes[path] = (mode, g.hash_blob(data))
    if removed:
        tree = g.tree_without(tree, removed)
    if changes:
        tree = g.tree_with(tree, changes)
    refuse_markers(g, tip, tree, resume="sgpatch port --continue")
    carries = tree != g.tree_of(tip)
    new = g.commit_tree(CommitSpec(tree, (tip,), patch.commit_message(), date)) if carries else tip
    reset_index(g, new)
    pause("port:resolved")
    if new != head:
        g.update_head(new, old=head, reason=f"sgpatch port --continue: {patch.name} resolved")
    return new, carries


# --------------------------------------------------------------------------- the stop, as the port reports it


def new_record(port: PortContext, conflict_at: int, *, existed_empty: bool) -> PortRecord:
    """What the record of a port stopped at patch ``conflict_at`` holds (``enter_stop`` adds where it is)."""
    plan, stack, release, run, pypi_commit = port.plan, port.stack, port.release, port.run, port.pypi_commit
    patch = plan.old.series.patches[conflict_at]
    names = [p.name for p in run.ported]
    decided = run.ported[: names.index(patch.name)]
    return PortRecord(
        phase="stopping",
        old_stack=plan.old.stack.name,
        stack=plan.new_name,
        version=plan.version,
        source=plan.source,
        commit=stack.commit,
        base=run.base,
        pypi_commit=pypi_commit,
        artifacts=tuple(release.artifacts),
        series={p.name: p.sha256 for p in plan.old.series.patches},
        kept=tuple(run.kept),
        conflict=patch.name,
        decided=tuple(p.recorded() for p in decided),
        conflicted=run.ported[names.index(patch.name)].recorded(),
        strict=plan.strict,
        force=plan.force,
        existed_empty=existed_empty,
        replaced=None,
    )


def next_steps(checkout: Path, result: PortResult, rejects: list[str]) -> tuple[str, ...]:
    stopped = next(p for p in result.patches if p.name == result.stopped)
    marked = [f for f in stopped.files if f.regions]
    steps = [f"cd {shlex.quote(str(checkout))}  (git status and git diff show where {stopped.name} stands)"]
    if marked:
        regions = sum(len(f.regions) for f in marked)
        steps.append(
            f"resolve the {regions} conflict(s) marked in {len(marked)} file(s) (diff3 style: <<<<<<< the "
            "release, ||||||| the old base, ======= the patch, >>>>>>>)"
        )
    if rejects:
        steps.append(
            f"for each of the {len(rejects)} reject file(s) (*.rej: a file the release lacks): move its hunks, "
            "recreate the file, or leave it absent; then delete the reject file"
        )
    steps.append("then run 'sgpatch port --continue' (or 'sgpatch port --abort' to give the port up)")
    return tuple(steps)


def stop_at(
    plan: Plan,
    record: PortRecord,
    run: Rebase,
    conflict_at: int,
    files: Files,
    result: PortResult,
    *,
    head: str,
    into: Path,
    target: Path,
    date: str,
) -> PortResult:
    """Leave the checkout at the conflict of patch ``conflict_at`` for a person, and report it (``date``: the base
    commit's, which the stop's commit is given)."""
    g = run.g
    patch = plan.old.series.patches[conflict_at]
    ported = next(p for p in result.patches if p.name == patch.name)
    exclude_droppings(g)
    gone = {f.path for f in ported.files if f.gone}
    settled = replay_rejects(plan.config.root, [fp for fp in patch.files if fp.path in gone])
    if settled:
        result = dataclasses.replace(result, replayed=(*result.replayed, *sorted(settled)))
    stop, rejects, texts = stop_commit(
        g, patch, ported, files, run.current, run.tip, release=f"sglang {plan.version}", date=date, settled=settled
    )
    if into != target and target.exists() and not (target.is_dir() and not any(target.iterdir())):
        aside = aside_of(target)  # the stack --force replaces: back on --abort
        if os.path.lexists(aside):
            raise CheckoutError(f"{aside}: exists (left by an earlier port?)", hint="remove it and port again")
        record = dataclasses.replace(record, replaced=str(aside))
    staged = texts if into != target else None  # the port's own staging copy, moved into place below
    record = enter_stop(g, record, head=head, tip=run.tip, stop=stop, rejects=rejects, staged=staged)
    if into != target:
        if record.replaced:
            target.rename(record.replaced)
        move_checkout_into_place(into, target)
    result = dataclasses.replace(result, checkout=target, stopped=patch.name, rejects=tuple(rejects))
    return dataclasses.replace(result, next_steps=next_steps(target, result, rejects))
