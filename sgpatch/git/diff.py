"""How sgpatch writes a patch and merges a file, whatever the user's git configuration says."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sgpatch.errors import CheckoutError
from sgpatch.git.repo import Git

# How sgpatch writes a patch (``diff_patch``), whatever the user's git config says; the engine's
# differential tests write theirs with the same options.
DIFF_OPTIONS = (
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--no-relative",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--unified=3",
    "--inter-hunk-context=0",
    "--diff-algorithm=myers",
    "--indent-heuristic",
    "--abbrev=7",
)


def diff_patch(g: Git, old: str, new: str, paths: Sequence[str] = ()) -> bytes:
    """``git diff old new`` in the shipped patches' style, whatever the user's git config says.

    ``a/`` ``b/`` prefixes, 3 lines of context, Myers, 7-digit index lines,
    no renames, no color; Python funcname hunk headers come from
    ``.git/info/attributes`` (``write_info_attributes``).
    """
    args = [
        "diff",
        *DIFF_OPTIONS,
        "--end-of-options",
        old,
        new,
        "--",
        *paths,
    ]
    env = {"GIT_CONFIG_GLOBAL": os.devnull}
    return g._run("-c", "diff.suppressBlankEmpty=false", "-c", "core.quotePath=true", *args, env=env).stdout


class MergeScratch:
    """An empty directory of the caller's own that many merges share: each text is written there once (a file's
    hunks are merged against the same two texts), named by the order it came in; no digest is made of it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._names: dict[bytes, str] = {}

    def name(self, data: bytes) -> str:
        """The name ``data`` has in the directory, written there the first time."""
        found = self._names.get(data)
        if found is None:
            found = self._names[data] = str(len(self._names))
            (self.root / found).write_bytes(data)
        return found


def merge_file(
    g: Git,
    current: bytes,
    base: bytes,
    other: bytes,
    labels: tuple[str, str, str],
    *,
    scratch: MergeScratch | None = None,
) -> tuple[bytes, int]:
    """Three-way merge of one file (``git merge-file --diff3``): the result and its number of conflicts.

    ``current`` gains the changes ``base`` -> ``other``; conflicts are marked
    with ``labels`` (current, base, other).  ``scratch``: where many merges write their texts (see
    ``MergeScratch``); without it, a temporary directory of this merge's own.
    """
    if scratch is None:
        with tempfile.TemporaryDirectory(prefix="sgpatch-merge-") as tmp:
            return merge_file(g, current, base, other, labels, scratch=MergeScratch(Path(tmp)))
    names = [scratch.name(data) for data in (current, base, other)]
    label_args = [arg for label in labels for arg in ("-L", label)]
    proc = g._run("merge-file", "-p", "--diff3", *label_args, *names, check=False, cwd=scratch.root)
    if proc.returncode < 0 or proc.returncode > 127:
        detail = proc.stderr.decode("utf-8", "replace").strip()
        raise CheckoutError(f"git merge-file failed: {detail or proc.returncode}")
    return proc.stdout, proc.returncode
