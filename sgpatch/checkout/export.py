"""export: turn the commits on a checkout back into the series (SPEC §9).

The user edits files in a patched checkout and commits: amending a series
commit, or adding commits on top.  ``export`` regenerates each patch file from
its commit with ``git diff`` (the shipped style exactly), keeping the patch's
DEP-3 header byte for byte but ``Last-Update``, which becomes today's date when
the patch's change is not its file's (new line numbers alone keep the date); a
commit without an ``Sgpatch-Patch`` trailer becomes a new numbered patch whose
header starts from its message.  It then
carries the anchors of the changed files to where their text now stands,
updates the ``patched`` blob pins of the stacks that use the series, and
re-records the series commits with the new patch hashes (same trees), so the
checkout is exactly what ``apply`` makes from the new files.

Output is stable: exporting an unchanged checkout rewrites nothing, so
``--check`` can fail CI when the committed patches are stale.
"""

from __future__ import annotations

import dataclasses
import datetime
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgpatch.atomic import write_atomic
from sgpatch.checkout.apply import check_tree_paths
from sgpatch.checkout.chain import ChainCommit, find_chain, header_of, match_series, render_chain, series_text
from sgpatch.checkout.journal import lock_checkout, move_checkout, recover
from sgpatch.checkout.state import base_candidates, check_base_files, open_checkout
from sgpatch.checkout.stop.here import refuse_stopped, stopped_in
from sgpatch.checkout.stop.project import lock_project
from sgpatch.config import Config, Stack, parse_config
from sgpatch.config.pins import FilePin, set_file_pins
from sgpatch.errors import CheckFailed, PatchError
from sgpatch.git.batch import blob_ids, read_blobs
from sgpatch.git.repo import CommitSpec, Git
from sgpatch.results import SCHEMA_VERSION
from sgpatch.series.anchors import ANCHORS_FILE, load_anchors
from sgpatch.series.engine import apply_in_order, apply_modes
from sgpatch.series.patch import SERIES_FILE, Patch, Series, parse_patch
from sgpatch.series.relocate import AnchorMove, relocate_all, render_anchors

# --------------------------------------------------------------------------- writing


def changed_files(outputs: Mapping[Path, bytes]) -> list[Path]:
    """The paths whose bytes on disk differ from ``outputs`` (missing files included)."""
    return [p for p, data in outputs.items() if not p.is_file() or p.read_bytes() != data]


def rerecord(g: Git, base: str, chain: Sequence[ChainCommit], patches: Sequence[Patch]) -> str:
    """The series commits again, same trees, with trailers naming the new patch files (as ``apply`` writes them)."""
    date = g.commit_date(base)
    parent = base
    for c, patch in zip(chain, patches, strict=True):
        parent = g.commit_tree(CommitSpec(g.tree_of(c.commit), (parent,), patch.commit_message(), date))
    return parent


# --------------------------------------------------------------------------- export


