"""Carry one series onto a new base, patch by patch: the engine of ``port`` (SPEC §9).

Each patch of the old series is classified against the new base with the
patches kept before it (``upstream``, ``superseded``, ``applies``, ``merged``
or ``conflict``); a kept patch is committed on the new checkout at once, so
the commits between the new base and ``Rebase.tip`` are the new series.
sgpatch knows the old release's files exactly (the pinned artifact), so a
patch that no longer applies is merged three ways: old base, new base, old
patched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.checkout.chain import ChainCommit
from sgpatch.checkout.state import trailers
from sgpatch.config import Artifact, Config, Stack
from sgpatch.errors import SourceError
from sgpatch.git.diff import merge_file
from sgpatch.git.repo import Git
from sgpatch.project import Project, load_project
from sgpatch.results import Progress
from sgpatch.series.engine import HunkFailure, apply_in_order, apply_modes, apply_patch, duplicate_definitions
from sgpatch.series.patch import TRAILER_PATCH, Series, split_lines
from sgpatch.series.upstream import SideBySide, judge
from sgpatch.source.archive import open_archive
from sgpatch.source.artifacts import fetch_artifact, verify_artifact
from sgpatch.source.tree import git_blob_id

KEPT = ("applies", "merged", "resolved")
DROPPED = ("upstream", "superseded")
Files = dict[str, bytes | None]


@dataclass(frozen=True, slots=True)
class ConflictHunk:
    """Where a conflicting patch failed, and where the merge left markers."""

    path: str
    failure: str  # the first hunk that does not apply, and why
    regions: tuple[tuple[int, int], ...]  # conflict marker ranges in the merged file (1-based, inclusive)

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.path, "failure": self.failure, "regions": [list(r) for r in self.regions]}


@dataclass(frozen=True, slots=True)
class PortedPatch:
    """One patch's fate in the new release."""

    name: str
    state: str  # upstream, superseded, applies, merged, resolved, conflict
    detail: str
    proof: str = ""  # for upstream: which test(s) proved it (reverse-apply, ast-equal, verbatim)
    hunks: tuple[str, ...] = ()  # the regenerated hunk headers, for kept patches
    side_by_side: tuple[SideBySide, ...] = ()
    conflicts: tuple[ConflictHunk, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "detail": self.detail,
            "proof": self.proof,
            "hunks": list(self.hunks),
            "side_by_side": [s.as_dict() for s in self.side_by_side],
            "conflicts": [c.as_dict() for c in self.conflicts],
        }


# --------------------------------------------------------------------------- the old release


@dataclass(frozen=True, slots=True)
class OldSeries:
    """The old stack's series and the exact files before and after each patch."""

    stack: Stack
    series: Series
    states: tuple[Files, ...]  # states[0]: the pinned base; states[k]: after patch k


def read_files(path: Path, artifact: Artifact, wanted: Sequence[str]) -> Files:
    """The ``wanted`` checkout-relative files of a pinned artifact (sha256 checked first), None if absent.

    Every member is checked (sgpatch.source.archive); only the wanted ones are read.
    """
    verify_artifact(path, artifact)
    found: Files = dict.fromkeys(wanted)
    inner = {p[len("python/") :] for p in wanted if p.startswith("python/")}
    with open_archive(path, "sdist" if artifact.kind == "sdist" else "wheel") as archive:
        for entry, data in archive.files(inner):
            found[f"python/{entry.name}"] = data
    return found


def load_old(config: Config, stack_name: str | None, *, progress: Progress | None) -> tuple[OldSeries, Project]:
    """The old stack's series with the exact files before and after each patch (from its pinned artifact)."""
    project = load_project(config, stack_name)
    stack, series = project.stack, project.series
    artifact = stack.source_artifact
    assert artifact is not None
    path = fetch_artifact(artifact, stack.sglang_version, progress=progress)
    base = read_files(path, artifact, series.touched)
    for pinned in stack.files:
        data = base.get(pinned.path)
        if data is None or git_blob_id(data) != pinned.pristine:
            raise SourceError(f"{artifact.filename}: {pinned.path} is not the pinned blob {pinned.pristine[:12]}")
    stages = apply_in_order(base, series.patches)
    if isinstance(stages, tuple):
        patch, failure = stages
        raise SourceError(
            f"{patch.name} does not apply to its own pinned base ({stack.name}): {failure.describe()}",
            hint=f"run 'sgpatch verify {stack.name}' and fix the series first",
        )
    return OldSeries(stack, series, (dict(base), *stages)), project


# --------------------------------------------------------------------------- classification


@dataclass
class Rebase:
    """Mutable state of one port run over the new checkout."""

    g: Git
    base: str
    tip: str
    current: Files
    ported: list[PortedPatch]
    kept: list[str]


def duplicates(before: Mapping[str, bytes | None], after: Mapping[str, bytes | None]) -> list[str]:
    return [
        f"{path}: {d}"
        for path, new in after.items()
        if new is not None and path.endswith(".py")
        for d in duplicate_definitions(before.get(path), new)
    ]


