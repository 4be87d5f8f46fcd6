"""The port's fast paths against the slow ones they replaced (issue 27, port time against its floor).

Each helper below was made faster without changing what it answers; each test runs the new code and the
straightforward one it replaced side by side, on every file of a real SGLang release and on crafted bytes (a
carriage return, a form feed, no final newline, a marker-like line, every byte value), and fails on the first
difference.  A faster path that can disagree with the slow one is a bug.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from packaging.tags import sys_tags

from sgpatch.cache import Cache, key
from sgpatch.config import Artifact, Config, load_config
from sgpatch.errors import SgpatchError, SourceError
from sgpatch.git.diff import MergeScratch, merge_file
from sgpatch.git.repo import Git
from sgpatch.port.ahead import start_ahead
from sgpatch.port.parallel import (
    GRACE,
    JOBS_ENV,
    MAX_JOBS,
    MIN_ITEMS,
    Forked,
    Later,
    can_fork,
    forked_map,
    jobs_for,
)
from sgpatch.port.rebase import ARTIFACT_FILES, load_old, read_files
from sgpatch.port.stack import renamed
from sgpatch.series.combine import _tokens
from sgpatch.series.conflicts import norm
from sgpatch.series.patch import split_lines
from sgpatch.source.artifacts import artifacts_root, cached_source, fetch_artifact
from sgpatch.source.release import Release, find_release

from .conftest import RELEASES
from .helpers import DATA, REPO, copy_project, git_shim, snapshot
from .reliability import first_error, record
from .shared import copy
from .test_port_series import GONE, sg, slime_project  # noqa: F401  (fixtures shared at session scope)

CRAFTED = [
    b"",
    b"\n",
    b"\n\n",
    b"a",
    b"a\n",
    b"a\nb",
    b"a\r\nb\r\n",
    b"a\rb\x0cc\x0bd\x1ce\x85f\n",
    b"  # only a comment\n\t x = 'one'  # and \"two\n'three\" \n",
    b"<<<<<<< ours\n=======\n>>>>>>> theirs\n",
    bytes(range(256)) * 2,
    b'\xef\xbb\xbfdef f():\n    return "\xc3\xa9"\n',
]


def _split_lines_slow(data: bytes) -> list[bytes]:
    if not data:
        return []
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


_SPACE = re.compile(rb"\s+")


def _norm_slow(line: bytes) -> bytes:
    text = _SPACE.sub(b"", line)
    return b"" if text.startswith(b"#") else text


_TOKEN = re.compile(rb"\"[^\"\n]*\"|'[^'\n]*'|[A-Za-z_][A-Za-z0-9_]*")


def _tokens_slow(lines: list[bytes]) -> frozenset[bytes]:
    return frozenset(m.group(0) for ln in lines for m in _TOKEN.finditer(ln))


@pytest.fixture(scope="module")
def release_texts(release_tree: Callable[[str], Path]) -> list[bytes]:
    root = release_tree("0.5.12.post1")
    texts = [p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()]
    assert len(texts) > 1000
    return texts


def _all(texts: list[bytes]) -> Iterator[bytes]:
    yield from CRAFTED
    yield from texts


def test_split_lines_is_the_lf_split_it_replaced(release_texts: list[bytes]) -> None:
    for data in _all(release_texts):
        assert split_lines(data) == _split_lines_slow(data), data[:80]


def test_norm_deletes_what_the_regex_deleted(release_texts: list[bytes]) -> None:
    assert norm(bytes(range(256))) == _norm_slow(bytes(range(256)))
    for byte in range(256):
        line = b"x" + bytes([byte]) + b"y\n"
        assert norm(line) == _norm_slow(line), byte
    for data in _all(release_texts):
        for line in _split_lines_slow(data):
            assert norm(line) == _norm_slow(line), line


def test_tokens_of_all_lines_at_once_are_the_tokens_line_by_line(release_texts: list[bytes]) -> None:
    for data in _all(release_texts):
        lines = _split_lines_slow(data)
        assert _tokens(lines) == _tokens_slow(lines), data[:80]
        unterminated = [line.rstrip(b"\n") for line in lines]  # lines without their breaks do not run together
        assert _tokens(unterminated) == _tokens_slow(unterminated), data[:80]


def test_the_old_release_files_kept_in_the_cache_are_the_archive_s(config: Config, tmp_path: Path) -> None:
    """``read_files`` with a cache: the second read is a hit and gives the archive's bytes exactly; an entry
    that is not what it wrote (other paths, not base64, not a string, not an object) is a miss, and the
    archive is read again."""
    artifact = config.stack(None).source_artifact
    assert artifact is not None
    path = fetch_artifact(artifact, config.stack(None).sglang_version)
    slime = DATA / "series" / "slime-sglang-0.5.9.patch"
    touched = re.findall(rb"^\+\+\+ b/(\S+)$", slime.read_bytes(), re.M)
    wanted = [*sorted({p.decode() for p in touched}), "python/sglang/not-in-the-sdist.py"]
    truth = read_files(path, artifact, wanted)
    assert truth["python/sglang/not-in-the-sdist.py"] is None and sum(v is not None for v in truth.values()) > 40
    (tmp_path / "results").mkdir(mode=0o700)
    cache = Cache(tmp_path / "results")
    assert read_files(path, artifact, wanted, cache=cache) == truth  # a miss: read, then kept
    assert (cache.hits, cache.misses) == (0, 1)
    assert read_files(path, artifact, wanted, cache=cache) == truth
    assert cache.hits == 1
    assert read_files(path, artifact, wanted[:-1], cache=cache) == {p: truth[p] for p in wanted[:-1]}  # other key
    assert cache.misses == 2
    entry = key(ARTIFACT_FILES, artifact.sha256, *wanted)
    kept = cache.get(ARTIFACT_FILES, entry)
    first = wanted[0]
    for bad in ({**kept, first: "not base64!"}, {**kept, first: 7}, {first: kept[first]}, [kept], "x"):
        cache.put(ARTIFACT_FILES, entry, bad)
        hits = cache.hits
        assert read_files(path, artifact, wanted, cache=cache) == truth
        assert cache.hits == hits + 1  # the entry was read, found bad: a miss, the archive read instead
    assert cache.get(ARTIFACT_FILES, entry) == kept  # and the good entry written back


def test_merges_in_one_scratch_give_what_each_alone_gives(release_tree: Callable[[str], Path], tmp_path: Path) -> None:
    """A port's merges share one ``MergeScratch`` where each text is written once (a memory file on Linux, else a
    file named by its order; no digest made): every merge gives the bytes and conflict count a merge of files
    in a directory of its own gives, whichever texts came before (the same text as current and base, an empty
    one, CRLF, no final newline), with all its memory files open or only the last merge's."""
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    g = Git(tmp_path / "repo")
    rel = "sglang/srt/managers/io_struct.py"
    old = (release_tree("0.5.9") / "python" / rel).read_bytes()
    new = (release_tree("0.5.12.post1") / "python" / rel).read_bytes()
    ours = old.replace(b"import ", b"import  ", 3) + b"# the patch\n"
    cases = [
        (new, old, ours),
        (new, old, old.replace(b"\n", b"\r\n", 40)),
        (new, old, ours),  # again: every text already written
        (old, old, ours),
        (b"", b"", b"one\n"),
        (b"a\nb", b"a\n", b"a\nc"),
        (ours, new, old),
    ]
    labels = ("the release", "the old base", "the patch")
    distinct = len({t for c in cases for t in c})
    for memory, keep in ((True, MergeScratch.MAX_OPEN), (True, 3), (False, MergeScratch.MAX_OPEN)):
        scratch = tmp_path / f"shared-{memory}-{keep}"
        scratch.mkdir()
        shared = MergeScratch(scratch, memory=memory)
        shared.MAX_OPEN = keep  # 3: the texts of one merge only, the others let go and written again when asked for
        before = set(os.listdir("/proc/self/fd"))
        conflicts = []
        for n, (current, base, other) in enumerate(cases):
            (scratch.parent / f"alone-{memory}-{keep}-{n}").mkdir()
            files = MergeScratch(scratch.parent / f"alone-{memory}-{keep}-{n}", memory=False)
            alone = merge_file(g, current, base, other, labels, scratch=files)
            assert merge_file(g, current, base, other, labels, scratch=shared) == alone
            conflicts.append(alone[1])
        assert 0 in conflicts and any(conflicts)  # clean merges and conflicting ones
        made = {p.name for p in scratch.iterdir()}
        if memory:  # Linux: the texts are memory files, none is made on disk; at most ``keep`` held open
            assert made == set()
            assert 0 < len(set(os.listdir("/proc/self/fd")) - before) <= min(keep, distinct)
        else:
            assert made == {str(n) for n in range(distinct)}
        shared.close()
        assert set(os.listdir("/proc/self/fd")) <= before  # every memory file let go


