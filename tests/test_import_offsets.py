"""sgpatch import --offsets: a hunk a few lines off, placed where its lines stand, as git apply places it.

A real second team's patch (miles', made on its own SGLang branch: on the 0.5.10 release one hunk stands a line
off) and hunks moved off their lines on the real 0.5.9 source; ``git apply`` on the same files is the reference.
Without ``--offsets`` the import refuses (a series sgpatch keeps has no offsets) and says how to take them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sgpatch.series.offsets import at_offsets
from sgpatch.series.patch import parse_patch

from .helpers import DATA, copy_project, empty_series_project, json_out, run_cli
from .shared import copy

MILES = DATA / "series" / "miles-sglang-0.5.10.patch"
ORIGIN = "https://github.com/radixark/miles/blob/26022052a/patches/sglang.patch"
QWEN = "python/sglang/srt/models/qwen3_moe.py"
MORI = "python/sglang/srt/layers/moe/ep_moe/layer.py"


def _project_files(proj: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(proj)): p.read_bytes()
        for p in sorted(proj.rglob("*"))
        if p.is_file() and ".sgpatch" not in p.parts
    }


def _git_apply(tree: Path, patch: Path, dest: Path) -> Path:
    """``tree`` copied to ``dest`` with ``patch`` applied by git (no repository: git apply reads the files)."""
    shutil.copytree(tree, dest)
    proc = subprocess.run(["git", "apply", str(patch)], cwd=dest, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return dest


@pytest.fixture(scope="module")
def project_0510(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose series is empty, ported to 0.5.10 (its stack ``0.5.10-cu130``, its checkout made)."""
    proj = empty_series_project(tmp_path_factory.mktemp("offsets") / "proj")
    result = run_cli("port", "0.5.9-cu130", "--to", "0.5.10", "--config", str(proj / "VERSIONS.toml"), "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    return proj


def test_a_real_patch_made_on_a_branch_is_placed_where_git_apply_places_it(
    project_0510: Path, tmp_path: Path, release_tree: Any
) -> None:
    proj = tmp_path / "proj"
    shutil.copytree(project_0510, proj, symlinks=True)
    config = str(proj / "VERSIONS.toml")
    before = _project_files(proj)

    refused = run_cli("import", "0.5.10-cu130", str(MILES), "--config", config)
    assert refused.exit_code == 1, refused.stdout + refused.stderr
    assert "its lines are at line 294 (offset -1)" in refused.stdout
    assert "1 of them stand exactly once elsewhere in their file" in refused.stdout and "--offsets" in refused.stdout
    assert _project_files(proj) == before  # nothing written

    result = run_cli(
        "import", "0.5.10-cu130", str(MILES), "--offsets", "--origin", ORIGIN, "--config", config, "--json"
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = json_out(result)
    assert [(m["file"], m["said"], m["line"], m["offset"]) for m in doc["moved"]] == [(QWEN, 295, 294, -1)]
    written = (proj / "patches" / "0.5.10" / doc["patches"][0]["name"]).read_text()
    assert f"Origin: {ORIGIN}\n" in written and "\n@@ -294,6 +294,7 @@" in written and "@@ -295," not in written
    shown = run_cli("import", "0.5.10-cu130", str(MILES), "--offsets", "--config", config)  # on top: refused
    assert shown.exit_code == 1 and "placed where their lines stand" not in shown.stdout

    applied = run_cli("apply", "0.5.10-cu130", "--config", config)
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    verified = run_cli("verify", "0.5.10-cu130", "--config", config)
    assert verified.exit_code == 0 and "ok (patched)" in verified.stdout, verified.stdout
    reference = _git_apply(release_tree("0.5.10"), MILES, tmp_path / "git")
    checkout = proj / ".sgpatch" / "checkouts" / "0.5.10-cu130"
    for path in (QWEN, MORI):
        assert (checkout / path).read_bytes() == (reference / path).read_bytes(), path


# --------------------------------------------------------------------------- hunks moved by hand on 0.5.9

CONFIG = "python/sglang/srt/configs/model_config.py"


@pytest.fixture
def project_059(tmp_path: Path, template_checkout: Path) -> Path:
    proj = copy_project(tmp_path / "proj", {})
    copy(template_checkout, proj / ".sgpatch" / "checkouts" / "0.5.9-cu130")
    return proj


def _two_hunks(source: bytes) -> bytes:
    """``CONFIG`` with two edits: a line added after its first ``import`` and one before its last ``return``."""
    lines = source.splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if ln.startswith(b"import "))
    last = max(i for i, ln in enumerate(lines) if ln.strip().startswith(b"return "))
    indent = lines[last][: len(lines[last]) - len(lines[last].lstrip())]
    edited = [*lines[: first + 1], b"import sys  # sgpatch: the first edit\n", *lines[first + 1 : last]]
    edited += [indent + b"_ = sys.argv  # sgpatch: the second edit\n", *lines[last:]]
    return b"".join(edited)


def _diff(tmp: Path, old: bytes, new: bytes) -> bytes:
    """git's diff of the two texts of ``CONFIG``, with git's a/ and b/ paths."""
    for side, data in (("a", old), ("b", new)):
        (tmp / side / Path(CONFIG).parent).mkdir(parents=True, exist_ok=True)
        (tmp / side / CONFIG).write_bytes(data)
    args = ["git", "diff", "--no-index", "--no-prefix", f"a/{CONFIG}", f"b/{CONFIG}"]
    proc = subprocess.run(args, cwd=tmp, capture_output=True)
    assert proc.returncode == 1, proc.stderr
    return proc.stdout


def test_hunks_moved_by_hand_are_placed_as_git_apply_places_them(
    project_059: Path, tmp_path: Path, release_tree: Any
) -> None:
    pristine = release_tree("0.5.9")
    source = (pristine / CONFIG).read_bytes()
    diff = _diff(tmp_path / "d", source, _two_hunks(source))
    headers = [ln for ln in diff.split(b"\n") if ln.startswith(b"@@ ")]
    assert len(headers) == 2, diff.decode()
    off = diff.replace(headers[0], _shifted(headers[0], 3)).replace(headers[1], _shifted(headers[1], 7))
    patch = tmp_path / "off.patch"
    patch.write_bytes(off)
    reference = _git_apply(pristine, patch, tmp_path / "git")  # git takes both hunks off their lines
    assert (reference / CONFIG).read_bytes() == _two_hunks(source)

    config = str(project_059 / "VERSIONS.toml")
    refused = run_cli("import", str(patch), "--config", config, "--json")
    assert refused.exit_code == 1
    failing = [h for h in json_out(refused)["hunks"] if not h["applies"]]
    assert [h["found_at"] is not None for h in failing] == [True, True]
    result = run_cli("import", str(patch), "--offsets", "--config", config, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert [(m["file"], m["offset"]) for m in json_out(result)["moved"]] == [(CONFIG, -3), (CONFIG, -7)]
    check = run_cli("export", "--config", config, "0.5.9-cu130", "--fresh", "--check")
    assert check.exit_code == 0, check.stdout + check.stderr  # the series applies strictly to a fresh checkout
    applied = run_cli("apply", "0.5.9-cu130", "--config", config)
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    checkout = project_059 / ".sgpatch" / "checkouts" / "0.5.9-cu130"
    assert (checkout / CONFIG).read_bytes() == (reference / CONFIG).read_bytes()


def _shifted(header: bytes, by: int) -> bytes:
    """A hunk header whose two starts say ``by`` lines more than they should."""
    head, _, rest = header.partition(b" @@")
    old, new = head.removeprefix(b"@@ -").split(b" +")
    o = old.split(b",")
    n = new.split(b",")
    o[0], n[0] = b"%d" % (int(o[0]) + by), b"%d" % (int(n[0]) + by)
    return b"@@ -" + b",".join(o) + b" +" + b",".join(n) + b" @@" + rest


# --------------------------------------------------------------------------- what is not placed

_FILE = b"".join(b"line %d\n" % i for i in range(1, 21))


def _patch(body: str) -> Any:
    text = (
        f"Description: t\nOrigin: vendor\nForwarded: no\n---\ndiff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n{body}"
    )
    return parse_patch(text.encode(), Path("t.patch"), name="t.patch")


def test_a_hunk_is_placed_only_where_its_lines_stand_once_and_in_order() -> None:
    # Its lines stand at 2-4, the header says 10: placed, the new side moved as much.
    one = _patch("@@ -10,3 +10,4 @@\n line 2\n+new\n line 3\n line 4\n")
    placed, moved = at_offsets({"f.py": _FILE}, [one])
    assert [(m.said, m.line) for m in moved] == [(10, 2)]
    assert placed[0].files[0].hunks[0].header == "@@ -2,3 +2,4 @@"
    # The same lines twice in the file: git would take the nearest; sgpatch does not guess.
    twice = _FILE + b"line 2\nline 3\nline 4\n"
    assert at_offsets({"f.py": twice}, [one]) == ([one], [])
    # Placed, the first hunk would come after the second: both left as they were.
    crossed = _patch("@@ -5,2 +5,3 @@\n line 16\n+new\n line 17\n@@ -10,2 +11,3 @@\n line 10\n+new\n line 11\n")
    assert at_offsets({"f.py": _FILE}, [crossed]) == ([crossed], [])
    # A hunk at its own line is left as it is; so is a patch that still does not apply.
    stale = _patch("@@ -2,2 +2,3 @@\n line 2\n+new\n gone\n")
    assert at_offsets({"f.py": _FILE}, [stale]) == ([stale], [])