def conflict_regions(data: bytes) -> tuple[tuple[int, int], ...]:
    lines = split_lines(data)
    out: list[tuple[int, int]] = []
    start: int | None = None
    for n, line in enumerate(lines, start=1):
        if line.startswith(b"<<<<<<< ") or line.rstrip(b"\n") == b"<<<<<<<":
            start = n
        elif start is not None and (line.startswith(b">>>>>>> ") or line.rstrip(b"\n") == b">>>>>>>"):
            out.append((start, n))
            start = None
    return tuple(out)


def classify(
    run: Rebase, old: OldSeries, k: int, *, old_label: str, new_label: str
) -> tuple[PortedPatch, Files | None]:
    """Classify patch ``k`` of the old series against ``run.current``; kept: its new file contents."""
    patch = old.series.patches[k]
    before, after = old.states[k], old.states[k + 1]
    verdict = judge(patch, before, after, run.current)
    if verdict.state == "upstream":
        kinds = ", ".join(dict.fromkeys(part.split(":", 1)[0].strip() for part in verdict.proof.split("; ")))
        return PortedPatch(patch.name, "upstream", f"in {new_label}: {verdict.proof}", proof=kinds), None
    if verdict.state == "superseded":
        detail = f"{verdict.proof} in {new_label}: dropped; review both below"
        return PortedPatch(patch.name, "superseded", detail, side_by_side=verdict.side_by_side), None
    forward = apply_patch(run.current, patch, allow_offset=True)
    if not isinstance(forward, HunkFailure):
        result = {**run.current, **forward}
        dups = duplicates(run.current, result)
        if dups:
            detail = f"would define {dups[0]} twice (Python keeps only the later one)"
            return PortedPatch(patch.name, "conflict", detail, side_by_side=verdict.side_by_side), None
        return PortedPatch(patch.name, "applies", f"applies to {new_label} with exact context"), result
    merged: Files = dict(run.current)
    conflicts: list[ConflictHunk] = []
    for fp in patch.files:
        mine, base, theirs = run.current.get(fp.path), before.get(fp.path), after.get(fp.path)
        labels = (new_label, old_label, f"{patch.name} on {old_label}")
        text, count = merge_file(run.g, mine or b"", base or b"", theirs or b"", labels)
        merged[fp.path] = None if theirs is None and mine == base else text
        if count:
            failure = apply_patch({fp.path: mine}, dataclasses.replace(patch, files=(fp,)), allow_offset=True)
            why = failure.describe() if isinstance(failure, HunkFailure) else "the merge conflicts"
            conflicts.append(ConflictHunk(fp.path, why, conflict_regions(text)))
    if conflicts:
        first = conflicts[0]
        detail = f"{first.failure}; the 3-way merge against {old_label} conflicts in {len(conflicts)} file(s)"
        return PortedPatch(patch.name, "conflict", detail, conflicts=tuple(conflicts)), merged
    dups = duplicates(run.current, merged)
    if dups:
        return PortedPatch(patch.name, "conflict", f"the merge would define {dups[0]} twice"), None
    detail = f"the 3-way merge against {old_label} is clean ({forward.label} of {forward.path} does not apply)"
    return PortedPatch(patch.name, "merged", detail), merged


def advance(
    run: Rebase, old: OldSeries, start: int, *, old_version: str, new_version: str, date: str
) -> tuple[int | None, Files | None]:
    """Classify patches ``start..``; returns the first conflicting index and its merge result."""
    first_conflict: int | None = None
    conflict_files: Files | None = None
    for k in range(start, len(old.series.patches)):
        patch = old.series.patches[k]
        ported, files = classify(run, old, k, old_label=f"sglang {old_version}", new_label=f"sglang {new_version}")
        if ported.state == "conflict":
            if first_conflict is None:
                first_conflict, conflict_files = k, files
            run.ported.append(ported)
            continue
        if ported.state in KEPT and files is not None:
            if first_conflict is None:
                run.tip = run.g.commit_files(
                    run.tip, files, run.current, patch.commit_message(), date, modes=apply_modes({}, patch)
                )
                run.kept.append(patch.name)
            else:
                ported = dataclasses.replace(
                    ported, detail=f"{ported.detail} (without the conflicting patch before it)"
                )
            run.current = {**run.current, **files}
        run.ported.append(ported)
    return first_conflict, conflict_files


class CommitTree:
    """The files of one commit, as a read-only SourceTree (verify without touching the work tree)."""

    def __init__(self, g: Git, commit: str) -> None:
        self.g = g
        self.commit = commit

    @property
    def label(self) -> str:
        return f"commit {self.commit[:12]} of {self.g.root}"

    def read(self, path: str) -> bytes | None:
        return self.g.read_blob(self.commit, path)

    def list(self, prefix: str) -> list[str]:
        return self.g.list_files(self.commit, prefix)


def series_chain(g: Git, base: str, tip: str) -> list[ChainCommit]:
    out: list[ChainCommit] = []
    commit = tip
    while commit != base:
        parent = g.parents(commit)[0]
        out.append(ChainCommit(commit, parent, _trailer_name(g, commit)))
        commit = parent
    out.reverse()
    return out


def _trailer_name(g: Git, commit: str) -> str | None:
    return trailers(g.message(commit)).get(TRAILER_PATCH)