KIMI = "python/sglang/srt/models/kimi_k25.py"


def test_a_kept_read_stands_in_for_the_archive_only_when_every_file_is_checked_by_a_pin(tmp_path: Path) -> None:
    """``load_old`` with a cache: a crafted but well-formed entry (a planted line in a file the series touches) is
    caught by the pin check when every touched file is pinned; when one is not pinned, no kept read is used at all,
    so the archive's bytes are the port's base whatever the cache holds."""
    pin = next(
        ln for ln in (REPO / "VERSIONS.toml").read_text().splitlines(keepends=True) if ln.startswith(f'"{KIMI}"')
    )
    pinned = load_config(copy_project(tmp_path / "pinned") / "VERSIONS.toml")
    unpinned = load_config(copy_project(tmp_path / "unpinned", {pin: ""}) / "VERSIONS.toml")
    (tmp_path / "results").mkdir(mode=0o700)
    cache = Cache(tmp_path / "results")
    old, _ = load_old(pinned, None, progress=None, cache=cache)  # a miss: the archive read, then kept
    truth = old.states[0][KIMI]
    assert truth is not None and KIMI in old.series.touched
    artifact = pinned.stack(None).source_artifact
    assert artifact is not None
    entry = key(ARTIFACT_FILES, artifact.sha256, *old.series.touched)
    kept = cache.get(ARTIFACT_FILES, entry)
    crafted = {**kept, KIMI: base64.b64encode(truth + b"\n# planted\n").decode()}
    cache.put(ARTIFACT_FILES, entry, crafted)
    with pytest.raises(SourceError, match=f"{KIMI} is not the pinned blob"):
        load_old(pinned, None, progress=None, cache=cache)
    hits = cache.hits
    old, _ = load_old(unpinned, None, progress=None, cache=cache)
    assert old.states[0][KIMI] == truth  # the archive's, not the planted one
    assert cache.hits == hits and cache.get(ARTIFACT_FILES, entry) == crafted  # the cache was not consulted


