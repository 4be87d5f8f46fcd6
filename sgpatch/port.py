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
import json
import re
import shlex
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from sgpatch.anchors import ANCHORS_FILE, Anchor, load_anchors
from sgpatch.artifacts import fetch_artifact
from sgpatch.atomic import write_atomic
from sgpatch.config import Artifact, Config, InstallRecipe, Stack, parse_config
from sgpatch.errors import CheckoutError, ConfigError, SourceError
from sgpatch.export import (
    find_chain,
    header_of,
    render_chain,
    rerecord,
    series_text,
)
from sgpatch.git import CommitSpec, Git, clone
from sgpatch.journal import lock_checkout, move_checkout
from sgpatch.patchset import (
    SERIES_FILE,
    Patch,
    Series,
    parse_patch,
    read_series,
)
from sgpatch.pins import (
    RENAMES,
    FilePin,
    append_stack,
    check_build_requires,
    port_pins,
    release_requires,
    remove_stack,
    stack_block,
)
from sgpatch.rebase import (
    DROPPED,
    KEPT,
    CommitTree,
    Files,
    OldSeries,
    PortedPatch,
    Rebase,
    advance,
    load_old,
    series_chain,
)
from sgpatch.release import Release, find_release
from sgpatch.relocate import AnchorMove, relocate_all, render_anchors
from sgpatch.results import SCHEMA_VERSION, Progress
from sgpatch.source import create_pypi_checkout
from sgpatch.state import inspect, open_checkout
from sgpatch.tree import DirTree, SourceTree
from sgpatch.verify import verify_tree

RECORD = "sgpatch-port.json"
_MARKER = re.compile(rb"^(<{7}|\|{7}|={7}|>{7})( |$)", re.MULTILINE)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class PortResult:
    """What port found, and what it wrote (nothing on a dry run or a failure)."""

    old_stack: str
    new_stack: str
    version: str
    source: str
    artifacts: tuple[Artifact, ...]
    pypi_commit: str | None
    commit: str | None
    base: str
    checkout: Path | None  # the new stack's checkout (None on a dry run)
    patches: tuple[PortedPatch, ...]
    anchors: tuple[AnchorMove, ...]
    written: tuple[Path, ...]
    dry_run: bool
    strict: bool
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "ok": self.ok,
            "from": self.old_stack,
            "stack": self.new_stack,
            "version": self.version,
            "source": self.source,
            "artifacts": [{"kind": a.kind, "filename": a.filename, "sha256": a.sha256} for a in self.artifacts],
            "pypi_commit": self.pypi_commit,
            "commit": self.commit,
            "base": self.base,
            "checkout": str(self.checkout) if self.checkout else None,
            "dry_run": self.dry_run,
            "strict": self.strict,
            "patches": [p.as_dict() for p in self.patches],
            "anchors": [m.as_dict() for m in self.anchors],
            "written": [str(p) for p in self.written],
            "failures": list(self.failures),
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- naming


def new_stack_name(old: Stack, version: str) -> str:
    prefix = f"{old.sglang_version}-"
    suffix = old.name[len(prefix) :] if old.name.startswith(prefix) else old.local_label
    return f"{version}-{suffix}"


def _swap_version(text: str, old: str, new: str) -> str:
    """``old`` version numbers in comment lines replaced by ``new`` (whole version tokens only)."""
    token = re.compile(rf"(?<![0-9.]){re.escape(old)}(?![0-9])")
    return "\n".join(token.sub(new, ln) if ln.lstrip().startswith("#") else ln for ln in text.split("\n"))


# --------------------------------------------------------------------------- the record of a port in progress


def _record_path(g: Git) -> Path:
    return g.git_dir() / RECORD


def read_record(checkout: Path) -> dict[str, Any] | None:
    """The record a conflicted port left in ``checkout``, if any."""
    g = Git(checkout)
    if not (checkout / ".git").exists() or not g.is_repo():
        return None
    path = _record_path(g)
    if not path.exists():
        return None
    try:
        record: dict[str, Any] = json.loads(path.read_text())
    except ValueError as exc:
        raise CheckoutError(f"{path}: unreadable port record: {exc}") from None
    return record


# --------------------------------------------------------------------------- checkouts of the new release


def _new_stack(
    old: Stack, version: str, release: Release, commit: str | None, series_dir: Path, config: tuple[Path, str]
) -> tuple[Stack, tuple[str, ...]]:
    """The new stack's table: the old one's with the release's own pins (install, overrides, build backend),
    and how those pins changed."""
    name = new_stack_name(old, version)
    carried = port_pins(old, version, release.metadata(), config=config)
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
    g.write_info_attributes()
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


