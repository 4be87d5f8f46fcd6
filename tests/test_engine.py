"""The patch engine against real git (issue 11): same tree for every patch ``git diff`` writes.

Random small trees (final newline or not, empty files, CRLF lines, non-ASCII,
executable files) get random edit scripts; ``git diff`` (the options of
``Git.diff_patch``) writes the patch; ``git apply --index`` on the base and
sgpatch's engine on the same base must give the same tree id.  Mutated patches
(shifted line numbers, changed context, wrong counts, moved final-newline
markers) must be refused by sgpatch whenever git refuses them; where sgpatch
refuses more, the reason is one of its named stricter rules.

``make test`` runs a few hundred examples; ``SGPATCH_FUZZ_SCALE=N`` multiplies them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgpatch.errors import PatchError
from sgpatch.git.diff import DIFF_OPTIONS
from sgpatch.series.classify import PatchState, classify_one
from sgpatch.series.engine import HunkFailure, _find_unique, apply_modes, apply_patch, describe_difference
from sgpatch.series.hunks import _NAME, says
from sgpatch.series.patch import parse_patch

from .helpers import DATA, copy_project, run_cli
from .reliability import record
from .smallrepo import HEADER, IDENTITY, Tiny, make_tiny
from .smallrepo import git as smallgit

SCALE = float(os.environ.get("SGPATCH_FUZZ_SCALE", "1"))
PATCH_HEADER = HEADER.format(desc="an engine test").encode()

# A file: its bytes and whether it is executable.
Tree = dict[str, tuple[bytes, bool]]


def _settings(examples: int) -> settings:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        derandomize=bool(os.environ.get("CI")) and SCALE <= 1,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
        print_blob=True,
    )


# --------------------------------------------------------------------------- a real git repository


class Repo:
    """One object store; each tree is written from its own work tree and index."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
            **IDENTITY,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
        }
        self.run("init", "-q", str(root / "repo"))
        self.git_dir = root / "repo" / ".git"
        for key, value in (("core.autocrlf", "false"), ("core.filemode", "true"), ("core.safecrlf", "false")):
            self.run("config", key, value)
        self.count = 0

    def run(
        self, *args: str, work: Path | None = None, index: Path | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        env = dict(self.env)
        prefix = ["git"]
        if hasattr(self, "git_dir"):
            prefix += [f"--git-dir={self.git_dir}"]
        if work is not None:
            prefix += [f"--work-tree={work}"]
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        return subprocess.run([*prefix, *args], cwd=work or self.root, env=env, capture_output=True, check=False)

    def out(self, *args: str, work: Path | None = None, index: Path | None = None) -> str:
        proc = self.run(*args, work=work, index=index)
        assert proc.returncode == 0, (args, proc.stderr)
        return proc.stdout.decode().strip()

    def scratch(self) -> tuple[Path, Path]:
        self.count += 1
        work = self.root / f"w{self.count}"
        work.mkdir()
        return work, self.root / f"i{self.count}"

    def done(self, work: Path, index: Path) -> None:
        shutil.rmtree(work)
        index.unlink(missing_ok=True)

    def write_tree(self, tree: Tree) -> tuple[str, None]:
        """The tree id of ``tree`` (written from a scratch work tree and index)."""
        work, index = self.scratch()
        write_files(work, tree)
        self.out("add", "-A", ".", work=work, index=index)
        tree_id = self.out("write-tree", work=work, index=index)
        self.done(work, index)
        return tree_id, None

    def diff(self, old: str, new: str) -> bytes:
        proc = self.run("diff", *DIFF_OPTIONS, old, new)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def git_apply(self, base: Tree, base_id: str, patch: bytes) -> str | None:
        """``git apply --index`` of ``patch`` on a fresh copy of the base: the tree id, or None if refused."""
        work, index = self.scratch()
        write_files(work, base)
        self.out("read-tree", base_id, work=work, index=index)
        self.out("update-index", "-q", "--refresh", work=work, index=index)
        (self.root / "p.patch").write_bytes(patch)
        proc = self.run("apply", "--index", str(self.root / "p.patch"), work=work, index=index)
        tree_id = self.out("write-tree", work=work, index=index) if proc.returncode == 0 else None
        self.done(work, index)
        return tree_id


def write_files(work: Path, tree: Tree) -> None:
    for path, (data, executable) in tree.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o755 if executable else 0o644)