# --------------------------------------------------------------------------- the files of a patch judged side by side


def _sg_port(
    proj: Path, jobs: int, tmp: Path, *, path: str | None = None, xdg: Path | None = None
) -> tuple[int, str, str, dict[str, str]]:
    """``sgpatch port`` of ``proj`` by ``jobs`` workers (1: the serial path), as a whole process: its exit code,
    its --json and its stderr (the project's path taken out), and the checkout it made (HEAD, index, status, every
    file, refs, and the port's record).  ``tmp``: its TMPDIR, left empty."""
    tmp.mkdir()
    env = {"SGPATCH_PORT_JOBS": str(jobs), "SGPATCH_PROGRESS": "0", "TMPDIR": str(tmp)}
    if path:
        env["PATH"] = path
    if xdg:
        env["XDG_CACHE_HOME"] = str(xdg)
    done = sg("port", "0.5.9-cu130", "--to", "0.5.12.post1", "--json", "--config", str(proj / "VERSIONS.toml"), **env)
    assert list(tmp.iterdir()) == []  # no worker's directory left
    co = proj / ".sgpatch" / "checkouts" / "0.5.12.post1-cu130"
    made = snapshot(co) if co.is_dir() else {}
    if co.is_dir():
        made["record"] = (co / ".git" / "sgpatch-port.json").read_text().replace(str(proj), "PROJ")
    return done.returncode, done.stdout.replace(str(proj), "PROJ"), done.stderr.replace(str(proj), "PROJ"), made


