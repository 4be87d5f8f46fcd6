"""The release watch: port to every SGLang release newer than the newest stack (SPEC §15).

``watch`` asks pip's index which releases exist (sgpatch.source.versions) and
takes those newer, by PEP 440, than the newest stack on the base stack's line
(its ``local_label``: ``cu130``).  Each is ported from the newest stack written
so far (a chain: the base stack, then each stack this watch writes; a release
that stops does not hold up the next one, which is ported from the last stack
written), with the resolutions kept in the project replayed (``reuse``), **in a scratch copy
of the project** (VERSIONS.toml and the series directories), with the new
stack's checkout where ``port`` puts it (``.sgpatch/checkouts/<stack>``):

- a clean port is then checked with ``check-interface`` on its patched checkout,
  and its stack (the new table and ``patches/<version>/``) is copied into the
  project, whatever the interface check says: the stack pins the release
  faithfully, and a gap is one more patch for a person to add;
- a port that stops on a conflict leaves its checkout stopped there (``sgpatch
  port --continue`` resumes it in the project), and nothing in VERSIONS.toml or
  patches/; ``<version>.carried.diff`` holds what it carried so far (the kept
  patches, the clean hunks, the conflict markers) for review;
- a release whose port fails otherwise (an input error) is reported, not raised;
  an environment failure (the network) ends the watch (exit 3).

One Markdown report per release is written (sgpatch.port.report), and the
state of each decides the exit code (``EXIT_*`` below).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sgpatch.atomic import write_atomic
from sgpatch.cache import Cache
from sgpatch.checkout.stop.project import lock_project
from sgpatch.config import Config, Stack, load_config
from sgpatch.errors import ConfigError, EnvironmentFailure, SgpatchError
from sgpatch.git.diff import diff_patch
from sgpatch.git.repo import Git
from sgpatch.port.chain import settle
from sgpatch.port.outputs import new_stack_name
from sgpatch.port.record import STOP_REF
from sgpatch.port.report import render_report
from sgpatch.port.result import PortResult
from sgpatch.port.reuse import STORE
from sgpatch.port.run import port_stack
from sgpatch.port.watched import (
    ERROR,
    NEEDS_PERSON,
    NEW,
    PORTED,
    InterfaceResult,
    WatchedRelease,
    WatchResult,
)
from sgpatch.results import Progress
from sgpatch.source.artifacts import PACKAGE
from sgpatch.source.versions import listed_versions


def _version(text: str, where: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise ConfigError(f"{where}: sglang_version {text[:40]!r} is not a PEP 440 version") from None


def base_stack(config: Config, name: str | None) -> tuple[Stack, Version]:
    """The stack to port from (``name``, else the newest stack: the default one among equals) and the newest
    SGLang version on its line (the stacks with its ``local_label``)."""
    versions = {s.name: _version(s.sglang_version, f"{config.path}: stack {s.name}") for s in config.stacks.values()}
    if not versions:
        raise ConfigError(f"{config.path}: no stack to watch from")
    if name is None:
        top = max(versions.values())
        newest = sorted(n for n, v in versions.items() if v == top)
        name = config.default_stack if config.default_stack in newest else newest[0]
    base = config.stack(name)
    line = max(versions[s.name] for s in config.stacks.values() if s.local_label == base.local_label)
    return base, line


def watch(
    config: Config,
    stack_name: str | None = None,
    *,
    out: Path | None = None,
    only: str | None = None,
    pre: bool = False,
    dry_run: bool = False,
    cache: Cache | None = None,
    progress: Progress | None = None,
) -> WatchResult:
    """Port to every release newer than the newest stack (``only``: that one release) and report each."""
    with lock_project(config.root, command="watch", create=not dry_run):  # one port at a time per project
        return _watch(config, stack_name, out, only, pre, dry_run, cache, progress)


def _watch(
    config: Config,
    stack_name: str | None,
    out: Path | None,
    only: str | None,
    pre: bool,
    dry_run: bool,
    cache: Cache | None,
    progress: Progress | None,
) -> WatchResult:

    base, newest = base_stack(config, stack_name)
    listed = listed_versions(PACKAGE, pre=pre or (only is not None and Version(only).is_prerelease))
    new = [v for v in listed.versions if Version(v) > newest]
    if only is not None:
        wanted = _version(only, "--release")
        if wanted.local is not None:
            raise ConfigError(f"--release {only}: a local version (a rebuild), not a release of {PACKAGE}")
        if wanted <= newest:
            raise ConfigError(f"--release {only}: not newer than {newest}, the newest stack of {base.name}'s line")
        same = [v for v in new if Version(v) == wanted]  # compared as PEP 440 compares them: 1.0 is 1.0.0
        if not same:
            raise ConfigError(f"--release {only}: {listed.index} lists no usable file of {PACKAGE} {only}")
        new = same
    out_dir = out if out is not None else config.root / "watch"
    releases: list[WatchedRelease] = []
    chain = base
    for version in new:
        name = new_stack_name(chain, version)
        if dry_run:
            releases.append(WatchedRelease(version, name, NEW))
            continue
        if progress:
            progress(f"watch: porting {chain.name} to sglang {version}")
        done = _port_one(config.path, chain.name, version, out_dir, cache=cache, progress=progress)
        report = out_dir / f"{version}.md"
        write_atomic(report, render_report(done, base=chain.name).encode())
        releases.append(replace(done, report=report))
        if done.port is not None and done.port.written:  # a chain: the next release is ported from this stack
            chain = load_config(config.path).stack(done.stack)
    return WatchResult(base.name, str(newest), listed.index, tuple(releases), listed.skipped, dry_run)


def _scratch(config_path: Path, into: Path) -> Config:
    """A copy of the project (VERSIONS.toml and every stack's series directory) in ``into``."""
    config = load_config(config_path)
    shutil.copyfile(config_path, into / config_path.name)
    for stack in config.stacks.values():
        try:
            rel = stack.series_dir.resolve().relative_to(config.root.resolve())
        except ValueError:
            raise ConfigError(f"{config.path}: stack {stack.name}: its series is outside the project") from None
        if stack.series_dir.is_dir() and not (into / rel).exists():
            shutil.copytree(stack.series_dir, into / rel, symlinks=True)
    kept = config.root / STORE  # the resolutions kept in the project, replayed by the ports
    if kept.is_dir() and not kept.is_symlink():
        shutil.copytree(kept, into / STORE, symlinks=True)
    return load_config(into / config_path.name)


def _port_one(
    config_path: Path, base: str, version: str, out: Path, *, cache: Cache | None, progress: Progress | None
) -> WatchedRelease:
    config = load_config(config_path)  # again for each release: the one before may have added a stack
    before = config_path.read_bytes()
    name = new_stack_name(config.stack(base), version)
    target = config.root / ".sgpatch" / "checkouts" / name
    with tempfile.TemporaryDirectory(prefix="sgpatch-watch-") as tmp:
        scratch = _scratch(config_path, Path(tmp))
        try:
            result = port_stack(scratch, base, version, checkout=target, cache=cache, progress=progress)
            result = settle(scratch, result, progress=progress)  # conflicts kept resolutions settle
        except EnvironmentFailure:
            raise
        except SgpatchError as exc:
            return WatchedRelease(version, name, ERROR, problems=(exc.message,))
        if result.stopped is not None:
            return _stopped(version, name, result, out)
        if not result.ok:
            return WatchedRelease(version, name, NEEDS_PERSON, port=result, problems=result.failures)
        written = load_config(scratch.path).stack(name)
        interface = _interface(written, target, cache)
        try:
            copied = _copy_back(scratch, config_path, before, result)
        except SgpatchError as exc:
            return WatchedRelease(version, name, ERROR, port=result, interface=interface, problems=(exc.message,))
    result = replace(result, written=tuple(copied))
    problems = tuple(f"interface: {g}" for g in interface.gaps) if interface else ()
    if interface is not None and interface.error:
        problems += (f"interface: {interface.error}",)
    state = NEEDS_PERSON if problems else PORTED
    return WatchedRelease(version, name, state, result, interface, written.install.pins, problems)


def _stopped(version: str, name: str, result: PortResult, out: Path) -> WatchedRelease:
    problems = []
    for p in result.patches:
        if p.state != "conflict":
            continue
        for f in p.files:
            for h in f.hunks:
                if h.state == "conflict":
                    problems.append(f"{p.name}: {f.path}: hunk {h.index} {h.header}: {h.detail or 'conflict'}")
            if f.gone:
                problems.append(f"{p.name}: {f.path}: the release has no such file ({len(f.hunks)} hunk(s) rejected)")
        if not any(x.startswith(f"{p.name}:") for x in problems):
            problems.append(f"{p.name}: conflict: {p.detail}")
    carried = None
    if result.checkout is not None:
        g = Git(result.checkout)
        stop = g.rev_parse(STOP_REF)
        if stop is not None:
            carried = out / f"{version}.carried.diff"
            write_atomic(carried, diff_patch(g, result.base, stop))
    return WatchedRelease(version, name, NEEDS_PERSON, result, problems=tuple(problems), carried=carried)


def _interface(stack: Stack, checkout: Path, cache: Cache | None) -> InterfaceResult | None:
    if stack.interface is None:
        return None
    from sgpatch.interface import interface_of
    from sgpatch.interface.check import check_interface
    from sgpatch.source.tree import DirTree

    try:
        report = check_interface(DirTree(checkout), cache=cache, **interface_of(stack.interface))
    except SgpatchError as exc:
        return InterfaceResult(False, (), exc.message)
    gaps = [f"{g.role}: {g.name} ({g.class_name}): {g.fix}" for g in report.gaps]
    gaps += [f"{d.role}: {d.name}: self.{d.attr} ({d.delegate}) lacks {d.missing}" for d in report.delegation_gaps]
    return InterfaceResult(report.ok, tuple(gaps))


def _copy_back(scratch: Config, config_path: Path, before: bytes, result: PortResult) -> list[Path]:
    """Copy the new stack from the scratch copy into the project: its series files, then VERSIONS.toml
    (last: the stack exists only once its files do).  ConfigError if the project changed meanwhile."""
    if config_path.read_bytes() != before:
        raise ConfigError(f"{config_path}: changed while watch ported; nothing of this release was copied")
    copied = []
    for path in result.written:
        rel = path.relative_to(scratch.root)
        if path != scratch.path and (config_path.parent / rel).exists():
            raise ConfigError(f"{config_path.parent / rel}: exists already; nothing of this release was copied")
    for path in sorted(result.written, key=lambda p: p == scratch.path):
        dest = config_path if path == scratch.path else config_path.parent / path.relative_to(scratch.root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest, path.read_bytes())
        copied.append(dest)
    return copied