@pytest.fixture
def repo() -> Iterator[Repo]:
    root = Path(tempfile.mkdtemp(prefix="sgpatch-engine-"))
    try:
        yield Repo(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


Refusal = HunkFailure | PatchError | PatchState


def sgpatch_apply(base: Tree, patch: bytes, *, strict: bool = False) -> Tree | Refusal:
    """sgpatch's engine on ``base``: the new tree, or why it refuses.

    ``strict`` adds apply's checks on top of the engine (landing, no duplicate definition).
    """
    try:
        parsed = parse_patch(PATCH_HEADER + patch, Path("0001-engine.patch"))
    except PatchError as exc:
        return exc
    files = {path: data for path, (data, _) in base.items()}
    modes = {path: "100755" if x else "100644" for path, (_, x) in base.items()}
    result = apply_patch(files, parsed, modes=modes)
    if isinstance(result, HunkFailure):
        return result
    if strict:
        state = classify_one(files, parsed, modes)
        if state.state != "applicable":
            return state
    new_modes = apply_modes(modes, parsed)
    out = dict(base)
    for path, data in result.items():
        if data is None:
            out.pop(path, None)
        else:
            out[path] = (data, new_modes.get(path) == "100755")
    return out


# --------------------------------------------------------------------------- random trees and edits

_WORDS = ["x", "y = 1", "", "    return y", "é ü ß", "日本", "\t tab", "a  ", "def f():", "#"]
line_text = st.one_of(st.sampled_from(_WORDS), st.text(alphabet="ab \t#é", max_size=6))
line = st.builds(lambda text, crlf: text.encode() + (b"\r\n" if crlf else b"\n"), line_text, st.booleans())


@st.composite
def contents(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(line, max_size=12))
    data = b"".join(lines)
    if data and draw(st.booleans()):
        data = data.rstrip(b"\n")  # no final newline (maybe a CR left at the end)
    return data


PATHS = ["a.txt", "b.py", "sub/c.txt", "sub/deep/d.txt", "e"]
NEW_PATHS = ["new.txt", "fresh/dir/n.py", "sub/n.txt"]


@st.composite
def base_trees(draw: st.DrawFn) -> Tree:
    names = draw(st.lists(st.sampled_from(PATHS), min_size=1, max_size=4, unique=True))
    return {name: (draw(contents()), draw(st.booleans()) and draw(st.booleans())) for name in names}


@st.composite
def edit_content(draw: st.DrawFn, data: bytes) -> bytes:
    lines = data.split(b"\n")  # the last element is the text after the last newline
    body, tail = lines[:-1], lines[-1]
    text = [ln + b"\n" for ln in body] + ([tail] if tail else [])
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "newline"]))
        at = draw(st.integers(0, len(text)))
        if op == "insert":
            text.insert(at, draw(line))
        elif op == "delete" and text:
            del text[min(at, len(text) - 1)]
        elif op == "replace" and text:
            text[min(at, len(text) - 1)] = draw(line)
        elif op == "newline" and text:
            text[-1] = text[-1].rstrip(b"\n") if text[-1].endswith(b"\n") else text[-1] + b"\n"
    # only the last line may lack its newline
    fixed = [ln if ln.endswith(b"\n") else ln + b"\n" for ln in text[:-1]] + text[-1:]
    return b"".join(fixed)


@st.composite
def edited(draw: st.DrawFn, base: Tree) -> Tree:
    new: Tree = {}
    for path, (data, executable) in base.items():
        fate = draw(st.sampled_from(["edit", "edit", "edit", "keep", "delete", "chmod", "chmod+edit"]))
        if fate == "delete":
            continue
        if fate == "keep":
            new[path] = (data, executable)
            continue
        changed = draw(edit_content(data)) if "edit" in fate else data
        new[path] = (changed, (not executable) if "chmod" in fate else executable)
    for path in draw(st.lists(st.sampled_from(NEW_PATHS), max_size=2, unique=True)):
        if path not in base:
            new[path] = (draw(contents()), draw(st.booleans()) and draw(st.booleans()))
    return new


# --------------------------------------------------------------------------- git diff patches apply as git applies them


