"""What each patch of a series is against a set of files: applicable, upstream or conflict (SPEC §6).

One engine (``patchset.apply_patch``) decides; on top of it sgpatch's stricter rules: a
patch may not define a name twice in one scope, and every hunk must land in the scope its
header names (``anchors.check_landing``).  Used by apply, verify's phase detection and export.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sgpatch.series.anchors import check_landing
from sgpatch.series.engine import HunkFailure, apply_modes, apply_patch, duplicate_definitions
from sgpatch.series.patch import Patch, Series

Files = Mapping[str, bytes | None]


@dataclass(frozen=True, slots=True)
class PatchState:
    """One patch's classification: applicable, applied, upstream or conflict."""

    name: str
    state: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "state": self.state, "detail": self.detail}


def classify(
    files: Files, series: Series, modes: Mapping[str, str] | None = None
) -> tuple[list[PatchState], list[dict[str, bytes | None]]]:
    """Classify each patch against ``files`` (and their git ``modes``, if known) in series order.

    Returns the states and, for each patch, the file contents after it (the
    series applied cumulatively; a patch that does not apply leaves them as they were).
    """
    current: dict[str, bytes | None] = dict(files)
    current_modes = dict(modes) if modes is not None else None
    states: list[PatchState] = []
    after: list[dict[str, bytes | None]] = []
    for patch in series.patches:
        state = classify_one(current, patch, current_modes)
        if state.state == "applicable":
            result = apply_patch(current, patch)
            assert not isinstance(result, HunkFailure)
            current.update(result)
            if current_modes is not None:
                current_modes = apply_modes(current_modes, patch)
        states.append(state)
        after.append(dict(current))
    return states, after


def classify_one(files: Files, patch: Patch, modes: Mapping[str, str] | None = None) -> PatchState:
    forward = apply_patch(files, patch, modes=modes)
    if not isinstance(forward, HunkFailure):
        dups = [
            f"{path}: {d}"
            for path, new in forward.items()
            if new is not None
            for d in duplicate_definitions(files.get(path), new)
        ]
        if dups:
            return PatchState(patch.name, "conflict", f"would define {dups[0]} twice (Python keeps only the later one)")
        for fp in patch.files:
            wrong = [r for r in check_landing(patch, fp, forward.get(fp.path)) if not r.ok]
            if wrong:
                return PatchState(patch.name, "conflict", f"{fp.path}: {wrong[0].hunk}: {wrong[0].detail}")
        return PatchState(patch.name, "applicable", "applies at its exact lines")
    reverse = apply_patch(files, patch, reverse=True, modes=modes)
    if not isinstance(reverse, HunkFailure):
        return PatchState(patch.name, "upstream", "its changes are already present")
    return PatchState(patch.name, "conflict", forward.describe())
