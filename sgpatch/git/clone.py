"""Clones: of upstream at a tag (the git source), and the shared local clones a build exports the patched
tree into; the checks of a URL and a ref name before git is handed them."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from sgpatch.errors import CheckoutError, EnvironmentFailure
from sgpatch.git.repo import Git
from sgpatch.git.run import NO_SUBMODULE_WORK_TREE

_URL_SCHEMES = ("https", "ssh", "git+ssh", "ssh+git", "file")


def check_git_url(url: str, *, cwd: Path) -> str:
    """Refuse a git URL sgpatch must not hand to git; return it, with a local path made absolute.

    Allowed: ``https://``, ``ssh://`` (and scp-like ``user@host:path``),
    ``file://`` and local paths.  Refused: every other transport (``http``,
    ``git``, ``ext::``, ``fd::``, any ``<helper>::``), option-like strings and
    ssh hosts that git would read as options.
    """
    bad = CheckoutError(
        f"refusing git URL {url!r}: only https, ssh and file transports (or a local path) are allowed",
        hint="e.g. https://github.com/sgl-project/sglang.git",
    )
    if not url or url.startswith("-") or any(ord(c) < 32 or c == "\x7f" for c in url) or "::" in url:
        raise bad
    scheme, sep, rest = url.partition("://")
    if sep:
        if scheme.lower() not in _URL_SCHEMES:
            raise bad
        if scheme.lower() != "file":
            authority = rest.split("/", 1)[0]
            host = authority.rsplit("@", 1)[-1]
            if not host or host.startswith("-") or authority.startswith("-"):
                raise bad
        return url
    head, colon, _ = url.partition(":")
    if colon and "/" not in head:  # scp-like [user@]host:path is ssh
        host = head.rsplit("@", 1)[-1]
        if not host or host.startswith("-") or head.startswith("-"):
            raise bad
        return url
    return str((cwd / url).resolve())


def check_ref_name(name: str, *, what: str = "tag") -> str:
    """Refuse a tag or branch name that is option-like or not a valid git ref name."""
    if not name or name.startswith("-") or any(ord(c) < 32 or c in " ~^:?*[\\\x7f" for c in name):
        raise CheckoutError(f"refusing {what} {name!r}: not a valid git ref name")
    parts = name.split("/")
    if any(not p or p.startswith(".") or p.endswith(".lock") for p in parts) or ".." in name or "@{" in name:
        raise CheckoutError(f"refusing {what} {name!r}: not a valid git ref name")
    if name.endswith("."):
        raise CheckoutError(f"refusing {what} {name!r}: not a valid git ref name")
    return name


def clone(url: str, into: Path, *, tag: str) -> tuple[Git, str]:
    """Clone ``url`` into ``into`` (which must not exist, no files checked out); the commit ``tag`` names.

    CheckoutError if the repository has no such tag.
    """
    url = check_git_url(url, cwd=Path.cwd())  # every caller is checked here, whatever it checked itself
    check_ref_name(tag)
    g = Git(into)
    proc = g._run("clone", "--quiet", "--no-checkout", "--", url, str(into), check=False, cwd=into.parent)
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        msg = detail[-1] if detail else f"exit {proc.returncode}"
        if into.exists():
            shutil.rmtree(into)
        raise EnvironmentFailure(f"git clone {url} failed: {msg}")
    commit = g.rev_parse(f"refs/tags/{tag}^{{commit}}")
    if commit is None:
        raise CheckoutError(f"{url}: has no tag {tag}")
    return g, commit


def clone_shared(source: Path, into: Path, commit: str) -> Git:
    """``commit`` of ``source`` as a fresh work tree in ``into``: a local clone sharing its objects,
    without its tags, index, build output or untracked files.  ``source`` is only read."""
    g = Git(into)
    g._run(
        "clone",
        "--quiet",
        "--shared",
        "--no-checkout",
        "--no-tags",
        "--config",
        "core.autocrlf=false",
        "--",
        str(source.resolve()),
        str(into),
        cwd=into.parent,
    )
    g._run("checkout", "--quiet", "--detach", commit)
    return g


def move_export(into: Path, commit: str) -> bool:
    """Move an export made by :func:`clone_shared` to ``commit`` incrementally (only the files that differ
    are written), remove everything git does not track (build output, ignored and untracked files), and
    prove the result clean: HEAD is ``commit``, no index entry is flagged assume-unchanged or
    skip-worktree (flags that would hide an edit), and ``git status`` (ignored files included) reports
    nothing.  False when the export cannot be proved clean (the caller makes a fresh one)."""
    g = Git(into)
    try:
        g._run("checkout", "--quiet", "--force", "--detach", commit)
        g._run("clean", "-ffdxq")
        flags = g._run("ls-files", "-v", "-z").stdout.split(b"\0")
        if any(entry and not entry.startswith(b"H ") for entry in flags):
            return False
        out = g._run(
            "status",
            "--porcelain=v2",
            "-z",
            "--branch",
            "--untracked-files=all",
            "--ignored=matching",
            NO_SUBMODULE_WORK_TREE,
        ).stdout
    except CheckoutError:
        return False
    entries = [e for e in out.split(b"\0") if e]
    return entries[:1] == [f"# branch.oid {commit}".encode()] and all(e.startswith(b"# ") for e in entries)


def clean_export(into: Path) -> None:
    """Remove what a build left in an export (its ``build/`` and ``*.egg-info``): every untracked file."""
    with contextlib.suppress(CheckoutError):
        Git(into)._run("clean", "-ffdxq")
