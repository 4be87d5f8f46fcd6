"""``Git.commit_files`` writes its commit with one ``git fast-import`` (``sgpatch.git.fastimport``): the commit must
be the one git's plumbing makes of the same files, id for id (blobs by ``hash-object``, a temporary index by
``read-tree`` and ``update-index``, ``write-tree``, ``commit-tree``), on a real release's files, with removals,
modes, links and names fast-import must quote, and whatever the repository's configuration says.  The plumbing
here is the reference, run directly (not through sgpatch)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from sgpatch.git.fastimport import commit_stream, quoted
from sgpatch.git.repo import IDENTITY_EMAIL, IDENTITY_NAME, Git
from tests.helpers import git

DATE = "1739836800 +0100"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(extra)
    return env


def _plumbing(
    repo: Path, parent: str, files: Mapping[str, tuple[str, bytes] | None], message: str, date: str, tmp: Path
) -> str:
    """The reference: the commit on ``parent`` with ``files`` (None: removed), made by git's plumbing."""
    tmp.mkdir(parents=True, exist_ok=True)
    index = {"GIT_INDEX_FILE": str(tmp / "index")}

    def run(*args: str, data: bytes | None = None, **env: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=repo, input=data, capture_output=True, check=True, env=_env(**index, **env)
        )
        return done.stdout.decode().strip()

    run("read-tree", parent)
    removed = [p for p, f in files.items() if f is None]
    if removed:
        run("update-index", "--force-remove", "--", *removed)
    info = b""
    for path, f in files.items():
        if f is not None:
            blob = run("hash-object", "-w", "--no-filters", "--stdin", data=f[1])
            info += f"{f[0]} {blob}\t{path}\0".encode()
    if info:
        run("update-index", "-z", "--index-info", data=info)
    tree = run("write-tree")
    who = {"GIT_AUTHOR_NAME": IDENTITY_NAME, "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL, "GIT_AUTHOR_DATE": date}
    who |= {k.replace("AUTHOR", "COMMITTER"): v for k, v in who.items()}
    return run("commit-tree", tree, "-p", parent, data=message.encode(), **who)


def _commit(g: Git, parent: str, files: Mapping[str, tuple[str, bytes] | None], message: str, date: str) -> str:
    before = {p: None for p in files}
    texts = {p: (f[1] if f is not None else None) for p, f in files.items()}
    modes = {p: f[0] for p, f in files.items() if f is not None}
    # ``before`` says every path was absent: a removal of a path the parent has needs its bytes there
    for p, f in files.items():
        if f is None:
            before[p] = b"present"
    return g.commit_files(parent, texts, before, message, date, modes=modes)


@pytest.fixture
def changes(pristine_checkout: Callable[[], Path]) -> tuple[Path, str, dict[str, tuple[str, bytes] | None]]:
    """A real 0.5.9 checkout, its HEAD, and a commit's worth of changes: 30 of its Python files changed, three
    removed (one the last file of its folder), files added in new folders, an executable, a link, names with a
    space, quotes, a backslash, a line break, a leading quote and letters outside ASCII."""
    co = pristine_checkout()
    head = git(co, "rev-parse", "HEAD")
    listed = git(co, "ls-files").splitlines()
    python = [p for p in listed if p.endswith(".py")]
    files: dict[str, tuple[str, bytes] | None] = {}
    for p in python[:30]:
        files[p] = ("100644", (co / p).read_bytes() + b"# carried\n")
    lonely = next(p for p in listed if sum(q.rsplit("/", 1)[0] == p.rsplit("/", 1)[0] for q in listed) == 1)
    for p in (python[40], python[41], lonely):
        files[p] = None
    odd = ["new/dir/a file.py", 'new/"quoted".py', "new/back\\slash.py", "new/line\nbreak.py", '"leading', "new/é.py"]
    for i, name in enumerate(odd):
        files[name] = ("100644", f"x = {i}\n".encode())
    files["new/tool.sh"] = ("100755", b"#!/bin/sh\necho hi\n")
    files["new/link"] = ("120000", b"../python/sglang/__init__.py")
    files["new/empty.txt"] = ("100644", b"")
    return co, head, files


def test_a_commit_of_real_files_is_the_plumbing_s(
    changes: tuple[Path, str, dict[str, tuple[str, bytes] | None]], tmp_path: Path
) -> None:
    co, head, files = changes
    refs = git(co, "show-ref")
    message = "0002-carried.patch: the release's files, carried\n\nOrigin: vendor\nUpstream-Status: Pending\n"
    made = _commit(Git(co), head, files, message, DATE)
    assert made == _plumbing(co, head, files, message, DATE, tmp_path)
    assert git(co, "show-ref") == refs  # no branch left behind
    assert git(co, "fsck", "--no-dangling", "--no-progress") == ""
    listed = git(co, "ls-tree", "-r", "--name-only", "-z", made).split("\0")
    assert "new/line\nbreak.py" in listed and next(p for p, f in files.items() if f is None) not in listed


def test_each_change_alone_is_the_plumbing_s(
    changes: tuple[Path, str, dict[str, tuple[str, bytes] | None]], tmp_path: Path
) -> None:
    """Nothing changed, one file changed, one removed, one added, a message without a final line break, a message
    in another script: each commit is the reference's."""
    co, head, files = changes
    g = Git(co)
    assert _commit(g, head, {}, "nothing\n", DATE) == _plumbing(co, head, {}, "nothing\n", DATE, tmp_path / "none")
    for k, (path, f) in enumerate(list(files.items())[28:]):
        message = f"one change: {path!r}" if k % 2 else f"eine Änderung, 一つの変更: {path!r}\n"
        one = {path: f}
        assert _commit(g, head, one, message, DATE) == _plumbing(co, head, one, message, DATE, tmp_path / str(k))


def test_a_checkout_that_signs_or_labels_its_commits_gets_the_same_commit(
    changes: tuple[Path, str, dict[str, tuple[str, bytes] | None]], tmp_path: Path
) -> None:
    """A checkout configured to sign every commit and to label messages Latin-1: sgpatch's commit is the one
    a plain checkout gets, by fast-import and by the plumbing (``commit-tree``) alike; nothing is signed."""
    co, head, files = changes
    message = "sgpatch port: stopped for a person\n"
    plain = _plumbing(co, head, files, message, DATE, tmp_path)
    git(co, "config", "commit.gpgSign", "true")
    git(co, "config", "i18n.commitEncoding", "ISO-8859-1")
    g = Git(co)
    assert _commit(g, head, files, message, DATE) == plain
    # a date fast-import cannot read sends commit_files down the plumbing: the same commit again
    assert _commit(g, head, files, message, "@" + DATE) == plain
    assert "gpgsig" not in git(co, "cat-file", "commit", plain)


def test_the_stream_quotes_every_path_and_declines_what_it_cannot_say() -> None:
    assert quoted('a "b"\\c\nd') == b'"a \\"b\\"\\\\c\\nd"'
    assert quoted("plain/path.py") == b'"plain/path.py"'
    ident = f"{IDENTITY_NAME} <{IDENTITY_EMAIL}>"
    assert commit_stream("0" * 40, {"a": ("100644", b"x")}, [], "m", DATE, ident) is not None
    assert commit_stream("0" * 40, {"a": ("100644", b"x")}, [], "m", "2025-02-18T00:00:00", ident) is None
    assert commit_stream("0" * 40, {"sub": ("160000", b"x")}, [], "m", DATE, ident) is None


def test_the_packs_of_many_commits_are_rolled_up_and_nothing_is_lost(pristine_checkout: Callable[[], Path]) -> None:
    # Each commit is a small pack of its own; past MAX_PACKS the small ones are rolled into one (the release's large
    # pack stays), and every commit written, none of them on a branch, is still whole.
    from sgpatch.git.fastimport import MAX_PACKS

    co = pristine_checkout()
    g = Git(co)
    pack_dir = co / ".git" / "objects" / "pack"
    big = max(pack_dir.glob("*.pack"), key=lambda p: p.stat().st_size)
    parent, made, most = git(co, "rev-parse", "HEAD"), [], 0
    for i in range(MAX_PACKS + 12):
        parent = g.commit_files(parent, {f"edits/{i}.py": f"x = {i}\n".encode()}, {}, f"edit {i}\n", DATE)
        made.append(parent)
        most = max(most, len(list(pack_dir.glob("*.pack"))))
    assert most == MAX_PACKS  # it grew to the bound; one pack past it, the small ones were rolled up
    assert len(list(pack_dir.glob("*.pack"))) < MAX_PACKS // 2 and big.exists()
    for i, commit in enumerate(made):
        assert git(co, "show", f"{commit}:edits/{i}.py") == f"x = {i}"
    git(co, "fsck", "--strict", "--no-progress", "--unreachable")  # whole, with nothing reachable from a ref


def test_a_roll_up_git_refuses_leaves_the_packs_and_the_commits(pristine_checkout: Callable[[], Path]) -> None:
    # A repository that keeps its objects precious: git refuses to delete packs, the commits go on, packs stay.
    from sgpatch.git.fastimport import MAX_PACKS

    co = pristine_checkout()
    git(co, "config", "core.repositoryFormatVersion", "1")
    git(co, "config", "extensions.preciousObjects", "true")
    g = Git(co)
    parent = git(co, "rev-parse", "HEAD")
    for i in range(MAX_PACKS + 2):
        parent = g.commit_files(parent, {f"edits/{i}.py": f"x = {i}\n".encode()}, {}, f"edit {i}\n", DATE)
    assert len(list((co / ".git" / "objects" / "pack").glob("*.pack"))) > MAX_PACKS
    assert git(co, "show", f"{parent}:edits/{MAX_PACKS + 1}.py") == f"x = {MAX_PACKS + 1}"
