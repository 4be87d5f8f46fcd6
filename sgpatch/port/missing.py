"""The files of a patch the release lacks: judged, then followed to where their definitions went (carried there by
definition, or those files named), else to what the release file they became already does."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from sgpatch.port.moved import follow
from sgpatch.port.package import named_elsewhere, naming_texts, release_files
from sgpatch.port.rebase import Files, Rebase
from sgpatch.port.renames import candidates, find_rename
from sgpatch.series.absorb import absorbed_moved
from sgpatch.series.conflicts import TAKE_UPSTREAM
from sgpatch.series.engine import HunkFailure, apply_file
from sgpatch.series.gone import gone
from sgpatch.series.hunks import FileOutcome, Merge, only
from sgpatch.series.patch import FilePatch, Patch


def missing_files(
    run: Rebase,
    patch: Patch,
    missing: Sequence[int],
    before: Files,
    merge: Merge,
    new_label: str,
    judge: Callable[[FilePatch], FileOutcome],
) -> tuple[dict[int, FileOutcome], Files]:
    """The files of ``patch`` the release lacks (by index, in order): judged (``judge``), and those whose hunks are
    all gone followed to where their definitions went (``_follow``: carried there, or those files named), else to
    what the release file they became already does (``_absorbed_where_it_went``); and the release files carried
    into."""
    outcomes: dict[int, FileOutcome] = {}
    carried: Files = {}
    for i in missing:
        fp = patch.files[i]
        b = before.get(fp.path)
        outcome = judge(fp)
        if outcome.verdict.gone:
            outcome = _where_it_went(run, outcome, b, new_label)
            if b is not None and run.release is not None:
                busy = frozenset(f.path for f in patch.files) | frozenset(carried)
                outcome, into = _follow(run, fp, outcome, b, merge, busy)
                carried.update(into)
                if outcome.verdict.gone:
                    outcome = _absorbed_where_it_went(run, fp, outcome, b)
        outcomes[i] = outcome
    return outcomes, carried


def _follow(
    run: Rebase, fp: FilePatch, outcome: FileOutcome, old: bytes, merge: Merge, busy: frozenset[str]
) -> tuple[FileOutcome, Files]:
    """A missing file's hunks carried to where their definitions now stand (``moved``), or those files named."""
    release = release_files(run)  # every missing file scans the same package: read it once
    assert release is not None
    followed = follow(fp, old, release.names(fp.path.split("/", 1)[0]), release.read, run.current, merge, busy=busy)
    v = outcome.verdict
    hunks = tuple(
        dataclasses.replace(h, detail=f"{h.detail}; {followed.why[h.index]}") if h.index in followed.why else h
        for h in v.hunks
    )
    places = sorted(set(followed.where.values()))
    if followed.carried:
        hunks = tuple(dataclasses.replace(h, state="merged", detail=followed.why[h.index]) for h in v.hunks)
        detail = f"moved: carried to {', '.join(places)} by definition"
        verdict = dataclasses.replace(
            v, state="merged", hunks=hunks, detail=detail, gone=False, renamed=", ".join(places)
        )
        return dataclasses.replace(outcome, verdict=verdict), {**followed.texts}
    renamed = v.renamed or ", ".join(places)
    detail = v.detail + (f"; its definitions now stand in {', '.join(places)}" if places else "")
    return dataclasses.replace(outcome, verdict=dataclasses.replace(v, hunks=hunks, detail=detail, renamed=renamed)), {}


def _absorbed_where_it_went(run: Rebase, fp: FilePatch, outcome: FileOutcome, old: bytes) -> FileOutcome:
    """A missing file's hunks suggested ``take-upstream`` where the one release file its definitions went to
    already does what they do (``absorb.absorbed_moved``), or no longer has what they change (``gone``)."""
    target = outcome.verdict.renamed
    release = release_files(run)
    if not target or "," in target or release is None or not fp.path.endswith(".py"):
        return outcome
    text = run.current[target] if target in run.current else release.read([target])[target]
    if text is None:
        return outcome
    hunks = []
    for h in outcome.verdict.hunks:
        after = apply_file(old, only(fp, (fp.hunks[h.index - 1],)))
        proof = None
        if h.state == "conflict" and not isinstance(after, HunkFailure):
            proof = absorbed_moved(fp.hunks[h.index - 1], old, after, text, target)
            if proof is None:  # what it changes may be gone from the file its definitions went to
                proof = gone(fp.hunks[h.index - 1], old, text, named_elsewhere(run, target), naming_texts(run, target))
        hunks.append(dataclasses.replace(h, suggestion=TAKE_UPSTREAM, evidence=proof) if proof else h)
    return dataclasses.replace(outcome, verdict=dataclasses.replace(outcome.verdict, hunks=tuple(hunks)))


def _where_it_went(run: Rebase, outcome: FileOutcome, old: bytes | None, new_label: str) -> FileOutcome:
    """A file the release lacks: name the release file it seems to have become."""
    path = outcome.verdict.path
    found = None
    release = release_files(run)  # read once for every missing file
    if release is not None:
        wanted = candidates(path, release.names(path.split("/", 1)[0]))
        read = {**release.read([f for f in wanted if f not in run.current])}
        found = find_rename(old, {**read, **{f: run.current[f] for f in wanted if f in run.current}})
    detail = f"not in {new_label}"
    renamed = ""
    if found is not None:
        renamed = found[0]
        detail += f"; moved to {renamed}? ({found[1]:.0%} of its lines are there)"
    hunks = tuple(dataclasses.replace(h, detail=detail) for h in outcome.verdict.hunks)
    return dataclasses.replace(
        outcome, verdict=dataclasses.replace(outcome.verdict, detail=detail, renamed=renamed, hunks=hunks)
    )
