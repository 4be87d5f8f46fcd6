"""``batch.read_blobs_known`` against ``batch.read_blobs``, which reads every file: the same answer, whatever the
texts known are (the same bytes, other bytes, absent, a folder, a link, a path not known at all)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sgpatch.git.batch import read_blobs, read_blobs_known
from sgpatch.git.objectid import blob_id, object_id
from sgpatch.git.repo import Git

from .helpers import git


def test_the_same_answer_as_reading_every_file(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    files = {"pkg/a.py": b"a = 1\n", "pkg/b.py": b"b = 2\n", "pkg/empty.py": b"", "pkg/sub/c.py": b"c\n"}
    for path, data in files.items():
        (repo / path).write_bytes(data)
    (repo / "pkg" / "link").symlink_to("a.py")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    paths = ["pkg/a.py", "pkg/b.py", "pkg/empty.py", "pkg/sub", "pkg/link", "pkg/gone.py", "pkg/unknown.py"]
    known: dict[str, bytes | None] = {
        "pkg/a.py": b"a = 1\n",  # the same bytes
        "pkg/b.py": b"b = 3\n",  # other bytes
        "pkg/empty.py": None,  # said absent, but there (empty)
        "pkg/sub": None,  # a folder: not a file
        "pkg/link": b"a.py",  # a link's blob is its target
        "pkg/gone.py": b"was here\n",  # said present, but absent
    }
    g = Git(repo)
    assert read_blobs_known(g, "HEAD", paths, known) == read_blobs(g, "HEAD", paths)
    assert read_blobs_known(g, "HEAD", paths, {}) == read_blobs(g, "HEAD", paths)
    assert read_blobs_known(g, "HEAD", [], known) == {}


def test_object_ids_made_without_git_are_gits(tmp_path: Path) -> None:
    """``git.objectid``: a blob's id as ``git hash-object`` prints it, SHA-1 and (``like`` a 64-digit id) SHA-256,
    and a tree's as git names the tree it wrote."""
    texts = [b"", b"x = 1\n", b"\0\xff binary\r\n", bytes(range(256)) * 4096]
    for fmt, like in (("sha1", None), ("sha256", "0" * 64)):
        repo = tmp_path / fmt
        subprocess.run(["git", "init", "-q", f"--object-format={fmt}", str(repo)], check=True)
        for data in texts:
            made = subprocess.run(
                ["git", "-C", str(repo), "hash-object", "--stdin"], input=data, capture_output=True, check=True
            )
            assert blob_id(data, like=like) == made.stdout.decode().strip()
    repo = tmp_path / "sha1"
    blob = (
        subprocess.run(
            ["git", "-C", str(repo), "hash-object", "-w", "--stdin"], input=b"a\n", capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    listing = f"100644 blob {blob}\ta.py\n".encode()
    tree = (
        subprocess.run(["git", "-C", str(repo), "mktree"], input=listing, capture_output=True, check=True)
        .stdout.decode()
        .strip()
    )
    body = subprocess.run(["git", "-C", str(repo), "cat-file", "tree", tree], capture_output=True, check=True).stdout
    assert object_id(b"tree", body).hex() == tree
