"""verify: anchors, blob checks, patch states and hunk landing on any tree (SPEC §7).

A checkout passes pristine (every patch applicable) or patched; a wheel or an
installed sglang must carry the series (``require_patched``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sgpatch.cache import Cache
from sgpatch.checkout.journal import recover
from sgpatch.checkout.state import check_base_files, inspect, open_checkout
from sgpatch.checkout.stop.here import stopped_in
from sgpatch.config import Stack
from sgpatch.errors import CheckFailed
from sgpatch.git.objectid import blob_id
from sgpatch.project import Project
from sgpatch.pyast import parses_shared
from sgpatch.results import SCHEMA_VERSION
from sgpatch.series.anchors import Anchor, AnchorResult, LandingResult, check_anchors, check_landing
from sgpatch.series.classify import PatchState, classify, classify_one
from sgpatch.series.engine import HunkFailure, apply_modes, apply_patch
from sgpatch.series.patch import FilePatch, Patch, Series
from sgpatch.source.tree import DirTree, SourceTree


@dataclass(frozen=True, slots=True)
class FileCheck:
    """A file's blob id against its pin (``expected`` None: not pinned for this phase)."""

    path: str
    expected: str | None
    found: str | None

    @property
    def ok(self) -> bool:
        return self.expected is None or self.expected == self.found


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """verify's report on one target: its phase, every patch, anchor, pinned file and landed hunk."""

    stack: str
    target: str
    phase: str  # pristine, patched or mixed
    patches: tuple[PatchState, ...]
    anchors: tuple[AnchorResult, ...]
    files: tuple[FileCheck, ...]
    landing: tuple[LandingResult, ...]
    notes: tuple[str, ...] = ()
    failures: tuple[str, ...] = field(default=())
    interface: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "stack": self.stack,
            "target": self.target,
            "phase": self.phase,
            "ok": self.ok,
            "patches": [p.as_dict() for p in self.patches],
            "anchors": [
                {
                    "id": r.anchor.id,
                    "file": r.anchor.file,
                    "lines": [r.anchor.start, r.anchor.end],
                    "phase": r.anchor.phase,
                    "status": r.status,
                    "found": list(r.found) if r.found else None,
                    "detail": r.detail,
                }
                for r in self.anchors
            ],
            "files": [{"path": f.path, "expected": f.expected, "found": f.found, "ok": f.ok} for f in self.files],
            "landing": [
                {"patch": r.patch, "file": r.path, "hunk": r.hunk, "ok": r.ok, "detail": r.detail} for r in self.landing
            ],
            "interface": self.interface,
            "notes": list(self.notes),
            "failures": list(self.failures),
        }


def _phase_of(
    series: Series, files: dict[str, bytes | None], modes: Mapping[str, str] | None = None
) -> tuple[str, list[PatchState], list[dict[str, bytes | None]]]:
    """Which phase the files are in, each patch's state, and the contents after each patch.

    ``stages[k]`` is the content after patch k (``stages[-1]`` the files as found),
    recovered by reverse-applying the later patches, so each hunk's landing is
    checked against the exact text it produced.  With ``modes`` (a checkout's)
    the modes patches state are checked too; a wheel's files have none.
    """
    forward, _ = classify(files, series, modes)
    if all(s.state == "applicable" for s in forward):
        return "pristine", forward, []
    stages: list[dict[str, bytes | None]] = [dict(files)]
    current = dict(files)
    current_modes = dict(modes) if modes is not None else None
    states: list[PatchState] = []
    for patch in reversed(series.patches):
        back = apply_patch(current, patch, reverse=True, modes=current_modes)
        if isinstance(back, HunkFailure):
            break
        states.append(PatchState(patch.name, "applied", "its lines stand at their new-side positions"))
        current.update(back)
        if current_modes is not None:
            current_modes = apply_modes(current_modes, patch, reverse=True)
        stages.append(dict(current))
    if len(states) == len(series.patches):
        states.reverse()
        stages.reverse()
        return "patched", states, stages[1:]
    # Neither: classify each patch on its own to say what differs.
    mixed = []
    for patch in series.patches:
        state = classify_one(files, patch, modes)
        if state.state == "upstream":
            state = PatchState(patch.name, "applied", "its changes are present")
        mixed.append(state)
    return "mixed", mixed, []


