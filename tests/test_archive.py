"""sgpatch.source.archive against the standard library's own readers, on SGLang's real files from PyPI.

The one reader must list and hash exactly what ``zipfile`` and ``tarfile`` see in
the pinned sdist and wheels, and its limits must leave a wide margin over them
(so a new release never trips a limit meant for hostile archives).  The hostile
archives themselves are in test_hostile.py.
"""

from __future__ import annotations

import hashlib
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from sgpatch.config import Config
from sgpatch.errors import ArchiveError
from sgpatch.source import archive, members
from sgpatch.source.artifacts import fetch_artifact

from .conftest import RELEASES


def _real(config: Config) -> dict[str, Path]:
    stack = config.stack(None)
    out = {}
    for artifact in stack.artifacts:
        out[artifact.filename] = fetch_artifact(artifact, stack.sglang_version)
    out[RELEASES["0.5.15"].filename] = fetch_artifact(RELEASES["0.5.15"], "0.5.15")
    return out


@pytest.fixture(scope="module")
def real(config: Config) -> dict[str, Path]:
    return _real(config)


def test_reads_exactly_what_the_standard_library_reads(real: dict[str, Path]) -> None:
    assert {n.rsplit(".", 1)[-1] for n in real} == {"gz", "whl"}
    for name, path in real.items():
        if name.endswith(".whl"):
            with zipfile.ZipFile(path) as zf:
                expected = {i.filename: hashlib.sha256(zf.read(i)).digest() for i in zf.infolist() if not i.is_dir()}
        else:
            with tarfile.open(path, "r:gz") as tar:
                expected = {}
                for info in tar:
                    if info.isfile():
                        fh = tar.extractfile(info)
                        assert fh is not None
                        expected[str(PurePosixPath(*PurePosixPath(info.name).parts[1:]))] = hashlib.sha256(
                            fh.read()
                        ).digest()
        with archive.open_archive(path) as a:
            got = {e.name: a.digest(e.name) for e in a.entries}
            assert sum(e.size for e in a.entries) > 20_000_000
        assert got == expected, name


def test_limits_leave_a_wide_margin_over_the_real_files(real: dict[str, Path]) -> None:
    for path in real.values():
        with archive.open_archive(path) as a:
            sizes = [e.size for e in a.entries]
        assert len(sizes) * 5 < archive.MAX_MEMBERS
        assert sum(sizes) * 5 < archive.MAX_TOTAL_BYTES
        assert max(sizes) * 5 < archive.MAX_MEMBER_BYTES


def test_a_member_is_read_in_chunks(real: dict[str, Path]) -> None:
    wheel = next(p for n, p in real.items() if "manylinux" in n)
    with archive.open_archive(wheel) as a:
        big = max(a.entries, key=lambda e: e.size)
        assert big.size > archive.CHUNK
        pieces = list(a.chunks(big.name))
    assert len(pieces) > 1 and max(len(p) for p in pieces) <= archive.CHUNK
    assert sum(len(p) for p in pieces) == big.size


def test_a_short_member_is_corrupt(tmp_path: Path) -> None:
    """A stored member whose header claims more bytes than the archive holds."""
    path = tmp_path / "w.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a.py", b"x" * 100)
    data = bytearray(path.read_bytes())
    data[data.index(b"PK\x01\x02") + 24] = 200  # central directory: uncompressed size 200
    path.write_bytes(bytes(data))
    with archive.open_archive(path) as a, pytest.raises(ArchiveError, match=r"'a\.py' is corrupt"):
        a.read("a.py")


def test_parents_by_slicing_are_pathlibs() -> None:
    """The file/directory clash check lists each member's parents by string slicing when the name is already
    normal: the same list ``PurePosixPath(name).parents`` gives, for names of every shape."""
    import itertools

    parts = ["a", "b.c", "/", ".", "..", "//", "/./", " ", "é"]
    names = ["".join(p) for n in range(1, 6) for p in itertools.product(parts, repeat=n)]
    for name in names:
        assert list(members._parents(name)) == [str(p) for p in PurePosixPath(name).parents], name


def test_plain_member_names_are_judged_as_the_full_checks_judge_them() -> None:
    """Most names take one regular expression (letters, digits, '_', '.', '+', '-' parts): for names of every
    shape, each one is refused, or accepted with its parts, exactly as by the checks on ``PurePosixPath``'s
    parts."""
    import itertools

    def reference(name: str) -> list[str] | None:
        parts = [p for p in PurePosixPath(name).parts if p != "/"]
        if name.startswith("/") or ".." in parts or "\\" in name or not parts:
            return None
        if any(p.lower() == ".git" for p in parts) or any(ord(c) < 32 or ord(c) == 127 for c in name):
            return None
        return parts

    pieces = ["a", "b.c", "/", ".", "..", ".git", ".GIT", "x.git", "_", "-", "+", ",", "=", "\\", "\x01", "é", " "]
    names = ["".join(p) for n in range(1, 4) for p in itertools.product(pieces, repeat=n)]
    for name in names:
        try:
            got: list[str] | None = members.check_member_name(name, "w.whl")
        except ArchiveError:
            got = None
        assert got == reference(name), name
