"""Carry one series onto a new base, patch by patch and, inside each patch, file by file and hunk by hunk.

Each patch of the old series is judged against the new base with the patches
kept before it: first by its own ``Obsolete-If`` evidence, read in the release (``obsolete``:
dropped), then as a whole (``upstream`` or ``superseded``: dropped), then
each file (a file whose change is upstream as a whole), then each hunk
(``sgpatch.series.hunks``).  A patch is ``upstream`` or ``superseded`` when every
hunk is; otherwise it keeps the rest, as one patch: ``applies`` when every kept
hunk applies, ``merged`` when some needed the three-way merge, ``conflict`` when
one needs a person.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from sgpatch.git.diff import MergeScratch, merge_file
from sgpatch.port.missing import missing_files
from sgpatch.port.moved import KeptFiles, moved_out, read_package
from sgpatch.port.package import named_elsewhere, naming_texts, release_files, release_names, words_ahead
from sgpatch.port.parallel import forked_map, jobs_for
from sgpatch.port.rebase import Files, OldSeries, Rebase
from sgpatch.pyast import collector_paused, parses_shared
from sgpatch.series.absorb import suggest
from sgpatch.series.hunks import STATES, FileOutcome, FileVerdict, Merge, carry_file, file_state
from sgpatch.series.needed import defined_lines, dropped, hold_needed
from sgpatch.series.obsolete import FIELD, read_claims
from sgpatch.series.patch import FilePatch, Patch
from sgpatch.series.upstream import VERBATIM, judge
from sgpatch.series.verdict import KEPT, ConflictHunk, PortedPatch


def _reader(files: Files) -> Callable[[Sequence[str]], Files]:
    return lambda paths: {p: files.get(p) for p in paths}


def _single(patch: Patch, fp: FilePatch) -> Patch:
    return dataclasses.replace(patch, files=(fp,))


def _whole(patch: Patch, state: str, proof: str, current: Files) -> tuple[FileVerdict, ...]:
    return tuple(
        carry_file(fp, None, None, current.get(fp.path), _no_merge, whole=(state, proof)).verdict for fp in patch.files
    )


def _no_merge(current: bytes, base: bytes, other: bytes) -> tuple[bytes, int]:
    raise AssertionError("a whole-file verdict merges nothing")


def _label(path: str, hunk_header: str, index: int) -> str:
    return f"{path}: hunk #{index} ({hunk_header.split(' @@')[0]} @@)"


def classify(
    run: Rebase, old: OldSeries, k: int, *, old_label: str, new_label: str
) -> tuple[PortedPatch, Files | None]:
    """Classify patch ``k`` of the old series against ``run.current``; kept: its new file contents."""
    patch = old.series.patches[k]
    evidence = read_claims(patch.obsolete_if, run.release.read if run.release is not None else _reader(run.current))
    if evidence and all(e.holds for e in evidence):
        proof = "; ".join(f"{e.where}: {e.claim}" for e in evidence)
        verdicts = _whole(patch, "obsolete", proof, run.current)
        detail = f"obsolete in {new_label}, as its {FIELD} says: {proof}"
        return PortedPatch(patch.name, "obsolete", detail, proof=FIELD, files=verdicts, evidence=evidence), None
    ported, texts = _carry(run, old, k, old_label=old_label, new_label=new_label)
    return dataclasses.replace(ported, evidence=evidence), texts


def _carry(run: Rebase, old: OldSeries, k: int, *, old_label: str, new_label: str) -> tuple[PortedPatch, Files | None]:
    """``classify`` past the patch's own evidence: upstream, superseded, or carried hunk by hunk."""
    patch = old.series.patches[k]
    before, after = old.states[k], old.states[k + 1]
    verdict = judge(patch, before, after, run.current)
    if verdict.state == "upstream":
        kinds = ", ".join(dict.fromkeys(part.split(":", 1)[0].strip() for part in verdict.proof.split("; ")))
        files = _whole(patch, "upstream", verdict.proof, run.current)
        return PortedPatch(patch.name, "upstream", f"in {new_label}: {verdict.proof}", proof=kinds, files=files), None
    if verdict.state == "superseded":
        detail = f"{verdict.proof} in {new_label}: dropped; review both below"
        files = _whole(patch, "superseded", verdict.proof, run.current)
        return PortedPatch(patch.name, "superseded", detail, side_by_side=verdict.side_by_side, files=files), None

    labels = (new_label, old_label, f"{patch.name} on {old_label}")
    with tempfile.TemporaryDirectory(prefix="sgpatch-merge-") as scratch:  # each text written once (in memory)
        texts = MergeScratch(Path(scratch))
        try:
            merge = _merger(run, labels, texts)
            return _carry_files(run, patch, before, after, merge, labels, old_label=old_label, new_label=new_label)
        finally:
            texts.close()