def test_a_patch_judged_by_forked_workers_is_the_serial_port(
    tmp_path: Path,
    slime_project: tuple[Path, Path],  # noqa: F811  (the fixture)
) -> None:
    """slime's 49-file patch ported by three forked workers (on any number of cores) and by the serial path: the
    same exit code, --json, stderr and checkout, byte for byte; the workers are reaped, their files removed."""
    serial = _sg_port(copy(slime_project[0], tmp_path / "serial"), 1, tmp_path / "tmp-serial")
    assert serial[0] == 1 and json.loads(serial[1])["stopped"]  # a stop at the conflicts: every path was taken
    assert _sg_port(copy(slime_project[0], tmp_path / "forked"), 3, tmp_path / "tmp-forked") == serial


def _linked_cache(xdg: Path, user: Path, *prefixes: str) -> Path:
    """``xdg`` for ``$XDG_CACHE_HOME``: a cache whose artifacts are the files named ``prefixes`` of the artifacts
    folder ``user``, hard-linked (copied where a link cannot be made): the same bytes under the same sha256."""
    for entry in sorted(user.iterdir()):
        if not entry.is_dir() or entry.is_symlink():
            continue
        for f in sorted(entry.iterdir()):
            if f.name.startswith(prefixes) and f.is_file() and not f.is_symlink():
                dest = xdg / "sgpatch" / "artifacts" / entry.name / f.name
                dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                for d in (xdg / "sgpatch", xdg / "sgpatch" / "artifacts", dest.parent):
                    d.chmod(0o700)
                try:
                    os.link(f, dest)
                except OSError:
                    shutil.copyfile(f, dest)
    return xdg


