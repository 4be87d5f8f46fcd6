"""What a port writes: the new series directory, anchors and VERSIONS.toml table, checked before they are written."""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.atomic import write_atomic
from sgpatch.checkout.chain import series_text
from sgpatch.checkout.state import inspect
from sgpatch.config import Config, Stack, parse_config
from sgpatch.config.pins import (
    FilePin,
    append_stack,
    release_requires,
    stack_block,
)
from sgpatch.errors import CheckoutError, ConfigError
from sgpatch.git.batch import blob_ids, read_blobs
from sgpatch.git.repo import Git
from sgpatch.port.rebase import OldSeries, Rebase
from sgpatch.series.anchors import ANCHORS_FILE, Anchor, load_anchors
from sgpatch.series.patch import (
    SERIES_FILE,
    Patch,
    Series,
    read_series,
)
from sgpatch.series.relocate import AnchorMove, relocate_all, render_anchors
from sgpatch.series.verdict import DROPPED, KEPT, PortedPatch
from sgpatch.source.release import Release
from sgpatch.source.tree import SourceTree
from sgpatch.verify.engine import verify_tree


def new_stack_name(old: Stack, version: str) -> str:
    prefix = f"{old.sglang_version}-"
    suffix = old.name[len(prefix) :] if old.name.startswith(prefix) else old.local_label
    return f"{version}-{suffix}"


def _swap_version(text: str, old: str, new: str) -> str:
    """``old`` version numbers in comment lines replaced by ``new`` (whole version tokens only)."""
    token = re.compile(rf"(?<![0-9.]){re.escape(old)}(?![0-9])")
    return "\n".join(token.sub(new, ln) if ln.lstrip().startswith("#") else ln for ln in text.split("\n"))


@dataclass(frozen=True, slots=True)
class Plan:
    """What a port was asked to do: from which series, to which version and stack name, and how."""

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
    exists: str = ""  # a dry run over a stack that exists already: what --force would replace (shown as a note)


@dataclass(frozen=True, slots=True)
class PortContext:
    """A port under way, as every step after the carry needs it: the plan, the new stack, the release it
    ports to, the rebase that carries the series (its checkout, base and kept commits) and the commit the
    release's own files make (``pypi_commit``)."""

    plan: Plan
    stack: Stack
    release: Release
    run: Rebase
    pypi_commit: str


def with_hunks(ported: PortedPatch, old: Patch, new: Patch | None) -> PortedPatch:
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


def render_outputs(
    port: PortContext,
    final: str,
    new_patches: Sequence[Patch],
    rendered: Sequence[Any],
    ported: Sequence[PortedPatch],
) -> tuple[dict[Path, bytes], list[AnchorMove]]:
    """Every file the new stack consists of, and the VERSIONS.toml block."""
    plan, stack, release, pypi_commit = port.plan, port.stack, port.release, port.pypi_commit
    g, base = port.run.g, port.run.base
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
    pristine_files, patched_files = read_blobs(g, base, paths), read_blobs(g, final, paths)
    new_view = {p: {"pristine": pristine_files[p], "patched": patched_files[p]} for p in paths}
    moves = relocate_all(plan.anchors, old_view, new_view, keep_files=touched)
    anchors_path = old.series.directory / ANCHORS_FILE
    original = anchors_path.read_text(encoding="utf-8") if anchors_path.exists() else ""
    original = _swap_version(original, old.stack.sglang_version, plan.version)
    source_artifact = release.source[0]
    if source_artifact.kind != "sdist":  # the header names what the pristine text really comes from
        original = original.replace(f"the {plan.version} sdist", f"the {plan.version} wheels (their .py files agree)")
    outputs[series_dir / ANCHORS_FILE] = render_anchors(original, moves, where=anchors_path).encode()

    pins = []
    for (path, pristine), (_, patched) in zip(blob_ids(g, base, touched), blob_ids(g, final, touched), strict=True):
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
            "pypi_commit": (
                f"The commit sgpatch makes from {release.source[0].filename} (fixed identity and date)."
                if source_artifact.kind == "sdist"
                else "The commit sgpatch makes from any of these wheels: their files but compiled extensions "
                "(fixed identity and date)."
            ),
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
        asked = "; ".join(str(required[o.key]) for o in stack.requires if o.key in required)
        wanted = "; ".join(o.text for o in stack.requires)
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
    if p.state == "obsolete":
        return f"obsolete in {version} ({'; '.join(f'{e.where}: {e.claim}' for e in p.evidence)})"
    names = ", ".join(dict.fromkeys(s.qualname.rpartition(".")[2] for s in p.side_by_side))
    return f"superseded in {version} (upstream defines {names} with another body)"


def self_check(plan: Plan, outputs: Mapping[Path, bytes], new_patches: Sequence[Patch], tree: SourceTree) -> list[str]:
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


def check_series_dir(plan: Plan, outputs: Mapping[Path, bytes], *, resuming: bool = False) -> None:
    """ConfigError unless the new series directory is absent, already these files, or ours to rewrite
    (``force``: the stack being replaced; ``resuming``: a write of these files that was cut short)."""
    series_dir = plan.series_dir
    if not series_dir.exists():
        return
    existing = {p for p in series_dir.iterdir() if p.is_file()}
    ours = {p for p in outputs if p.parent == series_dir}
    same = existing == ours and all(p.read_bytes() == outputs[p] for p in ours)
    partial = resuming and all(p in ours and p.read_bytes() == outputs[p] for p in existing)
    if not (same or partial or plan.force):
        raise ConfigError(
            f"{series_dir}: exists with other contents",
            hint="another stack uses it; move it away or port into an empty directory",
        )


def write_outputs(plan: Plan, outputs: Mapping[Path, bytes]) -> list[Path]:
    """Write the series directory, then VERSIONS.toml (last: the stack exists only once its files do).

    Call ``check_series_dir`` first.  Files of the series directory that are not ours go only with ``force``.
    """
    series_dir = plan.series_dir
    if series_dir.exists() and plan.force:  # the series of the stack being replaced: ours to rewrite
        for stale in {p for p in series_dir.iterdir() if p.is_file()} - set(outputs):
            stale.unlink()
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


def check_replaceable(target: Path, stack: Stack) -> None:
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


def move_checkout_into_place(into: Path, target: Path, *, replace: bool = False) -> None:
    if into.resolve() == target.resolve():
        return
    if replace and target.is_dir() and any(target.iterdir()):
        shutil.rmtree(target)  # checked replaceable before the port started
    if target.exists():
        target.rmdir()  # checked empty before the port started
    target.parent.mkdir(parents=True, exist_ok=True)
    into.rename(target)
