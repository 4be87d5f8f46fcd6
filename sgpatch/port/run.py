"""port: carry a stack's series to a new SGLang release (SPEC §9).

Each patch is judged against the new release, in series order, on top of the
patches kept before it, file by file and hunk by hunk (``carry``):

``upstream``    its effect is already there (reverse apply, AST-equal definitions, or its
                added lines verbatim): dropped, with the proof;
``superseded``  every definition it adds already exists in the same scope with another
                body: dropped, both versions in the report (``strict``: a failure);
``applies``     it applies with exact context, at an offset if need be;
``merged``      a three-way merge (old pinned base, new base, old patched) is clean;
``conflict``    a person must decide.

A patch keeps its hunks that are not upstream, under its own name and header.
Kept patches are committed on a checkout of the new release and exported
from there with ``git diff`` (new line numbers, DEP-3 headers kept); anchors
are carried to where their text now stands; the new stack is verified on that
checkout, then written: ``patches/<version>/`` and a new table at the end of
VERSIONS.toml.  At the first conflict the port stops, as ``git rebase`` does,
in the new stack's checkout (``stop``); ``port --continue`` takes the person's
resolution and goes on, ``port --abort`` gives up (``resume``).  Nothing reaches
VERSIONS.toml or patches/ before the whole series is carried.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from contextlib import nullcontext
from pathlib import Path

from sgpatch.cache import Cache
from sgpatch.checkout.fetch import pypi_commit_message
from sgpatch.checkout.stop.here import refuse_if_stopped, refuse_stopped, stopped_here
from sgpatch.checkout.stop.project import lock_project
from sgpatch.checkout.stop.record import PORT
from sgpatch.checkout.stop.recovery import STAGING, clear_leftovers
from sgpatch.config import Config, Stack
from sgpatch.config.pins import remove_stack
from sgpatch.errors import CheckoutError, ConfigError, SourceError
from sgpatch.git.batch import read_blobs, read_blobs_known
from sgpatch.git.repo import Git
from sgpatch.port.ahead import start_ahead
from sgpatch.port.carry import advance
from sgpatch.port.finish import base_result, finish_fresh
from sgpatch.port.outputs import (
    Plan,
    PortContext,
    check_replaceable,
    new_stack_name,
)
from sgpatch.port.parallel import Forked
from sgpatch.port.rebase import (
    ArchiveFiles,
    CheckoutFiles,
    Rebase,
    commit_kept,
    load_old,
)
from sgpatch.port.record import read_record
from sgpatch.port.result import PortResult
from sgpatch.port.reuse import replay_stop
from sgpatch.port.stack import Background, WheelsAgree, in_background, make_checkout, new_stack, renamed
from sgpatch.port.stop import new_record, stop_at
from sgpatch.results import Progress
from sgpatch.source.release import find_release


def port_stack(
    config: Config,
    stack_name: str | None,
    version: str,
    *,
    source: str = "pypi",
    commit: str | None = None,
    checkout: Path | None = None,
    dry_run: bool = False,
    strict: bool = False,
    force: bool = False,
    cache: Cache | None = None,
    progress: Progress | None = None,
) -> PortResult:
    """Port the series of ``stack_name`` to SGLang ``version`` (see the module docstring).

    ``force`` replaces a stack that port wrote before (its table, series
    directory and clean checkout); any other existing stack is a ConfigError.
    ``cache`` keeps work (each pinned wheel's file digests), never an answer.
    One port at a time per project (``stop.project``): what a killed one left is cleaned up first, and said.
    """
    with nullcontext() if dry_run else lock_project(config.root, command=f"port --to {version}"):
        target = checkout or config.root / ".sgpatch" / "checkouts" / new_stack_name(config.stack(stack_name), version)
        notes = () if dry_run else clear_leftovers(target)
        result = _port(config, stack_name, version, source, commit, checkout, dry_run, strict, force, cache, progress)
    return dataclasses.replace(result, notes=(*notes, *result.notes)) if notes else result


def _port(
    config: Config,
    stack_name: str | None,
    version: str,
    source: str,
    commit: str | None,
    checkout: Path | None,
    dry_run: bool,
    strict: bool,
    force: bool,
    cache: Cache | None,
    progress: Progress | None,
) -> PortResult:
    if source not in ("pypi", "git"):
        raise SourceError(f"unknown source {source!r}: use pypi or git")
    if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise ConfigError(f"--commit {commit!r} is not a full 40-hex commit SHA")
    old_stack = config.stack(stack_name)
    if version == old_stack.sglang_version:
        raise ConfigError(f"{old_stack.name} is already SGLang {version}")
    new_name = new_stack_name(old_stack, version)
    target = checkout or config.root / ".sgpatch" / "checkouts" / new_name
    stopped = None if dry_run else stopped_here(target)
    if stopped is not None and stopped.kind is PORT:
        record = read_record(target)  # an unreadable record is refused here, with the way out
        raise CheckoutError(
            f"{target}: a port is stopped here: the port to sglang {record and record.version} is in progress "
            f"here, stopped at {record and record.conflict}",
            hint=stopped.next_step,
        )
    refuse_stopped(stopped, f"sgpatch port --to {version}")
    refuse_if_stopped(config.checkout_dir(old_stack), f"sgpatch port {old_stack.name} --to {version}")
    config_text = config.path.read_text(encoding="utf-8")
    replaced = config.stacks.get(new_name)
    exists = ""
    if replaced is not None:
        exists = f"stack {new_name} exists already; --force replaces " + what_force_replaces(config, replaced, target)
        if not force and not dry_run:  # a dry run writes nothing: it ports and says what --force would replace
            raise ConfigError(
                f"{config.path}: stack {new_name} exists already",
                hint=f"--dry-run to see the port; --force replaces {what_force_replaces(config, replaced, target)}",
            )
        config_text = remove_stack(config_text, new_name, where=config.path)
        config = dataclasses.replace(config, stacks={k: v for k, v in config.stacks.items() if k != new_name})
    old, project = load_old(config, stack_name, progress=progress, cache=cache)
    series_dir = old.series.directory.parent / version
    plan = Plan(
        config=config,
        old=old,
        anchors=project.anchors,
        version=version,
        new_name=new_name,
        series_dir=series_dir,
        source=source,
        strict=strict,
        dry_run=dry_run,
        config_text=config_text,
        force=replaced is not None and force,
        exists=exists if dry_run else "",
    )
    existed_empty = False
    if not dry_run and target.exists():
        if not target.is_dir() or any(target.iterdir()):
            if replaced is None:
                raise CheckoutError(
                    f"{target}: exists and is not an empty directory",
                    hint="remove it, or pass --checkout DIR for the new stack's checkout",
                )
            check_replaceable(target, replaced)
        else:
            existed_empty = True

    parent = Path(tempfile.mkdtemp(prefix="sgpatch-port-")) if dry_run else target.parent
    made = [d for d in (parent, *parent.parents) if not d.exists()]  # removed again if the port fails (empty)
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{STAGING}{target.name}-", dir=parent))  # stop.recovery cleans up after a kill
    into = work / "checkout"
    touched = old.series.touched
    laying: Forked[tuple[str, str, str | None]] | Background[tuple[str, str, str | None]] | None = None
    wheels: WheelsAgree | None = None
    release_files: ArchiveFiles | None = None
    ahead = None
    failed = False
    try:
        # While the index is asked, the file the cache guesses the release is gets laid out and read (``ahead``:
        # kept only if the index names that very file).
        if source == "pypi":
            ahead = start_ahead(version, old, touched, renamed(old.stack, version, commit), into)
        release = find_release(version, progress=progress)
        if ahead is not None and not ahead.is_source_of(release):
            ahead.close()
            ahead = None
        opened = ahead.files.archive() if ahead is not None and ahead.read is not None else None
        stack, pin_changes = new_stack(
            old.stack, version, release, commit, series_dir, (config.path, config_text), opened=opened
        )
        plan = dataclasses.replace(plan, pin_changes=pin_changes)
        if source == "pypi":  # the series is judged from the artifact while the checkout is laid out from it
            if progress:
                progress(f"laying out {release.source[0].filename} as a git checkout")
            if ahead is not None:  # being laid out from the file the index named: its commit's message, now known
                laying = ahead.laying
                ahead.message.give(pypi_commit_message(stack, release.source[0]))
            else:
                laying = in_background(make_checkout, stack, release, into, touched, source=source, progress=None)
        # Every pinned wheel must make the same checkout: compared while the checkout is made and the series judged.
        wheels = WheelsAgree(stack, cache=cache, progress=progress) if release.source[0].kind == "wheel" else None
        if laying is None:  # a clone of upstream: its files are the release's
            base, pypi_commit, upstream_commit = make_checkout(
                stack, release, into, touched, source=source, progress=progress
            )
            g = Git(into)
            run = Rebase(g, base, base, read_blobs(g, base, touched), [], [], CheckoutFiles(g, base))
        else:
            if ahead is not None and ahead.read is not None:  # read while the index was asked
                release_files = ahead.files
                current, kept = ahead.read
                run = Rebase(Git(into, made=True), "", "", dict(current), [], [], kept)
            else:
                artifact, path = release.source
                release_files = ArchiveFiles(path, artifact)  # opened once for the whole port
                run = Rebase(Git(into, made=True), "", "", release_files.read(touched), [], [], release_files)
        judged = dict(run.current)
        if progress:
            progress(f"carrying {len(old.series.patches)} patch(es) to {version}, hunk by hunk")
        labels = {"old_version": old.stack.sglang_version, "new_version": version}
        conflict_at, conflict_files = advance(run, old, 0, **labels)
        g = run.g
        if laying is not None:
            base, pypi_commit, upstream_commit = laying.result()
            laid_out = read_blobs_known(g, base, touched, judged)
            if laid_out != judged:  # a file the checkout leaves out (packaging output): judge it as it is there
                run = Rebase(g, base, base, laid_out, [], [], CheckoutFiles(g, base))
                conflict_at, conflict_files = advance(run, old, 0, **labels)
            run.base = run.tip = base
        date = g.commit_date(base)
        commit_kept(run, date=date)
        source_kind = old.stack.default_source if upstream_commit else "pypi"
        stack = dataclasses.replace(stack, commit=upstream_commit, default_source=source_kind)
        if wheels is not None:
            wheels.result()
        port = PortContext(plan=plan, stack=stack, release=release, run=run, pypi_commit=pypi_commit)
        result = base_result(port)
        if conflict_at is None:
            return finish_fresh(port, result, into=into, target=target)
        failures = tuple(f"{p.name}: conflict: {p.detail}" for p in result.patches if p.state == "conflict")
        if dry_run:
            return dataclasses.replace(result, failures=failures)
        record = new_record(port, conflict_at, existed_empty=existed_empty)
        conflict_files, replayed = replay_stop(config.root, conflict_files or {})
        result = dataclasses.replace(result, failures=failures, replayed=replayed)
        return stop_at(
            plan, record, run, conflict_at, conflict_files or {}, result, head=base, into=into, target=target, date=date
        )
    except BaseException:
        failed = True
        raise
    finally:
        for child in (laying, wheels, ahead):  # a child whose answer was not taken (an error came first) is stopped
            if child is not None:
                child.close()
        if release_files is not None:
            release_files.close()
        shutil.rmtree(work if not dry_run else parent, ignore_errors=True)
        for folder in made if failed else ():  # a port that fails leaves no folder it made (the index failed...)
            try:
                folder.rmdir()
            except OSError:
                break  # not empty (or not ours to remove): the ones above it stay too


def what_force_replaces(config: Config, stack: Stack, checkout: Path) -> str:
    """In words: the stack's table in VERSIONS.toml, its series directory and its checkout, where they exist."""
    parts = [f'its [stacks."{stack.name}"] table in {config.path.name}']
    series = stack.series_dir if stack.series_dir.is_absolute() else config.root / stack.series_dir
    if series.is_dir():
        count = sum(1 for p in series.iterdir() if p.is_file())
        parts.append(f"its series directory {_rel(series, config.root)}/ ({count} file{'s' if count != 1 else ''})")
    if checkout.is_dir():
        parts.append(f"its checkout {_rel(checkout, config.root)}")
    return ", ".join(parts)


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