def _merger(run: Rebase, labels: tuple[str, str, str], texts: MergeScratch) -> Merge:
    """``git merge-file`` of a patch's texts, written once each in ``texts``; a hunk is merged once (by content)."""
    merged: dict[tuple[bytes, bytes, bytes], tuple[bytes, int]] = {}

    def merge(current: bytes, base: bytes, other: bytes) -> tuple[bytes, int]:
        if (current, base, other) not in merged:
            merged[current, base, other] = merge_file(run.g, current, base, other, labels, scratch=texts)
        return merged[current, base, other]

    return merge


def lacking_files(patch: Patch, before: Files, current: Files) -> list[int]:
    """The indices of ``patch``'s files that the old base has and the release (as ``current`` has it) lacks."""
    return [i for i, f in enumerate(patch.files) if before.get(f.path) is not None and current.get(f.path) is None]


def read_lacking_package(release: KeptFiles, patch: Patch, missing: Sequence[int], current: Files) -> None:
    """Read the package the first Python file among ``missing`` is looked for in (``moved.read_package``)."""
    python = next((patch.files[i].path for i in missing if patch.files[i].path.endswith(".py")), None)
    if python is not None:
        read_package(release, python, current)


def _judged_files(
    run: Rebase,
    patch: Patch,
    before: Files,
    after: Files,
    merge: Merge,
    labels: tuple[str, str, str],
    new_label: str,
) -> tuple[Callable[[int], FileOutcome], Files, dict[str, dict[int, set[str]]]]:
    """Each file of ``patch`` judged, by index, the release files the hunks of its missing files were carried
    into, and what the files with a ``take-upstream`` drop define (``_dropped_defines``).  Each file the release
    has is judged on its own (``_judge_file``); the files it lacks are followed together, in the patch's order
    (``missing.missing_files``: where one file's hunks went decides where the next may go), as one more task.
    Forked workers take them side by side (``port.parallel``), each with its own merges, the missing files first
    (they end in the package's scans); an answer no worker gave is computed here when asked for, as the serial
    path does.  Each task parses a text once, whatever asks for its tree."""
    release = release_files(run)  # made before the fork: every worker reads through the same one
    missing = lacking_files(patch, before, run.current)
    if release is not None:  # the package is read and scanned for them anyway: before the fork, not in each worker
        read_lacking_package(release, patch, missing, run.current)
    own: list[Merge] = []  # in a worker: its own merges (its scratch directory, its memo)
    # Each file the release has, and -1: the missing files, followed in order, in the place of the first of them
    # (answers are taken in that order, so an error is raised where the serial loop raises it).
    lacking, first = set(missing), missing[0] if missing else None
    tasks = [-1 if i == first else i for i in range(len(patch.files)) if i == first or i not in lacking]

    def work(t: int) -> tuple[dict[int, FileOutcome], Files, dict[str, dict[int, set[str]]]]:
        m = own[0] if own else merge
        with parses_shared():  # a task's texts parsed once: its files' judging, following, and the names dropped
            if tasks[t] == -1:
                found, into = missing_files(
                    run, patch, missing, before, m, new_label, lambda fp: _judge_file(run, patch, fp, before, after, m)
                )
            else:
                i = tasks[t]
                found, into = {i: _judge_file(run, patch, patch.files[i], before, after, m)}, {}
            return found, into, _dropped_defines(patch, found, after)

    def worker() -> None:
        own.append(_merger(run, labels, MergeScratch(Path(tempfile.mkdtemp(prefix="sgpatch-merge-")))))

    def cost(t: int) -> float:  # each hunk is tested against the file's texts: their size times the hunks
        if tasks[t] == -1:
            return float("inf")
        fp = patch.files[tasks[t]]
        texts = (before.get(fp.path), run.current.get(fp.path))
        return sum(len(t) for t in texts if t is not None) * (1 + len(fp.hunks))

    answer = forked_map(len(tasks), work, jobs=jobs_for(len(tasks)), child=worker, cost=cost)
    outcomes: dict[int, FileOutcome] = {}
    carried: Files = {}
    defines: dict[str, dict[int, set[str]]] = {}
    for t in range(len(tasks)):
        found, into, names = answer(t)
        outcomes.update(found)
        carried.update(into)
        defines.update(names)
    return outcomes.__getitem__, carried, defines


