"""Apply the series strictly and atomically (SPEC §6), after ``classify`` found every patch applicable.

Nothing in the work tree changes until every patch has been classified and
every commit object exists; then one two-way ``read-tree`` and one ref update
move the checkout, behind a journal that ``journal.recover`` finishes if the
process dies in between.  The whole apply holds the checkout's lock, so a
second sgpatch waits for it (or gives up with exit 3).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sgpatch.checkout.journal import lock_checkout, move_checkout
from sgpatch.checkout.state import CheckoutState, check_base_files, inspect, open_checkout
from sgpatch.checkout.stop.here import refuse_stopped, stopped_in
from sgpatch.config import Stack
from sgpatch.errors import CheckoutError, PatchError
from sgpatch.git.batch import read_blobs
from sgpatch.git.repo import Git, object_types
from sgpatch.lock import Notify, pause
from sgpatch.series.classify import Files, PatchState, classify
from sgpatch.series.engine import apply_modes
from sgpatch.series.patch import Patch, Series
from sgpatch.series.paths import path_refusal


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What ``apply`` did: each patch's state and the checkout's HEAD before and after."""

    stack: str
    checkout: Path
    patches: tuple[PatchState, ...]
    old_head: str
    new_head: str
    changed: bool

    @property
    def ok(self) -> bool:
        return all(p.state in ("applicable", "applied") for p in self.patches)


def read_files(g: Git, rev: str, paths: Sequence[str]) -> dict[str, bytes | None]:
    """``path -> bytes`` at ``rev`` (None: not a file there), read by one git process."""
    return read_blobs(g, rev, paths)


def read_modes(g: Git, rev: str, paths: Sequence[str]) -> dict[str, str]:
    """The git modes of those ``paths`` that exist at ``rev``, asked of one git process."""
    return g.modes(rev, paths) if paths else {}


def commit_series(g: Git, base: str, series: Series, after: list[dict[str, bytes | None]]) -> str:
    """Write one commit per patch on top of ``base`` (objects only; no ref moves).

    Each file keeps its mode unless the patch states a new one (new file, mode change).
    """
    date = g.commit_date(base)
    parent = base
    previous: Files = read_files(g, base, series.touched)
    modes = read_modes(g, base, series.touched)
    for number, (patch, files) in enumerate(zip(series.patches, after, strict=True), start=1):
        new_modes = apply_modes(modes, patch)
        parent = g.commit_files(parent, files, previous, patch.commit_message(), date, modes=new_modes, old_modes=modes)
        modes, previous = new_modes, files
        pause(f"apply:commit:{number}")
    return parent


def apply_series(stack: Stack, series: Series, checkout: Path, *, notify: Notify | None = None) -> ApplyResult:
    """Apply the whole series to a pristine checkout, or confirm a patched one (no-op).

    ``notify`` hears what is worth a line on stderr: waiting for another
    sgpatch's lock, finishing an apply that was killed part-way.
    """
    g = open_checkout(checkout)
    with lock_checkout(g, command="apply", notify=notify) as held:
        if held.stale is not None and notify is not None:
            notify(f"the previous {held.stale.describe()} was killed while it held {checkout}; checking what it left")
        pause("apply:locked")
        refuse_stopped(stopped_in(g), f"sgpatch apply {stack.name}")
        state = inspect(g, stack, series, notify=notify)
        _refuse_unsafe(g, state)
        assert state.base is not None
        check_base_files(g, stack, state.base)
        if state.phase == "patched":
            done = tuple(PatchState(p.name, "applied", "already applied") for p in series.patches)
            return ApplyResult(stack.name, checkout, done, state.head, state.head, False)
        check_touched_paths(g, state.base, series)
        base_files = read_files(g, state.base, series.touched)
        states, after = classify(base_files, series, read_modes(g, state.base, series.touched))
        if any(s.state != "applicable" for s in states):
            return ApplyResult(stack.name, checkout, tuple(states), state.head, state.head, False)
        pause("apply:classified")
        new_head = commit_series(g, state.base, series, after)
        move_checkout(g, old=state.head, new=new_head, reason=f"sgpatch apply {stack.name} series {series.id}")
        pause("apply:done")
    return ApplyResult(stack.name, checkout, tuple(states), state.head, new_head, True)