def test_engine_applies_every_git_diff_like_git(repo: Repo) -> None:
    tally = Counter[str]()
    same = Counter[str]()

    @_settings(150)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        base = data.draw(base_trees(), label="base")
        new = data.draw(edited(base), label="new")
        base_id, _ = repo.write_tree(base)
        new_id, _ = repo.write_tree(new)
        patch = repo.diff(base_id, new_id)
        if not patch:
            tally["no change"] += 1
            return
        by_git = repo.git_apply(base, base_id, patch)
        assert by_git == new_id, "git itself does not round-trip its own diff"
        ours = sgpatch_apply(base, patch)
        assert isinstance(ours, dict), f"sgpatch refuses a patch git applies: {ours}\n{patch.decode(errors='replace')}"
        ours_id, _ = repo.write_tree(ours)
        assert ours_id == by_git, f"sgpatch's tree differs from git's\n{patch.decode(errors='replace')}"
        same["patches"] += 1
        for feature, present in (
            ("no final newline", b"\\ No newline" in patch),
            ("new file", b"\nnew file mode" in patch),
            ("deleted file", b"\ndeleted file mode" in patch),
            ("mode change", b"\nnew mode" in patch),
            ("CRLF", b"\r\n" in patch),
        ):
            if present:
                tally[feature] += 1

    check()
    # the generator reaches every feature git diff writes
    for feature in ("no final newline", "new file", "deleted file", "mode change", "CRLF"):
        assert tally[feature] > 0, (feature, tally)
    record(
        "engine-differential",
        exit="ok",
        shown=f"{same['patches']} patches, the same tree as git apply for each; with "
        + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())),
    )


# --------------------------------------------------------------------------- mutated patches


def _mutate(patch: bytes, how: str, k: int) -> bytes | None:
    lines = patch.split(b"\n")
    headers = [i for i, ln in enumerate(lines) if ln.startswith(b"@@ ")]
    body = [i for i, ln in enumerate(lines) if ln[:1] in (b" ", b"-", b"+") and not ln.startswith((b"---", b"+++"))]
    context = [i for i in body if lines[i][:1] == b" "]
    if how in ("shift", "count", "shift-new", "count-new") and headers:
        i = headers[k % len(headers)]
        head, _, rest = lines[i].partition(b" @@")
        minus, plus = head[3:].split(b" ")
        sides = [minus[1:].split(b","), plus[1:].split(b",")]
        side = sides[1 if how.endswith("-new") else 0]
        delta = (k % 5) - 2 or 1
        if how.startswith("shift"):
            side[0] = str(max(0, int(side[0]) + delta)).encode()
        else:
            count = int(side[1]) if len(side) > 1 else 1
            side[1:] = [str(max(0, count + delta)).encode()]
        lines[i] = b"@@ -" + b",".join(sides[0]) + b" +" + b",".join(sides[1]) + b" @@" + rest
    elif how == "context" and context:
        i = context[k % len(context)]
        lines[i] = lines[i] + b" changed" if k % 2 else lines[i][:1] + lines[i][2:]
    elif how == "marker" and body:
        i = body[k % len(body)]
        lines.insert(i + 1, b"\\ No newline at end of file")
    elif how == "unmarker" and b"\\ No newline at end of file" in lines:
        lines.remove(b"\\ No newline at end of file")
    elif how == "drop" and body:
        del lines[body[k % len(body)]]
    else:
        return None
    return b"\n".join(lines)


def _stricter(ours: Refusal, base: Tree) -> str | None:
    """The named stricter rule behind a refusal of a patch git applies, or None if there is none."""
    if isinstance(ours, PatchState):
        if "twice (Python keeps only the later one)" in ours.detail:
            return "no duplicate definition"
        if "header names" in ours.detail or "is not where the hunk puts it" in ours.detail:
            return "landing check"
        return None
    if isinstance(ours, PatchError):
        text = ours.message
        for name, fragment in (
            ("strict parser: hunk counts", "malformed diff"),
            ("strict parser: final-newline marker", "No newline at end of file"),
            ("strict parser: line 0", "at line 0"),
            ("strict parser: CR outside a hunk's counted lines", "CRLF line ending"),
        ):
            if fragment in text:
                return name
        return None
    if "mode" in ours.reason and "the patch expects mode" in ours.reason:
        return "stated mode"
    if ours.hunk is not None and ("differs at column" in ours.reason or "past the end" in ours.reason):
        # exact position: git would have searched; the lines must stand somewhere else
        data = base.get(ours.path, (b"", False))[0]
        want = b"".join(ours.hunk.old)
        return "exact position (git found an offset)" if want in data or not want else None
    if "overlaps the previous hunk" in ours.reason:
        return "exact position (overlap)"
    return None


MUTATIONS = ("shift", "shift-new", "count", "count-new", "context", "marker", "unmarker", "drop")