def _dropped_defines(patch: Patch, found: dict[int, FileOutcome], after: Files) -> dict[str, dict[int, set[str]]]:
    """For each file of ``found`` with a hunk suggested ``take-upstream``, what ``hold_needed`` reads of it first
    (``needed.defined_lines`` of its text with the whole patch): read where the file was judged, its text
    parsed there already."""
    out: dict[str, dict[int, set[str]]] = {}
    for i, outcome in found.items():
        path = patch.files[i].path
        hunks = outcome.verdict.hunks
        if path.endswith(".py") and any(dropped(h) for h in hunks):
            out[path] = defined_lines(after.get(path))
    return out


def _judge_file(run: Rebase, patch: Patch, fp: FilePatch, before: Files, after: Files, merge: Merge) -> FileOutcome:
    """One file of ``patch`` judged against the release as the series so far left it, on its own: its hunks,
    the file as a whole, the suggestions for its conflicts, where a conflict's definition moved out of it (a
    missing file is followed by ``missing.missing_files``)."""
    b, a, n = before.get(fp.path), after.get(fp.path), run.current.get(fp.path)
    with parses_shared():  # the hunk tests, the file-level tests, the duplicate check and the suggestions
        outcome = carry_file(fp, b, a, n, merge)  # parse each text once
        states = {h.state for h in outcome.verdict.hunks}
        if states - {"upstream"} and "applies" not in states:  # a hunk that applies is not upstream
            whole = _whole_file(patch, fp, before, after, run.current)
            if whole is not None:
                outcome = carry_file(fp, b, a, n, merge, whole=whole)
        conflict = outcome.verdict.state == "conflict" and not outcome.verdict.gone and fp.hunks
        if conflict and b is not None and n is not None:
            hunks = tuple(
                suggest(
                    fp, outcome.verdict.hunks, b, n, merge, named_elsewhere(run, fp.path), naming_texts(run, fp.path)
                )
            )
            outcome = dataclasses.replace(outcome, verdict=dataclasses.replace(outcome.verdict, hunks=hunks))
    if outcome.verdict.state == "conflict" and not outcome.verdict.gone and b is not None:
        outcome = _moved_out(run, fp, outcome, b)
    return outcome


def _carry_files(
    run: Rebase,
    patch: Patch,
    before: Files,
    after: Files,
    merge: Merge,
    labels: tuple[str, str, str],
    *,
    old_label: str,
    new_label: str,
) -> tuple[PortedPatch, Files | None]:
    """Each file of ``patch`` carried hunk by hunk (``merge``: the patch's merges, by content)."""
    # ``carried``: release files the hunks of a missing file were carried into (``moved``)
    judged, carried, defines = _judged_files(run, patch, before, after, merge, labels, new_label)
    outcomes = [judged(i) for i in range(len(patch.files))]
    held = hold_needed(
        [(fp, o.verdict) for fp, o in zip(patch.files, outcomes, strict=True)],
        after,
        release_names(run),
        known=defines,
        ask_ahead=words_ahead(run),
    )
    outcomes = [dataclasses.replace(o, verdict=v) for o, v in zip(outcomes, held, strict=True)]
    ported, texts = _verdict(patch, outcomes, old_label, new_label)
    return ported, ({**texts, **carried} if texts is not None else None)


