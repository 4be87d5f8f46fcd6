"""A port's staging checkout moved to its stop by ``worktree.write_changes``, held to git's own move of the same
files (``read-tree -m -u``, the index read back to where it was, refreshed): the same files, bytes and modes, the
same status, diff and index entries; and the changes it does not do (a file removed, a link, a file where a folder
goes) left to git, with nothing written."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from sgpatch.git.repo import Git
from sgpatch.git.worktree import write_changes

from .helpers import git

BASE = {
    "python/sglang/srt/models/deepseek_v2.py": b"class DeepseekV2:\n    pass\n" * 50,
    "python/sglang/srt/models/kimi_k25.py": b"class KimiK25:\n    pass\n",
    "python/sglang/srt/utils.py": b"def f():\n    return 1\n",
    "python/sglang/run.sh": b"#!/bin/sh\necho run\n",
    "python/sglang/__init__.py": b"",
}


def _commit(repo: Path, files: dict[str, bytes | None], modes: dict[str, int], message: str) -> str:
    for path, data in sorted(files.items(), key=lambda kv: kv[1] is not None):  # removals first
        where = repo / path
        if data is None:
            where.unlink()
            continue
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(data)
        where.chmod(modes.get(path, 0o644))
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def _repo(tmp_path: Path, stop: dict[str, bytes | None], modes: dict[str, int]) -> tuple[Path, str, str]:
    """A checkout at its base commit (clean, refreshed), and the stop commit on top of it (objects only)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    base = _commit(repo, dict(BASE), {"python/sglang/run.sh": 0o755}, "base")
    new = _commit(repo, stop, modes, "stop")
    git(repo, "reset", "-q", "--hard", base)
    git(repo, "update-index", "-q", "--refresh")
    return repo, base, new


def _state(repo: Path) -> tuple[object, ...]:
    files = sorted(
        (str(p.relative_to(repo)), p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    )
    status = git(repo, "status", "--porcelain", "--untracked-files=all")
    return files, status, git(repo, "diff"), git(repo, "ls-files", "-s"), git(repo, "rev-parse", "HEAD")


STOP = {  # a conflict left for a person: files changed, one made executable, new files in new folders
    "python/sglang/srt/models/deepseek_v2.py": b"<<<<<<< sglang\nclass DeepseekV2:\n=======\n>>>>>>> patch\n",
    "python/sglang/srt/utils.py": b"def f():\n    return 2\n",
    "python/sglang/srt/models/kimi_k25.py.rej": b"--- a/kimi_k25.py\n+++ b/kimi_k25.py\n",
    "python/sglang/srt/speculative/new/spec_training_info.py": b"x = 1\n",
    "python/sglang/tool.sh": b"#!/bin/sh\n",
}


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_the_files_git_would_write_and_nothing_else(tmp_path: Path, umask: int) -> None:
    """Changed files, a mode change, new files (one executable) in new folders: what git's move leaves, with
    the texts given (one of them wrong: read from git instead) and under two umasks."""
    modes = {"python/sglang/srt/utils.py": 0o755, "python/sglang/tool.sh": 0o755}
    repo, base, stop = _repo(tmp_path, dict(STOP), modes)
    by_git = tmp_path / "by-git"
    shutil.copytree(repo, by_git, symlinks=True)
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=by_git)  # a copy's stat data are new
    known: dict[str, bytes | None] = dict(STOP)
    known["python/sglang/srt/utils.py"] = b"not what the stop holds\n"  # taken from git, not from here
    old = os.umask(umask)
    try:
        assert write_changes(Git(repo), base, stop, known)
        for args in (("read-tree", "-m", "-u", base, stop), ("read-tree", "-m", base)):
            moved = subprocess.run(["git", *args], cwd=by_git, capture_output=True, text=True)
            assert moved.returncode == 0, moved.stderr
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=by_git)
    finally:
        os.umask(old)
    assert _state(repo) == _state(by_git)
    for path in STOP:  # the files are the stop's; the index and HEAD the base's
        shown = subprocess.run(["git", "show", f"{stop}:{path}"], cwd=repo, capture_output=True, check=True).stdout
        assert (repo / path).read_bytes() == shown
    assert git(repo, "rev-parse", "HEAD") == base and git(repo, "diff", "--cached", "--stat") == ""


@pytest.mark.parametrize(
    "change",
    [
        {"python/sglang/srt/utils.py": None},  # removed
        {"python/sglang/__init__.py/inner.py": b"x\n", "python/sglang/__init__.py": None},  # a folder for a file
    ],
)
def test_what_it_does_not_do_it_leaves_to_git(tmp_path: Path, change: dict[str, bytes | None]) -> None:
    """A file removed, a folder where a file was: False, and nothing written (the journalled move does it)."""
    repo, base, stop = _repo(tmp_path, {**STOP, **change}, {})
    before = _state(repo)
    assert not write_changes(Git(repo), base, stop, dict(STOP))
    assert _state(repo) == before


def test_a_link_in_the_stop_is_left_to_git(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    base = _commit(repo, dict(BASE), {}, "base")
    (repo / "python/link").symlink_to("sglang")
    stop = _commit(repo, {"python/sglang/srt/utils.py": b"changed\n"}, {}, "stop")
    git(repo, "reset", "-q", "--hard", base)
    before = _state(repo)
    assert not write_changes(Git(repo), base, stop, {})
    assert _state(repo) == before
