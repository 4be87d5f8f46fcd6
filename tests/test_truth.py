"""Issue 17: what a careless user or an attacker did, each row a test, run as real ``python -m sgpatch`` processes.

Every run has its own ``XDG_CACHE_HOME`` and ``TMPDIR`` (where a bug's traceback file would land).  The
invariant of rows 4 to 9: after each change, a plain run prints exactly what ``--no-cache`` prints and
exits the same.  Rows 2 and 3: the program a checkout (or its submodule) configures never runs, in
``verify`` or ``apply``, while a plain ``git status`` in the same repository does run it (the control: without
it the test would prove nothing).  Then: git's refusal of a repository owned by another user is said as
such, and text from outside reaches the terminal with its control characters made visible.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sgpatch.git.repo import git_env

from .helpers import copy_project, make_venv
from .reliability import CASES, first_error, record

KIMI = "python/sglang/srt/models/kimi_k25.py"
VERSION_PY = "python/sglang/version.py"
ANCHOR_LINES = "lines = [2944, 2963]"  # deepseek-embed-and-head in the shipped anchors.toml
MOVED_LINES = "lines = [2945, 2964]"  # the same length: the anchor now says the text is one line lower
REPO_ANCHORS = Path(__file__).resolve().parent.parent / "patches/0.5.9/anchors.toml"


@dataclass(frozen=True)
class Run:
    code: int
    out: bytes
    err: bytes

    @property
    def stdout(self) -> str:
        return self.out.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.err.decode("utf-8", "replace")

    def same(self) -> tuple[int, bytes, bytes]:
        return self.code, self.out, self.err


class Sgpatch:
    """``python -m sgpatch`` in ``cwd``, with a private cache and temporary directory."""

    def __init__(self, where: Path, cwd: Path | None = None) -> None:
        self.cache = where / "xdg-cache"
        self.tmp = where / "tmpdir"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd or where
        self.env_extra: dict[str, str] = {}
        self.python = sys.executable

    def env(self) -> dict[str, str]:
        return {**os.environ, "XDG_CACHE_HOME": str(self.cache), "TMPDIR": str(self.tmp), **self.env_extra}

    def __call__(self, *args: str, preexec: Callable[[], None] | None = None, timeout: float = 120) -> Run:
        proc = subprocess.run(
            [self.python, "-m", "sgpatch", *args],
            cwd=self.cwd,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            preexec_fn=preexec,  # runs in the child after its streams are set: it may close one
            timeout=timeout,
            check=False,
        )
        return Run(proc.returncode, proc.stdout or b"", proc.stderr or b"")

    def bug_files(self) -> list[Path]:
        return sorted(self.tmp.glob("sgpatch-bug-*"))

    def plain_is_no_cache(self, *args: str) -> Run:
        """Run ``args`` plain, then with ``--no-cache``, then plain again: all three the same, no traceback."""
        first = self(*args)
        uncached = self(*args, "--no-cache")
        again = self(*args)
        assert first.same() == uncached.same() == again.same(), (first, uncached, again)
        assert "Traceback" not in first.stderr and "internal error" not in first.stderr, first.stderr
        assert self.bug_files() == []
        return first


def plain_git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """git as a user runs it: no neutralizing settings (only the inherited ``GIT_*`` scrubbed)."""
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, env=git_env(), timeout=120, check=False)


def user_git(repo: Path, *args: str) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always"]
    proc = plain_git(repo, *ident, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode().strip()


def restat(path: Path, seconds: int) -> None:
    """Same bytes, another inode and mtime: git must read the file again (through its clean filter) to
    know whether it changed."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    os.utime(path, (seconds, seconds))


def plant_filter(git_dir: Path, marker: Path, pattern: str) -> None:
    """A clean filter in the repository's own config that creates ``marker``, applied to ``pattern``."""
    with (git_dir / "config").open("a") as fh:
        fh.write(f'[filter "evil"]\n\tclean = touch {marker}; cat\n')
    (git_dir / "info").mkdir(exist_ok=True)
    with (git_dir / "info" / "attributes").open("a") as fh:
        fh.write(f"{pattern} filter=evil\n")