def verify_tree(
    stack: Stack,
    series: Series,
    anchors: Sequence[Anchor],
    tree: SourceTree,
    *,
    require_patched: bool,
    notes: Sequence[str] = (),
    modes: Mapping[str, str] | None = None,
    cache: Cache | None = None,
) -> VerifyReport:
    """Run every check on ``tree``; a pristine tree passes only when ``require_patched`` is off.

    ``modes`` (path -> git mode of the touched files) where the tree has them (a checkout).
    ``cache`` (None: none) keeps the expensive parts by the bytes they come from: each file's landing
    results and each source file's interface facts.  Every check runs each time, over those parts.
    """
    with parses_shared():  # the landing check and the interface check parse each file once between them
        return _verify_tree(stack, series, anchors, tree, require_patched, notes, modes, cache)


def _verify_tree(
    stack: Stack,
    series: Series,
    anchors: Sequence[Anchor],
    tree: SourceTree,
    require_patched: bool,
    notes: Sequence[str],
    modes: Mapping[str, str] | None,
    cache: Cache | None,
) -> VerifyReport:
    files = {p: tree.read(p) for p in series.touched}
    phase, states, stages = _phase_of(series, files, modes)
    anchor_phase = "patched" if phase == "patched" else "pristine"
    if phase == "mixed":
        applied = sum(s.state == "applied" for s in states)
        anchor_phase = "patched" if applied * 2 >= len(states) else "pristine"
    anchor_results = check_anchors(anchors, tree, anchor_phase)
    file_checks = []
    for pinned in stack.files:
        expected = pinned.patched if anchor_phase == "patched" else pinned.pristine
        data = files.get(pinned.path, tree.read(pinned.path))
        file_checks.append(FileCheck(pinned.path, expected, blob_id(data) if data is not None else None))
    landing: list[LandingResult] = []
    if phase == "patched":
        for patch, stage in zip(series.patches, stages, strict=True):
            for fp in patch.files:
                landing.extend(_landing(patch, fp, stage.get(fp.path), cache))

    failures: list[str] = []
    if phase == "mixed":
        bad = [s for s in states if s.state not in ("applied",)]
        failures.extend(f"patch {s.name}: {s.state}: {s.detail}" for s in bad)
        if not bad:
            failures.append("the files are neither pristine nor patched")
    elif phase == "pristine" and require_patched and series.patches:
        failures.append(f"{tree.label} does not carry the series: every patch is still applicable")
    failures.extend(f"anchor {r.anchor.id}: {r.status} ({r.detail})" for r in anchor_results if not r.ok)
    failures.extend(
        f"{f.path}: blob {str(f.found)[:12]} is not the pinned {anchor_phase} blob {str(f.expected)[:12]}"
        for f in file_checks
        if not f.ok
    )
    failures.extend(f"{r.patch} {r.path} {r.hunk}: {r.detail}" for r in landing if not r.ok)
    notes = list(notes)
    if not series.patches:  # everything went upstream: the release's own files are the stack's
        notes.append(f"nothing to carry: the series of {stack.name} is empty (series {series.id})")
    interface = None
    if stack.interface is not None:
        from sgpatch.interface import interface_of
        from sgpatch.interface.check import check_interface
        from sgpatch.interface.modules import ClassFileMissing

        try:
            found = check_interface(tree, cache=cache, **interface_of(stack.interface))
        except ClassFileMissing as exc:
            if not require_patched:
                raise
            failures.append(f"interface: {exc.message}")  # an install whose file is gone: drift, not bad input
        else:
            interface = found.as_dict()
            gaps = [f"{g.role} {g.class_name} lacks {g.name}" for g in found.gaps]
            gaps += [
                f"{d.role} {d.name} forwards to {d.delegate}.{d.missing}, which does not exist"
                for d in found.delegation_gaps
            ]
            if phase == "pristine" and not require_patched:
                notes.extend(f"interface gap the series must close: {g}" for g in gaps)
            else:
                failures.extend(f"interface gap ({found.algorithm}): {g}" for g in gaps)
    return VerifyReport(
        stack=stack.name,
        target=tree.label,
        phase=phase,
        patches=tuple(states),
        anchors=tuple(anchor_results),
        files=tuple(file_checks),
        landing=tuple(landing),
        notes=tuple(notes),
        failures=tuple(failures),
        interface=interface,
    )