@dataclass(frozen=True, slots=True)
class ExportedPatch:
    name: str
    commit: str
    status: str  # "unchanged", "updated", "new"

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "commit": self.commit, "status": self.status}


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What export wrote (or, with ``check``, would write)."""

    stack: str
    checkout: Path
    series_dir: Path
    patches: tuple[ExportedPatch, ...]
    anchors: tuple[AnchorMove, ...]
    changed: tuple[Path, ...]  # files whose bytes differ from what the commits say
    check: bool
    old_head: str
    new_head: str
    notes: tuple[str, ...] = field(default=())
    fresh: bool = False  # read from a fresh checkout of the pinned source (no working checkout)

    @property
    def stale(self) -> bool:
        return bool(self.changed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "stack": self.stack,
            "checkout": str(self.checkout),
            "series": str(self.series_dir),
            "check": self.check,
            "stale": self.stale,
            "changed": [str(p) for p in self.changed],
            "patches": [p.as_dict() for p in self.patches],
            "anchors": [m.as_dict() for m in self.anchors if m.status != "kept"],
            "old_head": self.old_head,
            "new_head": self.new_head,
            "notes": list(self.notes),
            "fresh": self.fresh,
        }


def _series_touched(patches: Sequence[Patch]) -> list[str]:
    seen: dict[str, None] = {}
    for p in patches:
        for f in p.files:
            seen.setdefault(f.path)
    return list(seen)


def _old_patched(base_files: Mapping[str, bytes | None], series: Series) -> dict[str, bytes | None] | None:
    """The files after the old series, from the patch files on disk (None if it no longer applies)."""
    stages = apply_in_order(base_files, series.patches)
    if isinstance(stages, tuple):
        return None
    return stages[-1] if stages else dict(base_files)


def check_applies(g: Git, base: str, head: str, patches: Sequence[Patch], directory: Path) -> None:
    """The exported series, applied by sgpatch's engine to ``base``, must make ``head``'s files and modes.

    So export never writes (and ``export --check`` never passes) a series that ``apply`` would refuse.
    """
    from sgpatch.checkout.apply import read_modes
    from sgpatch.series.classify import classify

    paths = tuple(_series_touched(patches))
    files = read_blobs(g, base, paths)
    modes = read_modes(g, base, paths)
    states, after = classify(files, Series(directory, tuple(patches)), modes)
    for state in states:
        if state.state != "applicable":
            raise CheckFailed(
                f"{directory / state.name}: sgpatch apply would find it {state.state}: {state.detail}",
                hint="fix the commit it comes from (or the series) and export again",
            )
    for patch in patches:
        modes = apply_modes(modes, patch)
    final = after[-1] if after else files
    made, made_modes = read_blobs(g, head, paths), read_modes(g, head, paths)
    for path in paths:
        if final[path] != made[path] or (final[path] is not None and modes.get(path) != made_modes.get(path)):
            raise CheckFailed(f"{directory}: applying the exported series does not reproduce {path} of {head[:12]}")


def export_series(config: Config, stack: Stack, series: Series, checkout: Path, *, check: bool) -> ExportResult:
    """Regenerate the series of ``stack`` from the commits on ``checkout`` (see the module docstring)."""
    g = open_checkout(checkout)
    project = nullcontext() if check else lock_project(config.root, command="export", create=False)
    with project, lock_checkout(g, command="export"):
        refuse_stopped(stopped_in(g), f"sgpatch export {stack.name}")
        recover(g)
        return _export(config, stack, series, g, check=check)


def export_held(config: Config, stack: Stack, series: Series, g: Git) -> ExportResult:
    """Export from ``g`` with its checkout lock already held (an edit's write-back)."""
    return _export(config, stack, series, g, check=False)


def check_export(config: Config, stack: Stack, series: Series, g: Git, tip: str) -> None:
    """Every check export (and so apply) runs on the series the commits up to ``tip`` make, writing nothing:
    CheckFailed with the finding (an edit's write-back asks before it moves the checkout there)."""
    _export(config, stack, series, g, check=True, tip=tip)


def _export(
    config: Config,
    stack: Stack,
    series: Series,
    g: Git,
    *,
    check: bool,
    today: str | None = None,
    tip: str | None = None,
) -> ExportResult:
    checkout = g.root
    base, chain = find_chain(g, base_candidates(stack), head=tip)
    check_base_files(g, stack, base)
    names = [p.name for p in series.patches]
    match_series(chain, names, checkout)
    head = chain[-1].commit if chain else base

    directory = series.directory
    current = {p.name: p.data for p in series.patches}
    headers = {name: header_of(data) for name, data in current.items()}
    rendered = render_chain(g, chain, headers, current, names, today=today or datetime.date.today().isoformat())
    for r in rendered:
        if r.status == "new" and (directory / r.name).exists():
            raise PatchError(f"{directory / r.name}: exists but is not in the series", hint="remove or list it")
    outputs: dict[Path, bytes] = {directory / r.name: r.data for r in rendered}
    series_path = directory / SERIES_FILE
    new_names = [r.name for r in rendered]
    outputs[series_path] = series_text(series_path.read_text(encoding="utf-8"), new_names).encode()
    new_patches = [parse_patch(r.data, directory / r.name, name=r.name) for r in rendered]
    check_tree_paths(g, base, new_patches)
    check_applies(g, base, head, new_patches, directory)

    # Anchors and pins follow the files the series touches, before and after the edit.
    touched = _series_touched(new_patches)
    old_touched = list(series.touched)
    all_paths = list(dict.fromkeys([*old_touched, *touched]))
    base_files = read_blobs(g, base, all_paths)
    head_files = read_blobs(g, head, all_paths)
    old_patched = _old_patched(base_files, series)
    old_view = {p: {"pristine": base_files[p], "patched": (old_patched or {}).get(p)} for p in all_paths}
    new_view = {p: {"pristine": base_files[p], "patched": head_files[p]} for p in all_paths}
    anchors_path = directory / ANCHORS_FILE
    anchors = load_anchors(anchors_path)
    moves = relocate_all(anchors, old_view, new_view, keep_files=touched)
    if anchors_path.exists() or anchors:
        original = anchors_path.read_text(encoding="utf-8") if anchors_path.exists() else ""
        outputs[anchors_path] = render_anchors(original, moves, where=anchors_path).encode()

    pins = []
    for (path, pristine), (_, patched) in zip(blob_ids(g, base, touched), blob_ids(g, head, touched), strict=True):
        if pristine is not None and patched is not None:  # a file the series creates or deletes has no pin
            pins.append(FilePin(path, pristine, patched))
    users = [s.name for s in config.stacks.values() if s.series_dir.resolve() == directory.resolve()]
    text = config.path.read_text(encoding="utf-8")
    new_text = set_file_pins(text, users, pins, where=config.path)
    parse_config(new_text, config.path)  # never write a VERSIONS.toml that does not load
    outputs[config.path] = new_text.encode()

    changed = changed_files(outputs)
    notes: list[str] = []
    dirty = g.status()
    if dirty:
        notes.append(f"{len(dirty)} uncommitted change(s) in the checkout are not exported (commit them first)")
    status = {r.name: r.status for r in rendered}
    exported = tuple(ExportedPatch(r.name, r.commit, status[r.name]) for r in rendered)
    if check:
        return ExportResult(
            stack.name, checkout, directory, exported, tuple(moves), tuple(changed), True, head, head, tuple(notes)
        )
    for target in changed:
        write_atomic(target, outputs[target])
    series_chain = [ChainCommit(r.commit, "", r.name) for r in rendered]
    new_head = rerecord(g, base, series_chain, new_patches) if rendered else base
    if new_head != head:
        move_checkout(g, old=head, new=new_head, reason=f"sgpatch export {stack.name}")
    return ExportResult(
        stack.name, checkout, directory, exported, tuple(moves), tuple(changed), False, head, new_head, tuple(notes)
    )


def export_fresh(config: Config, stack: Stack, series: Series, *, check: bool) -> ExportResult:
    """Export from a fresh checkout of the pinned source with the series applied (in a temporary directory).

    This is the gate for a repository that keeps its patches: the series must
    apply strictly to its pinned source (CheckFailed otherwise) and the files
    must be exactly what export makes of the result.
    """
    from sgpatch.checkout.apply import apply_series
    from sgpatch.checkout.fetch import fetch
    from sgpatch.errors import CheckFailed

    with tempfile.TemporaryDirectory(prefix="sgpatch-export-") as tmp:
        checkout = Path(tmp) / "checkout"
        fetch(stack, checkout)
        applied = apply_series(stack, series, checkout)
        if not applied.ok:
            bad = next(p for p in applied.patches if p.state not in ("applicable", "applied"))
            raise CheckFailed(
                f"{bad.name}: {bad.state} on the pinned source of {stack.name}: {bad.detail}",
                hint="fix the patch (edit it in a checkout and run 'sgpatch export')",
            )
        result = export_series(config, stack, series, checkout, check=check)
        notes = (*result.notes, "exported from a fresh checkout of the pinned source")
        return dataclasses.replace(result, notes=notes, fresh=True)