def test_a_port_worked_ahead_is_the_port_that_waited_for_the_index(
    tmp_path: Path,
    slime_project: tuple[Path, Path],  # noqa: F811  (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While pip and the index are asked, a port lays out and reads the file the cache guesses the release is
    (``port.ahead``), and keeps that work only where the index names that very file.  slime's port with the guess
    right (kept) and with the guess wrong (a decoy: the release's wheel again, named for the tag this host ranks
    first; laid out and read, then dropped, as no index names it): the same exit code, --json, stderr and checkout,
    byte for byte, and the dropped layout leaves nothing behind."""
    old, _ = load_old(load_config(slime_project[0] / "VERSIONS.toml"), None, progress=None)
    wheel = RELEASES["0.5.12.post1"]
    release = find_release("0.5.12.post1")
    assert release.source[0] == wheel  # what the index names: this host's wheel (no sdist)
    stack = renamed(old.stack, "0.5.12.post1", None)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)  # where no child may be forked, nothing is worked on ahead
    other.start()
    try:
        assert start_ahead("0.5.12.post1", old, old.series.touched, stack, tmp_path / "threaded" / "checkout") is None
    finally:
        stop.set()
        other.join()
    ports, user = [], artifacts_root()
    for name in ("right", "decoy"):
        xdg = _linked_cache(tmp_path / f"xdg-{name}", user, "sglang-0.5.9", "sglang-0.5.12.post1")
        if name == "decoy":
            cached = xdg / "sgpatch" / "artifacts" / wheel.sha256 / wheel.filename
            best = next(iter(sys_tags()))  # the tag this host ranks first
            decoy = f"sglang-0.5.12.post1-{best.interpreter}-{best.abi}-{best.platform}.whl"
            assert decoy != wheel.filename
            os.link(cached, cached.with_name(decoy))
        monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
        into = tmp_path / f"ahead-{name}" / "checkout"
        into.parent.mkdir()
        ahead = start_ahead("0.5.12.post1", old, old.series.touched, stack, into)
        assert ahead is not None and ahead.artifact.sha256 == wheel.sha256  # the guess, being worked on
        try:
            assert (ahead.artifact == wheel) is (name == "right")
            assert ahead.read is not None
            current, _ = ahead.read
            assert current.get(sorted(GONE)[0], b"") is None and any(current.values())  # the series' files, read
            assert ahead.is_source_of(fetched(release, xdg)) is (name == "right")
        finally:
            ahead.close()  # the child waiting for its message is stopped: it leaves nothing
        assert list(into.parent.iterdir()) == []
        ports.append(_sg_port(copy(slime_project[0], tmp_path / name), 2, tmp_path / f"tmp-{name}", xdg=xdg))
    assert ports[0][0] == 1 and json.loads(ports[0][1])["stopped"]
    assert ports[1] == ports[0]


def test_a_child_killed_while_it_works_ahead_leaves_nothing_either(
    tmp_path: Path,
    slime_project: tuple[Path, Path],  # noqa: F811  (the fixture)
) -> None:
    """The child laying the guess out dies without unwinding (SIGKILL: it cannot remove what it made): once it is
    reaped, closing the work done ahead removes its staging directory; nothing is left beside the checkout."""
    old, _ = load_old(load_config(slime_project[0] / "VERSIONS.toml"), None, progress=None)
    into = tmp_path / "ahead" / "checkout"
    into.parent.mkdir()
    ahead = start_ahead("0.5.12.post1", old, old.series.touched, renamed(old.stack, "0.5.12.post1", None), into)
    assert ahead is not None
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "ahead").glob(f".checkout.sgpatch-new-{ahead.laying.pid}-*/python")):
            assert time.monotonic() < deadline, "the child never started laying out"
            time.sleep(0.01)
        os.kill(ahead.laying.pid, signal.SIGKILL)
    finally:
        ahead.close()
    assert list(into.parent.iterdir()) == []


def test_a_port_whose_index_fails_while_it_works_ahead_fails_as_one_that_waited(
    tmp_path: Path,
    slime_project: tuple[Path, Path],  # noqa: F811  (the fixture)
) -> None:
    """The index cannot answer (pip's no-index, an empty find-links) while the port lays out and reads the file the
    cache guesses: the same exit code and error line as without a guess, the child laying it out stopped, nothing
    left in the project (not even the folder made for the new checkout) or the temporary directory."""
    empty = tmp_path / "wheelhouse"
    empty.mkdir()
    results = []
    user = artifacts_root()
    for name, prefixes in (("guessed", ("sglang-0.5.9", "sglang-0.5.12.post1")), ("not-guessed", ("sglang-0.5.9",))):
        xdg = _linked_cache(tmp_path / f"xdg-{name}", user, *prefixes)
        proj = copy(slime_project[0], tmp_path / name)
        before = sorted(proj.rglob("*"))
        tmp = tmp_path / f"tmp-{name}"
        tmp.mkdir()
        env = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty)}
        env.update(XDG_CACHE_HOME=str(xdg), TMPDIR=str(tmp), SGPATCH_PROGRESS="0")
        done = sg("port", "0.5.9-cu130", "--to", "0.5.12.post1", "--config", str(proj / "VERSIONS.toml"), **env)
        assert list(tmp.iterdir()) == []
        assert sorted(proj.rglob("*")) == before  # not even the folder the checkout would have gone to
        results.append((done.returncode, first_error(done.stderr).replace(str(tmp_path / name), "PROJ")))
    assert results[0][0] == 3 and "the releases of sglang cannot be listed" in results[0][1], results
    assert results[0] == results[1]


def fetched(release: Release, xdg: Path) -> Release:
    """``release`` with its files where the cache at ``xdg`` holds them (as ``find_release`` run there gives it)."""
    root = xdg / "sgpatch" / "artifacts"
    return dataclasses.replace(release, paths=tuple(root / p.parent.name / p.name for p in release.paths))


def test_the_cache_guesses_one_file_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cached_source``: the release's sdist, else the wheel this host ranks first, among the cache's files of
    that version; none where the cache holds none, or two files of the chosen name; a folder that is a link, or
    not named as a sha256 is, is not looked into."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = artifacts_root()
    root.mkdir(mode=0o700, parents=True)
    root.parent.chmod(0o700)
    best = next(iter(sys_tags()))

    def put(digit: str, name: str, *, folder: str | None = None) -> Path:
        where = root / (folder or digit * 64)
        where.mkdir(mode=0o700, exist_ok=True)
        (where / name).write_bytes(name.encode())
        return where / name

    assert cached_source("1.0") is None
    put("a", "sglang-1.0-py3-none-any.whl")
    host = put("b", f"sglang-1.0-{best.interpreter}-{best.abi}-{best.platform}.whl")
    put("c", "sglang-1.0-cp27-cp27m-win32.whl")
    put("d", "sglang-1.01.tar.gz")  # another version
    put("e", "sglang-1.0.tar.gz", folder="not-a-digest")
    assert cached_source("1.0") == (Artifact("wheel", host.name, "b" * 64), host)
    (root / ("f" * 64)).symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "sglang-1.0.tar.gz").write_bytes(b"planted")
    assert cached_source("1.0") == (Artifact("wheel", host.name, "b" * 64), host)  # the link is not followed
    sdist = put("1", "sglang-1.0.tar.gz")
    assert cached_source("1.0") == (Artifact("sdist", sdist.name, "1" * 64), sdist)
    put("2", "sglang-1.0.tar.gz")  # the same name under two sha256: which one, only the index says
    assert cached_source("1.0") is None
    assert cached_source("2.0") is None


def test_a_guess_whose_bytes_are_not_its_sha256_is_not_read(
    tmp_path: Path,
    slime_project: tuple[Path, Path],  # noqa: F811  (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cache entry whose bytes are not the sha256 it is filed under (planted, or corrupted) is guessed but never
    read as the release: nothing is read from it here, and the child laying it out gives no answer, so a port whose
    index named that sha256 lays out again, from the file the download put there (checked the same way)."""
    old, _ = load_old(load_config(slime_project[0] / "VERSIONS.toml"), None, progress=None)
    wheel = RELEASES["0.5.12.post1"]
    planted = tmp_path / "xdg" / "sgpatch" / "artifacts" / ("0" * 64) / wheel.filename
    planted.parent.mkdir(mode=0o700, parents=True)
    for d in (planted.parents[1], planted.parents[2]):
        d.chmod(0o700)
    shutil.copyfile(fetch_artifact(wheel, "0.5.12.post1"), planted)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cached_source("0.5.12.post1") == (Artifact("wheel", wheel.filename, "0" * 64), planted)
    into = tmp_path / "ahead" / "checkout"
    into.parent.mkdir()
    ahead = start_ahead("0.5.12.post1", old, old.series.touched, renamed(old.stack, "0.5.12.post1", None), into)
    assert ahead is not None
    try:
        assert ahead.read is None
        ahead.message.give("sglang 0.5.12.post1 from PyPI wheels\n")
        with pytest.raises(SourceError, match="sha256"):
            ahead.laying.result()  # the child answered nothing: called here, where the archive's check refuses it
    finally:
        ahead.close()
    assert not into.exists()


def test_an_error_in_a_worker_is_the_serial_path_s(
    tmp_path: Path,
    slime_project: tuple[Path, Path],  # noqa: F811  (the fixture)
) -> None:
    """A git whose ``merge-file`` fails (a broken install): the port stops with the serial path's one line and exit
    code whether a worker or this process met it first, and leaves no worker behind."""
    real = shutil.which("git")
    assert real
    shim = tmp_path / "bin" / "git"
    shim.parent.mkdir()
    shim.write_text(
        '#!/bin/sh\nfor a in "$@"; do case "$a" in merge-file) echo "fatal: merge-file broken here" >&2; exit 255;; '
        f'esac; done\nexec {real} "$@"\n'
    )
    shim.chmod(0o755)
    path = f"{shim.parent}{os.pathsep}{os.environ['PATH']}"
    serial = _sg_port(copy(slime_project[0], tmp_path / "serial"), 1, tmp_path / "tmp-serial", path=path)
    assert serial[0] == 2
    assert json.loads(serial[1])["error"] == "git merge-file failed: fatal: merge-file broken here"
    assert _sg_port(copy(slime_project[0], tmp_path / "forked"), 3, tmp_path / "tmp-forked", path=path) == serial
    assert not serial[3]  # the checkout of a failed port is not left behind
    shown = json.loads(serial[1])["error"]
    record("port-worker-merge-file-broken", exit=serial[0], shown=shown, roots=(tmp_path,))


class _Refused(SgpatchError):
    exit_code = 3


def _judge(i: int) -> tuple[int, int]:
    if i == 5:
        raise _Refused(f"item {i} refused", hint="a hint that pickling would lose")
    if i == 7 and os.getpid() != PARENT:
        os._exit(9)  # a worker that dies: its item is judged by the parent
    if i == 8 and os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return (i, i * i)


PARENT = os.getpid()


def _children() -> set[int]:
    """This process's child processes (zombies included: a child not reaped is still one), from /proc."""
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):
            found.update(int(pid) for pid in (task / "children").read_text().split())
    return found


def test_forked_map_answers_in_order_and_raises_the_serial_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``forked_map`` by three workers: every answer is the serial one, in order; an item a worker died on (its
    exit, a SIGKILL) is judged here; the error an item raises is raised here, when that item is asked for, as
    the serial loop raises it (its class, message, hint and the frame it came from); a worker's answer that does
    not pickle is computed here.  No child process and no temporary file is left."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert can_fork()
    others = _children()  # the test process's own (a fixture's server): not the workers'
    answer = forked_map(12, _judge, jobs=3)
    assert [answer(i) for i in range(5)] == [(i, i * i) for i in range(5)]
    with pytest.raises(_Refused) as raised:
        answer(5)
    with pytest.raises(_Refused) as serial:
        _judge(5)
    assert (raised.value.message, raised.value.hint) == (serial.value.message, serial.value.hint)
    assert raised.traceback[-1].name == "_judge"
    assert [answer(i) for i in range(6, 12)] == [(i, i * i) for i in range(6, 12)]
    lambdas = forked_map(4, lambda i: lambda: i, jobs=2)  # an answer that does not pickle
    assert [lambdas(i)() for i in range(4)] == [0, 1, 2, 3]
    assert _children() <= others  # every worker reaped
    assert list(tmp_path.iterdir()) == []


def test_jobs_for_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SGPATCH_PORT_JOBS``: 1 is the serial path, N is N workers (never more than the items); unset, one per core
    and none for fewer than ``MIN_ITEMS`` items; anything else is ignored."""
    monkeypatch.setenv(JOBS_ENV, "1")
    assert jobs_for(49) == 1
    monkeypatch.setenv(JOBS_ENV, "5")
    assert (jobs_for(49), jobs_for(2)) == (5, 2)
    for unset in ("", "0", "many", "-2"):
        monkeypatch.setenv(JOBS_ENV, unset)
        assert jobs_for(MIN_ITEMS - 1) == 1
        assert jobs_for(49) == max(1, min(len(os.sched_getaffinity(0)), MAX_JOBS))


def _sleep_in_tmp(seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="sgpatch-sleeping-"):  # unwound (removed) when the child is stopped
        time.sleep(seconds)


def test_a_forked_call_answers_or_is_called_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Forked`` (the checkout laid out, the wheels compared, beside the judging): its answer; for a call that
    raises in the child, the error a call here raises; ``close`` stops a child still at work within a moment (it
    unwinds: its temporary directory goes with it); no child and no temporary file is left."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    others = _children()
    assert Forked(pow, 2, 10).result() == 1024
    with pytest.raises(_Refused) as raised:
        Forked(_judge, 5).result()
    assert raised.value.hint == "a hint that pickling would lose" and raised.traceback[-1].name == "_judge"
    busy = Forked(_sleep_in_tmp, 60)
    time.sleep(0.5)
    started = time.monotonic()
    busy.close()
    busy.close()  # again: nothing left to do
    assert time.monotonic() - started < GRACE
    assert _children() <= others
    assert list(tmp_path.iterdir()) == []


@contextlib.contextmanager
def _within(seconds: int) -> Iterator[None]:
    """Fail, rather than hang, if the block takes longer than ``seconds``."""

    def late(signum: int, frame: object) -> None:
        raise AssertionError(f"still waiting after {seconds} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _handed(later: Later[str], tag: str) -> tuple[int, str]:
    return os.getpid(), f"{tag}: {later.get()}"


def test_a_value_handed_later_reaches_the_forked_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Later`` (the checkout's commit message, known once the index answered): the forked child waits for it and
    answers with it; a child never given it answers nothing, and the call here raises EOFError, as it would; where
    the child is gone, giving costs nothing; workers forked after it hold no end of its pipe."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    others = _children()
    later: Later[str] = Later()
    child = Forked(_handed, later, "message", handed=later)
    workers = forked_map(4, lambda i: i * i, jobs=2)  # forked while the child waits: they must not keep it waiting
    assert [workers(i) for i in range(4)] == [0, 1, 4, 9]
    time.sleep(0.2)
    later.give("sglang 0.5.12.post1 from PyPI wheels")
    pid, said = child.result()
    assert pid != os.getpid() and said == "message: sglang 0.5.12.post1 from PyPI wheels"
    never: Later[str] = Later()
    waiting = Forked(_handed, never, "never", handed=never)
    sleeper = Forked(_sleep_in_tmp, 60)  # forked after it: holds no end of its pipe, or the child would wait on
    never.close()
    with _within(10), pytest.raises(EOFError):
        waiting.result()
    sleeper.close()
    gone: Later[str] = Later()
    stopped = Forked(_handed, gone, "gone", handed=gone)
    stopped.close()
    gone.give("too late")  # no one reads it: no error, no wait
    assert gone.get() == "too late"  # what was given, here
    assert _children() <= others
    assert list(tmp_path.iterdir()) == []


def test_a_repository_sgpatch_made_is_not_asked_its_git_dir_or_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port's own checkout (made in a ``mkdtemp`` directory of its own): the same git directory git names, the
    same answers, without ``rev-parse`` or the configuration check (two processes of the port's serial end)."""
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / "checkout"
    Git(root).init(branch="sgpatch/test")
    (root / "a.py").write_text("x = 1\n")
    subprocess.run(["git", "-C", str(root), "add", "a.py"], check=True)
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"], check=True
    )
    bin_dir, log = git_shim(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    asked: dict[bool, tuple[Path, str, list[str]]] = {}
    for made in (False, True):
        log.unlink(missing_ok=True)
        g = Git(root, made=made)
        answers = (g.git_dir(), g.commit_date("HEAD"))
        asked[made] = (*answers, log.read_text().split())
    assert asked[True][:2] == asked[False][:2]
    assert asked[False][0] == (root / ".git").resolve()
    assert asked[False][2] == ["config", "rev-parse", "log"]  # the configuration check, the git dir, the question
    assert asked[True][2] == ["log"]
