"""One file of a patch carried to a new release, hunk by hunk (SPEC §9).

Each hunk is judged against the new release's file on its own:

``upstream``    its result is already there: its hunk reverse-applies exactly (offsets allowed), the
                definitions it changes are equal as Python ASTs, or its added lines stand verbatim in
                the same definition and the lines it removes are gone from it;
``superseded``  every definition it adds exists upstream in the same scope with another body;
``obsolete``    the whole patch, by its own ``Obsolete-If`` evidence (``port`` decides it, never a hunk);
``applies``     it applies with exact context (the offset is reported);
``merged``      a three-way merge of the hunk alone (old base, new release, old base + the hunk) is clean;
``conflict``    that merge conflicts, the file is gone from the release, or the hunk would define a
                name twice.

The file's new text keeps what is not upstream or superseded: the hunks applied when they all apply,
else one three-way merge of them, with the conflicts marked diff3-style against the old base.  Pure
but for ``Merge``, which the caller makes (``git merge-file``).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sgpatch.series.engine import HunkFailure, apply_file, duplicate_definitions
from sgpatch.series.gone import WORD_BYTES
from sgpatch.series.hunkproof import hunk_superseded, hunk_upstream
from sgpatch.series.patch import FilePatch, Hunk, split_lines
from sgpatch.series.upstream import REVERSE_APPLY

# (current, base, other) -> (the merged text, the number of conflicts): ``git merge-file --diff3``.
Merge = Callable[[bytes, bytes, bytes], tuple[bytes, int]]

STATES = ("upstream", "superseded", "obsolete", "applies", "merged", "conflict")
KEPT_HUNKS = ("applies", "merged", "conflict")


@dataclass(frozen=True, slots=True)
class HunkVerdict:
    """What one hunk of the old patch is in the new release."""

    index: int  # 1-based within its file
    header: str  # the old patch's "@@ -a,b +c,d @@ section" line
    state: str  # one of STATES
    detail: str = ""
    proof: str = ""  # upstream: reverse-apply, ast-equal or verbatim
    offset: int | None = None  # applies: how far it moved (new line - old line)
    suggestion: str = ""  # conflict: take-upstream, take-patch or combine (sgpatch.series.absorb); "" for none
    evidence: str = ""  # why that suggestion

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "header": self.header,
            "state": self.state,
            "detail": self.detail,
            "proof": self.proof,
            "offset": self.offset,
            "suggestion": self.suggestion or None,
            "evidence": self.evidence,
        }

    @property
    def held(self) -> bool:
        """Whether a suggestion was withdrawn from it (``series.needed``): its evidence says why, and
        ``--resolve suggested`` leaves its file to a person."""
        return not self.suggestion and bool(self.evidence)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HunkVerdict:
        offset = d.get("offset")
        return cls(
            int(d["index"]),
            str(d["header"]),
            str(d["state"]),
            str(d.get("detail", "")),
            str(d.get("proof", "")),
            int(offset) if offset is not None else None,
            str(d.get("suggestion") or ""),
            str(d.get("evidence", "")),
        )


@dataclass(frozen=True, slots=True)
class FileVerdict:
    """One file of the patch in the new release: its hunks' verdicts and where the merge left markers."""

    path: str
    state: str  # one of STATES: the strongest of its hunks' (conflict > merged > applies > ...)
    hunks: tuple[HunkVerdict, ...]
    detail: str = ""
    regions: tuple[tuple[int, int], ...] = ()  # conflict markers in the new text (1-based, inclusive)
    gone: bool = False  # the release has no such file: the hunks wait in a reject file
    renamed: str = ""  # where the release seems to have moved it

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "state": self.state,
            "detail": self.detail,
            "counts": dict(Counter(h.state for h in self.hunks)),
            "hunks": [h.as_dict() for h in self.hunks],
            "regions": [list(r) for r in self.regions],
            "gone": self.gone,
            "renamed": self.renamed,
            "suggestion": self.suggestion or None,
        }

    @property
    def suggestion(self) -> str:
        """The suggestion every conflicting hunk shares ("" when they differ or one has none)."""
        found = {h.suggestion for h in self.hunks if h.state == "conflict"}
        return found.pop() if len(found) == 1 and not any(h.held for h in self.hunks) else ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileVerdict:
        return cls(
            str(d["file"]),
            str(d["state"]),
            tuple(HunkVerdict.from_dict(h) for h in d.get("hunks", ())),
            str(d.get("detail", "")),
            tuple((int(a), int(b)) for a, b in d.get("regions", ())),
            bool(d.get("gone", False)),
            str(d.get("renamed", "")),
        )


