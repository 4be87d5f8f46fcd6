"""How sgpatch writes a patch and merges a file, whatever the user's git configuration says."""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict
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
    """The texts many merges share (a file's hunks are merged against the same two texts), each written once and
    named by the order it came in; no digest is made of it.  On Linux each is a memory file (``memfd_create``),
    handed to git as ``/proc/self/fd/N``: no file is made on disk, where creating hundreds of them costs more than
    the merges (a file system that searches past recently freed inodes).  Elsewhere, or when no memory file can be
    had, a file in ``root`` (an empty directory of the caller's own).  At most ``MAX_OPEN`` memory files are kept
    open, the least recently used closed first (written again if asked for again).  ``close`` lets them go."""

    MAX_OPEN = 128  # descriptors: a port merges a file's texts, then the next file's

    def __init__(self, root: Path, *, memory: bool = True) -> None:
        self.root = root
        self._names: dict[bytes, str] = {}  # texts written in ``root``
        self._fds: OrderedDict[bytes, int] = OrderedDict()  # texts held as memory files, the latest used last
        self._memory = memory and _HAS_MEMFD

    def name(self, data: bytes) -> tuple[str, int | None]:
        """The path git reads ``data`` at (relative to ``root``), written the first time, and the memory file's
        descriptor git must be handed (``pass_fds``; None for a file in ``root``)."""
        fd = self._fds.get(data)
        if fd is None and data not in self._names and self._memory:
            fd = self._memory_file(data)
            if fd is not None:
                self._fds[data] = fd
                if len(self._fds) > self.MAX_OPEN:  # never one of a merge's three: each was used just now
                    os.close(self._fds.popitem(last=False)[1])
        if fd is not None:
            self._fds.move_to_end(data)
            return f"/proc/self/fd/{fd}", fd
        found = self._names.get(data)
        if found is None:
            found = self._names[data] = str(len(self._names))
            (self.root / found).write_bytes(data)
        return found, None

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])

    def _memory_file(self, data: bytes) -> int | None:
        try:
            fd = os.memfd_create("sgpatch-merge", os.MFD_CLOEXEC)
        except OSError:  # none to be had (descriptors, memory): a file in ``root``
            self._memory = False
            return None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            os.close(fd)
            self._memory = False
            return None
        return fd


_HAS_MEMFD = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


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
            texts = MergeScratch(Path(tmp))
            try:
                return merge_file(g, current, base, other, labels, scratch=texts)
            finally:
                texts.close()
    named = [scratch.name(data) for data in (current, base, other)]
    label_args = [arg for label in labels for arg in ("-L", label)]
    args = ("merge-file", "-p", "--diff3", *label_args, *(name for name, _ in named))
    proc = g._run(*args, check=False, cwd=scratch.root, pass_fds=tuple(fd for _, fd in named if fd is not None))
    if proc.returncode < 0 or proc.returncode > 127:
        detail = proc.stderr.decode("utf-8", "replace").strip()
        raise CheckoutError(f"git merge-file failed: {detail or proc.returncode}")
    return proc.stdout, proc.returncode
