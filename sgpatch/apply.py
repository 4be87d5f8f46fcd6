"""Classify every patch, then apply the series strictly and atomically (SPEC §6).

Nothing in the work tree changes until every patch has been classified and
every commit object exists; then one two-way ``read-tree`` and one ref update
move the checkout, behind a journal that ``state.recover`` finishes if the
process dies in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sgpatch.anchors import check_landing
from sgpatch.checkout import CommitSpec, Git
from sgpatch.config import Stack
from sgpatch.errors import CheckoutError
from sgpatch.patchset import HunkFailure, Patch, Series, apply_patch, duplicate_definitions
from sgpatch.state import CheckoutState, check_base_files, clear_journal, inspect, open_checkout, write_journal

Files = Mapping[str, bytes | None]


@dataclass(frozen=True, slots=True)
class PatchState:
    """One patch's classification: applicable, applied, upstream or conflict."""

    name: str
    state: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "state": self.state, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class ApplyResult:
    stack: str
    checkout: Path
    patches: tuple[PatchState, ...]
    old_head: str
    new_head: str
    changed: bool

    @property
    def ok(self) -> bool:
        return all(p.state in ("applicable", "applied") for p in self.patches)


def classify(files: Files, series: Series) -> tuple[list[PatchState], list[dict[str, bytes | None]]]:
    """Classify each patch against ``files`` in series order.

    Returns the states and, for each patch, the file contents after it (the
    series applied cumulatively; a patch that does not apply leaves them as they were).
    """
    current: dict[str, bytes | None] = dict(files)
    states: list[PatchState] = []
    after: list[dict[str, bytes | None]] = []
    for patch in series.patches:
        state = classify_one(current, patch)
        if state.state == "applicable":
            result = apply_patch(current, patch)
            assert not isinstance(result, HunkFailure)
            current.update(result)
        states.append(state)
        after.append(dict(current))
    return states, after


def classify_one(files: Files, patch: Patch) -> PatchState:
    forward = apply_patch(files, patch)
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
    reverse = apply_patch(files, patch, reverse=True)
    if not isinstance(reverse, HunkFailure):
        return PatchState(patch.name, "upstream", "its changes are already present")
    return PatchState(patch.name, "conflict", forward.describe())


def read_files(g: Git, rev: str, paths: tuple[str, ...]) -> dict[str, bytes | None]:
    return {p: g.read_blob(rev, p) for p in paths}


def _mode(g: Git, rev: str, path: str) -> str:
    return g.file_mode(rev, path) or "100644"


def commit_series(g: Git, base: str, series: Series, after: list[dict[str, bytes | None]]) -> str:
    """Write one commit per patch on top of ``base`` (objects only; no ref moves)."""
    date = g.commit_date(base)
    parent = base
    tree = g.tree_of(base)
    previous: Files = read_files(g, base, series.touched)
    for patch, files in zip(series.patches, after, strict=True):
        changes: dict[str, tuple[str, str]] = {}
        removed: list[str] = []
        for path, data in files.items():
            if data == previous.get(path):
                continue
            if data is None:
                removed.append(path)
            else:
                changes[path] = (_mode(g, parent, path), g.hash_blob(data))
        if removed:
            with g.temp_index(tree) as env:
                g.run("update-index", "--force-remove", "--", *removed, env=env)
                tree = g.out("write-tree", env=env)
        tree = g.tree_with(tree, changes)
        parent = g.commit_tree(CommitSpec(tree, (parent,), patch.commit_message(), date))
        previous = files
    return parent


def apply_series(stack: Stack, series: Series, checkout: Path) -> ApplyResult:
    """Apply the whole series to a pristine checkout, or confirm a patched one (no-op)."""
    g = open_checkout(checkout)
    state = inspect(g, stack, series)
    _refuse_unsafe(g, state)
    assert state.base is not None
    check_base_files(g, stack, state.base)
    if state.phase == "patched":
        done = tuple(PatchState(p.name, "applied", "already applied") for p in series.patches)
        return ApplyResult(stack.name, checkout, done, state.head, state.head, False)
    base_files = read_files(g, state.base, series.touched)
    states, after = classify(base_files, series)
    if any(s.state != "applicable" for s in states):
        return ApplyResult(stack.name, checkout, tuple(states), state.head, state.head, False)
    new_head = commit_series(g, state.base, series, after)
    write_journal(g, old=state.head, new=new_head)
    g.move_to(new_head, old=state.head, reason=f"sgpatch apply {stack.name} series {series.id}")
    clear_journal(g)
    return ApplyResult(stack.name, checkout, tuple(states), state.head, new_head, True)


def _refuse_unsafe(g: Git, state: CheckoutState) -> None:
    if state.dirty:
        shown = ", ".join(e[3:] for e in state.dirty[:3]) + (" …" if len(state.dirty) > 3 else "")
        raise CheckoutError(
            f"{g.root}: the work tree has uncommitted changes ({len(state.dirty)}: {shown})",
            hint="commit or stash them; sgpatch never discards your changes",
        )
    if state.phase == "other":
        raise CheckoutError(
            f"{g.root}: {state.problem}", hint="sgpatch acts only on a pristine or exactly patched checkout"
        )