def test_engine_refuses_whenever_git_refuses(repo: Repo) -> None:
    seen: Counter[str] = Counter()

    @_settings(150)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        base = data.draw(base_trees(), label="base")
        new = data.draw(edited(base), label="new")
        base_id, _ = repo.write_tree(base)
        new_id, _ = repo.write_tree(new)
        patch = repo.diff(base_id, new_id)
        how = data.draw(st.sampled_from(MUTATIONS), label="mutation")
        mutated = _mutate(patch, how, data.draw(st.integers(0, 50), label="k")) if patch else None
        if mutated is None or mutated == patch:
            return
        by_git = repo.git_apply(base, base_id, mutated)
        ours = sgpatch_apply(base, mutated, strict=True)
        shown = mutated.decode(errors="replace")
        if by_git is None:
            assert not isinstance(ours, dict), f"git refuses ({how}), sgpatch applies:\n{shown}"
            seen["both refuse"] += 1
        elif isinstance(ours, dict):
            ours_id, _ = repo.write_tree(ours)
            assert ours_id == by_git, f"both apply ({how}), different trees:\n{shown}"
            seen["both apply"] += 1
        else:
            rule = _stricter(ours, base)
            assert rule is not None, f"git applies ({how}), sgpatch refuses without a named rule: {ours}\n{shown}"
            seen[f"stricter: {rule}"] += 1

    check()
    assert seen["both refuse"] > 0, seen
    record(
        "engine-mutated",
        exit="ok",
        shown=", ".join(f"{k} {v}" for k, v in sorted(seen.items())) + "; never applied what git refuses",
    )


# --------------------------------------------------------------------------- the rows, one by one


def _one(repo: Repo, base: Tree, new: Tree) -> tuple[bytes, str | None, Tree | HunkFailure | PatchError, str]:
    base_id, _ = repo.write_tree(base)
    new_id, _ = repo.write_tree(new)
    patch = repo.diff(base_id, new_id)
    return patch, repo.git_apply(base, base_id, patch), sgpatch_apply(base, patch), new_id


@pytest.mark.parametrize(
    ("case_id", "base", "new"),
    [
        ("engine-no-final-newline", {"f": (b"a\nb", False)}, {"f": (b"a\nc", False)}),
        ("engine-remove-final-newline", {"f": (b"a\nb\n", False)}, {"f": (b"a\nb", False)}),
        ("engine-empty-new-file", {"f": (b"a\n", False)}, {"f": (b"a\n", False), "n/e/w": (b"", False)}),
        ("engine-empty-deleted-file", {"f": (b"a\n", False), "e": (b"", False)}, {"f": (b"a\n", False)}),
        ("engine-mode-change", {"f": (b"a\n", False)}, {"f": (b"a\n", True)}),
        ("engine-mode-and-content", {"f": (b"a\n", True)}, {"f": (b"b\n", False)}),
        ("engine-new-executable", {"f": (b"a\n", False)}, {"f": (b"a\n", False), "x": (b"#!/bin/sh\n", True)}),
    ],
)
def test_features_git_diff_writes(repo: Repo, case_id: str, base: Tree, new: Tree) -> None:
    _patch, by_git, ours, new_id = _one(repo, base, new)
    assert by_git == new_id
    assert isinstance(ours, dict), ours
    assert ours == new
    record(case_id, exit=0, shown=f"same tree as git apply ({new_id[:10]})")


def test_new_file_on_existing_path_refused(repo: Repo) -> None:
    base = {"f": (b"a\nb\n", False)}
    patch = _one(repo, {"g": (b"", False)}, {"g": (b"", False), "f": (b"new\n", False)})[0]
    base_id, _ = repo.write_tree(base)
    assert repo.git_apply(base, base_id, patch) is None
    ours = sgpatch_apply(base, patch)
    assert isinstance(ours, HunkFailure)
    assert "already exists" in ours.describe()
    record("engine-new-file-exists", exit=1, shown=ours.describe())