@dataclass(frozen=True, slots=True)
class FileOutcome:
    """A file carried by one patch: the verdict and the file's new text."""

    verdict: FileVerdict
    text: bytes | None  # the file's new contents (None: absent)


def file_state(states: Sequence[str]) -> str:
    """A file's (or a patch's) state from its hunks': a conflict wins, then a merge, then an apply."""
    for state in ("conflict", "merged", "applies"):
        if state in states:
            return state
    if "superseded" in states:
        return "superseded"
    return "upstream"


def conflict_regions(data: bytes) -> tuple[tuple[int, int], ...]:
    """The line ranges of diff3 conflict blocks (``<<<<<<<`` to ``>>>>>>>``) in ``data``."""
    out: list[tuple[int, int]] = []
    start: int | None = None
    for n, line in enumerate(split_lines(data), start=1):
        if line.startswith(b"<<<<<<< ") or line.rstrip(b"\n") == b"<<<<<<<":
            start = n
        elif start is not None and (line.startswith(b">>>>>>> ") or line.rstrip(b"\n") == b">>>>>>>"):
            out.append((start, n))
            start = None
    return tuple(out)


def only(fp: FilePatch, hunks: Sequence[Hunk]) -> FilePatch:
    """``fp`` reduced to ``hunks``: a content change of an existing file."""
    return dataclasses.replace(fp, hunks=tuple(hunks), new_file=False, deleted=False, old_mode=None, new_mode=None)


def _position(lines: Sequence[bytes], hunk: Hunk) -> int | None:
    """Where the hunk's old side stands in ``lines`` (1-based): at its own line, else the one place it occurs."""
    want = hunk.old
    begin = hunk.old_start - 1 if want else hunk.old_start
    if tuple(lines[begin : begin + len(want)]) == want:
        return hunk.old_start
    if not want:
        return None
    hits = [
        i + 1
        for i in range(len(lines) - len(want) + 1)
        if lines[i] == want[0] and tuple(lines[i : i + len(want)]) == want
    ]
    return hits[0] if len(hits) == 1 else None


def _judge_hunk(fp: FilePatch, hunk: Hunk, before: bytes, after: bytes, new: bytes, merge: Merge) -> HunkVerdict:
    one = only(fp, (hunk,))
    header = hunk.header
    if not isinstance(apply_file(new, one, reverse=True, allow_offset=True), HunkFailure):
        return HunkVerdict(hunk.index, header, "upstream", "its lines reverse-apply exactly", REVERSE_APPLY)
    forward = apply_file(new, one, allow_offset=True)
    if not isinstance(forward, HunkFailure):
        at = _position(split_lines(new), hunk)
        offset = at - hunk.old_start if at is not None else None
        where = "at its own lines" if not offset else f"at line {at} (offset {offset:+d})"
        return HunkVerdict(hunk.index, header, "applies", f"applies with exact context {where}", offset=offset)
    failure = forward.describe().split(": ", 2)[-1]
    after_hunk = apply_file(before, one)
    if isinstance(after_hunk, HunkFailure):  # cannot be: the patch applies to its own base
        return HunkVerdict(hunk.index, header, "conflict", f"does not apply to its own base: {after_hunk.reason}")
    proof = hunk_upstream(one, before, after_hunk, after, new) if names_stand(hunk, new) else None
    if proof is not None:
        kind, _, why = proof.partition(": ")
        return HunkVerdict(hunk.index, header, "upstream", why, kind)
    if _may_define(hunk):  # only a hunk that adds a definition can be superseded or define a name twice
        verdict = hunk_superseded(one, before, after_hunk, new)
        if verdict.state == "superseded":
            return HunkVerdict(hunk.index, header, "superseded", f"{verdict.proof}: dropped; review both")
        if verdict.duplicates:
            return HunkVerdict(hunk.index, header, "conflict", f"would define {verdict.duplicates[0]} twice")
    _, conflicts = merge(new, before, after_hunk)
    if conflicts:
        return HunkVerdict(hunk.index, header, "conflict", f"{failure}; the 3-way merge conflicts")
    return HunkVerdict(hunk.index, header, "merged", f"{failure}; the 3-way merge is clean")


