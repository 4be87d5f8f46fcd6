"""One patch's fate in the new release, with its files' and hunks' verdicts (what ``port`` reports)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sgpatch.series.hunks import STATES, FileVerdict
from sgpatch.series.obsolete import Finding
from sgpatch.series.upstream import SideBySide

KEPT = ("applies", "merged", "resolved")
DROPPED = ("upstream", "superseded", "obsolete")


@dataclass(frozen=True, slots=True)
class ConflictHunk:
    """Where a conflicting patch failed in one file, and where the merge left markers."""

    path: str
    failure: str  # the first hunk that does not apply, and why
    regions: tuple[tuple[int, int], ...]  # conflict marker ranges in the merged file (1-based, inclusive)

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.path, "failure": self.failure, "regions": [list(r) for r in self.regions]}


@dataclass(frozen=True, slots=True)
class PortedPatch:
    """One patch's fate in the new release."""

    name: str
    state: str  # upstream, superseded, obsolete, applies, merged, resolved, conflict
    detail: str
    proof: str = ""  # for upstream: which test(s) proved it (reverse-apply, ast-equal, verbatim)
    hunks: tuple[str, ...] = ()  # the regenerated hunk headers, for kept patches
    side_by_side: tuple[SideBySide, ...] = ()
    conflicts: tuple[ConflictHunk, ...] = ()
    files: tuple[FileVerdict, ...] = ()  # each file's hunks, judged one by one
    evidence: tuple[Finding, ...] = ()  # its Obsolete-If claims read in the release (all hold: obsolete)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "detail": self.detail,
            "proof": self.proof,
            "hunks": list(self.hunks),
            "side_by_side": [s.as_dict() for s in self.side_by_side],
            "conflicts": [c.as_dict() for c in self.conflicts],
            "counts": counts([self]),
            "files": [f.as_dict() for f in self.files],
            "evidence": [e.as_dict() for e in self.evidence],
        }

    def record(self) -> dict[str, Any]:
        """What the port record keeps of it (``from_record`` reads it back; side by side is for review only)."""
        return {
            "name": self.name,
            "state": self.state,
            "detail": self.detail,
            "proof": self.proof,
            "conflicts": [c.as_dict() for c in self.conflicts],
            "files": [f.as_dict() for f in self.files],
            "evidence": [e.as_dict() for e in self.evidence],
        }

    def recorded(self) -> PortedPatch:
        """The patch as the port record keeps it (``record``, read back by ``from_record``)."""
        return dataclasses.replace(self, hunks=(), side_by_side=())

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> PortedPatch:
        conflicts = tuple(
            ConflictHunk(str(c["file"]), str(c["failure"]), tuple((int(a), int(b)) for a, b in c["regions"]))
            for c in d.get("conflicts", ())
        )
        files = tuple(FileVerdict.from_dict(f) for f in d.get("files", ()))
        evidence = tuple(Finding.from_dict(e) for e in d.get("evidence", ()))
        return cls(
            name=str(d["name"]),
            state=str(d["state"]),
            detail=str(d["detail"]),
            proof=str(d.get("proof", "")),
            conflicts=conflicts,
            files=files,
            evidence=evidence,
        )


def counts(patches: Iterable[PortedPatch]) -> dict[str, dict[str, int]]:
    """How many files and hunks are in each state (every state named, zeros included)."""
    files: Counter[str] = Counter()
    hunks: Counter[str] = Counter()
    for p in patches:
        for f in p.files:
            files[f.state] += 1
            hunks.update(h.state for h in f.hunks)
    return {"files": {s: files[s] for s in STATES}, "hunks": {s: hunks[s] for s in STATES}}