def edit_anchor(project: Path) -> None:
    anchors = project / "patches/0.5.9/anchors.toml"
    text = anchors.read_text()
    assert text.count(ANCHOR_LINES) == 1
    anchors.write_text(text.replace(ANCHOR_LINES, MOVED_LINES))


def close_fd(fd: int) -> Callable[[], None]:
    return lambda: os.close(fd)


# --------------------------------------------------------------------------- row 1: a closed stream


def test_row1_a_closed_stdout_or_stderr_never_changes_a_later_run(
    patched_checkout: Callable[[], Path], tmp_path: Path
) -> None:
    """``2>&-`` and ``>&-`` (the descriptor closed, not /dev/null): the documented exit code, no traceback,
    nothing kept that a later run would show."""
    co = patched_checkout()
    proj = copy_project(tmp_path / "proj")
    sg = Sgpatch(tmp_path, cwd=proj)
    missing = ("verify", "--checkout", str(tmp_path / "nonexistent" / "x"))
    codes = {}
    for name, args, fd, code in [
        ("verify-missing 2>&-", missing, 2, 2),
        ("verify-missing >&-", missing, 1, 2),
        ("verify 2>&-", ("verify", "--checkout", str(co)), 2, 0),
        ("verify >&-", ("verify", "--checkout", str(co)), 1, 0),
        ("fetch --into (present) 2>&-", ("fetch", "--into", str(co)), 2, 0),
        ("verify --wheel (missing) 2>&-", ("verify", "--wheel", str(tmp_path / "none.whl")), 2, 2),
    ]:
        closed = sg(*args, preexec=close_fd(fd))
        codes[name] = closed.code
        assert closed.code == code, (name, closed)
        assert sg.bug_files() == [], (name, [p.read_text() for p in sg.bug_files()])
        # whichever stream stayed open holds no traceback either
        assert b"Traceback" not in closed.out + closed.err, name
        # the next runs: as if the closed one never happened
        after = sg.plain_is_no_cache(*missing)
        assert after.code == 2 and "no such checkout" in after.stderr, after
        assert sg.plain_is_no_cache("verify", "--checkout", str(co)).code == 0
    for entry in sg.cache.rglob("*") if sg.cache.exists() else []:
        assert not entry.is_file() or b"Traceback" not in entry.read_bytes(), entry
    record(
        "truth-closed-stream",
        exit=codes["fetch --into (present) 2>&-"],
        shown="; ".join(f"{name}: exit {code}" for name, code in codes.items()),
        roots=(tmp_path, co.parent),
    )


# --------------------------------------------------------------------------- row 2: a gitdir: file, a symlink


def _evil_repo(pristine_checkout: Callable[[], Path], marker: Path) -> Path:
    """A pristine checkout whose own config names a clean filter for version.py, which git must re-read."""
    evil = pristine_checkout()
    plant_filter(evil / ".git", marker, VERSION_PY)
    restat(evil / VERSION_PY, 1_600_000_000)
    return evil