def carry_file(
    fp: FilePatch,
    before: bytes | None,
    after: bytes | None,
    new: bytes | None,
    merge: Merge,
    *,
    whole: tuple[str, str] | None = None,
) -> FileOutcome:
    """Carry one file section of a patch onto ``new`` (the release's file; None: absent).

    ``before``/``after``: the file on the old base before and after the patch.  ``whole``: a
    (state, proof) already proved for the whole file (upstream or superseded): every hunk has it.
    """
    if whole is not None:
        state, proof = whole
        kind = proof.split(":", 1)[0] if state == "upstream" else ""
        hunks = tuple(HunkVerdict(h.index, h.header, state, proof, kind) for h in fp.hunks)
        return FileOutcome(FileVerdict(fp.path, state, hunks, proof), new)
    if fp.new_file or fp.deleted or before is None or after is None:
        return _whole_file(fp, before, after, new, merge)
    if new is None:
        hunks = tuple(HunkVerdict(h.index, h.header, "conflict", "the file is not in the release") for h in fp.hunks)
        return FileOutcome(FileVerdict(fp.path, "conflict", hunks, "not in the release", gone=True), None)
    if not fp.hunks:  # a mode change alone: the commit that carries the patch sets it
        return FileOutcome(FileVerdict(fp.path, "applies", (), f"mode {fp.old_mode} -> {fp.new_mode}"), new)
    verdicts = [_judge_hunk(fp, h, before, after, new, merge) for h in fp.hunks]
    return _combine(fp, verdicts, before, new, merge)


def _combine(fp: FilePatch, verdicts: list[HunkVerdict], before: bytes, new: bytes, merge: Merge) -> FileOutcome:
    """The file's new text from the hunks kept; a conflict the hunks make only together is marked on them."""
    kept = [h for h, v in zip(fp.hunks, verdicts, strict=True) if v.state in KEPT_HUNKS]
    text: bytes = new
    if kept and all(v.state == "applies" for v in verdicts if v.state in KEPT_HUNKS):
        applied = apply_file(new, only(fp, kept), allow_offset=True)
        if not isinstance(applied, HunkFailure):
            text = applied
        else:
            kept_ids = {h.index for h in kept}
            verdicts = [
                dataclasses.replace(v, state="merged", detail=f"{v.detail}, but not together with the others")
                if v.index in kept_ids
                else v
                for v in verdicts
            ]
    if kept and text is new:
        other = apply_file(before, only(fp, kept))
        assert not isinstance(other, HunkFailure)  # a subset of a patch applies to its own base
        text, count = merge(new, before, other)
        if count and not any(v.state == "conflict" for v in verdicts):
            verdicts = [
                dataclasses.replace(v, state="conflict", detail=f"{v.detail}; conflicts with the file's other hunks")
                if v.state == "merged"
                else v
                for v in verdicts
            ]
    if fp.path.endswith(".py") and any(_may_define(h) for h in kept):
        dups = duplicate_definitions(new, text)
        if dups:
            text, verdicts = _mark_duplicates(fp, verdicts, text, new, dups)
    state = file_state([v.state for v in verdicts])
    counts = Counter(v.state for v in verdicts)
    detail = ", ".join(f"{counts[s]} {s}" for s in STATES if counts[s])
    return FileOutcome(FileVerdict(fp.path, state, tuple(verdicts), detail, conflict_regions(text)), text)


_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


def names_stand(hunk: Hunk, new: bytes) -> bool:
    """Whether every name the hunk's added lines say (comments aside) occurs in ``new``: without it neither an AST
    nor a verbatim proof can hold, and nothing is parsed.  A name cut off wrongly (a ``#`` in a string) only
    leaves fewer names to find: the test can miss a proof, never make one."""
    wanted = {m for _, line in hunk.added for m in _NAME.findall(line.split(b"#", 1)[0])}
    return all(says(new, name) for name in wanted)


_DIGITS = frozenset(b"0123456789")


