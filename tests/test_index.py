"""The index sgpatch writes for a checkout it lays out (``sgpatch.git.index``), held to git: byte for byte the index
git writes for the same files (``read-tree`` of the commit, ``update-index --refresh``), on a real wheel, the real
sdist and names git orders its own way; and the files dated as their commit, so that no entry is racily clean."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from sgpatch.checkout.fetch import create_pypi_checkout
from sgpatch.config import Artifact, Config
from sgpatch.errors import CheckoutError
from sgpatch.git.index import write_index
from sgpatch.source.archive import WHEEL_CHECKOUT_EPOCH
from sgpatch.source.artifacts import fetch_artifact

from .conftest import RELEASES
from .helpers import git


def _held_to_git(co: Path, commit: str) -> None:
    """``co``'s index is the one git writes for its files; nothing is modified; each file is dated as the commit."""
    ours = (co / ".git" / "index").read_bytes()
    assert subprocess.run(["git", "-C", str(co), "diff-files", "--quiet"]).returncode == 0
    assert git(co, "status", "--porcelain", "--untracked-files=all") == ""
    git(co, "read-tree", commit)
    git(co, "update-index", "-q", "--refresh")
    assert (co / ".git" / "index").read_bytes() == ours
    date = int(git(co, "show", "-s", "--format=%ct", commit))
    listed = [p for p in git(co, "ls-files", "-z").split("\0") if p]
    assert listed and {os.stat(co / p).st_mtime_ns for p in listed} == {date * 1_000_000_000}


def test_a_wheel_checkouts_index_is_the_one_git_writes(tmp_path: Path, config: Config) -> None:
    """The real 0.5.12.post1 wheel (2,642 files): the index with its cache tree is git's, the files 1980's."""
    artifact = RELEASES["0.5.12.post1"]
    co = tmp_path / "co"
    commit = create_pypi_checkout(config.stack(None), fetch_artifact(artifact, "0.5.12.post1"), co, artifact)
    _held_to_git(co, commit)
    assert int(git(co, "show", "-s", "--format=%ct", commit)) == WHEEL_CHECKOUT_EPOCH


def test_an_sdist_checkouts_index_is_the_one_git_writes(tmp_path: Path, config: Config) -> None:
    """The pinned 0.5.9 sdist (files deflated here, executables among them): git's index, the files dated as the
    commit (the sdist's newest member)."""
    stack = config.stack(None)
    sdist = next(a for a in stack.artifacts if a.kind == "sdist")
    co = tmp_path / "co"
    commit = create_pypi_checkout(stack, fetch_artifact(sdist, stack.sglang_version), co, sdist)
    assert "100755" in git(co, "ls-files", "-s")
    _held_to_git(co, commit)


NAMES = {  # git orders index entries by their bytes, and cache-tree subdirectories by length first
    "sglang/a.py": b"print(1)\n",
    "sglang/a/b.py": b"",
    "sglang/a-b": b"",
    "sglang/a0": b"\x00binary\xff" * 5000,
    "sglang/A": b"upper\r\nCRLF\r\n",
    "sglang/bb/x.py": b"x = 1\n",
    "sglang/c/x.py": b"x = 1\n",
    "sglang/\u00e9t\u00e9.py": "caf\u00e9 = 1\n".encode(),
    "sglang/sub dir/f": b"".join(hashlib.sha256(b"%d" % k).digest() for k in range(100_000)),  # 3.2 MB
    "/".join(["sglang", *(f"d{k}" for k in range(60)), "deep.py"]): b"deep = True\n",
}


def test_names_git_orders_its_own_way(tmp_path: Path, config: Config) -> None:
    """A wheel of names the index and the cache tree order differently (``a-b`` < ``a.py`` < ``a/b.py`` < ``a0``;
    ``c`` before ``bb``), UTF-8, a space, a file of several chunks and 60 nested folders: git's index."""
    wheel = tmp_path / "sglang-0.5.12.post1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in NAMES.items():
            zf.writestr(name, data)
    artifact = Artifact("wheel", wheel.name, hashlib.sha256(wheel.read_bytes()).hexdigest())
    co = tmp_path / "co"
    commit = create_pypi_checkout(config.stack(None), wheel, co, artifact)
    _held_to_git(co, commit)
    cache_tree = (co / ".git" / "index").read_bytes().split(b"TREE", 1)[1]
    assert 0 <= cache_tree.find(b"c\x001 0\n") < cache_tree.find(b"bb\x001 0\n")  # by length, then bytes


def test_an_index_another_git_is_writing_is_left_alone(tmp_path: Path) -> None:
    """``index.lock`` taken (another git writes the index): refused, naming it; the lock and the index untouched."""
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    (repo / "f").write_text("f\n")
    git(repo, "add", "f")
    index, lock = repo / ".git" / "index", repo / ".git" / "index.lock"
    before = index.read_bytes()
    lock.write_bytes(b"theirs")
    with pytest.raises(CheckoutError, match=r"index\.lock: exists: another git process"):
        write_index(repo / ".git", b"DIRC")
    assert index.read_bytes() == before and lock.read_bytes() == b"theirs"
