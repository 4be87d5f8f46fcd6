"""What state a checkout is in relative to its stack and series (SPEC §6).

``pristine``: HEAD is the pinned base.  ``patched``: HEAD is the base plus
exactly the series, one commit per patch, each with trailers naming the patch
file and its sha256.  Anything else is described precisely and refused.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sgpatch.checkout.journal import recover
from sgpatch.checkout.stop.recovery import moved_aside, put_back_hint
from sgpatch.config import Stack
from sgpatch.errors import CheckoutError
from sgpatch.git.history import first_parent_line
from sgpatch.git.repo import Git
from sgpatch.series.patch import TRAILER_PATCH, TRAILER_SHA, Series

if TYPE_CHECKING:
    from sgpatch.lock import Notify

_TRAILER = re.compile(rf"^({TRAILER_PATCH}|{TRAILER_SHA}):\s*(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class CheckoutState:
    """Where a checkout stands: its phase, the pinned base, the series commits and what is dirty."""

    phase: str  # "pristine", "patched" or "other"
    head: str
    base: str | None
    series_commits: tuple[str, ...]
    dirty: tuple[str, ...]
    problem: str | None
    base_blobs: tuple[tuple[str, str | None], ...] = ()  # the pinned files' blob ids at base, when read
    gitlinks: tuple[tuple[str, str], ...] = ()  # submodules in the index: (path, commit); never entered
    stale: bool = False  # "other" only because patch files changed since they were applied (edited, pulled)
    head_tree: str = ""  # HEAD's tree, read with it
    head_blobs: tuple[tuple[str, str | None], ...] = ()  # the pinned files' blob ids at HEAD, read with it
    base_date: str = ""  # the base's committer date as ``<unix> <tz>`` (``Git.commit_date``), when found

    @property
    def clean(self) -> bool:
        return not self.dirty


def open_checkout(path: Path) -> Git:
    """The git repository at ``path``; CheckoutError if there is none."""
    g = Git(path)
    if not path.is_dir():
        aside = moved_aside(path)
        if aside is not None:
            raise CheckoutError(
                f"{path}: no such checkout: a killed 'port --force' or 'port --abort' left it moved aside to {aside}",
                hint=put_back_hint(path),
            )
        raise CheckoutError(f"{path}: no such checkout", hint="run 'sgpatch fetch' first, or pass --checkout DIR")
    if not g.is_repo():
        raise CheckoutError(f"{path}: not the top of a git work tree", hint="a checkout is a git clone of sglang")
    return g


def base_candidates(stack: Stack) -> tuple[str, ...]:
    return tuple(c for c in (stack.commit, stack.pypi_commit) if c)


def trailers(message: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in _TRAILER.finditer(message)}


def inspect(g: Git, stack: Stack, series: Series, *, notify: Notify | None = None) -> CheckoutState:
    """Find the base under HEAD and compare the commits above it with the series.

    An apply that was killed part-way is finished first (``recover``).
    """
    done = recover(g, notify=notify)
    if done and notify is not None:
        notify(done)
    # HEAD, the commits below it that could be the series, their messages and the pinned files' blobs
    # in each (one of them is the base): one git process.
    line = first_parent_line(g, "HEAD", len(series.patches), [f.path for f in stack.files])
    if not line:
        raise CheckoutError(f"{g.root}: has no commits", hint="run 'sgpatch fetch' to create the checkout")
    head = line[0].oid
    dirty = tuple(g.status())
    gitlinks = tuple(g.gitlinks())
    refuse_gitlinks(g, series, gitlinks)
    bases = base_candidates(stack)
    chain: list[str] = []
    base: str | None = None
    base_blobs: tuple[tuple[str, str | None], ...] = ()
    messages = {c.oid: c.message for c in line}
    base_date = ""
    for entry in line:
        if entry.oid in bases:
            base = entry.oid
            base_blobs = tuple(entry.blobs.items())
            base_date = entry.committed
            break
        chain.append(entry.oid)
    if base is None:
        pins = " or ".join(b[:12] for b in bases)
        return CheckoutState(
            "other",
            head,
            None,
            (),
            dirty,
            f"HEAD {head[:12]} is neither the pinned base ({pins}) nor the base plus the series of {stack.name}",
            gitlinks=gitlinks,
            head_tree=line[0].tree,
            head_blobs=tuple(line[0].blobs.items()),
        )
    chain.reverse()
    problem, stale = _compare_series(messages, chain, series)
    if problem:
        phase = "other"
    else:
        phase, stale = ("pristine" if not chain else "patched"), False
    return CheckoutState(
        phase=phase,
        head=head,
        base=base,
        series_commits=tuple(chain),
        dirty=dirty,
        problem=problem or None,
        base_blobs=base_blobs,
        gitlinks=gitlinks,
        stale=stale,
        head_tree=line[0].tree,
        head_blobs=tuple(line[0].blobs.items()),
        base_date=base_date,
    )


def refuse_gitlinks(g: Git, series: Series, gitlinks: tuple[tuple[str, str], ...]) -> None:
    """CheckoutError (exit 2) when a submodule stands where the series reads or writes: at a file it
    patches or at a directory on the way to one.  Its files are another repository's, which sgpatch never
    enters; a submodule anywhere else is only reported (``verify``'s notes)."""
    if not gitlinks:
        return
    wanted = {p: p for p in series.touched}
    for path in series.touched:
        parts = path.split("/")
        for i in range(1, len(parts)):
            wanted.setdefault("/".join(parts[:i]), path)
    for link, commit in gitlinks:
        if link in wanted:
            raise CheckoutError(
                f"{g.root}: {link} is a submodule (gitlink {commit[:12]}), and the series patches "
                f"{wanted[link]}; sgpatch never enters a submodule",
                hint=f"remove it from the index (git rm --cached {shlex.quote(link)}), or use a fresh checkout",
            )


def _compare_series(messages: dict[str, str], chain: list[str], series: Series) -> tuple[str | None, bool]:
    """What differs between the commits above the base and the series ('' when nothing), and whether the only
    difference is patch files changed since they were applied (the same names, other bytes)."""
    changed: str | None = None
    for i, commit in enumerate(chain):
        found = trailers(messages[commit])
        if i >= len(series.patches):
            return f"commit {commit[:12]} is beyond the series", False
        patch = series.patches[i]
        name, sha = found.get(TRAILER_PATCH), found.get(TRAILER_SHA)
        if name is None:
            return (
                f"commit {commit[:12]} is not an sgpatch commit (no {TRAILER_PATCH} trailer): a foreign commit",
                False,
            )
        if name != patch.name:
            return f"commit {commit[:12]} carries {name}, but position {i + 1} of the series is {patch.name}", False
        if sha != patch.sha256 and changed is None:
            changed = (
                f"commit {commit[:12]} carries {name} at sha256 {str(sha)[:12]}, "
                f"but the patch file is now {patch.sha256[:12]}"
            )
    if changed is not None:
        return changed, True
    if chain and len(chain) != len(series.patches):
        return f"only {len(chain)} of {len(series.patches)} patches are applied", False
    return None, False


def check_base_files(g: Git, stack: Stack, base: str, known: Mapping[str, str | None] | None = None) -> None:
    """The touched files at the base must be the pinned blobs: otherwise it is the wrong source.

    ``known``: blob ids already read at ``base`` (``CheckoutState.base_blobs``); the others are asked."""
    for pinned in stack.files:
        if any(ord(c) < 32 or ord(c) == 127 for c in pinned.path):
            raise CheckoutError(f"{stack.name}: pinned file {pinned.path!r} has a control character in its path")
        found = known[pinned.path] if known and pinned.path in known else g.blob_id(base, pinned.path)
        if found != pinned.pristine:
            raise CheckoutError(
                f"{g.root}: {pinned.path} at base {base[:12]} is blob {found or 'missing'}, "
                f"{stack.name} pins {pinned.pristine[:12]}",
                hint="the checkout is not the pinned source",
            )
