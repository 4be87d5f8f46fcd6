"""``sgpatch status``: where each stack stands, read-only and fast (no download, no lock, nothing recovered).

For each stack of VERSIONS.toml: its default checkout (``.sgpatch/checkouts/STACK``) absent, ``pristine``
(the pinned base), ``patched`` (the base plus exactly the series, as ``apply`` or ``export`` committed it),
``partial`` (the first patches of the series), ``drifted`` (the series commits no longer match the patch
files: a patch file changed, or a commit carries another patch) or ``other`` (not the pinned base, a merge,
another repository: the reason); its uncommitted changes; its unexported commits (commits above the
series that ``export`` would turn into patches, and series commits edited since they were recorded); and
the last wheel ``build`` made of it (still there? of the current series?).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.checkout.state import base_candidates, trailers
from sgpatch.checkout.stop.here import stopped_in
from sgpatch.checkout.stop.recovery import moved_aside, put_back_hint
from sgpatch.config import Config, Stack
from sgpatch.errors import SgpatchError
from sgpatch.git.history import first_parent_line
from sgpatch.git.repo import Git
from sgpatch.results import SCHEMA_VERSION
from sgpatch.series.patch import TRAILER_PATCH, TRAILER_SHA, Series, read_series
from sgpatch.wheel.last import LastBuild, last_build
from sgpatch.wheel.provenance import wheel_version

MAX_ABOVE = 200  # how many commits above the series status looks for the base (export's limit)


@dataclass(frozen=True, slots=True)
class StackStatus:
    stack: str
    default: bool
    checkout: Path
    state: str  # "absent", "pristine", "patched", "partial", "drifted", "other", "error"
    detail: str
    series: int  # patches in the series (-1: the series does not load)
    applied: int  # series commits on the checkout
    uncommitted: tuple[str, ...]  # git status --porcelain entries
    unexported: tuple[str, ...]  # "<sha12> <subject>" of each commit export would write
    wheel_version: str | None  # the version build would give the wheel now
    last_build: LastBuild | None

    @property
    def build_current(self) -> bool | None:
        """Whether the last build is of the current series (None without one)."""
        if self.last_build is None:
            return None
        return self.last_build.version == self.wheel_version

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "default": self.default,
            "checkout": str(self.checkout),
            "state": self.state,
            "detail": self.detail,
            "series": self.series,
            "applied": self.applied,
            "uncommitted": list(self.uncommitted),
            "unexported": list(self.unexported),
            "wheel_version": self.wheel_version,
            "last_build": None if self.last_build is None else self.last_build.as_dict(),
            "build_current": self.build_current,
        }


@dataclass(frozen=True, slots=True)
class StatusReport:
    config: Path
    stacks: tuple[StackStatus, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "config": str(self.config),
            "stacks": [s.as_dict() for s in self.stacks],
        }


def project_status(config: Config) -> StatusReport:
    """One row per stack of ``config``, in the file's order."""
    return StatusReport(config.path, tuple(stack_status(config, s) for s in config.stacks.values()))


def stack_status(config: Config, stack: Stack) -> StackStatus:
    checkout = config.checkout_dir(stack)
    row = StackStatus(
        stack=stack.name,
        default=stack.name == config.default_stack,
        checkout=checkout,
        state="absent",
        detail="no checkout ('sgpatch fetch' makes it)",
        series=-1,
        applied=0,
        uncommitted=(),
        unexported=(),
        wheel_version=None,
        last_build=last_build(config.root, stack.name),
    )
    try:
        series = read_series(stack.series_dir)
    except (SgpatchError, OSError) as exc:
        return dataclasses.replace(row, state="error", detail=getattr(exc, "message", None) or str(exc))
    row = dataclasses.replace(row, series=len(series.patches), wheel_version=wheel_version(stack, series))
    if not checkout.exists() and not checkout.is_symlink():
        aside = moved_aside(checkout)
        if aside is not None:
            why = f"a killed 'port --force' or 'port --abort' left the checkout moved aside to {aside}"
            return dataclasses.replace(row, state="stopped", detail=f"{why}; {put_back_hint(checkout)}")
        return row
    try:
        state, detail, applied, dirty, unexported = _checkout_state(Git(checkout), stack, series)
    except SgpatchError as exc:
        state, detail, applied, dirty, unexported = "other", exc.message, 0, (), ()
    return dataclasses.replace(
        row, state=state, detail=detail, applied=applied, uncommitted=dirty, unexported=unexported
    )


def _checkout_state(g: Git, stack: Stack, series: Series) -> tuple[str, str, int, tuple[str, ...], tuple[str, ...]]:
    if not g.is_repo():
        return "other", "not the top of a git work tree", 0, (), ()
    stopped = stopped_in(g)
    if stopped is not None:
        return "stopped", f"{stopped.what}; {stopped.next_step}", 0, tuple(g.status()), ()
    bases = base_candidates(stack)
    line = first_parent_line(g, "HEAD", len(series.patches) + MAX_ABOVE)
    at = next((i for i, c in enumerate(line) if c.oid in bases), None)
    dirty = tuple(g.status())
    if at is None:
        pins = " or ".join(b[:12] for b in bases)
        if line and len(line[-1].parents) > 1:
            why = f"a merge commit ({line[-1].oid[:12]}) is above the pinned base ({pins})"
        else:
            why = f"the pinned base ({pins}) is not below HEAD"
        return "other", why, 0, dirty, ()
    base = line[at]
    above = list(reversed(line[:at]))  # oldest first
    series_commits = [(c, trailers(c.message)) for c in above if TRAILER_PATCH in trailers(c.message)]
    new = [c for c in above if TRAILER_PATCH not in trailers(c.message)]
    unexported = [f"{c.oid[:12]} {c.message.splitlines()[0] if c.message else ''}".rstrip() for c in new]
    base_date = g.commit_date(base.oid)
    for c, _ in series_commits:  # apply and export commit with the base's date; an amend has its own
        if g.commit_date(c.oid) != base_date:
            unexported.append(f"{c.oid[:12]} {trailers(c.message)[TRAILER_PATCH]} (edited since it was recorded)")
    applied = len(series_commits)
    first_new = next((i for i, c in enumerate(above) if TRAILER_PATCH not in trailers(c.message)), len(above))
    if any(TRAILER_PATCH in trailers(c.message) for c in above[first_new:]):
        return (
            "other",
            "a commit without an sgpatch trailer sits between series commits",
            applied,
            dirty,
            tuple(unexported),
        )
    problem = None
    for i, (c, found) in enumerate(series_commits):
        if i >= len(series.patches):
            problem = f"commit {c.oid[:12]} carries {found[TRAILER_PATCH]}, beyond the series"
            break
        patch = series.patches[i]
        if found[TRAILER_PATCH] != patch.name:
            problem = f"commit {c.oid[:12]} carries {found[TRAILER_PATCH]}; the series' patch {i + 1} is {patch.name}"
            break
        if found.get(TRAILER_SHA) != patch.sha256:
            problem = f"{patch.name} changed since it was applied (commit {c.oid[:12]})"
            break
    if problem is not None:
        state, detail = "drifted", problem
    elif applied == 0:
        state, detail = "pristine", "the pinned base"
    elif applied == len(series.patches):
        state, detail = "patched", f"the pinned base plus the {applied} patch(es) of the series"
    else:
        state, detail = "partial", f"{applied} of {len(series.patches)} patches applied"
    return state, detail, applied, dirty, tuple(unexported)
