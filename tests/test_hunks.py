"""One file of a patch carried to a new release, hunk by hunk (sgpatch.series.hunks), with git's own merge."""

from __future__ import annotations

from pathlib import Path

from sgpatch.git.diff import merge_file
from sgpatch.git.repo import Git
from sgpatch.series.hunks import FileOutcome, Merge, carry_file, conflict_regions
from sgpatch.series.patch import FilePatch, parse_patch

HEADER = b"Description: t\nOrigin: test\nUpstream-Status: Pending\n---\n"


def _fp(before: bytes, after: bytes, tmp_path: Path, path: str = "m.py") -> FilePatch:
    """The file section ``git diff`` writes for ``before`` -> ``after``."""
    import subprocess

    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(before)
    b.write_bytes(after)
    out = subprocess.run(["git", "diff", "--no-index", "-U3", str(a), str(b)], capture_output=True).stdout
    body = out.split(b"\n@@", 1)[1]
    diff = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@".encode() + body
    return parse_patch(HEADER + diff, tmp_path / "t.patch").files[0]


def _merge(tmp_path: Path) -> Merge:
    g = Git(tmp_path)
    return lambda current, base, other: merge_file(g, current, base, other, ("new", "old", "patch"))


def _lines(n: int, prefix: str = "x") -> list[str]:
    return [f"{prefix}{i} = {i}\n" for i in range(n)]


def _carry(before: list[str], after: list[str], new: list[str] | None, tmp_path: Path) -> FileOutcome:
    b, a = "".join(before).encode(), "".join(after).encode()
    n = "".join(new).encode() if new is not None else None
    return carry_file(_fp(b, a, tmp_path), b, a, n, _merge(tmp_path))


def test_each_hunk_gets_its_own_state(tmp_path: Path) -> None:
    before = _lines(60)
    after = list(before)
    after[5] = "x5 = 500\n"  # hunk 1: the release made the same change
    after[25] = "x25 = 2500\n"  # hunk 2: applies, 3 lines lower
    after[45] = "x45 = 4500\n"  # hunk 3: the release changed its context (one line apart): merged
    new = list(before)
    new[5] = "x5 = 500\n"
    new[43] = "x43 = 'release'\n"
    new[10:10] = ["inserted_a = 1\n", "inserted_b = 2\n", "inserted_c = 3\n"]
    out = _carry(before, after, new, tmp_path)
    states = [(h.state, h.proof, h.offset) for h in out.verdict.hunks]
    assert states == [("upstream", "reverse-apply", None), ("applies", "", 3), ("merged", "", None)]
    assert out.verdict.state == "merged" and out.verdict.regions == ()
    assert out.text is not None and b"x25 = 2500\n" in out.text and b"x45 = 4500\n" in out.text
    assert out.text.count(b"x5 = 500\n") == 1 and b"x43 = 'release'\n" in out.text


def test_a_conflict_is_marked_against_the_old_base(tmp_path: Path) -> None:
    before = _lines(20)
    after = list(before)
    after[10] = "x10 = 'ours'\n"
    new = list(before)
    new[10] = "x10 = 'theirs'\n"
    out = _carry(before, after, new, tmp_path)
    ((hunk),) = out.verdict.hunks
    assert hunk.state == "conflict" and "the 3-way merge conflicts" in hunk.detail
    assert out.text is not None and conflict_regions(out.text) == out.verdict.regions
    ((start, end),) = out.verdict.regions
    region = out.text.decode().splitlines()[start - 1 : end]
    assert region == [
        "<<<<<<< new",
        "x10 = 'theirs'",
        "||||||| old",
        "x10 = 10",
        "=======",
        "x10 = 'ours'",
        ">>>>>>> patch",
    ]


def test_a_file_the_release_lacks_is_a_conflict_and_stays_absent(tmp_path: Path) -> None:
    before = _lines(10)
    after = [*before[:5], "added = 1\n", *before[5:]]
    out = _carry(before, after, None, tmp_path)
    assert out.text is None and out.verdict.gone and [h.state for h in out.verdict.hunks] == ["conflict"]


def test_upstream_by_ast_and_superseded(tmp_path: Path) -> None:
    before = ["class A:\n", "    def f(self):\n", "        return 1\n", "\n", *_lines(12)]
    after = ["class A:\n", "    def f(self):\n", "        return (1 + 1)\n", "\n", *_lines(12)]
    new = ["# upstream's header\n", "class A:\n", "    def f(self):\n", "        # two\n", "        return 1 + 1\n"]
    new += ["\n", *_lines(12)]
    (hunk,) = _carry(before, after, new, tmp_path).verdict.hunks
    assert (hunk.state, hunk.proof) == ("upstream", "ast-equal")
    added = ["    def g(self):\n", "        return 2\n", "\n"]
    after = [*before[:4], *added, *before[4:]]
    theirs = ["    def g(self):\n", "        return 'upstream'\n", "\n"]
    new = ["import os\n", *before[:4], *theirs, *before[4:]]
    out = _carry(before, after, new, tmp_path)
    assert [h.state for h in out.verdict.hunks] == ["superseded"] and out.text == "".join(new).encode()


def test_a_hunk_that_would_define_a_name_twice_is_marked(tmp_path: Path) -> None:
    before = ["class A:\n", "    def f(self):\n", "        return 1\n", "\n", "    x = 1\n", *_lines(6, "    y")]
    added = ["    def f(self):\n", "        return 2\n", "\n"]
    after = [*before[:4], *added, *before[4:]]
    new = ["import os\n", *before]  # the hunk applies at an offset, and would put a second f in A
    out = _carry(before, after, new, tmp_path)
    assert [h.state for h in out.verdict.hunks] == ["conflict"]
    assert "f in class A twice" in out.verdict.hunks[0].detail
    assert out.text is not None and len(out.verdict.regions) == 1
    ((start, end),) = out.verdict.regions
    region = out.text.decode().splitlines(keepends=True)[start - 1 : end]
    theirs = "".join(region[region.index("=======\n") + 1 : -1])
    assert "".join(added) in theirs and region[0] == "<<<<<<< the release\n"


def test_a_hunk_naming_what_the_release_never_says_is_not_parsed_for_a_proof(tmp_path: Path) -> None:
    from sgpatch.series.hunks import names_stand

    before = b"def f(x):\n    return x\n"
    after = b"def f(x):\n    # keep the old value: see issue 7\n    return clamp(x, lo=0)\n"
    (hunk,) = _fp(before, after, tmp_path).hunks
    # Every name the added code says stands in the release (the comment's words need not): a proof may hold.
    assert names_stand(hunk, b"def f(x):\n    return clamp(x, lo=0)\n")
    # One name missing (lo): neither an AST nor a verbatim proof can hold.
    assert not names_stand(hunk, b"def f(x):\n    return clamp(x, 0)\n")
    # The verdict is the same either way: a reformatted upstream copy is still found upstream.
    merge = _merge(tmp_path)
    new = b"def f(x):\n    return clamp(\n        x, lo=0\n    )\n"
    fp = _fp(before, after, tmp_path)
    assert [h.state for h in carry_file(fp, before, after, new, merge).verdict.hunks] == ["upstream"]
