"""port: carry a stack's series to a new SGLang release (SPEC §9).

Each patch is classified against the new release, in series order, on top of
the patches kept before it:

``upstream``    its effect is already there (reverse apply, AST-equal definitions, or its
                added lines verbatim): dropped, with the proof;
``superseded``  every definition it adds already exists in the same scope with another
                body: dropped, both versions in the report (``strict``: a failure);
``applies``     it applies with exact context, at an offset if need be;
``merged``      a three-way merge (old pinned base, new base, old patched) is clean;
``conflict``    the merge conflicts: the result, with markers, is left in the checkout.

Kept patches are committed on a checkout of the new release and exported
from there with ``git diff`` (new line numbers, DEP-3 headers kept); anchors
are carried to where their text now stands; the new stack is verified on that
checkout, then written: ``patches/<version>/`` and a new table at the end of
VERSIONS.toml.  A conflict writes nothing to the project; once the user has
committed the resolution in the checkout, ``port`` (or ``export``) again
continues from there.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sgpatch.checkout.chain import find_chain, header_of, render_chain
from sgpatch.checkout.export import rerecord
from sgpatch.checkout.fetch import check_wheels_agree, create_pypi_checkout
from sgpatch.checkout.journal import lock_checkout, move_checkout
from sgpatch.checkout.state import open_checkout
from sgpatch.config import Artifact, Config, InstallRecipe, Stack
from sgpatch.errors import CheckoutError, ConfigError, SourceError
from sgpatch.git.clone import clone
from sgpatch.git.diff import write_info_attributes
from sgpatch.git.repo import CommitSpec, Git
from sgpatch.pins import (
    RENAMES,
    check_build_requires,
    port_pins,
    remove_stack,
)
from sgpatch.port.outputs import (
    Plan,
    check_replaceable,
    move_checkout_into_place,
    new_stack_name,
    render_outputs,
    self_check,
    with_hunks,
    write_outputs,
)
from sgpatch.port.rebase import (
    CommitTree,
    Files,
    PortedPatch,
    Rebase,
    advance,
    load_old,
    series_chain,
)
from sgpatch.port.record import CONFLICT_MARKER, leave_conflict, read_record, record_path
from sgpatch.port.result import PortResult
from sgpatch.results import Progress
from sgpatch.series.patch import (
    parse_patch,
)
from sgpatch.source.release import Release, find_release, pinned_release
from sgpatch.source.tree import DirTree, SourceTree


def _new_stack(
    old: Stack, version: str, release: Release, commit: str | None, series_dir: Path, config: tuple[Path, str]
) -> tuple[Stack, tuple[str, ...]]:
    """The new stack's table: the old one's with the release's own pins (install, overrides, build backend),
    and how those pins changed."""
    name = new_stack_name(old, version)
    source, metadata = release.metadata_file()
    carried = port_pins(old, version, metadata, config=config, source=source)
    declared = release.build_system_requires()
    if declared is not None:  # a source build: the pinned backend must be one the release accepts
        check_build_requires(old.build_requires, declared, where=f"{release.source[0].filename}: pyproject.toml")
    note = old.install.note
    for before, after in RENAMES.items():
        if any(c.startswith(f"{before} renamed") for c in carried.changes):
            note = note.replace(before, after)
    new = dataclasses.replace(
        old,
        name=name,
        sglang_version=version,
        tag=f"v{version}",
        commit=commit,
        series_dir=series_dir,
        pypi_commit=None,
        artifacts=release.artifacts,
        files=(),
        requires=carried.requires,
        install=InstallRecipe(old.install.extra_index_urls, carried.pins, note),
        build_requires=old.build_requires if declared is not None else (),
        # Without upstream's commit a git checkout cannot be checked: the new stack defaults to PyPI.
        default_source=old.default_source if commit else "pypi",
    )
    return new, carried.changes


def _make_checkout(
    stack: Stack, release: Release, into: Path, paths: Sequence[str], *, source: str, progress: Progress | None
) -> tuple[str, str, str | None]:
    """The new release as a git checkout in ``into``: (base commit, pypi commit, upstream commit).

    With the git source the base is upstream's tag; the PyPI artifact is still
    laid out (the new stack pins it) and must hold the same ``paths``.
    """
    artifact, path = release.source
    if artifact.kind == "wheel":  # every pinned wheel must make the same checkout
        check_wheels_agree(stack, progress=progress)
    if source == "pypi":
        if progress:
            progress(f"laying out {artifact.filename} as a git checkout")
        pypi_commit = create_pypi_checkout(stack, path, into, artifact)
        return pypi_commit, pypi_commit, stack.commit
    url = stack.git_url
    if not url:
        raise SourceError(f"stack {stack.name} has no git_url for --source git")
    if progress:
        progress(f"cloning {url} at {stack.tag}")
    into.parent.mkdir(parents=True, exist_ok=True)
    g, commit = clone(url, into, tag=stack.tag)
    if stack.commit and commit != stack.commit:
        raise SourceError(f"{url}: tag {stack.tag} is {commit}, not the given --commit {stack.commit}")
    g.checkout_branch(f"sgpatch/{stack.name}", commit)
    write_info_attributes(g)
    with tempfile.TemporaryDirectory(prefix="sgpatch-pypi-") as tmp:
        laid_out = Path(tmp) / "co"
        pypi_commit = create_pypi_checkout(dataclasses.replace(stack, commit=commit), path, laid_out, artifact)
        other = Git(laid_out)
        for p in paths:
            if other.blob_id(pypi_commit, p) != g.blob_id(commit, p):
                raise SourceError(
                    f"{p}: {artifact.filename} and {url} at {stack.tag} differ",
                    hint="the new stack would pin two different sources; port with --source pypi",
                )
    return commit, pypi_commit, commit


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
    progress: Progress | None = None,
) -> PortResult:
    """Port the series of ``stack_name`` to SGLang ``version`` (see the module docstring).

    ``force`` replaces a stack that port wrote before (its table, series
    directory and clean checkout); any other existing stack is a ConfigError.
    """
    if source not in ("pypi", "git"):
        raise SourceError(f"unknown source {source!r}: use pypi or git")
    if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise ConfigError(f"--commit {commit!r} is not a full 40-hex commit SHA")
    old_stack = config.stack(stack_name)
    if version == old_stack.sglang_version:
        raise ConfigError(f"{old_stack.name} is already SGLang {version}")
    new_name = new_stack_name(old_stack, version)
    config_text = config.path.read_text(encoding="utf-8")
    replaced = config.stacks.get(new_name)
    replacing = replaced is not None
    if replaced is not None:
        if not force:
            raise ConfigError(
                f"{config.path}: stack {new_name} exists already",
                hint="pass --force to replace a stack port made, or remove it first",
            )
        config_text = remove_stack(config_text, new_name, where=config.path)
        config = dataclasses.replace(config, stacks={k: v for k, v in config.stacks.items() if k != new_name})
    old, project = load_old(config, stack_name, progress=progress)
    series_dir = old.series.directory.parent / version
    plan = Plan(
        config, old, project.anchors, version, new_name, series_dir, source, strict, dry_run, config_text, replacing
    )
    target = checkout or config.root / ".sgpatch" / "checkouts" / new_name
    if not dry_run:
        record = read_record(target) if target.exists() else None
        if record is not None:
            return continue_port(config, target, progress=progress)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            if not replacing:
                raise CheckoutError(
                    f"{target}: exists and is not an empty directory",
                    hint="remove it, or pass --checkout DIR for the new stack's checkout",
                )
            assert replaced is not None
            check_replaceable(target, replaced)

    release = find_release(version, progress=progress)
    stack, pin_changes = _new_stack(old.stack, version, release, commit, series_dir, (config.path, config_text))
    plan = dataclasses.replace(plan, pin_changes=pin_changes)
    parent = Path(tempfile.mkdtemp(prefix="sgpatch-port-")) if dry_run else target.parent
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".port-{new_name}-", dir=parent))
    into = work / "checkout"
    try:
        base, pypi_commit, upstream_commit = _make_checkout(
            stack, release, into, old.series.touched, source=source, progress=progress
        )
        source_kind = old.stack.default_source if upstream_commit else "pypi"
        stack = dataclasses.replace(stack, commit=upstream_commit, default_source=source_kind)
        g = Git(into)
        current: Files = {p: g.read_blob(base, p) for p in old.series.touched}
        run = Rebase(g, base, base, current, [], [])
        if progress:
            progress(f"classifying {len(old.series.patches)} patch(es) against {version}")
        conflict_at, conflict_files = advance(
            run, old, 0, date=g.commit_date(base), old_version=old.stack.sglang_version, new_version=version
        )
        return _finish(plan, stack, release, run, pypi_commit, conflict_at, conflict_files, into, target)
    finally:
        shutil.rmtree(work if not dry_run else parent, ignore_errors=True)


def _finish(
    plan: Plan,
    stack: Stack,
    release: Release,
    run: Rebase,
    pypi_commit: str,
    conflict_at: int | None,
    conflict_files: Files | None,
    into: Path,
    target: Path,
    *,
    previous: Sequence[PortedPatch] = (),
) -> PortResult:
    """Either leave a conflict for the user, or regenerate, verify and write the new stack."""
    result = PortResult(
        old_stack=plan.old.stack.name,
        new_stack=plan.new_name,
        version=plan.version,
        source=plan.source,
        artifacts=release.artifacts,
        pypi_commit=pypi_commit,
        commit=stack.commit,
        base=run.base,
        checkout=None,
        patches=(*previous, *run.ported),
        anchors=(),
        written=(),
        dry_run=plan.dry_run,
        strict=plan.strict,
        notes=tuple(f"pins: {c}" for c in plan.pin_changes),
    )
    if conflict_at is not None:
        failures = tuple(f"{p.name}: conflict: {p.detail}" for p in result.patches if p.state == "conflict")
        if plan.dry_run:
            return dataclasses.replace(result, failures=failures)
        assert conflict_files is not None
        leave_conflict(plan, stack, release, run, pypi_commit, conflict_at, conflict_files, result.patches, into)
        move_checkout_into_place(into, target)
        note = (
            f"resolve the conflict markers in {target}, commit (git commit -a), then run "
            f"'sgpatch port {plan.old.stack.name} --to {shlex.quote(plan.version)}' or "
            f"'sgpatch export --checkout {shlex.quote(str(target))}'"
        )
        return dataclasses.replace(result, checkout=target, failures=failures, notes=(*result.notes, note))

    g = run.g
    chain = series_chain(g, run.base, run.tip)
    old_by_name = {p.name: p for p in plan.old.series.patches}
    headers = {name: header_of(old_by_name[name].path.read_bytes()) for name in run.kept}
    rendered = render_chain(g, chain, headers, {}, list(old_by_name))
    new_patches = [parse_patch(r.data, plan.series_dir / r.name, name=r.name) for r in rendered]
    final = rerecord(g, run.base, chain, new_patches) if chain else run.base
    new_by_name = {p.name: p for p in new_patches}
    ported = tuple(with_hunks(p, old_by_name[p.name], new_by_name.get(p.name)) for p in result.patches)

    problems: list[str] = []
    if plan.strict:
        problems.extend(f"{p.name}: superseded (--strict): {p.detail}" for p in ported if p.state == "superseded")
    outputs, moves = render_outputs(
        plan, stack, release, g, run.base, final, new_patches, rendered, ported, pypi_commit
    )
    head = g.head()
    assert head is not None
    tree: SourceTree
    if into != target:  # a checkout of our own (removed on failure): verify its work tree, it is quicker
        move_checkout(g, old=head, new=final, reason=f"sgpatch port {plan.new_name}")
        tree = DirTree(into)
    else:  # the user's checkout: it moves only once the port succeeded
        tree = CommitTree(g, final)
    problems.extend(self_check(plan, outputs, new_patches, tree))
    result = dataclasses.replace(result, patches=ported, anchors=tuple(moves), failures=tuple(problems))
    if problems or plan.dry_run:
        return result
    written = write_outputs(plan, outputs)
    if g.head() != final:
        move_checkout(g, old=head, new=final, reason=f"sgpatch port {plan.new_name}")
    move_checkout_into_place(into, target, replace=plan.force)
    return dataclasses.replace(result, checkout=target, written=tuple(written))


def continue_port(config: Config, checkout: Path, *, progress: Progress | None = None) -> PortResult:
    """Finish a port whose conflict the user resolved and committed in ``checkout``."""
    g = open_checkout(checkout)
    with lock_checkout(g, command="port"):
        record = read_record(checkout)
        if record is None:
            raise CheckoutError(f"{checkout}: no port in progress here")
        return _continue(config, g, record, progress=progress)


def _continue(config: Config, g: Git, record: dict[str, Any], *, progress: Progress | None) -> PortResult:
    checkout = g.root
    old, project = load_old(config, record["from"], progress=progress)
    if {p.name: p.sha256 for p in old.series.patches} != record["series"]:
        raise CheckoutError(
            f"{checkout}: the series of {old.stack.name} changed since the port started",
            hint=f"remove {checkout} and port again",
        )
    if record["stack"] in config.stacks:
        raise ConfigError(f"{config.path}: stack {record['stack']} exists already")
    if g.status():
        raise CheckoutError(
            f"{checkout}: the work tree has uncommitted changes",
            hint="resolve the conflict markers, then commit (git commit -a) and run this again",
        )
    base = record["base"]
    _, chain = find_chain(g, [base])
    kept: list[str] = record["kept"]
    carried = [c.patch for c in chain[: len(kept)]]
    resolution = chain[len(kept) :]
    if carried != kept:
        raise CheckoutError(f"{checkout}: the commits of the kept patches ({', '.join(kept)}) were changed")
    conflict = next(p for p in old.series.patches if p.name == record["conflict"])
    previous = [PortedPatch(d["name"], d["state"], d["detail"], d.get("proof", "")) for d in record["decided"]]
    date = g.commit_date(base)
    tip = chain[len(kept) - 1].commit if kept else base
    if resolution:
        head = resolution[-1].commit
        for fp in conflict.files:
            data = g.read_blob(head, fp.path)
            if data is not None and CONFLICT_MARKER.search(data):
                raise CheckoutError(
                    f"{checkout}: {fp.path} still has conflict markers", hint="resolve them and amend the commit"
                )
    else:
        head = tip  # the user took the new release's text: nothing of the patch is left
    if g.tree_of(head) != g.tree_of(tip):
        tip = g.commit_tree(CommitSpec(g.tree_of(head), (tip,), conflict.commit_message(), date))
        kept = [*kept, conflict.name]
        previous.append(PortedPatch(conflict.name, "resolved", f"its conflict was resolved by hand in {checkout}"))
    else:
        note = f"its conflict was resolved to the text of sglang {record['version']}: dropped"
        previous.append(PortedPatch(conflict.name, "resolved", note))
    artifacts = tuple(Artifact(a["kind"], a["filename"], a["sha256"]) for a in record["artifacts"])
    release = pinned_release(record["version"], artifacts, progress=progress)
    series_dir = old.series.directory.parent / record["version"]
    config_source = (config.path, config.path.read_text(encoding="utf-8"))
    stack, pin_changes = _new_stack(old.stack, record["version"], release, record["commit"], series_dir, config_source)
    plan = Plan(
        config,
        old,
        project.anchors,
        record["version"],
        record["stack"],
        series_dir,
        record["source"],
        record["strict"],
        False,
        config_source[1],
        pin_changes=pin_changes,
    )
    current: Files = {p: g.read_blob(tip, p) for p in old.series.touched}
    run = Rebase(g, base, tip, current, [], list(kept))
    start = [p.name for p in old.series.patches].index(conflict.name) + 1
    conflict_at, conflict_files = advance(
        run, old, start, date=date, old_version=old.stack.sglang_version, new_version=record["version"]
    )
    result = _finish(
        plan,
        stack,
        release,
        run,
        record["pypi_commit"],
        conflict_at,
        conflict_files,
        checkout,
        checkout,
        previous=previous,
    )
    if result.ok:
        record_path(g).unlink(missing_ok=True)
    return result
