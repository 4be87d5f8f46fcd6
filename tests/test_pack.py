"""The pack sgpatch writes for a laid-out checkout (``sgpatch.git.pack``), held to git: the objects, the trees, the
commit and the index are what git makes of the same files; a wheel's deflated members are taken as they are stored
only when they are exactly the member's bytes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest

from sgpatch.checkout.fetch import create_pypi_checkout
from sgpatch.config import Artifact, Config
from sgpatch.errors import ArchiveError, SourceError
from sgpatch.git.pack import blob_pack
from sgpatch.git.repo import Git
from sgpatch.source.archive import open_archive
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.wheel.writer import RawMember, write_raw_zip

from .conftest import RELEASES
from .helpers import git

IDENT = {"NAME": "sgpatch", "EMAIL": "sgpatch@localhost"}


def _by_git(files: Path, tree: str, message: bytes, date: str) -> tuple[str, str]:
    """The tree and commit git itself makes of the files under ``files`` (``add -A``, ``write-tree``, ``commit-tree``
    by sgpatch's identity at ``date``)."""
    git(files, "init", "-q")
    git(files, "-c", "core.filemode=true", "-c", "core.autocrlf=false", "add", "-A")
    made = git(files, "write-tree")
    env = {
        **os.environ,
        **{f"GIT_{r}_{k}": v for r in ("AUTHOR", "COMMITTER") for k, v in {**IDENT, "DATE": date}.items()},
    }
    commit = (
        subprocess.run(
            ["git", "-C", str(files), "commit-tree", made], input=message, env=env, capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    assert made == tree
    return made, commit


def _same_index_as_git(repo: Path, *options: str) -> None:
    """The pack's index is the one ``git index-pack`` writes for the same pack, byte for byte."""
    (pack,) = (repo / ".git" / "objects" / "pack").glob("*.pack")
    theirs = repo.parent / f"{repo.name}-by-git.idx"
    git(repo, "index-pack", *options, "-o", str(theirs), str(pack))
    assert pack.with_suffix(".idx").read_bytes() == theirs.read_bytes()
    git(repo, "verify-pack", str(pack.with_suffix(".idx")))
    assert pack.name == f"pack-{pack.read_bytes()[-20:].hex()}.pack"  # named by its checksum, as git names one


def test_a_wheel_checkout_is_the_commit_git_makes_of_its_files(tmp_path: Path, config: Config) -> None:
    """A real wheel (0.5.12.post1: 2,600 files, every one deflated) laid out with its members' deflated bytes in the
    pack as stored: git reads every object (``fsck --strict``), the index and the stat data are fresh, the index
    file is git's own, and git, given the laid-out files, makes the very same tree and commit."""
    artifact = RELEASES["0.5.12.post1"]
    co = tmp_path / "co"
    commit = create_pypi_checkout(config.stack(None), fetch_artifact(artifact, "0.5.12.post1"), co, artifact)
    counted = dict(line.split(": ") for line in git(co, "count-objects", "-v").splitlines())
    assert counted["count"] == "0" and counted["packs"] == "1"
    git(co, "fsck", "--strict", "--no-dangling")
    assert subprocess.run(["git", "-C", str(co), "diff-files", "--quiet"]).returncode == 0
    _same_index_as_git(co)
    raw = subprocess.run(["git", "-C", str(co), "cat-file", "commit", commit], capture_output=True, check=True).stdout
    head, _, message = raw.partition(b"\n\n")
    date = next(ln for ln in head.split(b"\n") if ln.startswith(b"committer ")).decode().rsplit("> ", 1)[1]
    shutil.copytree(co / "python", tmp_path / "other" / "python")
    assert _by_git(tmp_path / "other", git(co, "rev-parse", f"{commit}^{{tree}}"), message, date)[1] == commit
    # The pack holds the members' own deflate streams: each object's packed size is its stored size and 6 bytes.
    with open_archive(fetch_artifact(artifact, "0.5.12.post1"), "wheel") as archive:
        kept = [e.name for e in archive.entries if (co / "python" / e.name).is_file()][:50]
        stored = {name: archive.deflated(name) for name in kept}
        for name, found in stored.items():
            assert found is not None
            data, pieces = found
            assert b"".join(pieces) == b"".join(archive.chunks(name))  # the same bytes zipfile reads
            oid = git(co, "rev-parse", f"{commit}:python/{name}")
            listed = git(co, "verify-pack", "-v", str(next((co / ".git/objects/pack").glob("*.idx"))))
            line = next(ln for ln in listed.splitlines() if ln.startswith(oid))
            assert int(line.split()[3]) == len(data) + 6 + len(_header(archive.entry(name).size))  # type: ignore[union-attr]


def _header(size: int) -> bytes:
    out, byte, size = bytearray(), (3 << 4) | (size & 15), size >> 4
    while size:
        out.append(byte | 0x80)
        byte, size = size & 0x7F, size >> 7
    out.append(byte)
    return bytes(out)


TRICKY = {  # names git sorts with a folder's as if it ended in "/": a.py < a/ < a0, a-b < a.b < a/
    "x/a.py": b"print(1)\n",
    "x/a/b.py": b"",
    "x/a-b": b"",  # the same bytes as another file: one object
    "x/a0": b"\x00binary\xff" * 5000,
    "x/A": b"upper\r\nCRLF\r\n",
    "x/\u00e9t\u00e9.py": "caf\u00e9 = 1\n".encode(),
    "x/sub dir/f": b"x" * (3 << 20),  # several chunks
    "run.sh": b"#!/bin/sh\n",
    "z": b"no final newline",
}


@pytest.mark.parametrize("how", ["deflated", "raw", "level0", "flushed", "mixed"])
def test_blobs_trees_and_commit_are_what_git_makes(tmp_path: Path, how: str) -> None:
    """Blobs given with their deflate stream (several kinds of streams: level 9, stored blocks, a stream cut by
    full flushes) or deflated here, files of the same bytes, names git sorts in its own way, an executable, a
    message in UTF-8: the ids are git's, each object reads back whole, the index is git's own (also with the
    64-bit offsets git writes past a limit), and the tree and commit are the ones git makes of the files."""
    g = Git(tmp_path / "repo")
    g.init(branch="main")
    files = tmp_path / "files"
    modes = []
    with blob_pack(g, limit=12) as pack:  # 12: the first object's offset, the last in 32 bits
        for n, (path, data) in enumerate(TRICKY.items()):
            kind = how if how != "mixed" else ("deflated", "raw")[n % 2]
            pack.begin(len(data), _deflate(data, kind))
            for k in range(0, max(len(data), 1), 1 << 20):
                pack.write(data[k : k + (1 << 20)])
            pack.end()
            executable = path.endswith(".sh")
            modes.append(("100755" if executable else "100644", path))
            (files / path).parent.mkdir(parents=True, exist_ok=True)
            (files / path).write_bytes(data)
            (files / path).chmod(0o755 if executable else 0o644)
        message = "sgpatch: caf\u00e9 \u2014 a message\n\nwith a body\n"
        pack.commit(modes, message, "1700000000 +0000")
    assert pack.ids == [g.hash_blob(data) for data in TRICKY.values()]
    for oid, data in zip(pack.ids, TRICKY.values(), strict=True):
        assert subprocess.run(["git", "-C", str(g.root), "cat-file", "blob", oid], capture_output=True).stdout == data
    git(g.root, "fsck", "--strict", "--no-dangling", pack.commit_id or "")
    _same_index_as_git(g.root, "--index-version=2,12")
    tree = git(g.root, "rev-parse", f"{pack.commit_id}^{{tree}}")
    assert _by_git(files, tree, message.encode(), "1700000000 +0000")[1] == pack.commit_id
    distinct = len(set(TRICKY.values()))
    assert f"in-pack: {distinct + 4 + 1}" in git(g.root, "count-objects", "-v")  # blobs, 4 trees, the commit


def _deflate(data: bytes, how: str) -> bytes | None:
    if how == "raw":
        return None
    if how == "flushed":
        packer = zlib.compressobj(6, zlib.DEFLATED, -15)
        half = len(data) // 2
        return (
            packer.compress(data[:half])
            + packer.flush(zlib.Z_FULL_FLUSH)
            + packer.compress(data[half:])
            + packer.flush()
        )
    packer = zlib.compressobj(0 if how == "level0" else 9, zlib.DEFLATED, -15)
    return packer.compress(data) + packer.flush()


def _wheel(
    path: Path, members: dict[str, bytes], *, tails: dict[str, bytes] | None = None, method: int = zipfile.ZIP_DEFLATED
) -> Artifact:
    raw = []
    for name, data in members.items():
        packer = zlib.compressobj(6, zlib.DEFLATED, -15)
        tail = (tails or {}).get(name, b"")
        stored = packer.compress(data) + packer.flush() + tail if method == zipfile.ZIP_DEFLATED else data
        raw.append(RawMember(name, method, zlib.crc32(data), len(data), stored, (2024, 1, 1, 0, 0, 0), 0o100644 << 16))
    write_raw_zip(path, raw)
    return Artifact("wheel", path.name, hashlib.sha256(path.read_bytes()).hexdigest())


MEMBERS = {"sglang/__init__.py": b"", "sglang/srt/a.py": b"x = 1\n" * 400, "sglang/srt/b.py": b"y = 2\n"}


def test_a_deflate_stream_with_bytes_after_its_end_is_refused(tmp_path: Path, config: Config) -> None:
    """zipfile reads a member whose deflate stream ends before its stored bytes do (the rest is never inflated,
    the CRC matches); git would read those bytes as the stream's checksum.  The layout refuses the wheel, names the
    member, and leaves no checkout; the same wheel without the tail lays out."""
    bad = _wheel(tmp_path / "sglang-9.9-py3-none-any.whl", MEMBERS, tails={"sglang/srt/a.py": b"junk"})
    with zipfile.ZipFile(tmp_path / bad.filename) as zf:
        assert zf.read("sglang/srt/a.py") == MEMBERS["sglang/srt/a.py"]  # zipfile takes it
    with pytest.raises(
        (SourceError, ArchiveError),
        match=r"'sglang/srt/a\.py' is corrupt: its deflate stream does not end where its data ends",
    ):
        create_pypi_checkout(config.stack(None), tmp_path / bad.filename, tmp_path / "co", bad)
    assert not (tmp_path / "co").exists()
    (tmp_path / "long").mkdir()  # more stored bytes than a deflate stream of the member could be: not even read
    long = _wheel(tmp_path / "long" / bad.filename, MEMBERS, tails={"sglang/srt/b.py": b"j" * 5000})
    with pytest.raises((SourceError, ArchiveError), match=r"'sglang/srt/b\.py' is corrupt: \d+ stored bytes for 6"):
        create_pypi_checkout(config.stack(None), tmp_path / "long" / long.filename, tmp_path / "co", long)
    assert not (tmp_path / "co").exists()
    (tmp_path / "good").mkdir()
    good = _wheel(tmp_path / "good" / "sglang-9.9-py3-none-any.whl", MEMBERS)
    create_pypi_checkout(config.stack(None), tmp_path / "good" / good.filename, tmp_path / "co", good)
    git(tmp_path / "co", "fsck", "--strict", "--no-dangling")
    assert (tmp_path / "co" / "python" / "sglang" / "srt" / "a.py").read_bytes() == MEMBERS["sglang/srt/a.py"]


def test_a_stored_member_and_a_local_header_naming_another_file(tmp_path: Path, config: Config) -> None:
    """A wheel of stored (not deflated) members is deflated here and lays out as git would commit it; a member
    whose local header names another file than the central directory is refused (zipfile refuses it too)."""
    stored = _wheel(tmp_path / "sglang-9.9-py3-none-any.whl", MEMBERS, method=zipfile.ZIP_STORED)
    commit = create_pypi_checkout(config.stack(None), tmp_path / stored.filename, tmp_path / "co", stored)
    git(tmp_path / "co", "fsck", "--strict", "--no-dangling")
    assert git(tmp_path / "co", "rev-parse", f"{commit}:python/sglang/srt/a.py") == Git(tmp_path / "co").hash_blob(
        MEMBERS["sglang/srt/a.py"]
    )
    (tmp_path / "renamed").mkdir()
    wheel = tmp_path / "renamed" / "sglang-9.9-py3-none-any.whl"
    _wheel(wheel, MEMBERS)
    data = bytearray(wheel.read_bytes())
    at = data.index(b"sglang/srt/b.py")  # the first: the local header's (the central directory's comes last)
    data[at : at + 15] = b"sglang/srt/c.py"
    wheel.write_bytes(bytes(data))
    artifact = Artifact("wheel", wheel.name, hashlib.sha256(bytes(data)).hexdigest())
    with pytest.raises((SourceError, ArchiveError), match=r"local header names 'sglang/srt/c\.py'"):
        create_pypi_checkout(config.stack(None), wheel, tmp_path / "co2", artifact)
    assert not (tmp_path / "co2").exists()


def test_bytes_written_again_last_are_taken_back(tmp_path: Path) -> None:
    """A pack whose last blob has the bytes of an earlier, larger one (nothing written after it): the second entry
    is taken back whole, so the pack ends with its checksum and git reads it."""
    g = Git(tmp_path / "repo")
    g.init(branch="main")
    blobs = [b"a larger file\n" * 100, b"small\n", b"a larger file\n" * 100]
    with blob_pack(g) as pack:
        for data in blobs:
            pack.begin(len(data), _deflate(data, "deflated"))
            pack.write(data)
            pack.end()
    assert pack.ids == [g.hash_blob(data) for data in blobs]
    _same_index_as_git(g.root)
    assert "in-pack: 2" in git(g.root, "count-objects", "-v")