# --------------------------------------------------------------------------- the port


@dataclass(frozen=True, slots=True)
class _Plan:
    config: Config
    old: OldSeries
    anchors: tuple[Anchor, ...]
    version: str
    new_name: str
    series_dir: Path
    source: str
    strict: bool
    dry_run: bool
    config_text: str
    force: bool = False
    pin_changes: tuple[str, ...] = ()  # how the install pins and overrides moved (shown in the report)


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
    plan = _Plan(
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
            _check_replaceable(target, replaced)

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
    plan: _Plan,
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
        _leave_conflict(plan, stack, release, run, pypi_commit, conflict_at, conflict_files, result.patches, into)
        _move_checkout(into, target)
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
    ported = tuple(_with_hunks(p, old_by_name[p.name], new_by_name.get(p.name)) for p in result.patches)

    problems: list[str] = []
    if plan.strict:
        problems.extend(f"{p.name}: superseded (--strict): {p.detail}" for p in ported if p.state == "superseded")
    outputs, moves = _outputs(plan, stack, release, g, run.base, final, new_patches, rendered, ported, pypi_commit)
    head = g.head()
    assert head is not None
    tree: SourceTree
    if into != target:  # a checkout of our own (removed on failure): verify its work tree, it is quicker
        move_checkout(g, old=head, new=final, reason=f"sgpatch port {plan.new_name}")
        tree = DirTree(into)
    else:  # the user's checkout: it moves only once the port succeeded
        tree = CommitTree(g, final)
    problems.extend(_self_check(plan, outputs, new_patches, tree))
    result = dataclasses.replace(result, patches=ported, anchors=tuple(moves), failures=tuple(problems))
    if problems or plan.dry_run:
        return result
    written = _write(plan, outputs)
    if g.head() != final:
        move_checkout(g, old=head, new=final, reason=f"sgpatch port {plan.new_name}")
    _move_checkout(into, target, replace=plan.force)
    return dataclasses.replace(result, checkout=target, written=tuple(written))


def _with_hunks(ported: PortedPatch, old: Patch, new: Patch | None) -> PortedPatch:
    """``ported`` with its regenerated hunk headers, and how far an applying patch moved."""
    if new is None:
        return ported
    headers = tuple(h.header for fp in new.files for h in fp.hunks)
    detail = ported.detail
    if ported.state == "applies":
        old_starts = [h.old_start for fp in old.files for h in fp.hunks]
        new_starts = [h.old_start for fp in new.files for h in fp.hunks]
        if old_starts == new_starts:
            detail = f"{detail}, at its exact lines"
        elif len(old_starts) == len(new_starts):
            moves = ", ".join(f"{a} -> {b}" for a, b in zip(old_starts, new_starts, strict=True) if a != b)
            detail = f"{detail}, at an offset (hunks moved {moves})"
    return dataclasses.replace(ported, detail=detail, hunks=headers)


def _outputs(
    plan: _Plan,
    stack: Stack,
    release: Release,
    g: Git,
    base: str,
    final: str,
    new_patches: Sequence[Patch],
    rendered: Sequence[Any],
    ported: Sequence[PortedPatch],
    pypi_commit: str,
) -> tuple[dict[Path, bytes], list[AnchorMove]]:
    """Every file the new stack consists of, and the VERSIONS.toml block."""
    old = plan.old
    series_dir = plan.series_dir
    outputs: dict[Path, bytes] = {series_dir / r.name: r.data for r in rendered}
    names = {p.name for p in new_patches}
    dropped = {p.name: _dropped_comment(p, plan.version) for p in ported if p.name not in names}
    old_series_text = (old.series.directory / SERIES_FILE).read_text(encoding="utf-8")
    text = series_text(
        _swap_version(old_series_text, old.stack.sglang_version, plan.version),
        [p.name for p in new_patches],
        dropped=dropped,
    )
    outputs[series_dir / SERIES_FILE] = text.encode()

    touched = list(dict.fromkeys(f.path for p in new_patches for f in p.files))
    paths = list(dict.fromkeys([*old.series.touched, *touched, *(a.file for a in plan.anchors)]))
    old_view = {p: {"pristine": old.states[0].get(p), "patched": old.states[-1].get(p)} for p in paths}
    new_view = {p: {"pristine": g.read_blob(base, p), "patched": g.read_blob(final, p)} for p in paths}
    moves = relocate_all(plan.anchors, old_view, new_view, keep_files=touched)
    anchors_path = old.series.directory / ANCHORS_FILE
    original = anchors_path.read_text(encoding="utf-8") if anchors_path.exists() else ""
    original = _swap_version(original, old.stack.sglang_version, plan.version)
    source_artifact = release.source[0]
    if source_artifact.kind != "sdist":  # the header names what the pristine text really comes from
        original = original.replace(f"the {plan.version} sdist", f"the {plan.version} wheel {source_artifact.filename}")
    outputs[series_dir / ANCHORS_FILE] = render_anchors(original, moves, where=anchors_path).encode()

    pins = []
    for path in touched:
        pristine, patched = g.blob_id(base, path), g.blob_id(final, path)
        if pristine is not None and patched is not None:
            pins.append(FilePin(path, pristine, patched))
    kept = [p.name[:4] for p in ported if p.state in KEPT]
    gone = [f"{p.name[:4]} {p.state}" for p in ported if p.state in DROPPED]
    title = f"SGLang {plan.version} on CUDA {stack.cuda}: ported from {old.stack.name} by 'sgpatch port'"
    summary = "; ".join(filter(None, [f"kept {', '.join(kept)}" if kept else "", ", ".join(gone)]))
    block = stack_block(
        stack,
        series=str(series_dir.relative_to(plan.config.root)),
        pypi_commit=pypi_commit,
        artifacts=release.artifacts,
        pins=pins,
        comments={
            "title": f"{title}\n({summary})." if summary else title,
            "pypi_commit": f"The commit sgpatch makes from {release.source[0].filename} (fixed identity and date).",
            "files": "Git blob ids of the files the series touches, before and after it.",
            **_pin_comments(stack, old.stack, release),
        },
    )
    config_text = plan.config_text
    outputs[plan.config.path] = append_stack(config_text, block).encode()
    return outputs, moves


def _pin_comments(stack: Stack, old: Stack, release: Release) -> dict[str, str]:
    """The comments over the new stack's requires, build and install tables: where each pin comes from."""
    required = release_requires(release.metadata())
    version = release.version
    out: dict[str, str] = {}
    if stack.requires:
        asked = "; ".join(
            str(required[canonicalize_name(d)]) for d, _ in stack.requires if canonicalize_name(d) in required
        )
        wanted = "; ".join(t for _, t in stack.requires)
        out["requires"] = (
            f"Requires-Dist overrides for the wheel: sglang {version} requires {asked}; "
            f"CUDA {stack.cuda} needs {wanted}."
        )
    sdist = release.file("sdist")
    if stack.build_requires and sdist is not None:
        declared = ", ".join(release.build_system_requires() or ()) or "nothing"
        out["build"] = (
            f"The build backend for the isolated build of {sdist[0].filename}, pinned so that a rebuild is "
            f"byte-identical\n(its pyproject.toml asks for {declared})."
        )
    out["install"] = (
        f"Install pins: sglang {version}'s own Requires-Dist for the CUDA stack's packages, "
        f"with the indexes and\nlocal tags of {old.name} (CUDA {stack.cuda})."
    )
    return out


def _dropped_comment(p: PortedPatch, version: str) -> str:
    if p.state == "resolved":
        return f"resolved to the text of {version} by hand: dropped"
    if p.state == "upstream":
        return f"upstream in {version} ({p.proof})"
    names = ", ".join(dict.fromkeys(s.qualname.rpartition(".")[2] for s in p.side_by_side))
    return f"superseded in {version} (upstream defines {names} with another body)"


def _self_check(
    plan: _Plan, outputs: Mapping[Path, bytes], new_patches: Sequence[Patch], tree: SourceTree
) -> list[str]:
    """Load what would be written and verify the new stack on its checkout: a port that fails here writes nothing."""
    failures: list[str] = []
    try:
        new_config = parse_config(outputs[plan.config.path].decode(), plan.config.path)
    except ConfigError as exc:
        return [f"the new VERSIONS.toml would not load: {exc.message}"]
    new_stack = new_config.stack(plan.new_name)
    with tempfile.TemporaryDirectory(prefix="sgpatch-anchors-") as tmp:
        path = Path(tmp) / ANCHORS_FILE
        path.write_bytes(outputs[plan.series_dir / ANCHORS_FILE])
        anchors = load_anchors(path)
    series = Series(plan.series_dir, tuple(new_patches))
    report = verify_tree(new_stack, series, anchors, tree, require_patched=bool(new_patches))
    failures.extend(f"verify {plan.new_name}: {f}" for f in report.failures)
    return failures


def _write(plan: _Plan, outputs: Mapping[Path, bytes]) -> list[Path]:
    """Write the series directory, then VERSIONS.toml (last: the stack exists only once its files do)."""
    series_dir = plan.series_dir
    if series_dir.exists():
        existing = {p for p in series_dir.iterdir() if p.is_file()}
        ours = {p for p in outputs if p.parent == series_dir}
        same = existing == ours and all(p.read_bytes() == outputs[p] for p in ours)
        if not same and plan.force:  # the series of the stack being replaced: ours to rewrite
            for stale in existing - ours:
                stale.unlink()
        elif not same:
            raise ConfigError(
                f"{series_dir}: exists with other contents",
                hint="another stack uses it; move it away or port into an empty directory",
            )
    written = []
    for path, data in outputs.items():
        if path == plan.config.path:
            continue
        if not path.exists() or path.read_bytes() != data:
            write_atomic(path, data)
            written.append(path)
    write_atomic(plan.config.path, outputs[plan.config.path])
    written.append(plan.config.path)
    return written


def _check_replaceable(target: Path, stack: Stack) -> None:
    """CheckoutError unless ``target`` is exactly what sgpatch makes for ``stack`` (the one port --force replaces):
    its pinned source, pristine or with its series, and nothing else (no uncommitted change, no commit of the user's).
    """
    if not (target / ".git").exists() or not Git(target).is_repo():
        raise CheckoutError(f"{target}: exists and is not a git checkout", hint="move it away, or pass --checkout DIR")
    state = inspect(Git(target), stack, read_series(stack.series_dir))
    if state.dirty:
        raise CheckoutError(
            f"{target}: the checkout of the stack being replaced has uncommitted changes",
            hint="keep them elsewhere or discard them yourself; sgpatch never discards your work",
        )
    if state.phase == "other":
        raise CheckoutError(
            f"{target}: the checkout of the stack being replaced holds more than sgpatch made: {state.problem}",
            hint="move it away, or pass --checkout DIR for the new stack's checkout",
        )


def _move_checkout(into: Path, target: Path, *, replace: bool = False) -> None:
    if into.resolve() == target.resolve():
        return
    if replace and target.is_dir() and any(target.iterdir()):
        shutil.rmtree(target)  # checked replaceable before the port started
    if target.exists():
        target.rmdir()  # checked empty before the port started
    target.parent.mkdir(parents=True, exist_ok=True)
    into.rename(target)


# --------------------------------------------------------------------------- conflicts and continuing


def _leave_conflict(
    plan: _Plan,
    stack: Stack,
    release: Release,
    run: Rebase,
    pypi_commit: str,
    conflict_at: int,
    conflict_files: Files,
    ported: Sequence[PortedPatch],
    into: Path,
) -> None:
    """Put the kept commits and the conflicted merge in the checkout, and record how to continue."""
    g = run.g
    head = g.head()
    assert head is not None
    if head != run.tip:
        move_checkout(g, old=head, new=run.tip, reason=f"sgpatch port {plan.new_name}: kept patches")
    patch = plan.old.series.patches[conflict_at]
    for fp in patch.files:
        data = conflict_files.get(fp.path)
        path = into / fp.path
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    record = {
        "schema_version": SCHEMA_VERSION,
        "from": plan.old.stack.name,
        "stack": plan.new_name,
        "version": plan.version,
        "source": plan.source,
        "commit": stack.commit,
        "base": run.base,
        "pypi_commit": pypi_commit,
        "artifacts": [{"kind": a.kind, "filename": a.filename, "sha256": a.sha256} for a in release.artifacts],
        "series": {p.name: p.sha256 for p in plan.old.series.patches},
        "kept": list(run.kept),
        "conflict": patch.name,
        "decided": [
            {"name": p.name, "state": p.state, "detail": p.detail, "proof": p.proof}
            for p in ported[: ported.index(next(q for q in ported if q.name == patch.name))]
        ],
        "strict": plan.strict,
    }
    _record_path(g).write_text(json.dumps(record, indent=2) + "\n")


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
            if data is not None and _MARKER.search(data):
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
    paths = []
    for a in artifacts:
        paths.append(fetch_artifact(a, record["version"], progress=progress))
    release = Release(record["version"], artifacts, tuple(paths))
    series_dir = old.series.directory.parent / record["version"]
    config_source = (config.path, config.path.read_text(encoding="utf-8"))
    stack, pin_changes = _new_stack(old.stack, record["version"], release, record["commit"], series_dir, config_source)
    plan = _Plan(
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
        _record_path(g).unlink(missing_ok=True)
    return result