@pytest.mark.parametrize("how", ["gitdir-file", "symlink"])
def test_row2_a_repointed_gitdir_file_or_symlinked_checkout_is_guarded(
    how: str, pristine_checkout: Callable[[], Path], tmp_path: Path
) -> None:
    """A run on a clean repository, then the checkout re-pointed at one whose configuration names a clean
    filter: the configuration is checked like any checkout's before git runs there (exit 2, nothing runs)."""
    marker = tmp_path / "MARKER"
    clean = pristine_checkout()
    evil = _evil_repo(pristine_checkout, marker)
    if how == "gitdir-file":
        checkout = tmp_path / "worktree"
        shutil.copytree(clean, checkout, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        (checkout / ".git").write_text(f"gitdir: {clean / '.git'}\n")
    else:
        checkout = tmp_path / "link"
        checkout.symlink_to(clean)
    proj = copy_project(tmp_path / "proj")
    sg = Sgpatch(tmp_path, cwd=proj)
    assert sg.plain_is_no_cache("verify", "--checkout", str(checkout)).code == 0
    if how == "gitdir-file":
        (checkout / ".git").write_text(f"gitdir: {evil / '.git'}\n")
    else:
        checkout.unlink()
        checkout.symlink_to(evil)
    case = CASES[f"truth-{how}-repointed"]
    refused = sg.plain_is_no_cache("verify", "--checkout", str(checkout))
    assert refused.code == case.exit == 2, refused
    assert case.expect in refused.stderr
    assert not marker.exists(), "verify ran the filter the re-pointed repository configures"
    applied = sg("apply", "--checkout", str(checkout))
    assert applied.code == 2 and case.expect in applied.stderr, applied
    assert not marker.exists(), "apply ran the filter the re-pointed repository configures"
    record(case.id, exit=refused.code, shown=first_error(refused.stderr), roots=(tmp_path, evil.parent))
    plain_git(checkout, "status")
    assert marker.exists(), "plain git status did not run the planted filter: the test proves nothing"


# --------------------------------------------------------------------------- row 3: a submodule


def _submodule(co: Path, marker: Path, at: str = "python/sub") -> Path:
    """A repository at ``at`` inside ``co``, staged there as a submodule, whose own config names a clean
    filter for its one file; its ``ignore = none`` (in .gitmodules and .git/config) asks status to look."""
    sub = co / at
    sub.mkdir(parents=True)
    user_git(sub, "init", "-q")
    (sub / "a.txt").write_text("a file of the submodule\n")
    user_git(sub, "add", "a.txt")
    user_git(sub, "commit", "-q", "-m", "submodule")
    plant_filter(sub / ".git", marker, "a.txt")
    user_git(co, "add", at)
    (co / ".gitmodules").write_text(f'[submodule "sub"]\n\tpath = {at}\n\turl = ./sub\n\tignore = none\n')
    user_git(co, "config", "submodule.sub.ignore", "none")
    return sub


def test_row3_git_never_enters_a_submodule(pristine_checkout: Callable[[], Path], tmp_path: Path) -> None:
    """A staged submodule whose own config names a clean filter, its file due to be read again: neither
    verify nor apply (nor a second verify from the cache) runs it; plain ``git status`` does."""
    co = pristine_checkout()
    marker = tmp_path / "MARKER"
    sub = _submodule(co, marker)
    proj = copy_project(tmp_path / "proj")
    sg = Sgpatch(tmp_path, cwd=proj)
    runs: dict[str, Run] = {}
    for n, (name, args) in enumerate(
        [
            ("verify", ("verify",)),
            ("verify --no-cache", ("verify", "--no-cache")),
            ("verify (again)", ("verify",)),
            ("apply", ("apply",)),
        ]
    ):
        restat(sub / "a.txt", 1_600_000_000 + n)
        runs[name] = sg(*args, "--checkout", str(co))
        assert not marker.exists(), f"{name} ran the filter of the submodule's own config"
    assert runs["verify"].same() == runs["verify --no-cache"].same() == runs["verify (again)"].same()
    case = CASES["truth-submodule-filter"]
    assert runs["verify"].code == case.exit == 0, runs["verify"]
    assert case.expect in runs["verify"].stdout
    assert runs["apply"].code == 2 and "uncommitted changes" in runs["apply"].stderr, runs["apply"]
    record(case.id, exit=0, shown=f"{case.expect}; apply exit {runs['apply'].code}; no marker", roots=(tmp_path,))
    restat(sub / "a.txt", 1_500_000_000)
    plain_git(co, "status")
    assert marker.exists(), "plain git status did not enter the submodule: the test proves nothing"


@pytest.mark.parametrize("at", ["python/sglang/srt/models", KIMI])
def test_row3_a_gitlink_where_the_series_patches_is_refused(
    at: str, pristine_checkout: Callable[[], Path], tmp_path: Path
) -> None:
    """A gitlink at a file the series patches, or at a directory on the way to one: the files there are
    another repository's; verify and apply refuse with one line (exit 2), and run nothing."""
    co = pristine_checkout()
    marker = tmp_path / "MARKER"
    sub = _submodule(co, marker, "python/sub")
    commit = user_git(sub, "rev-parse", "HEAD")
    user_git(co, "update-index", "--add", "--replace", "--cacheinfo", f"160000,{commit},{at}")
    proj = copy_project(tmp_path / "proj")
    sg = Sgpatch(tmp_path, cwd=proj)
    case = CASES["truth-gitlink-on-patched-path"]
    refused = sg.plain_is_no_cache("verify", "--checkout", str(co))
    assert refused.code == case.exit == 2, refused
    assert case.expect in refused.stderr and f"{at} is a submodule" in refused.stderr
    assert len(refused.stderr.splitlines()) == 2  # the error and its hint
    applied = sg("apply", "--checkout", str(co))
    assert applied.code == 2 and case.expect in applied.stderr, applied
    assert not marker.exists()
    record(case.id, exit=refused.code, shown=first_error(refused.stderr), roots=(tmp_path, co.parent))


def test_no_git_command_of_sgpatch_enters_a_submodule(pristine_checkout: Callable[[], Path], tmp_path: Path) -> None:
    """Each question sgpatch puts to git, put to a checkout with a staged submodule whose own filter would
    run: status, the index checks, a refresh, a two-way read-tree, the diffs, hashing the work tree; then
    the same commands as a user types them (the control)."""
    from sgpatch.git.diff import diff_patch
    from sgpatch.git.repo import Git

    co = pristine_checkout()
    marker = tmp_path / "MARKER"
    sub = _submodule(co, marker)
    g = Git(co)
    head = g.head()
    assert head is not None
    questions: dict[str, Callable[[], object]] = {
        "status": g.status,
        "gitlinks": g.gitlinks,
        "diff-index --cached": lambda: g.index_matches(head),
        "update-index --refresh": g.refresh_index,
        "read-tree -m -u": lambda: g.read_tree_update(head, head),
        "diff-tree": lambda: g.changed_paths(head, head),
        "diff": lambda: diff_patch(g, head, head),
        "hash-object": lambda: g.hash_files([VERSION_PY]),
    }
    for n, (name, ask) in enumerate(questions.items()):
        restat(sub / "a.txt", 1_600_000_000 + n)
        ask()
        assert not marker.exists(), f"git {name} entered the submodule"
    assert ("python/sub", user_git(sub, "rev-parse", "HEAD")) in g.gitlinks()
    assert any(e.endswith("python/sub") for e in g.status())  # the staged gitlink is still a change
    for n, args in enumerate([("status",), ("diff-files",)]):
        restat(sub / "a.txt", 1_500_000_000 + n)
        plain_git(co, *args)
        assert marker.exists(), f"plain git {args[0]} did not enter the submodule: the control failed"
        marker.unlink()


# --------------------------------------------------------------------------- rows 4 to 6: where things are


def test_row4_project_and_checkout_under_a_pycache_directory(
    patched_checkout: Callable[[], Path], tmp_path: Path
) -> None:
    """Nothing is special about a directory named ``__pycache__``: an edited anchor, then an edited file,
    each answered as ``--no-cache`` answers."""
    under = tmp_path / "__pycache__"
    co = under / "checkout"
    shutil.copytree(patched_checkout(), co, symlinks=True)
    proj = copy_project(under / "proj")
    sg = Sgpatch(tmp_path, cwd=proj)
    assert sg.plain_is_no_cache("verify", "--checkout", str(co)).code == 0
    edit_anchor(proj)
    moved = sg.plain_is_no_cache("verify", "--checkout", str(co))
    assert moved.code == CASES["truth-pycache"].exit == 1, moved
    assert CASES["truth-pycache"].expect in moved.stderr
    kimi = co / KIMI
    kimi.write_bytes(kimi.read_bytes().replace(b"def get_embed_and_head(self)", b"def get_embed_and_headX(self)"))
    drifted = sg.plain_is_no_cache("verify", "--checkout", str(co))
    assert drifted.code == 1 and drifted.stdout != moved.stdout
    record("truth-pycache", exit=moved.code, shown=first_error(moved.stderr), roots=(tmp_path,))


def test_row5_config_given_through_a_symlink(patched_checkout: Callable[[], Path], tmp_path: Path) -> None:
    """``--config LINK/../VERSIONS.toml``, LINK a symlink into the project: an edited anchor, then LINK
    re-pointed into another project, each answered as ``--no-cache`` answers."""
    co = patched_checkout()
    proj = copy_project(tmp_path / "real" / "proj")
    other = copy_project(tmp_path / "real" / "other")
    edit_anchor(other)
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "LINK"
    link.symlink_to(proj / "patches")
    config = f"{link}/../VERSIONS.toml"
    sg = Sgpatch(tmp_path)
    args = ("verify", "--checkout", str(co), "--config", config)
    assert sg.plain_is_no_cache(*args).code == 0
    edit_anchor(proj)
    moved = sg.plain_is_no_cache(*args)
    assert moved.code == 1 and "deepseek-embed-and-head: moved" in moved.stderr, moved
    shutil.copy2(REPO_ANCHORS, proj / "patches/0.5.9/anchors.toml")
    assert sg.plain_is_no_cache(*args).code == 0
    link.unlink()
    link.symlink_to(other / "patches")
    again = sg.plain_is_no_cache(*args)
    assert again.code == 1, again
    record("truth-config-through-link", exit=moved.code, shown=first_error(moved.stderr), roots=(tmp_path,))


def test_row6_series_directory_link_repointed_outside(patched_checkout: Callable[[], Path], tmp_path: Path) -> None:
    """``patches/0.5.9`` a symlink to a directory inside the project, then re-pointed at an identical copy
    outside it: refused (exit 2) as ``--no-cache`` refuses it."""
    co = patched_checkout()
    proj = copy_project(tmp_path / "proj")
    series = proj / "patches" / "0.5.9"
    inside = proj / "patches" / "kept-0.5.9"
    series.rename(inside)
    series.symlink_to(inside)
    outside = tmp_path / "outside" / "0.5.9"
    shutil.copytree(inside, outside)
    sg = Sgpatch(tmp_path, cwd=proj)
    assert sg.plain_is_no_cache("verify", "--checkout", str(co)).code == 0
    series.unlink()
    series.symlink_to(outside)
    case = CASES["truth-series-link-outside"]
    refused = sg.plain_is_no_cache("verify", "--checkout", str(co))
    assert refused.code == case.exit == 2 and case.expect in refused.stderr, refused
    record(case.id, exit=refused.code, shown=first_error(refused.stderr), roots=(tmp_path,))


# --------------------------------------------------------------------------- row 7: not a regular file

NON_REGULAR = {
    "fifo": lambda path: os.mkfifo(path),
    "directory": lambda path: path.mkdir(),
    "device": lambda path: path.symlink_to("/dev/zero"),
}
PROJECT_FILES = {"versions": "VERSIONS.toml", "series": "patches/0.5.9/series", "anchors": "patches/0.5.9/anchors.toml"}


@pytest.mark.parametrize("kind", list(NON_REGULAR))
@pytest.mark.parametrize("which", list(PROJECT_FILES))
def test_row7_a_project_file_that_is_not_a_regular_file(
    which: str, kind: str, patched_checkout: Callable[[], Path], tmp_path: Path
) -> None:
    """VERSIONS.toml (found from the working directory), the series file or anchors.toml replaced by a FIFO
    (no writer: reading it would block for ever), a directory or a device: one line naming it, exit 2."""
    co = patched_checkout()
    proj = copy_project(tmp_path / "proj")
    sg = Sgpatch(tmp_path, cwd=proj)
    args = ("verify", "--checkout", str(co))
    assert sg.plain_is_no_cache(*args).code == 0
    target = proj / PROJECT_FILES[which]
    target.unlink()
    NON_REGULAR[kind](target)
    case = CASES[f"truth-nonregular-{which}-{kind}"]
    refused = sg.plain_is_no_cache(*args)
    assert refused.code == case.exit == 2, refused
    assert refused.stderr.splitlines() == [f"sgpatch: error: {target}: cannot read: {case.expect}"], refused.stderr
    assert refused.out == b""
    record(case.id, exit=refused.code, shown=first_error(refused.stderr), roots=(tmp_path,))


# --------------------------------------------------------------------------- row 8: anchors swapped


def test_row8_anchors_swapped_between_and_during_runs(patched_checkout: Callable[[], Path], tmp_path: Path) -> None:
    """anchors.toml swapped back and forth (atomic renames) while plain runs read it: each run's answer is
    exactly the one ``--no-cache`` gives for one of the two files, never a mix; once the swapping stops,
    plain runs answer for the file that is there.  Then rewritten in place with bytes of the same length
    and its modification time put back (nothing a stat sees changed): still ``--no-cache``'s answer."""
    co = patched_checkout()
    proj = copy_project(tmp_path / "proj")
    anchors = proj / "patches/0.5.9/anchors.toml"
    good = tmp_path / "good.toml"
    moved = tmp_path / "moved.toml"
    shutil.copy2(anchors, good)
    moved.write_text(good.read_text().replace(ANCHOR_LINES, MOVED_LINES))
    sg = Sgpatch(tmp_path, cwd=proj)
    args = ("verify", "--checkout", str(co))
    answers = {}
    for name, source in (("moved", moved), ("good", good)):
        shutil.copy2(source, anchors)
        answers[name] = sg.plain_is_no_cache(*args).same()
    assert answers["good"][0] == 0 and answers["moved"][0] == 1

    stop = threading.Event()

    def swap() -> None:
        k = 0
        while not stop.is_set():
            spare = anchors.with_name(f".swap{k % 2}")
            shutil.copyfile(moved if k % 2 else good, spare)
            os.replace(spare, anchors)
            k += 1
            stop.wait(0.002)  # hundreds of swaps during each run, without taking a core from the runs

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        seen = [sg(*args).same() for _ in range(12)]
    finally:
        stop.set()
        swapper.join()
    assert all(answer in answers.values() for answer in seen), "a run answered for neither file"
    for name, source in (("good", good), ("moved", moved), ("good", good)):
        shutil.copy2(source, anchors)
        assert sg.plain_is_no_cache(*args).same() == answers[name], name

    before = anchors.stat()  # the good file is in place
    with anchors.open("r+b") as fh:  # the same inode, the same size
        text = fh.read()
        fh.seek(0)
        fh.write(text.replace(ANCHOR_LINES.encode(), MOVED_LINES.encode()))
    os.utime(anchors, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = anchors.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    case = CASES["truth-anchors-swapped"]
    run = sg.plain_is_no_cache(*args)
    assert run.same() == answers["moved"] and run.code == case.exit and case.expect in run.stderr
    record(case.id, exit=run.code, shown=first_error(run.stderr), roots=(tmp_path,))


# --------------------------------------------------------------------------- row 9: an importable torch

FAKE_MODULE = """
class Module:
    training: bool

    def __init__(self):
        pass

    def get_embed_and_head(self):
        return None

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        return None
"""


@pytest.mark.parametrize("how", ["pythonpath", "pth"])
def test_row9_check_interface_follows_the_torch_it_reads(
    how: str, pristine_checkout: Callable[[], Path], tmp_path: Path
) -> None:
    """``torch.nn.Module``'s members are read from the torch sgpatch's interpreter would find (never
    imported).  A folder on its path from the start (on ``PYTHONPATH``, or named by a ``.pth`` file), then a
    torch put in it whose ``Module`` defines the two missing methods: the gaps close; its ``Module`` edited,
    one comes back; the torch removed, both.  The command line and environment never change; every answer is
    ``--no-cache``'s."""
    co = pristine_checkout()
    proj = copy_project(tmp_path / "proj")
    sg = Sgpatch(tmp_path, cwd=proj)
    # A venv of this test's own, whose site-packages can hold a .pth file: it sees this environment's
    # packages (sgpatch included) through a .pth file that adds their directory.
    sg.python = str(make_venv(tmp_path / "venv"))
    site_packages = Path(
        subprocess.run(
            [sg.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ours = sysconfig.get_paths()["purelib"]
    (site_packages / "outer.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    if how == "pythonpath":
        sg.env_extra = {"PYTHONPATH": str(folder)}
    else:
        (site_packages / "folder.pth").write_text(f"{folder}\n")
    args = ("check-interface", "--checkout", str(co))
    gaps = sg.plain_is_no_cache(*args)
    assert gaps.code == 1 and "lacks get_embed_and_head" in gaps.stdout, gaps
    module = folder / "torch" / "nn" / "modules" / "module.py"
    module.parent.mkdir(parents=True)
    for init in (folder / "torch", folder / "torch" / "nn", module.parent):
        (init / "__init__.py").write_text("")
    module.write_text(FAKE_MODULE)
    closed = sg.plain_is_no_cache(*args)
    case = CASES[f"truth-torch-{how}"]
    assert closed.code == case.exit == 0, closed
    assert case.expect in closed.stdout
    assert str(module) in closed.stdout  # where the members were read is shown
    module.write_text(FAKE_MODULE.replace("def get_embed_and_head", "def get_embed_and_headX"))
    one = sg.plain_is_no_cache(*args)
    summary = one.stdout.split("check-interface:")[-1]
    assert one.code == 1 and "lacks get_embed_and_head" in summary and "set_eagle3" not in summary, one
    shutil.rmtree(folder / "torch")
    assert sg.plain_is_no_cache(*args).same() == gaps.same()
    record(case.id, exit=closed.code, shown=closed.stdout.splitlines()[-1], roots=(tmp_path,))


# --------------------------------------------------------------------------- item 5: another user's repository


@pytest.mark.skipif(os.geteuid() != 0, reason="making a repository another user owns needs root (chown)")
def test_a_repository_of_another_user_is_said_as_such(pristine_checkout: Callable[[], Path], tmp_path: Path) -> None:
    """git's safe.directory refusal ("detected dubious ownership") is the line the user reads, with the
    command that trusts the directory; not "not the top of a git work tree"."""
    co = pristine_checkout()
    os.chown(co, 65534, -1)
    proj = copy_project(tmp_path / "proj")
    sg = Sgpatch(tmp_path, cwd=proj)
    case = CASES["checkout-dubious-ownership"]
    for command, where in [
        ("verify", "--checkout"),
        ("apply", "--checkout"),
        ("check-interface", "--checkout"),
        ("export", "--checkout"),
        ("fetch", "--into"),
    ]:
        run = sg(command, where, str(co))
        if command == "check-interface":
            assert run.code == 1, run  # reads files only: no git, no ownership question
            continue
        assert run.code == case.exit == 2, (command, run)
        assert run.stderr.splitlines() == [
            f"sgpatch: error: {co}: git refuses the repository at {co}: it belongs to another user "
            "(detected dubious ownership)",
            f"hint: if you trust it: git config --global --add safe.directory {co}",
        ], run.stderr
        if command == "verify":
            first = run
    assert "not the top of a git work tree" not in first.stderr
    record(case.id, exit=first.code, shown=first_error(first.stderr), roots=(tmp_path, co.parent))


# --------------------------------------------------------------------------- item 4: text from outside

RED = "\x1b[31m"


def _strings(doc: object) -> list[str]:
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        doc = list(doc.values())
    return [s for item in doc for s in _strings(item)] if isinstance(doc, list) else []


def _no_raw_controls(run: Run) -> None:
    for stream in (run.out, run.err):
        assert not any(b < 32 and b not in b"\n\t" for b in stream), stream
        assert b"\x7f" not in stream


@pytest.mark.parametrize("where", ["anchor", "file-path", "commit-message", "patch-description"])
def test_text_from_outside_is_shown_escaped(where: str, pristine_checkout: Callable[[], Path], tmp_path: Path) -> None:
    """An anchor, a file name in the checkout, a git commit message, a patch's description, each holding
    ``ESC[31m`` and a carriage return: shown as ``\\x1b[31m`` on stdout and stderr, never sent raw; the
    ``--json`` document has it escaped as JSON escapes it."""
    co = pristine_checkout()
    proj = copy_project(tmp_path / "proj")
    sg = Sgpatch(tmp_path, cwd=proj)
    shown_out = shown_err = None
    if where == "anchor":
        anchors = proj / "patches/0.5.9/anchors.toml"
        anchors.write_text(
            anchors.read_text()
            + '\n[[anchor]]\nid = "hostile"\nfile = "python/\\u001b[31mred\\rfake.py"\nlines = [1, 1]\n'
            + 'phase = "both"\nfirst_line = "x"\n'
        )
        verify = sg("verify", "--checkout", str(co))
        assert verify.code == 1, verify
        shown_out, shown_err = verify, verify
    elif where == "file-path":
        (co / "python" / f"e{RED}\rvil.py").write_text("untracked\n")
        verify = sg("verify", "--checkout", str(co))
        apply = sg("apply", "--checkout", str(co))
        assert verify.code == 0 and apply.code == 2, (verify, apply)
        shown_out, shown_err = verify, apply
    elif where == "commit-message":
        # a trailer's value is one word (\\S+): the escape sequence fits in it, a carriage return cannot
        message = f"a foreign commit\n\nSgpatch-Patch: {RED}evil\nSgpatch-Patch-Sha256: 0\n"
        user_git(co, "commit", "-q", "--allow-empty", "-m", message)
        verify = sg("verify", "--checkout", str(co))
        apply = sg("apply", "--checkout", str(co))
        assert verify.code == 0 and apply.code == 2, (verify, apply)
        shown_out, shown_err = verify, apply
    else:
        patch = proj / "patches/0.5.9/0001-kimi-k25-eagle3-delegation.patch"
        patch.write_bytes(patch.read_bytes().replace(b"Description: ", f"Description{RED}\r: ".encode(), 1))
        verify = sg("verify", "--checkout", str(co))
        assert verify.code == 2, verify
        shown_err = verify
    for run in {id(r): r for r in (shown_out, shown_err) if r is not None}.values():
        _no_raw_controls(run)
    if shown_out is not None:
        assert "\\x1b[31m" in shown_out.stdout, shown_out.stdout
    assert shown_err is not None and CASES[f"cli-escape-{where}"].expect in shown_err.stderr, shown_err.stderr
    assert shown_err.code == CASES[f"cli-escape-{where}"].exit
    as_json = sg("verify", "--checkout", str(co), "--json")
    _no_raw_controls(as_json)
    if as_json.out and "error" not in json.loads(as_json.out):  # a report (an error document says no text of it)
        assert "\\u001b[31m" in as_json.stdout  # JSON's own escape
        assert RED in "".join(_strings(json.loads(as_json.out)))  # which decodes to the text as it was
    record(
        f"cli-escape-{where}",
        exit=shown_err.code,
        shown=next(
            ln for ln in (shown_err.stderr + shown_err.stdout).splitlines() if CASES[f"cli-escape-{where}"].expect in ln
        ),
        roots=(tmp_path, co.parent),
    )