def says(text: bytes, name: bytes) -> bool:
    """Whether ``_NAME.findall(text)`` holds ``name`` (a name: it does not begin with a digit), without reading
    every name of ``text``: an occurrence not followed by a letter, digit or ``_``, with nothing but digits between
    it and the letter, digit or ``_`` run it ends (``findall`` skips a run's leading digits: ``9abc`` says
    ``abc``).  A byte search for the name, and a look around each hit (``tests/test_engine.py`` holds it to
    ``findall``)."""
    at = text.find(name)
    while at >= 0:
        end = at + len(name)
        if end >= len(text) or text[end] not in WORD_BYTES:
            start = at
            while start > 0 and text[start - 1] in _DIGITS:
                start -= 1
            if start == 0 or text[start - 1] not in WORD_BYTES:
                return True
        at = text.find(name, at + 1)
    return False


_DEFINING = re.compile(rb"^[ \t]*(?:async[ \t]+def|def|class|@)[ \t]*\S")


def _may_define(hunk: Hunk) -> bool:
    """Whether a hunk changes a ``def``, ``class`` or decorator line: only then can it define a name twice."""
    removed = (Counter(hunk.old) - Counter(hunk.new)).elements()
    return any(_DEFINING.match(ln) for ln in [*(text for _, text in hunk.added), *removed])


def _mark_duplicates(
    fp: FilePatch, verdicts: list[HunkVerdict], text: bytes, new: bytes, dups: list[str]
) -> tuple[bytes, list[HunkVerdict]]:
    """The hunks that would define a name twice become conflicts, marked where their lines went in."""
    lines = split_lines(text)
    out = list(verdicts)
    for k, (hunk, v) in enumerate(zip(fp.hunks, verdicts, strict=True)):
        if v.state not in ("applies", "merged"):
            continue
        alone = apply_file(new, only(fp, (hunk,)), allow_offset=True)
        mine = [] if isinstance(alone, HunkFailure) else duplicate_definitions(new, alone)
        if not mine and len(dups) > 0 and v.state == "merged":
            mine = [d for d in dups if any(d.split(" in ")[0].encode() in ln for ln in hunk.new if ln not in hunk.old)]
        if not mine:
            continue
        out[k] = dataclasses.replace(v, state="conflict", detail=f"would define {mine[0]} twice")
        at = _find(lines, hunk.new)
        if at is not None:
            block = [b"<<<<<<< the release\n", *hunk.old, b"||||||| the old base\n", *hunk.old, b"=======\n"]
            block += [*hunk.new, b">>>>>>> the patch (defines a name the release already has)\n"]
            lines[at : at + len(hunk.new)] = [ln if ln.endswith(b"\n") else ln + b"\n" for ln in block]
    return b"".join(lines), out


def _find(lines: Sequence[bytes], block: Sequence[bytes]) -> int | None:
    if not block:
        return None
    hits = [i for i in range(len(lines) - len(block) + 1) if tuple(lines[i : i + len(block)]) == tuple(block)]
    return hits[0] if len(hits) == 1 else None


def _whole_file(
    fp: FilePatch, before: bytes | None, after: bytes | None, new: bytes | None, merge: Merge
) -> FileOutcome:
    """A file the patch creates or deletes (or whose mode alone it changes): judged as one unit."""
    what = "creates" if fp.new_file else "deletes" if fp.deleted else "changes the mode of"
    if new == after:
        state, detail, text = "upstream", f"the release already has what the patch {what}", new
    elif new == before:
        state, detail, text = "applies", f"the patch {what} it, as on the old base", after
    elif new is None:
        state, detail, text = "conflict", f"the patch {what} it, but the release has no such file", None
    else:
        text, _ = merge(new, before or b"", after or b"")
        state, detail = "conflict", f"the patch {what} it, but the release's file is another"
    hunks = tuple(HunkVerdict(h.index, h.header, state, detail) for h in fp.hunks)
    gone = new is None and state == "conflict"
    regions = conflict_regions(text) if text is not None else ()
    return FileOutcome(FileVerdict(fp.path, state, hunks, detail, regions, gone=gone), text)


def reject_text(fp: FilePatch, section: bytes, *, release: str, renamed: str) -> bytes:
    """What a reject file (``<path>.rej``) says about a file the release lacks, then the patch's section for it."""
    lines = [
        f"# sgpatch port: {release} has no {fp.path}; the patch's {len(fp.hunks)} hunk(s) for it are below.",
        f"# It seems to have moved to {renamed}." if renamed else "# No file of the release looks like it.",
        "# Move the hunks there, recreate the file, or leave it absent; then delete this file",
        "# and run 'sgpatch port --continue'.",
    ]
    return ("\n".join(lines) + "\n").encode() + section
