"""``port --continue`` and ``port --abort``: after a port stopped for a person (SPEC §9).

``--continue`` takes the checkout as the person left it as the stopped patch
(``stop.take_resolution``: it refuses while a conflict marker or reject file
remains), carries the rest of the series, and either stops at the next
conflict or writes the new stack exactly as a port without conflicts does.
``--abort`` removes the new stack's checkout (and puts back the one a
``--force`` port was replacing): nothing of the project was written yet.
Both first finish a step a kill interrupted, from the record (``record``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
from pathlib import Path

from sgpatch.atomic import write_atomic
from sgpatch.checkout.journal import lock_checkout, move_checkout, recover
from sgpatch.checkout.state import open_checkout
from sgpatch.checkout.stop.kinds import PortRecord
from sgpatch.checkout.stop.project import lock_project
from sgpatch.checkout.stop.recovery import aside_of, clear_leftovers, hidden_checkouts, recover_stop
from sgpatch.config import Config
from sgpatch.errors import CheckoutError, ConfigError
from sgpatch.git.batch import read_blobs, read_objects
from sgpatch.git.repo import Git
from sgpatch.git.worktree import delete_ref
from sgpatch.lock import pause
from sgpatch.port.carry import advance
from sgpatch.port.finish import base_result, prepare_in_place, replace_stack_text
from sgpatch.port.outputs import Plan, PortContext, check_series_dir, new_stack_name
from sgpatch.port.rebase import CheckoutFiles, Rebase, commit_kept, load_old
from sgpatch.port.record import STOP_REF, clear_record, read_record, write_record
from sgpatch.port.result import PortResult
from sgpatch.port.reuse import learn_from, replay_stop
from sgpatch.port.stack import new_stack
from sgpatch.port.stop import STEPS, new_record, stop_at, take_resolution
from sgpatch.results import Progress
from sgpatch.source.release import pinned_release

_PLAIN = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,199}$")
_OID = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def find_port(config: Config, stack_name: str | None, version: str | None, checkout: Path | None) -> Path:
    """The checkout of the port in progress: ``checkout``, the default one for ``version``, or the only one."""
    if checkout is not None:
        return checkout
    root = config.root / ".sgpatch" / "checkouts"
    if version:
        return root / new_stack_name(config.stack(stack_name), version)
    found = []
    for d in sorted(root.iterdir()) if root.is_dir() else ():
        if d.is_dir() and not d.is_symlink():
            record = read_record(d)
            if record is not None and (stack_name is None or record.old_stack == stack_name):
                found.append(d)
    if not found:
        hidden = hidden_checkouts(root)  # moved aside by a killed --force port or --abort: the next command restores it
        if len(hidden) == 1:
            return hidden[0]
        raise CheckoutError(
            f"no port in progress under {root}", hint="pass --checkout DIR for a port into another directory"
        )
    if len(found) > 1:
        raise CheckoutError(
            f"{len(found)} ports in progress: {', '.join(d.name for d in found)}", hint="name one with --to VERSION"
        )
    return found[0]


def continue_port(config: Config, checkout: Path, *, progress: Progress | None = None) -> PortResult:
    """Go on with the port stopped in ``checkout`` (see the module docstring)."""
    with lock_project(config.root, command="port --continue"):
        notes = clear_leftovers(checkout)
        g = open_checkout(checkout)
        with lock_checkout(g, command="port --continue"):
            found = recover_stop(g, STEPS)
            record, notes = found.record, (*notes, *found.notes)
            if record is None:
                raise CheckoutError(
                    f"{checkout}: no port in progress here", hint="'sgpatch port --to VERSION' starts one"
                )
            if record.phase == "finishing":
                written = settle_finish(config, g, record)
                result = _finished_result(record, g.root, written)
            else:
                result = _continue(config, g, record, progress=progress)
    return dataclasses.replace(result, notes=(*notes, *result.notes)) if notes else result


def _continue(config: Config, g: Git, record: PortRecord, *, progress: Progress | None) -> PortResult:
    old, project = load_old(config, record.old_stack, progress=progress)
    if {p.name: p.sha256 for p in old.series.patches} != record.series:
        raise CheckoutError(
            f"{g.root}: the series of {old.stack.name} changed since the port started",
            hint="'sgpatch port --abort', then port again",
        )
    config, config_text = replace_stack_text(config, record.stack, force=record.force)
    names = [p.name for p in old.series.patches]
    patch = old.series.patches[names.index(record.conflict)]
    version = record.version
    base = record.base
    date = g.commit_date(base)
    new_head, carries = take_resolution(g, record, patch, date=date)
    rejected = {r.removesuffix(".rej") for r in record.rejects}
    gone = [fp for fp in patch.files if fp.path in rejected]
    previous, conflicted = list(record.decided), record.conflicted
    kept = list(record.kept)
    if carries:
        kept.append(patch.name)
        how = f"resolved by hand in {g.root}"
    else:
        how = f"resolved to the text of sglang {version}: dropped"
    previous.append(dataclasses.replace(conflicted, state="resolved", detail=how, conflicts=()))

    release = pinned_release(version, record.artifacts, progress=progress)
    series_dir = old.series.directory.parent / version
    stack, pin_changes = new_stack(old.stack, version, release, record.commit, series_dir, (config.path, config_text))
    plan = Plan(
        config=config,
        old=old,
        anchors=project.anchors,
        version=version,
        new_name=record.stack,
        series_dir=series_dir,
        source=record.source,
        strict=record.strict,
        dry_run=False,
        config_text=config_text,
        force=record.force,
        pin_changes=pin_changes,
    )
    current = read_blobs(g, new_head, old.series.touched)
    run = Rebase(g, base, new_head, current, [], kept, CheckoutFiles(g, new_head))
    start = names.index(patch.name) + 1
    conflict_at, files = advance(run, old, start, old_version=old.stack.sglang_version, new_version=version)
    commit_kept(run, date=date)
    port = PortContext(plan=plan, stack=stack, release=release, run=run, pypi_commit=record.pypi_commit)
    result = base_result(port, tuple(previous))
    if conflict_at is not None:
        failures = tuple(f"{p.name}: conflict: {p.detail}" for p in run.ported if p.state == "conflict")
        stopped = new_record(port, conflict_at, existed_empty=record.existed_empty)
        stopped = dataclasses.replace(
            stopped, decided=(*(p.recorded() for p in previous), *stopped.decided), replaced=record.replaced
        )
        learn_from(config.root, g, record, new_head, gone)  # taken: kept for later ports of the series (reuse)
        files, replayed = replay_stop(config.root, files or {})
        result = dataclasses.replace(result, failures=failures, replayed=replayed)
        return stop_at(
            plan, stopped, run, conflict_at, files, result, head=new_head, into=g.root, target=g.root, date=date
        )
    ready = prepare_in_place(port, result)
    if ready.result.failures:  # the record stays: the person fixes the resolution and continues again
        steps = (
            f"fix the resolution of {patch.name} in {g.root} (the checkout is as you left it)",
            "then run 'sgpatch port --continue' again (or 'sgpatch port --abort' to give the port up)",
        )
        return dataclasses.replace(ready.result, checkout=g.root, next_steps=steps)
    check_series_dir(plan, ready.outputs)
    learn_from(config.root, g, record, new_head, gone)  # passed every check: kept for later ports (reuse)
    outputs = {str(p.relative_to(config.root)): g.hash_blob(data) for p, data in ready.outputs.items()}
    record = dataclasses.replace(
        record,
        phase="finishing",
        head=new_head,
        final=ready.final,
        outputs=outputs,
        config_before=hashlib.sha256(config.path.read_bytes()).hexdigest(),
        decided=tuple(p.recorded() for p in ready.result.patches),
    )
    write_record(g, record)
    pause("port:finishing")
    written = settle_finish(config, g, record)
    return dataclasses.replace(ready.result, checkout=g.root, written=tuple(written))


def settle_finish(config: Config, g: Git, record: PortRecord) -> list[Path]:
    """Move the checkout to the new series and write the new stack's files (again, after a kill)."""
    recover(g)
    final, head = str(record.final), g.head()
    if head != final:
        if head != record.head:
            raise CheckoutError(
                f"{g.root}: HEAD {str(head)[:12]} moved while the port was finishing",
                hint="check the checkout with 'git status'; 'sgpatch port --continue' finishes from the record",
            )
        move_checkout(g, old=record.head, new=final, reason=f"sgpatch port {record.stack}")
    pause("port:finish-moved")
    series_dir = config.stack(record.old_stack).series_dir.parent / record.version
    outputs: dict[Path, str] = {}
    for rel, blob in (record.outputs or {}).items():
        path = config.root / rel
        if not (path == config.path or path.parent == series_dir) or not _OID.match(str(blob)):
            raise CheckoutError(f"{g.root}: the port record names {rel!r} to write", hint="'sgpatch port --abort'")
        outputs[path] = str(blob)
    data = dict(zip(outputs, read_objects(g, list(outputs.values())), strict=True))
    if any(v is None for v in data.values()) or config.path not in data:
        raise CheckoutError(f"{g.root}: the new stack's files are missing from the checkout's objects")
    new_config = data[config.path]
    assert new_config is not None
    now = config.path.read_bytes()
    if now != new_config and hashlib.sha256(now).hexdigest() != record.config_before:
        raise ConfigError(
            f"{config.path}: changed while the port to {record.version} was finishing",
            hint=f"put it back, then run 'sgpatch port --continue' to finish writing {record.stack}",
        )
    written = []
    if record.force and series_dir.is_dir():
        for stale in {p for p in series_dir.iterdir() if p.is_file()} - set(data):
            stale.unlink()
    for path, content in data.items():
        assert content is not None
        if path != config.path and (not path.exists() or path.read_bytes() != content):
            write_atomic(path, content)
            written.append(path)
    pause("port:finish-series")
    if now != new_config:
        write_atomic(config.path, new_config)
    written.append(config.path)
    aside = aside_of(g.root)  # never a path from the record
    if record.replaced and aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside)
    if g.rev_parse(STOP_REF) is not None:
        delete_ref(g, STOP_REF)
    clear_record(g)
    return written


def _finished_result(record: PortRecord, checkout: Path, written: list[Path]) -> PortResult:
    """What a ``--continue`` that only finished an interrupted write reports."""
    return PortResult(
        old_stack=record.old_stack,
        new_stack=record.stack,
        version=record.version,
        source=record.source,
        artifacts=record.artifacts,
        pypi_commit=record.pypi_commit,
        commit=record.commit,
        base=record.base,
        checkout=checkout,
        patches=record.decided,
        anchors=(),
        written=tuple(written),
        dry_run=False,
        strict=record.strict,
        notes=("finished writing the new stack, which an interrupted 'port --continue' had started",),
    )
