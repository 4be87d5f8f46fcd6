"""The index and work tree beside HEAD, as a port that stopped for a person reads and sets them."""

from __future__ import annotations

from sgpatch.git.repo import Git


def reset_index(g: Git, rev: str) -> None:
    """Load ``rev``'s tree into the repository's own index, refreshed; HEAD and files stay (guarded).

    A one-tree ``read-tree -m`` keeps the file stats of each entry whose content ``rev`` has too, so the refresh
    reads again only the files that changed (on an SGLang checkout, a plain ``read-tree`` left all 2,650 files
    to be read and hashed again: 0.15 s).  An index that cannot be merged from (unmerged entries) is read whole."""
    if g._run("read-tree", "-m", "--end-of-options", rev, guarded=True, check=False).returncode != 0:
        g._run("read-tree", "--end-of-options", rev, guarded=True)
    g.refresh_index()


def worktree_changes(g: Git, rev: str) -> list[str]:
    """What ``git add -A`` would change against ``rev``: tracked paths whose work-tree file differs (or is
    gone) and untracked files, ignored ones left out; sorted, no renames."""
    args = ("diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", "--end-of-options")
    tracked = g._run(*args, rev, "--").stdout
    untracked = g._run("ls-files", "-z", "--others", "--exclude-standard").stdout
    return sorted({p.decode("utf-8", "surrogateescape") for p in (tracked + b"\0" + untracked).split(b"\0") if p})


def delete_ref(g: Git, ref: str) -> None:
    g._run("update-ref", "-d", "--end-of-options", ref)


def tracked_changes(g: Git, rev: str) -> list[str]:
    """What ``git commit -a`` would take against ``rev``: tracked paths whose work-tree file or index entry
    differs from ``rev`` (new files only once ``git add`` staged them); sorted, no renames."""
    args = ("--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", "--end-of-options", rev, "--")
    found = g._run("diff", *args).stdout + b"\0" + g._run("diff", "--cached", *args).stdout
    return sorted({p.decode("utf-8", "surrogateescape") for p in found.split(b"\0") if p})


def untracked_files(g: Git) -> list[str]:
    """Untracked files, ignored ones left out; sorted."""
    found = g._run("ls-files", "-z", "--others", "--exclude-standard").stdout
    return sorted(p.decode("utf-8", "surrogateescape") for p in found.split(b"\0") if p)