def test_partial_deletion_refused(repo: Repo) -> None:
    whole = {"f": (b"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", False)}
    patch, _, _, _ = _one(repo, whole, {})
    # keep only the first hunk line: a deletion that does not cover the file
    lines = patch.split(b"\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith(b"@@"))
    cut = b"\n".join([*lines[:at], b"@@ -1 +0,0 @@", b"-1", b""])
    base_id, _ = repo.write_tree(whole)
    assert repo.git_apply(whole, base_id, cut) is None
    ours = sgpatch_apply(whole, cut)
    assert isinstance(ours, HunkFailure)
    assert "deletes the file, but 9 line(s)" in ours.describe()
    record("engine-partial-deletion", exit=1, shown=ours.describe())


def test_marker_after_mid_hunk_context_refused(repo: Repo) -> None:
    base = {"f": (b"a\nb\nc\nd\n", False)}
    patch, _, _, _ = _one(repo, base, {"f": (b"a\nB\nc\nd\n", False)})
    lines = patch.split(b"\n")
    at = lines.index(b"+B")
    mutated = b"\n".join([*lines[: at + 1], lines[at + 1], b"\\ No newline at end of file", *lines[at + 2 :]])
    base_id, _ = repo.write_tree(base)
    assert repo.git_apply(base, base_id, mutated) is None
    ours = sgpatch_apply(base, mutated)
    assert isinstance(ours, PatchError)
    assert "follows '\\ No newline at end of file'" in ours.message and "0001-engine.patch:" in ours.message
    record("engine-mid-hunk-marker", exit=2, shown=ours.message)


@pytest.mark.parametrize(
    ("what", "section", "why"),
    [
        ("rename", b"diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n", "renames are not"),
        ("copy", b"diff --git a/x b/y\nsimilarity index 100%\ncopy from x\ncopy to y\n", "copies are not"),
        ("binary", b"diff --git a/x b/x\nindex 1111111..2222222 100644\nBinary files a/x and b/x differ\n", "binary"),
        (
            "symlink",
            b"diff --git a/x b/x\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/x\n"
            b"@@ -0,0 +1 @@\n+target\n\\ No newline at end of file\n",
            "symlink",
        ),
        (
            "submodule",
            b"diff --git a/x b/x\nnew file mode 160000\nindex 0000000..1111111\n--- /dev/null\n+++ b/x\n"
            b"@@ -0,0 +1 @@\n+Subproject commit 1111111111111111111111111111111111111111\n",
            "submodule",
        ),
    ],
)
def test_unsupported_features_named(what: str, section: bytes, why: str) -> None:
    ours = sgpatch_apply({"x": (b"a\n", False)}, section)
    assert isinstance(ours, PatchError), what
    assert why in ours.message and "0001-engine.patch:" in ours.message
    record(f"engine-refuse-{what}", exit=2, shown=ours.message)


@pytest.mark.parametrize("char", ["\u200b", "\u202e", "\u2066"])
def test_invisible_path_characters_refused(char: str) -> None:
    path = f"py{char}thon/x.py"
    section = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n".encode()
    ours = sgpatch_apply({path: (b"a\n", False)}, section)
    assert isinstance(ours, PatchError)
    assert ours.exit_code == 2
    assert f"U+{ord(char):04X}" in ours.message and "0001-engine.patch:5" in ours.message
    record("engine-invisible-path", exit=2, shown=ours.message)


# --------------------------------------------------------------------------- a conflict shows the difference


def test_conflict_shows_first_differing_column() -> None:
    want = b"            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]\n"
    got = b"            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]  # tuned\n"
    text = describe_difference(got, want)
    assert "column 80" in text and "# tuned" in text
    tab = describe_difference(b"a\tb\n", b"a b\n")
    assert "\u2192" in tab and "column 2" in tab
    cr = describe_difference(b"x = 1\r\n", b"x = 1\n")
    assert "\\r" in cr and "trailing whitespace or CR" in cr
    eof = describe_difference(b"x = 1", b"x = 1\n")
    assert "no final newline" in eof
    blank = describe_difference(b"x = 1  \n", b"x = 1\n")
    assert "\u00b7\u00b7" in blank
    # through the engine: the hunk's context line drifted after column 60
    section = b"diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,3 @@\n x = 1\n " + want + b"+y = 2\n"
    parsed = parse_patch(PATCH_HEADER + section, Path("0001-engine.patch"))
    failure = apply_patch({"m.py": b"x = 1\n" + got}, parsed)
    assert isinstance(failure, HunkFailure)
    shown = failure.describe()
    assert "line 2 differs at column 80" in shown and "# tuned" in shown, shown
    record("engine-conflict-column", exit=1, shown=shown)


# --------------------------------------------------------------------------- round trip: edit, export, apply


def _cli(*args: str) -> Any:
    result = run_cli(*args, catch=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tiny, Tiny]:
    """The tiny project pristine, and a copy of it with its series applied."""
    pristine = make_tiny(tmp_path_factory.mktemp("engine-tiny"), modules=3, patches=2)
    patched = pristine.copy(tmp_path_factory.mktemp("engine-tiny-patched"))
    applied = _cli("apply", "--config", str(patched.config), "--checkout", str(patched.checkout))
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    return pristine, patched


_SAFE_WORDS = ["x = 1", "", "# note", "y = 'é ü'", "\tz = 2", "w = 3  "]
safe_line = st.builds(
    lambda text, crlf: text.encode() + (b"\r\n" if crlf else b"\n"), st.sampled_from(_SAFE_WORDS), st.booleans()
)


@st.composite
def checkout_edits(draw: st.DrawFn, files: dict[str, bytes]) -> list[tuple[str, str, bytes]]:
    """(path, action, data): write, delete, chmod or create."""
    edits: list[tuple[str, str, bytes]] = []
    for path, data in files.items():
        fate = draw(st.sampled_from(["keep", "edit", "edit", "chmod", "delete"]))
        if fate == "edit":
            text = data.splitlines(keepends=True)
            for _ in range(draw(st.integers(1, 3))):
                at = draw(st.integers(0, len(text)))
                op = draw(st.sampled_from(["insert", "replace", "delete", "newline"]))
                if op == "insert":
                    text.insert(at, draw(safe_line))
                elif op == "replace" and at < len(text):
                    text[at] = draw(safe_line)
                elif op == "delete" and at < len(text):
                    del text[at]
                elif op == "newline" and text:
                    text[-1] = text[-1].rstrip(b"\n") if text[-1].endswith(b"\n") else text[-1] + b"\n"
            fixed = [ln if ln.endswith(b"\n") else ln + b"\n" for ln in text[:-1]] + text[-1:]
            edits.append((path, "write", b"".join(fixed)))
        elif fate in ("chmod", "delete"):
            edits.append((path, fate, b""))
    for path in draw(st.lists(st.sampled_from(["NOTES", "python/pkg/new/mod.py", "docs/empty"]), unique=True)):
        edits.append((path, "create", b"".join(draw(st.lists(safe_line, max_size=3)))))
    return edits


def test_round_trip_edit_export_apply(tiny_pair: tuple[Tiny, Tiny], tmp_path: Path) -> None:
    pristine, patched = tiny_pair
    modules = sorted(p.relative_to(patched.checkout).as_posix() for p in patched.checkout.glob("python/pkg/mod*.py"))
    counter = Counter[str]()

    @_settings(8)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        counter["run"] += 1
        work = tmp_path / f"rt{counter['run']}"
        edited = patched.copy(work / "edited")
        fresh = pristine.copy(work / "fresh")
        fresh = Tiny(edited.root, fresh.checkout, fresh.base)  # the fresh checkout applies the exported series
        files = {m: (edited.checkout / m).read_bytes() for m in modules}
        for path, action, payload in data.draw(checkout_edits(files), label="edits"):
            target = edited.checkout / path
            if action in ("write", "create"):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(payload)
            elif action == "chmod":
                target.chmod(target.stat().st_mode ^ 0o111)
            else:
                target.unlink()
        smallgit(edited.checkout, "add", "-A")
        if not smallgit(edited.checkout, "status", "--porcelain"):
            return
        smallgit(edited.checkout, "commit", "-q", "-m", "local: a random edit")
        config = str(edited.config)
        before = {p.name: p.read_bytes() for p in edited.series.iterdir()}
        exported = _cli("export", "--config", config, "--checkout", str(edited.checkout))
        check_edited = _cli("export", "--config", config, "--checkout", str(edited.checkout), "--check")
        if exported.exit_code == 1:
            # An edit apply would refuse (its landing or duplicate-definition rule): export refuses it
            # by name, --check agrees, nothing is written.
            assert "sgpatch apply would find it conflict: " in exported.stderr, exported.stderr
            assert any(rule in exported.stderr for rule in ("header names", "twice", "not where the hunk")), (
                exported.stderr
            )
            assert check_edited.exit_code == 1 and check_edited.stderr == exported.stderr
            assert {p.name: p.read_bytes() for p in edited.series.iterdir()} == before
            counter["refused by name"] += 1
            shutil.rmtree(work)
            return
        assert exported.exit_code == 0, exported.stdout + exported.stderr
        assert check_edited.exit_code == 0, check_edited.stdout
        counter["exported"] += 1
        applied = _cli("apply", "--config", config, "--checkout", str(fresh.checkout))
        assert applied.exit_code == 0, applied.stdout + applied.stderr
        head = smallgit(edited.checkout, "rev-parse", "HEAD")
        assert smallgit(fresh.checkout, "rev-parse", "HEAD") == head  # same tree, same series commits
        check_fresh = _cli("export", "--config", config, "--checkout", str(fresh.checkout), "--check")
        assert check_fresh.exit_code == 0, check_fresh.stdout
        log = smallgit(fresh.checkout, "log", "--format=%B", f"{pristine.base}..HEAD").decode()
        assert log.count("Sgpatch-Patch: ") == 3 and log.count("Sgpatch-Patch-Sha256: ") == 3
        shutil.rmtree(work)

    check()
    record(
        "engine-round-trip",
        exit=0,
        shown=f"{counter['exported']} random edits exported, applied on a fresh checkout: the same HEAD; "
        f"{counter['refused by name']} refused by export with apply's named rule",
    )


AUTHORS = "python/sglang/jit_kernel/flash_attention/cute/AUTHORS"


def test_round_trip_of_a_file_without_final_newline_on_059(
    tmp_path: Path, patched_checkout: Callable[[], Path], pristine_checkout: Callable[[], Path]
) -> None:
    proj = copy_project(tmp_path / "proj", {})
    config = str(proj / "VERSIONS.toml")
    co = patched_checkout()
    old = (co / AUTHORS).read_bytes()
    assert not old.endswith(b"\n")
    (co / AUTHORS).write_bytes(old + b"\nA. N. Other")  # still no final newline
    smallgit(co, "commit", "-q", "-a", "-m", "cute: one more author")
    exported = _cli("export", "--config", config, "--checkout", str(co))
    assert exported.exit_code == 0, exported.stderr
    new_patch = next((proj / "patches/0.5.9").glob("0004-*.patch")).read_bytes()
    assert new_patch.count(b"\\ No newline at end of file") == 2
    assert _cli("export", "--config", config, "--checkout", str(co), "--check").exit_code == 0
    fresh = pristine_checkout()
    applied = _cli("apply", "--config", config, "--checkout", str(fresh))
    assert applied.exit_code == 0, applied.stdout + applied.stderr
    assert smallgit(fresh, "rev-parse", "HEAD") == smallgit(co, "rev-parse", "HEAD")
    verified = _cli("verify", "--config", config, "--checkout", str(co), "--json")
    assert verified.exit_code == 0, verified.stdout
    assert json.loads(verified.stdout)["phase"] == "patched"
    record("engine-authors-round-trip", exit=0, shown="0004 exported with both markers; apply gives the same HEAD")


def test_mode_changes_reach_the_commits_and_verify(tiny_pair: tuple[Tiny, Tiny], tmp_path: Path) -> None:
    pristine, patched = tiny_pair
    edited = patched.copy(tmp_path / "edited")
    script = edited.checkout / "python/pkg/mod1.py"
    script.chmod(0o755)
    (edited.checkout / "tools/run.sh").parent.mkdir()
    (edited.checkout / "tools/run.sh").write_bytes(b"#!/bin/sh\n")
    (edited.checkout / "tools/run.sh").chmod(0o755)
    smallgit(edited.checkout, "add", "-A")
    smallgit(edited.checkout, "commit", "-q", "-m", "local: executable bits")
    config = str(edited.config)
    assert _cli("export", "--config", config, "--checkout", str(edited.checkout)).exit_code == 0
    patch = next(edited.series.glob("0003-*.patch")).read_bytes()
    assert b"old mode 100644\nnew mode 100755\n" in patch and b"new file mode 100755\n" in patch
    fresh = pristine.copy(tmp_path / "fresh")
    before = _cli("verify", "--config", config, "--checkout", str(fresh.checkout), "--json")
    assert json.loads(before.stdout)["phase"] == "pristine"
    assert _cli("apply", "--config", config, "--checkout", str(fresh.checkout)).exit_code == 0
    listed = smallgit(fresh.checkout, "ls-tree", "-r", "HEAD", "--", "python/pkg/mod1.py", "tools/run.sh").decode()
    assert [ln.split(" ", 1)[0] for ln in listed.splitlines()] == ["100755", "100755"]
    assert smallgit(fresh.checkout, "rev-parse", "HEAD") == smallgit(edited.checkout, "rev-parse", "HEAD")
    after = _cli("verify", "--config", config, "--checkout", str(fresh.checkout), "--json")
    assert after.exit_code == 0 and json.loads(after.stdout)["phase"] == "patched", after.stdout
    # The work tree lost the executable bit: the mode-only change no longer stands.
    (fresh.checkout / "python/pkg/mod1.py").chmod(0o644)
    lost = _cli("verify", "--config", config, "--checkout", str(fresh.checkout), "--json")
    doc = json.loads(lost.stdout)
    assert lost.exit_code == 1 and doc["phase"] == "mixed", lost.stdout
    assert any(f.startswith("patch 0003-") for f in doc["failures"]), doc["failures"]
    record("engine-mode-commits", exit=0, shown="0003 carries both modes; apply commits 100755; verify: patched")


def test_stated_old_mode_is_checked() -> None:
    section = b"diff --git a/x b/x\nold mode 100644\nnew mode 100755\n"
    parsed = parse_patch(PATCH_HEADER + section, Path("0001-engine.patch"))
    files = {"x": b"a\n"}
    assert apply_patch(files, parsed, modes={"x": "100644"}) == {"x": b"a\n"}
    wrong = apply_patch(files, parsed, modes={"x": "100755"})
    assert isinstance(wrong, HunkFailure)
    assert wrong.describe() == "x: file header: the file has mode 100755, the patch expects mode 100644"
    assert classify_one(files, parsed, {"x": "100755"}).state == "upstream"
    assert classify_one(files, parsed, {"x": "100644"}).state == "applicable"
    assert apply_modes({"x": "100644"}, parsed) == {"x": "100755"}
    assert apply_modes({"x": "100755"}, parsed, reverse=True) == {"x": "100644"}


def test_export_refuses_a_series_apply_would_refuse(tiny_pair: tuple[Tiny, Tiny], tmp_path: Path) -> None:
    _, patched = tiny_pair
    edited = patched.copy(tmp_path / "edited")
    module = edited.checkout / "python/pkg/mod0.py"
    module.write_bytes(module.read_bytes() + b"\n\ndef helper_0():\n    return None\n")  # defined twice now
    smallgit(edited.checkout, "commit", "-q", "-a", "-m", "local: a second helper_0")
    before = {p.name: p.read_bytes() for p in edited.series.iterdir()}
    config = str(edited.config)
    for extra in ((), ("--check",)):
        result = _cli("export", "--config", config, "--checkout", str(edited.checkout), *extra)
        assert result.exit_code == 1, result.stdout + result.stderr
        assert (
            "sgpatch apply would find it conflict: would define python/pkg/mod0.py: helper_0 in module twice"
            in result.stderr
        ), result.stderr
    assert {p.name: p.read_bytes() for p in edited.series.iterdir()} == before
    record("engine-export-self-check", exit=1, shown=result.stderr.strip().splitlines()[0])


def test_a_block_found_at_an_offset_only_where_it_stands_once() -> None:
    """``allow_offset``'s search (a C scan for the block's first line, then the block) gives what trying every place
    gives: the place where the block stands, only where it stands exactly once."""

    def every_place(lines: list[bytes], block: list[bytes]) -> int | None:
        hits = [i + 1 for i in range(len(lines) - len(block) + 1) if lines[i : i + len(block)] == block]
        return hits[0] if block and len(hits) == 1 else None

    rng = random.Random(27)
    alphabet = [b"a\n", b"b\n", b"c\n", b"\n", b"    pass\n"]
    for _ in range(3000):
        lines = [rng.choice(alphabet) for _ in range(rng.randint(0, 14))]
        if lines and rng.random() < 0.7:
            at = rng.randrange(len(lines))
            block = lines[at : at + rng.randint(0, 4)]
        else:
            block = [rng.choice(alphabet) for _ in range(rng.randint(0, 5))]
        assert _find_unique(lines, block) == every_place(lines, block), (lines, block)
    assert _find_unique([b"x\n", b"y\n"], [b"x\n", b"y\n", b"z\n"]) is None  # longer than the file
    assert _find_unique([b"x\n", b"y\n", b"x\n"], [b"y\n"]) == 2
    assert _find_unique([b"x\n", b"y\n", b"x\n"], [b"x\n"]) is None  # twice


def test_a_name_is_said_where_findall_finds_it() -> None:
    """``hunks.says`` (a byte search per name) against the set ``_NAME.findall`` makes of the whole text, on random
    texts of letters, digits, ``_`` and separators (``9abc`` says ``abc``, ``a9abc`` does not) and on a real file."""
    rng = random.Random(11)
    alphabet = b"ab9_ .(\n0"
    for _ in range(3000):
        text = bytes(rng.choice(alphabet) for _ in range(rng.randrange(30)))
        found = set(_NAME.findall(text))
        names = found | {bytes(rng.choice(b"ab9_") for _ in range(rng.randrange(1, 4))) for _ in range(4)}
        for name in names:
            if _NAME.fullmatch(name):
                assert says(text, name) is (name in found), (text, name)
    real = (DATA / "series" / "slime-sglang-0.5.9.patch").read_bytes()
    found = set(_NAME.findall(real))
    assert all(says(real, name) for name in found)
    assert not any(says(real, name + b"_not_there_9") for name in list(found)[:200])