def _owners(patches: Sequence[Patch]) -> dict[str, Patch]:
    owners: dict[str, Patch] = {}
    for patch in patches:
        for fp in patch.files:
            owners.setdefault(fp.path, patch)
    return owners


def _refusal(patch: Patch, path: str, why: str) -> PatchError:
    return PatchError(f"{patch.path}: {path}: {why}", hint="a patch may only change regular files inside the checkout")


def check_tree_paths(g: Git, base: str, patches: Sequence[Patch]) -> dict[str, tuple[str | None, str | None]]:
    """Refuse patches that would write anywhere but a regular file of the tree at ``base``: the path rule
    every patch is held to (``path_refusal``: no control character, no ``..``, no git metadata in any case),
    no leading component that is a file, symlink or submodule, and no target that is a symlink, submodule
    or directory.  What ``apply`` and ``export`` check alike, so export never writes a patch apply refuses.
    Returns each path's object type and mode at ``base`` (None: absent)."""
    owners = _owners(patches)
    for path, patch in owners.items():
        problem = path_refusal(path)
        if problem is not None:
            raise _refusal(patch, path, problem)
    paths = list(owners)
    prefixes = sorted({"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)})
    specs = prefixes + paths
    types = dict(zip(specs, object_types(g, [f"{base}:{s}" for s in specs]), strict=True))
    modes = g.modes(base, paths)
    for path, patch in owners.items():
        parts = path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            kind = types.get(prefix)
            if kind is None:
                break
            if kind != "tree":
                why = f"{prefix} is a file, symlink or submodule in the checkout, not a directory"
                raise _refusal(patch, path, why)
        kind, mode = types.get(path), modes.get(path)
        if kind == "tree":
            raise _refusal(patch, path, "is a directory in the checkout")
        if mode is not None and mode not in ("100644", "100755"):
            what = "a symlink" if mode == "120000" else "a submodule" if mode == "160000" else f"mode {mode}"
            raise _refusal(patch, path, f"is {what} in the checkout")
    return {path: (types.get(path), modes.get(path)) for path in owners}


def check_touched_paths(g: Git, base: str, series: Series) -> None:
    """Refuse a series that would write anywhere but a regular file inside the checkout.

    Checked against the base commit (``check_tree_paths``) and the work tree, before anything is
    written: nothing on the way may be a symlink on disk (tracked or not), and a file the series
    creates may not exist yet (an ignored or untracked file would be overwritten).
    """
    at_base = check_tree_paths(g, base, series.patches)
    for path, patch in _owners(series.patches).items():
        local = g.root
        for part in path.split("/"):
            local = local / part
            if local.is_symlink():
                rel, target = local.relative_to(g.root), local.readlink()
                raise _refusal(
                    patch, path, f"{rel} is a symlink in the work tree (to {target}); refusing to write through it"
                )
            if not local.exists():
                break
        if at_base[path] == (None, None) and (g.root / path).exists():
            raise CheckoutError(
                f"{g.root}: {path} exists but is not tracked (ignored or untracked); {patch.name} would overwrite it",
                hint="move it away; sgpatch never discards your files",
            )


def _refuse_unsafe(g: Git, state: CheckoutState) -> None:
    if state.dirty:
        shown = ", ".join(e[3:] for e in state.dirty[:3]) + (" …" if len(state.dirty) > 3 else "")
        raise CheckoutError(
            f"{g.root}: the work tree has uncommitted changes ({len(state.dirty)}: {shown})",
            hint="commit or stash them; sgpatch never discards your changes",
        )
    if state.phase == "other" and state.stale and state.base:
        raise CheckoutError(
            f"{g.root}: the series changed since this checkout was patched: {state.problem}",
            hint=(
                "to apply the series as it is now (the checkout's series commits are dropped: export first "
                f"anything you changed in them): git -C {shlex.quote(str(g.root))} reset --hard "
                f"{state.base[:12]} && sgpatch apply"
            ),
        )
    if state.phase == "other":
        raise CheckoutError(
            f"{g.root}: {state.problem}", hint="sgpatch acts only on a pristine or exactly patched checkout"
        )
