"""Patch files and series: the shipped series parses; malformed input is refused with file:line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sgpatch.checkout.chain import dep3_header
from sgpatch.errors import PatchError
from sgpatch.project import Project
from sgpatch.series.dep3 import forwarded_value, with_last_update
from sgpatch.series.patch import parse_patch, read_series

from .helpers import REPO

P0002 = REPO / "patches/0.5.9/0002-deepseek-eagle3-layer-offset.patch"


def test_shipped_series_has_dep3_headers_and_origins(project: Project) -> None:
    names = [p.name for p in project.series.patches]
    assert names == [
        "0001-kimi-k25-eagle3-delegation.patch",
        "0002-deepseek-eagle3-layer-offset.patch",
        "0003-eagle3-no-deferred-allreduce.patch",
    ]
    first, second, third = project.series.patches
    assert first.field("Origin") == "backport, https://github.com/sgl-project/sglang/pull/19689"
    # DEP-3's own fields only: no OpenEmbedded Upstream-Status beside Forwarded.
    for patch in (first, second, third):
        assert patch.field("Upstream-Status") is None
        assert patch.field("Forwarded") == "not-needed"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", patch.field("Last-Update") or "")
    assert first.field("Applied-Upstream") == "v0.5.10, https://github.com/sgl-project/sglang/commit/85f7a0aa"
    assert second.field("Origin") == "backport, https://github.com/sgl-project/sglang/pull/25454"
    assert [f.path for f in first.files] == ["python/sglang/srt/models/kimi_k25.py"]
    assert [f.path for f in second.files] == ["python/sglang/srt/models/deepseek_v2.py"]
    # 0003 is sgpatch's own guard (not a backport), naming the upstream fix it stands in for until 0.5.14.
    assert third.field("Origin") == "vendor, https://github.com/sgl-project/sglang/pull/28343"
    assert third.field("Applied-Upstream") is None and len(third.obsolete_if) == 1
    assert [f.path for f in third.files] == ["python/sglang/srt/layers/communicator.py"]
    assert first.files[0].hunks[0].section.startswith("def load_weights")
    assert len(project.series.id) == 10


def test_kimi_block_is_textually_upstreams(release_tree) -> None:  # type: ignore[no-untyped-def]
    """0001's added lines are 0.5.10's, verbatim, so upstream detection can prove the merge."""
    patch = read_series(REPO / "patches/0.5.9").patches[0]
    added = b"".join(line for _, line in patch.files[0].hunks[0].added)
    upstream = (release_tree("0.5.10") / "python/sglang/srt/models/kimi_k25.py").read_bytes()
    assert added.strip() and added.strip() in upstream


def _bad(tmp_path: Path, data: bytes) -> PatchError:
    path = tmp_path / "0009-bad.patch"
    path.write_bytes(data)
    with pytest.raises(PatchError) as err:
        parse_patch(data, path)
    assert str(path) in err.value.message
    return err.value


def test_truncated_hunk(tmp_path: Path) -> None:
    data = P0002.read_bytes()
    err = _bad(tmp_path, data[: data.rindex(b"+                self.model")])
    hunk_line = next(i for i, ln in enumerate(data.splitlines(), 1) if ln.startswith(b"@@"))
    assert f":{hunk_line}:" in err.message


def test_crlf_patch(tmp_path: Path) -> None:
    err = _bad(tmp_path, P0002.read_bytes().replace(b"\n", b"\r\n"))
    assert ":1: CRLF" in err.message


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        (b"a/python/sglang", b"a/../python/sglang", "leaves the checkout"),
        (b"b/python/sglang", b"b/../../etc/sglang", "leaves the checkout"),
        (b"/python/sglang", b"//etc/sglang", "is absolute"),
        (b"index 1583dd7..c5c7124 100644", b"new file mode 120000", "symlink"),
    ],
)
def test_unsafe_paths_and_modes(tmp_path: Path, old: bytes, new: bytes, why: str) -> None:
    data = P0002.read_bytes()
    assert old in data
    err = _bad(tmp_path, data.replace(old, new))
    assert why in err.message


def test_missing_dep3_field(tmp_path: Path) -> None:
    data = P0002.read_bytes()
    err = _bad(tmp_path, b"\n".join(ln for ln in data.split(b"\n") if not ln.startswith(b"Origin:")))
    assert "lacks 'Origin'" in err.message


def _series_dir(tmp_path: Path) -> Path:
    d = tmp_path / "series"
    d.mkdir()
    for p in (REPO / "patches/0.5.9").iterdir():
        (d / p.name).write_bytes(p.read_bytes())
    return d


def test_patch_file_missing_from_series(tmp_path: Path) -> None:
    d = _series_dir(tmp_path)
    (d / "0003-extra.patch").write_bytes(P0002.read_bytes())
    with pytest.raises(PatchError, match=r"0003-extra\.patch: patch file is not listed"):
        read_series(d)


def test_series_entry_without_file(tmp_path: Path) -> None:
    d = _series_dir(tmp_path)
    (d / "series").write_text((d / "series").read_text() + "0009-gone.patch\n")
    with pytest.raises(PatchError, match=r"series:5: 0009-gone.patch: no such patch file"):
        read_series(d)


@pytest.mark.parametrize("entry", ["../0001-x.patch", "/etc/passwd", "sub/0001.patch", "--upload-pack=x"])
def test_series_entry_outside_the_directory(tmp_path: Path, entry: str) -> None:
    d = _series_dir(tmp_path)
    (d / "series").write_text(entry + "\n")
    with pytest.raises(PatchError, match="is not a patch file name in this directory"):
        read_series(d)


def test_dep3_reading_writing_and_dating() -> None:
    """sgpatch reads DEP-3 (Origin may give way to Author) and older headers with Upstream-Status, writes
    DEP-3's Forwarded for it, and dates a header by replacing or adding Last-Update, every other byte kept."""
    diff = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    authored = parse_patch(b"Description: t\nAuthor: A <a@x>\n---\n" + diff, Path("0001-x.patch"))
    assert authored.field("Author") == "A <a@x>"
    older = parse_patch(b"Description: t\nOrigin: vendor\nUpstream-Status: Pending\n---\n" + diff, Path("0001-x.patch"))
    assert older.field("Upstream-Status") == "Pending"
    with pytest.raises(PatchError, match="lacks 'Origin'"):
        parse_patch(b"Description: t\nForwarded: no\n---\n" + diff, Path("0001-x.patch"))
    assert [forwarded_value(s) for s in ("Pending", "Backport [v0.5.10]", "Inappropriate [local]")] == [
        "no",
        "not-needed",
        "not-needed",
    ]
    assert forwarded_value("Submitted [https://example.com/pr/1]") == "https://example.com/pr/1"
    header = b"Description: t\nOrigin: vendor\nLast-Update: 2020-01-01\nForwarded: no\n---\n"
    assert with_last_update(header, "2026-02-03") == header.replace(b"2020-01-01", b"2026-02-03")
    bare = b"Description: t\nOrigin: vendor\n---\n"
    assert with_last_update(bare, "2026-02-03") == b"Description: t\nOrigin: vendor\nLast-Update: 2026-02-03\n---\n"
    message = "Fix it\n\nUpstream-Status: Submitted [https://example.com/pr/2]\n"
    written = dep3_header(message, "A <a@x>", "2026-01-02").decode()
    assert "Upstream-Status" not in written and "Forwarded: https://example.com/pr/2\n" in written