def _moved_out(run: Rebase, fp: FilePatch, outcome: FileOutcome, old: bytes) -> FileOutcome:
    """A file the release has: each hunk left for a person (no suggestion) whose definition the release's file no
    longer has names where that definition stands now (``moved.moved_out``)."""
    release = release_files(run)
    new = run.current.get(fp.path)
    left = [h.index for h in outcome.verdict.hunks if h.state == "conflict" and not h.suggestion]
    if release is None or new is None or not left:
        return outcome
    notes = moved_out(fp, left, old, new, release.names(fp.path.split("/", 1)[0]), release.read, run.current)
    if not notes:
        return outcome
    hunks = tuple(
        dataclasses.replace(h, detail=f"{h.detail}; {notes[h.index]}") if h.index in notes else h
        for h in outcome.verdict.hunks
    )
    return dataclasses.replace(outcome, verdict=dataclasses.replace(outcome.verdict, hunks=hunks))


def _whole_file(patch: Patch, fp: FilePatch, before: Files, after: Files, new: Files) -> tuple[str, str] | None:
    """(state, proof) when the file's change is upstream (or superseded) as a whole, proved across its hunks
    (two hunks may change one definition: neither alone is upstream).  Asked only where no hunk applies (the
    old lines of one that does still stand); a verbatim proof is left to the hunks, which also check that the
    lines they remove are gone."""
    b, a, n = before.get(fp.path), after.get(fp.path), new.get(fp.path)
    if len(patch.files) == 1 or b is None or a is None or n is None or fp.new_file or fp.deleted:
        return None
    one = judge(_single(patch, fp), before, after, new)
    if one.state == "upstream" and not one.proof.startswith(VERBATIM):
        return ("upstream", one.proof)
    if one.state == "superseded":
        return ("superseded", one.proof)
    return None


def _verdict(
    patch: Patch, outcomes: list[FileOutcome], old_label: str, new_label: str
) -> tuple[PortedPatch, Files | None]:
    files = tuple(o.verdict for o in outcomes)
    states = [h.state for f in files for h in f.hunks] + [f.state for f in files if not f.hunks]
    tally = Counter(states)
    summary = ", ".join(f"{tally[s]} {s}" for s in STATES if tally[s])
    state = file_state(states)
    if state in ("upstream", "superseded"):
        proofs = sorted({h.proof for f in files for h in f.hunks if h.proof})
        detail = f"every hunk is in {new_label} ({summary})"
        return PortedPatch(patch.name, state, detail, proof=", ".join(proofs), files=files), None
    texts: Files = {o.verdict.path: o.text for o in outcomes}
    dropped = tally["upstream"] + tally["superseded"]
    tail = f"; {dropped} of {len(states)} hunk(s) already in {new_label}: dropped ({summary})" if dropped else ""
    if state == "applies":
        return PortedPatch(
            patch.name, "applies", f"applies to {new_label} with exact context{tail}", files=files
        ), texts
    if state == "merged":
        moved = tally["merged"]
        detail = f"the 3-way merge against {old_label} is clean ({moved} hunk(s) do not apply as they are){tail}"
        return PortedPatch(patch.name, "merged", detail, files=files), texts
    conflicts = []
    for f in files:
        if f.state != "conflict":
            continue
        first = next((h for h in f.hunks if h.state == "conflict"), None)
        failure = f"{_label(f.path, first.header, first.index)}: {first.detail}" if first else f"{f.path}: {f.detail}"
        conflicts.append(ConflictHunk(f.path, failure, f.regions))
    detail = f"{len(conflicts)} file(s) need a person ({summary}); the first: {conflicts[0].failure}"
    return PortedPatch(patch.name, "conflict", detail, conflicts=tuple(conflicts), files=files), texts


def advance(
    run: Rebase, old: OldSeries, start: int, *, old_version: str, new_version: str
) -> tuple[int | None, Files | None]:
    """Classify patches ``start..``; returns the first conflicting index and its merge result.

    The patches kept before the first conflict wait in ``run.pending`` (``commit_kept`` commits them);
    patches after it are still judged (without it), for the report."""
    with collector_paused():  # the trees parsed meanwhile are let go by reference counts: nothing to collect
        return _advance(run, old, start, old_version=old_version, new_version=new_version)


def _advance(
    run: Rebase, old: OldSeries, start: int, *, old_version: str, new_version: str
) -> tuple[int | None, Files | None]:
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
                run.pending.append((patch, files, run.current))
                run.kept.append(patch.name)
            else:
                ported = dataclasses.replace(
                    ported, detail=f"{ported.detail} (without the conflicting patch before it)"
                )
            run.current = {**run.current, **files}
        run.ported.append(ported)
    return first_conflict, conflict_files