def _landing(patch: Patch, fp: FilePatch, data: bytes | None, cache: Cache | None) -> list[LandingResult]:
    """``check_landing``, kept in ``cache`` under a key of everything it reads: the patch's name, the file's
    diff (its ``repr``: every field) and the file's bytes (the code that checks is in every key)."""
    if cache is None:
        return check_landing(patch, fp, data)
    from sgpatch.cache import key

    entry = key("landing", patch.name, repr(fp), b"\0absent" if data is None else b"\1" + data)
    found = _landing_from(cache.get("landing", entry), patch, fp)
    if found is not None:
        return found
    found = check_landing(patch, fp, data)
    cache.put("landing", entry, [[r.hunk, r.ok, r.detail] for r in found])
    return found


def _landing_from(doc: Any, patch: Patch, fp: FilePatch) -> list[LandingResult] | None:
    """The results a kept entry holds, if it is exactly one [hunk label, ok, detail] per hunk of ``fp``."""
    if not isinstance(doc, list) or len(doc) != len(fp.hunks):
        return None
    out = []
    for row, hunk in zip(doc, fp.hunks, strict=True):
        if not (isinstance(row, list) and len(row) == 3 and row[0] == hunk.label):
            return None
        if not isinstance(row[1], bool) or not isinstance(row[2], str):
            return None
        out.append(LandingResult(patch.name, fp.path, hunk.label, row[1], row[2]))
    return out


def verify_checkout(project: Project, checkout: Path, *, cache: Cache | None = None) -> VerifyReport:
    """Verify a checkout's work tree; its git state is reported alongside.

    ``cache``: see :func:`verify_tree`."""
    g = open_checkout(checkout)
    stopped = stopped_in(g)
    if stopped is not None:  # the files are a half-made series: nothing else verify could say is true
        raise CheckFailed(
            f"{g.root}: {stopped.what}; the checkout is not the series of {project.stack.name}", hint=stopped.next_step
        )
    done = recover(g)  # an interrupted apply is finished (or its journal cleared) first: say so
    state = inspect(g, project.stack, project.series)
    notes = [f"git: {done}"] if done else []
    notes.append(f"git: {state.phase} at {state.head[:12]}")
    if state.base is not None:
        check_base_files(g, project.stack, state.base, dict(state.base_blobs))
    if state.problem:
        notes.append(f"git: {state.problem}")
    if state.dirty:
        notes.append(f"git: {len(state.dirty)} uncommitted change(s), e.g. {state.dirty[0][3:]}")
    notes.extend(
        f"git: {path} is a submodule (gitlink {commit[:12]}); sgpatch does not look inside it"
        for path, commit in state.gitlinks
    )
    tree = DirTree(checkout)
    found = {p: tree.mode(p) for p in project.series.touched}
    report = verify_tree(
        project.stack,
        project.series,
        project.anchors,
        tree,
        require_patched=False,
        notes=notes,
        modes={p: m for p, m in found.items() if m is not None},
        cache=cache,
    )
    if state.dirty and report.failures:  # the edit is the cause: said first, before what it makes fail
        return replace(report, failures=(uncommitted(state.dirty), *report.failures))
    return report


def uncommitted(dirty: Sequence[str]) -> str:
    """The cause a check failure on an edited checkout has: its uncommitted changes, by file."""
    files = [entry[3:] for entry in dirty]
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (
        f"the checkout has uncommitted changes ({shown}): the checks judge the edited files; "
        "commit them (then 'sgpatch export') or discard them (git checkout -- FILE)"
    )
