"""The one cache (sgpatch/cache.py): it keeps work, never an answer, and a cached run answers exactly as
``--no-cache`` does.

- The module: one key (kind, content, sgpatch itself), a bounded reader that takes anything odd as a miss,
  atomic writes whose failure is silent, pruning that removes only its own entries and never through a link,
  a directory trusted only when it is the user's own, not a link and not writable by others.
- The interface facts: a second check reads every part from the cache; any one changed input (a byte of a
  file the check read, a file created where it found none, a file added to a directory it listed, a file
  removed, the stack's interface table, the torch found) gives the uncached answer.
- The CLI, in-process and as real processes: byte-identical output to ``--no-cache`` with entries that are
  truncated, garbage, of another shape or crafted to break the reader, with a cache that cannot be written,
  a cache directory that is a link, another user's or writable by others (refused in one warning line).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import sgpatch.cache
from sgpatch.cache import KEEP, MAX_ENTRY_BYTES, Cache, key, open_cache
from sgpatch.checkout.state import inspect
from sgpatch.errors import ConfigError
from sgpatch.git.history import first_parent_line
from sgpatch.git.repo import Git
from sgpatch.interface import ClassRef, ExternalBases, InterfaceReport, check_interface
from sgpatch.interface.external import kept_nn_module
from sgpatch.project import Project
from sgpatch.source.tree import DirTree, SourceTree
from sgpatch.verify.engine import verify_checkout

from .conftest import USER_RESULTS_ROOT
from .helpers import copy_project, git, git_shim, run_cli
from .reliability import record

KIMI = ClassRef.parse("python/sglang/srt/models/kimi_k25.py:KimiK25ForConditionalGeneration")
LLAMA_EAGLE3 = ClassRef.parse("python/sglang/srt/models/llama_eagle3.py:LlamaForCausalLMEagle3")
KEPT = ExternalBases(kept_nn_module())
ARGS: dict[str, Any] = {"target": KIMI, "draft": LLAMA_EAGLE3, "externals": KEPT}
FACTS = "interface-facts"


def _warnings() -> tuple[list[str], Callable[[str], None]]:
    said: list[str] = []
    return said, said.append


# ---------------------------------------------------------------------------------------- the module


def test_the_key_covers_the_kind_every_part_and_sgpatch_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    same = key("landing", "a", b"bc")
    assert key("landing", "a", b"bc") == same
    others = [
        key("wheel-digests", "a", b"bc"),
        key("landing", "ab", b"c"),  # parts are length-prefixed: no two lists collide by concatenation
        key("landing", "a", b"bc", b""),
        key("landing", "a", b"bd"),
    ]
    assert same not in others and len(set(others)) == len(others)
    monkeypatch.setattr(sgpatch.cache, "_CODE", ["another sgpatch"])  # one digest of the whole package
    assert key("landing", "a", b"bc") != same


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$XDG_CACHE_HOME`` in ``tmp_path``, and the cache where the user's would be: ``$XDG_CACHE_HOME/sgpatch``
    (not this test session's own)."""
    monkeypatch.setattr(sgpatch.cache, "results_root", USER_RESULTS_ROOT)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def test_a_new_cache_is_made_0700_and_keeps_json(xdg: Path) -> None:
    said, warn = _warnings()
    cache = open_cache(warn=warn)
    assert cache is not None and said == []
    assert cache.root == xdg / "sgpatch" / "results"
    for folder in (xdg / "sgpatch", cache.root):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    entry = key("landing", "x")
    assert cache.get("landing", entry) is None
    cache.put("landing", entry, [["hunk", True, "at its new-side lines"]])
    assert cache.get("landing", entry) == [["hunk", True, "at its new-side lines"]]
    assert (cache.hits, cache.misses) == (1, 1)
    assert sorted(p.name for p in (cache.root / "landing").iterdir()) == [f"{entry}.json"]
    assert stat.S_IMODE((cache.root / "landing").stat().st_mode) == 0o700


def _other_user_owns(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a directory another user owns needs root")
    os.chown(path, 4242, -1)


UNTRUSTED: dict[str, Callable[[Path, Path], None]] = {
    "group-writable": lambda root, _: root.chmod(0o770),
    "other-writable": lambda root, _: root.parent.chmod(0o707),
    "a-link": lambda root, elsewhere: (root.rmdir(), root.symlink_to(elsewhere, target_is_directory=True)),
    "another-owner": lambda root, _: _other_user_owns(root),
}  # type: ignore[dict-item]


@pytest.mark.parametrize("how", list(UNTRUSTED))
def test_an_untrusted_cache_directory_is_refused_in_one_line(xdg: Path, tmp_path: Path, how: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    root = xdg / "sgpatch" / "results"
    root.mkdir(parents=True, mode=0o700)
    (xdg / "sgpatch").chmod(0o700)
    UNTRUSTED[how](root, elsewhere)
    said, warn = _warnings()
    assert open_cache(warn=warn) is None
    assert len(said) == 1
    assert said[0].startswith(f"the cache directory {root.parent if how == 'other-writable' else root} ")
    assert said[0].endswith(": not used, running without a cache")
    assert list(elsewhere.iterdir()) == []


def test_a_root_replaced_after_the_check_is_not_used(xdg: Path) -> None:
    cache = open_cache(warn=pytest.fail)
    assert cache is not None
    entry = key("landing", "x")
    cache.put("landing", entry, [])
    assert cache.get("landing", entry) == []
    cache.root.rename(cache.root.with_name("checked"))
    (cache.root / "landing").mkdir(parents=True, mode=0o700)
    (cache.root / "landing" / f"{entry}.json").write_text('[["planted", true, "after the check"]]')
    assert cache.get("landing", entry) is None
    cache.put("landing", key("landing", "y"), [])
    assert sorted(p.name for p in (cache.root / "landing").iterdir()) == [f"{entry}.json"]


def test_a_cache_that_cannot_be_made_is_quietly_not_used(xdg: Path) -> None:
    xdg.mkdir()
    (xdg / "sgpatch").write_text("a file where the cache directory would be")
    said, warn = _warnings()
    assert open_cache(warn=warn) is None and said == []
    (xdg / "sgpatch").unlink()
    (xdg / "sgpatch").mkdir(mode=0o700)
    (xdg / "sgpatch" / "results").write_text("a file again")
    assert open_cache(warn=warn) is None and said == []


def _bad_entries(outside: Path, good: bytes) -> dict[str, Callable[[Path], None]]:
    outside.write_bytes(good)

    def oversize(p: Path) -> None:
        with p.open("wb") as fh:
            fh.truncate(MAX_ENTRY_BYTES + 1)  # sparse: 16 MiB of zeros and one more byte

    return {
        "a-link": lambda p: p.symlink_to(outside),
        "a-fifo": lambda p: os.mkfifo(p),
        "a-directory": lambda p: p.mkdir(),
        "oversize": oversize,
        "truncated": lambda p: p.write_bytes(good[: len(good) // 2]),
        "not-json": lambda p: p.write_bytes(b"\x00\xff{["),
        "not-utf8": lambda p: p.write_bytes(b'["\xff\xfe"]'),
        "deep": lambda p: p.write_bytes(b"[" * 100_000 + b"]" * 100_000),
        "huge-number": lambda p: p.write_bytes(b"1" * 5000),
    }


def test_a_bad_entry_is_a_miss_and_a_read_never_blocks(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "results")
    cache.root.mkdir(mode=0o700)
    value = [["hunk", True, "at its new-side lines"]]
    cache.put("landing", key("landing", "probe"), value)
    folder = cache.root / "landing"
    good = (folder / f"{key('landing', 'probe')}.json").read_bytes()
    for n, (name, make) in enumerate(_bad_entries(tmp_path / "outside.json", good).items()):
        entry = key("landing", name, str(n))
        make(folder / f"{entry}.json")
        assert cache.get("landing", entry) is None, name
        cache.put("landing", entry, value)  # rewritten whole where the bad one was (a directory stays)
        assert cache.get("landing", entry) == (None if name == "a-directory" else value), name
    assert (tmp_path / "outside.json").read_bytes() == good  # the link was replaced, not written through


def _entries(folder: Path, count: int) -> list[str]:
    names = []
    for n in range(count):
        name = f"{key('landing', str(n))}.json"
        (folder / name).write_text("[]")
        os.utime(folder / name, ns=(n * 10**9, n * 10**9))  # entry n written at second n
        names.append(name)
    return names


def test_pruning_removes_only_its_own_oldest_entries(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "results")
    folder = cache.root / "landing"
    folder.mkdir(parents=True)
    names = _entries(folder, 300)
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    linked = f"{'e' * 64}.json"
    (folder / linked).symlink_to(victim)  # named like an entry, but a link: never removed, never followed
    (folder / f"{'d' * 64}.json").mkdir()  # a directory named like an entry
    (folder / "notes.txt").write_text("not an entry")
    (folder / f"{'A' * 64}.json").write_text("[]")  # not lowercase hex: not a name this cache writes
    stale, fresh = f".tmp-{'a' * 64}-1-0123abcd", f".tmp-{'b' * 64}-2-0123abcd"
    (folder / stale).write_text("left by a killed run")
    os.utime(folder / stale, (0, 0))
    (folder / fresh).write_text("being written now")

    assert cache.prune("landing", keep=100) == 201  # 200 old entries and the stale temporary file
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([*names[200:], linked, f"{'d' * 64}.json", "notes.txt", f"{'A' * 64}.json", fresh])
    assert victim.read_text() == "precious"
    assert cache.prune("landing", keep=100) == 0


def test_a_kind_directory_that_is_a_link_is_never_used(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "results")
    cache.root.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.mkdir()
    names = _entries(victim, 300)
    before = {n: (victim / n).read_bytes() for n in names}
    (cache.root / "landing").symlink_to(victim, target_is_directory=True)
    assert cache.prune("landing", keep=0) == 0
    assert cache.get("landing", names[0].removesuffix(".json")) is None
    cache.put("landing", key("landing", "new"), [])
    assert {n: (victim / n).read_bytes() for n in sorted(p.name for p in victim.iterdir())} == before
    record("cache-link-prune", exit=0, shown="prune(keep=0) through the link: 0 removed", roots=(tmp_path,))


def test_a_write_that_fails_is_silent(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "results")
    cache.root.mkdir()
    (cache.root / "landing").write_text("a file where the kind's directory would be")
    cache.put("landing", key("landing", "x"), [])
    assert cache.get("landing", key("landing", "x")) is None
    gone = Cache(tmp_path / "no-such-directory")
    gone.put("landing", key("landing", "x"), [])
    assert not gone.root.exists()


# ---------------------------------------------------------------------------------------- interface facts


class RecordingTree:
    """A tree that remembers what the check read from it (sha256, or None: missing) and what it listed."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.reads: dict[str, bool] = {}
        self.lists: set[str] = set()

    @property
    def label(self) -> str:
        return self.tree.label

    def read(self, path: str) -> bytes | None:
        data = self.tree.read(path)
        self.reads[path] = data is not None
        return data

    def list(self, prefix: str) -> list[str]:
        self.lists.add(prefix)
        return self.tree.list(prefix)


@pytest.fixture(scope="module")
def tree(release_tree: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of pristine 0.5.9's python/sglang/srt (the hypothesis test edits it and restores it)."""
    import shutil

    root = tmp_path_factory.mktemp("cache-tree")
    shutil.copytree(release_tree("0.5.9") / "python" / "sglang" / "srt", root / "python" / "sglang" / "srt")
    return root


@pytest.fixture(scope="module")
def recorded(tree: Path) -> RecordingTree:
    rec = RecordingTree(DirTree(tree))
    check_interface(rec, **ARGS)
    return rec


def outcome(run: Callable[[], InterfaceReport]) -> tuple[str, object]:
    try:
        return "report", run().as_dict()
    except ConfigError as exc:
        return "error", exc.message


def test_a_second_check_reads_every_part_from_the_cache(tree: Path, tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    first = check_interface(DirTree(tree), cache=cache, **ARGS)
    computed = cache.misses
    assert computed > 30 and cache.hits == 0  # the modules, classes, scans and methods the check needed
    assert len(list((tmp_path / FACTS).iterdir())) == computed
    second = check_interface(DirTree(tree), cache=cache, **ARGS)
    assert cache.misses == computed and cache.hits == computed  # nothing parsed: every part was kept
    assert first == second == check_interface(DirTree(tree), **ARGS)
    assert first.gaps  # pristine 0.5.9 lacks two target methods: a report with every part filled


@contextmanager
def changed(tree: Path, kind: str, path: str, pos: int, value: int) -> Iterator[None]:
    """One input changed, then put back: a byte of a file read, a file created where the check found none,
    a file added to a directory it listed, or a file it read removed."""
    target = tree / path
    saved = target.read_bytes() if target.is_file() else None
    made: list[Path] = []
    if kind == "byte":
        assert saved is not None
        at = pos % len(saved) if saved else 0
        old = saved[at] if saved else None
        if old is not None and chr(old).isalpha():  # a letter becomes another: the file still parses, mostly
            new = b"abcdefghijklmnopqrstuvwxyz"[value % 26]
            new = new if new != old else new ^ 0x01
        else:
            new = value if value != old else (value + 1) % 256
        target.write_bytes(saved[:at] + bytes([new]) + saved[at + 1 :])
    elif kind == "create":
        missing = [p for p in target.parents if not p.exists()]
        target.parent.mkdir(parents=True, exist_ok=True)
        made = [target, *missing]
        target.write_bytes(b"x = 1\n" if value % 2 else bytes([value]) * (pos % 7))
    elif kind == "listing":  # ``path`` is a directory the check listed
        target = tree / path / f"zz_added_{pos}.py"
        made = [target]
        target.write_bytes(b"x = 1\n")
    else:  # remove
        target.unlink()
    try:
        yield
    finally:
        for p in made:
            if p.is_dir():
                p.rmdir()
            else:
                p.unlink(missing_ok=True)
        if saved is not None:
            target = tree / path
            target.write_bytes(saved)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Cache:
    return Cache(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def baseline(tree: Path, shared_cache: Cache) -> InterfaceReport:
    """The report on the unchanged tree; its parts are in ``shared_cache``."""
    return check_interface(DirTree(tree), cache=shared_cache, **ARGS)


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # each example is four full checks: no shrinking
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_one_changed_input_gives_the_uncached_answer(
    tree: Path, recorded: RecordingTree, baseline: InterfaceReport, shared_cache: Cache, data: st.DataObject
) -> None:
    kind = data.draw(st.sampled_from(["byte", "byte", "byte", "create", "listing", "remove"]), label="kind")
    present = sorted(p for p, found in recorded.reads.items() if found)
    absent = sorted(p for p, found in recorded.reads.items() if not found and not p.endswith("/__init__.py"))
    choices = {"create": absent, "listing": sorted(recorded.lists)}.get(kind, present)
    path = data.draw(st.sampled_from(choices), label="path")
    pos, value = data.draw(st.integers(0, 1 << 20), label="pos"), data.draw(st.integers(0, 255), label="value")

    def cached() -> InterfaceReport:
        return check_interface(DirTree(tree), cache=shared_cache, **ARGS)

    with changed(tree, kind, path, pos, value):
        got = outcome(cached)
        want = outcome(lambda: check_interface(DirTree(tree), **ARGS))
        again = outcome(cached)  # now from the parts kept for the changed tree
    event(f"{kind}: {got[0]}")
    assert got == want
    assert again == want
    misses = shared_cache.misses
    assert check_interface(DirTree(tree), cache=shared_cache, **ARGS) == baseline
    assert shared_cache.misses == misses  # the parts of the original bytes were kept, not replaced


@pytest.mark.parametrize(
    "change",
    [
        {"declared_target": ("get_embed_and_head", "not_used_anywhere")},
        {"declared_draft": ("load_lm_head_from_target",)},
        {"draft": None},
        {"target": ClassRef.parse("python/sglang/srt/models/deepseek_v2.py:DeepseekV2ForCausalLM")},
        {"algorithm": "eagle"},
        {"externals": ExternalBases(None)},  # torch here if installed, else the kept list
    ],
    ids=["declared-target", "declared-draft", "no-draft", "target", "algorithm", "externals"],
)
def test_a_changed_interface_table_gives_the_uncached_answer(
    tree: Path, tmp_path: Path, change: dict[str, object]
) -> None:
    cache = Cache(tmp_path)
    check_interface(DirTree(tree), cache=cache, **ARGS)
    args = {**ARGS, **change}
    assert check_interface(DirTree(tree), cache=cache, **args) == check_interface(DirTree(tree), **args)


def test_fewer_torch_members_give_the_uncached_answer(tree: Path, tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    check_interface(DirTree(tree), cache=cache, **ARGS)
    kept = kept_nn_module()
    fewer = type(kept)(kept.name, kept.source, kept.origin, {k: v for k, v in kept.members.items() if k != "modules"})
    args = {**ARGS, "externals": ExternalBases(fewer)}
    assert check_interface(DirTree(tree), cache=cache, **args) == check_interface(DirTree(tree), **args)


# ---------------------------------------------------------------------------------------- the CLI, in-process


def _runs(co: Path, config: Path, *extra: str) -> list[tuple[int, str, str]]:
    out = []
    for cmd in ("verify", "check-interface"):
        for fmt in (("--json",), ()):
            r = run_cli(cmd, "--checkout", str(co), "--config", str(config), *fmt, *extra)
            out.append((r.exit_code, r.stdout, r.stderr))
    return out


@pytest.fixture
def patched(patched_checkout: Callable[[], Path], xdg: Path) -> Path:
    return patched_checkout()


def entries(xdg: Path) -> list[Path]:
    return sorted(p for p in (xdg / "sgpatch").rglob("*") if p.is_file() or p.suffix)


def test_cached_output_is_byte_identical_to_no_cache(patched: Path, project: Project, xdg: Path) -> None:
    full = _runs(patched, project.config.path, "--no-cache")
    assert not xdg.exists()  # --no-cache keeps nothing
    assert [code for code, _, _ in full] == [0, 0, 0, 0]
    first = _runs(patched, project.config.path)
    kinds = sorted({p.parent.name for p in entries(xdg)})
    assert kinds == [FACTS, "landing"]
    assert first == full
    assert _runs(patched, project.config.path) == full  # every entry read this time


def test_a_drifted_checkout_is_not_answered_from_the_cache(patched: Path, project: Project) -> None:
    _runs(patched, project.config.path)
    kimi = patched / KIMI.path
    kimi.write_bytes(kimi.read_bytes().replace(b"def get_embed_and_head(self)", b"def get_embed_and_headX(self)"))
    cached = _runs(patched, project.config.path)
    assert cached == _runs(patched, project.config.path, "--no-cache")
    assert [code for code, _, _ in cached] == [1, 1, 1, 1]


def _corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "cache-truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "cache-garbage":
        path.write_bytes(b"\x00\xffnot json{[")
    elif how == "cache-wrong-shape":
        doc = json.loads(data)
        if isinstance(doc, dict):  # facts: each field of the wrong type in turn
            field = sorted(doc)[len(data) % len(doc)]
            doc[field] = {"bindings": 7, "line": "7", "members": {"x": 1}}.get(field, [[1, {}, None]])
            path.write_text(json.dumps(doc))
        else:
            path.write_text(json.dumps([["x", "y", "z", "not a bool", 5]]))
    else:  # a directory in its place
        path.unlink()
        path.mkdir()
        (path / "inner").write_text("{}")


@pytest.mark.parametrize("how", ["cache-truncated", "cache-garbage", "cache-wrong-shape", "cache-directory"])
def test_corrupt_entries_are_misses_and_are_rewritten(patched: Path, project: Project, xdg: Path, how: str) -> None:
    full = _runs(patched, project.config.path, "--no-cache")
    _runs(patched, project.config.path)
    found = [p for p in entries(xdg) if p.suffix == ".json"]
    assert found
    for p in found:
        _corrupt(p, how)
    again = _runs(patched, project.config.path)
    assert again == full
    record(how, exit=again[0][0], shown="same output as --no-cache", roots=(xdg.parent,))
    if how != "cache-directory":
        for p in found:
            json.loads(p.read_bytes())  # whole again
    assert _runs(patched, project.config.path) == full


def test_verify_asks_git_the_same_with_or_without_a_cache(
    patched: Path, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, log = git_shim(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    counts = []
    for extra in (("--no-cache",), (), ()):
        log.unlink(missing_ok=True)
        r = run_cli("verify", "--checkout", str(patched), "--config", str(project.config.path), "--json", *extra)
        assert r.exit_code == 0
        counts.append(len(log.read_text().splitlines()))
    # every run asks the same: rev-parse, the config check, cat-file, status, ls-files (the submodules in the
    # index; no verdict is remembered)
    assert counts == [5, 5, 5]


def test_a_config_changed_after_a_verify_is_refused(patched: Path, project: Project, tmp_path: Path) -> None:
    assert run_cli("verify", "--checkout", str(patched), "--config", str(project.config.path)).exit_code == 0
    git(patched, "config", "filter.evil.clean", "touch pwned")
    r = run_cli("verify", "--checkout", str(patched), "--config", str(project.config.path))
    assert r.exit_code == 2
    assert "names a program git could run" in r.stderr
    assert not (patched / "pwned").exists()
    record("cache-config-changed", exit=r.exit_code, shown=r.stderr.splitlines()[0], roots=(tmp_path,))


def test_a_config_included_from_another_file_is_checked(patched: Path, project: Project, tmp_path: Path) -> None:
    extra = tmp_path / "extra.gitconfig"
    extra.write_text("[core]\n\tquotepath = false\n")
    git(patched, "config", "include.path", str(extra))
    assert run_cli("verify", "--checkout", str(patched), "--config", str(project.config.path)).exit_code == 0
    extra.write_text('[filter "evil"]\n\tclean = touch pwned\n')  # the included file changes, not .git/config
    r = run_cli("verify", "--checkout", str(patched), "--config", str(project.config.path))
    assert r.exit_code == 2 and "filter.evil.clean" in r.stderr


def test_first_parent_line_agrees_with_git(patched: Path, project: Project) -> None:
    paths = [f.path for f in project.stack.files] + ["no/such/file.py"]
    line = first_parent_line(Git(patched), "HEAD", 5, paths)
    assert len(line) == 4  # three series commits and the base, which has no parent
    for k, commit in enumerate(line):
        assert commit.oid == git(patched, "rev-parse", f"HEAD~{k}")
        assert list(commit.parents) == git(patched, "rev-list", "--parents", "-n", "1", commit.oid).split()[1:]
        assert commit.message.strip() == git(patched, "log", "-1", "--format=%B", commit.oid).strip()
        assert commit.tree == git(patched, "rev-parse", f"{commit.oid}^{{tree}}")
        assert commit.committed == git(patched, "log", "-1", "--format=%cd", "--date=raw", commit.oid)
        for p in paths[:-1]:
            assert commit.blobs[p] == git(patched, "rev-parse", f"{commit.oid}:{p}")
        assert commit.blobs["no/such/file.py"] is None
    alone = first_parent_line(Git(patched), "HEAD", 0)  # depth 0: HEAD alone
    assert [(c.oid, c.parents, c.message) for c in alone] == [(line[0].oid, line[0].parents, line[0].message)]
    assert first_parent_line(Git(patched), "no-such-ref", 3) == []


def test_the_state_carries_what_a_build_asked_git_for(patched: Path, project: Project) -> None:
    """HEAD's tree, the base's committer date and the pinned files' blob ids at HEAD and at the base come with
    the state, from its one batch: what ``build`` asked three more git processes for, equal to their answers."""
    state = inspect(Git(patched), project.stack, project.series)
    assert state.phase == "patched" and state.base is not None
    assert state.head_tree == git(patched, "rev-parse", "HEAD^{tree}")
    assert state.base_date == git(patched, "log", "-1", "--format=%cd", "--date=raw", state.base)
    for rev, blobs in (("HEAD", state.head_blobs), (state.base, state.base_blobs)):
        assert [p for p, _ in blobs] == [f.path for f in project.stack.files]
        assert all(blob == git(patched, "rev-parse", f"{rev}:{path}") for path, blob in blobs)


def test_landing_results_from_the_cache_follow_the_file(patched: Path, project: Project, tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c")
    cache.root.mkdir()
    first = verify_checkout(project, patched, cache=cache)
    assert first.as_dict() == verify_checkout(project, patched).as_dict()
    assert len(list((cache.root / "landing").iterdir())) == len(project.stack.files)  # one per patched file
    deepseek = patched / "python/sglang/srt/models/deepseek_v2.py"
    lines = deepseek.read_bytes().split(b"\n")
    landed = next(i for i, text in enumerate(lines) if b"if layer_ids and layer_ids[0] == 1:" in text)
    deepseek.write_bytes(b"\n".join([*lines[:landed], b"# moved", *lines[landed:]]))
    cached, full = verify_checkout(project, patched, cache=cache), verify_checkout(project, patched)
    assert cached.as_dict() == full.as_dict()
    assert not cached.ok


# ---------------------------------------------------------------------------------------- real processes


def sgpatch_run(*args: str, xdg: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``python -m sgpatch ARGS`` as its own process, with ``$XDG_CACHE_HOME`` at ``xdg``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    full.update({"XDG_CACHE_HOME": str(xdg), **(env or {})})
    proc = subprocess.run(
        [sys.executable, "-m", "sgpatch", *args], env=full, capture_output=True, text=True, timeout=300, check=False
    )
    return proc.returncode, proc.stdout, proc.stderr


def _commands(co: Path, project: Project) -> list[list[str]]:
    where = ["--checkout", str(co), "--config", str(project.config.path)]
    return [["verify", *where, "--json"], ["check-interface", *where], ["verify", *where]]


@pytest.fixture
def real(patched_checkout: Callable[[], Path], project: Project, tmp_path: Path) -> tuple[Path, list[tuple]]:
    """A patched checkout, and what each command says with --no-cache (as a real process)."""
    co = patched_checkout()
    full = [sgpatch_run(*cmd, "--no-cache", xdg=tmp_path / "unused") for cmd in _commands(co, project)]
    assert [code for code, _, _ in full] == [0, 0, 0]
    assert not (tmp_path / "unused").exists()
    return co, full


def _files_below(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.parametrize("where", ["sgpatch", "results", "kinds"])
def test_an_unwritable_cache_changes_nothing_but_time(
    real: tuple[Path, list[tuple]], project: Project, tmp_path: Path, where: str
) -> None:
    co, full = real
    xdg = tmp_path / "xdg"
    spot = {"sgpatch": xdg / "sgpatch", "results": xdg / "sgpatch" / "results"}.get(where)
    if spot is not None:
        spot.parent.mkdir(parents=True, mode=0o700)
        spot.write_text("a file where the cache directory would be")
    else:
        for kind in KEEP:
            (xdg / "sgpatch" / "results").mkdir(parents=True, mode=0o700, exist_ok=True)
            (xdg / "sgpatch" / "results" / kind).write_text("a file where the kind's directory would be")
    (xdg / "sgpatch").chmod(0o700) if (xdg / "sgpatch").is_dir() else None
    before = _files_below(xdg)
    got = [sgpatch_run(*cmd, xdg=xdg) for cmd in _commands(co, project)]
    assert got == full  # nothing claims a result was kept: the output is --no-cache's, byte for byte
    assert _files_below(xdg) == before
    record("cache-unwritable", exit=got[0][0], shown="same output as --no-cache; nothing written", roots=(tmp_path,))


def _victim(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    victim = tmp_path / "victim"
    victim.mkdir()
    _entries(victim, 300)
    return victim, {p.name: p.read_bytes() for p in victim.iterdir()}


def test_a_linked_kind_directory_is_neither_used_nor_pruned(
    real: tuple[Path, list[tuple]], project: Project, tmp_path: Path
) -> None:
    co, full = real
    victim, before = _victim(tmp_path)
    results = tmp_path / "xdg" / "sgpatch" / "results"
    results.mkdir(parents=True, mode=0o700)
    (results.parent).chmod(0o700)
    for kind in KEEP:
        (results / kind).symlink_to(victim, target_is_directory=True)
    got = [sgpatch_run(*cmd, xdg=tmp_path / "xdg") for cmd in _commands(co, project)]
    assert got == full
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == before


def test_a_linked_cache_directory_is_refused_and_left_alone(
    real: tuple[Path, list[tuple]], project: Project, tmp_path: Path
) -> None:
    co, full = real
    victim, before = _victim(tmp_path)
    top = tmp_path / "xdg" / "sgpatch"
    top.mkdir(parents=True, mode=0o700)
    (top / "results").symlink_to(victim, target_is_directory=True)
    got = [sgpatch_run(*cmd, xdg=tmp_path / "xdg") for cmd in _commands(co, project)]
    warning = (
        f"sgpatch: warning: the cache directory {top / 'results'} is a symbolic link: "
        "not used, running without a cache\n"
    )
    assert got == [(code, out, warning + err) for code, out, err in full]
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == before
    record("cache-link-prune", exit=got[0][0], shown=warning.strip(), roots=(tmp_path,))


@pytest.mark.parametrize("how", list(UNTRUSTED))
def test_an_untrusted_cache_directory_is_not_used_by_a_command(
    real: tuple[Path, list[tuple]], project: Project, tmp_path: Path, how: str
) -> None:
    co, full = real
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    root = tmp_path / "xdg" / "sgpatch" / "results"
    root.mkdir(parents=True, mode=0o700)
    root.parent.chmod(0o700)
    UNTRUSTED[how](root, elsewhere)
    got = [sgpatch_run(*cmd, xdg=tmp_path / "xdg") for cmd in _commands(co, project)]
    for (code, out, err), (want_code, want_out, want_err) in zip(got, full, strict=True):
        assert (code, out) == (want_code, want_out)
        first, _, rest = err.partition("\n")
        assert first.startswith("sgpatch: warning: the cache directory ") and first.endswith(
            ": not used, running without a cache"
        )
        assert rest == want_err
    assert list(elsewhere.iterdir()) == [] and (how == "a-link" or list(root.iterdir()) == [])
    record("cache-untrusted-root", exit=got[0][0], shown=got[0][2].splitlines()[0], roots=(tmp_path,))


def _crafted(path: Path, n: int, others: list[Path]) -> str:
    """Replace the entry at ``path`` by the ``n``-th kind of crafted entry; its name."""
    try:
        doc: Any = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        doc = None  # crafted for an earlier command, and not read since
    kinds = ["a-link", "a-fifo", "oversize", "deep", "not-python", "out-of-range", "wrong-types"]
    how = kinds[n % len(kinds)]
    path.unlink()
    if how == "a-link":
        path.symlink_to(others[(n + 1) % len(others)])  # another entry: a valid one, but a link
    elif how == "a-fifo":
        os.mkfifo(path)
    elif how == "oversize":
        with path.open("wb") as fh:
            fh.write(b"[" + b" " * (MAX_ENTRY_BYTES + 16) + b"]")
    elif how == "deep":
        path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    elif how == "not-python" and isinstance(doc, dict) and doc.get("guards"):
        doc["guards"][0][0] = "__import__('os').system('touch PWNED') if (:"
        path.write_text(json.dumps(doc))
    elif how == "out-of-range" and isinstance(doc, dict) and "sites" in doc and doc["sites"]:
        doc["sites"][0][5] = [10**9]
        path.write_text(json.dumps(doc))
    elif isinstance(doc, dict):  # wrong types: every field a string
        path.write_text(json.dumps({k: "x" for k in doc}))
    else:
        path.write_text(json.dumps([[-1, "not a bool", None]]))
    return how


def test_crafted_entries_are_misses_and_the_answer_is_no_caches(
    real: tuple[Path, list[tuple]], project: Project, tmp_path: Path
) -> None:
    co, full = real
    xdg = tmp_path / "xdg"
    commands = _commands(co, project)
    assert sgpatch_run(*commands[0], xdg=xdg) == full[0]
    kept = sorted((xdg / "sgpatch" / "results").glob("*/*.json"))
    assert len(kept) > 30
    seen: set[str] = set()
    for cmd, want in zip(commands, full, strict=True):
        for n, p in enumerate(sorted((xdg / "sgpatch" / "results").glob("*/*.json"))):
            if p.is_file() and not p.is_symlink():
                seen.add(_crafted(p, n, kept))
        assert sgpatch_run(*cmd, xdg=xdg) == want
    assert seen >= {"a-link", "a-fifo", "oversize", "deep", "not-python", "out-of-range", "wrong-types"}
    assert not (co / "PWNED").exists() and not Path("PWNED").exists()
    record("cache-hostile-entry", exit=full[0][0], shown="same output as --no-cache", roots=(tmp_path,))


RMTREE_PROBE = """
import json, os, posix, sys
from sgpatch.cli import main
sys.argv = ["sgpatch", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
imported = "shutil" in sys.modules
import shutil
print(json.dumps({"code": code, "shutil imported": imported, "safe": shutil.rmtree.avoids_symlink_attacks,
                  "stat": os.stat is posix.stat, "lstat": os.lstat is posix.lstat}), file=sys.stderr)
"""


def test_a_verify_process_keeps_the_symlink_safe_rmtree(
    patched_checkout: Callable[[], Path], project: Project, tmp_path: Path
) -> None:
    co = patched_checkout()
    for extra in ((), ()):  # the first fills the cache, the second reads it
        proc = subprocess.run(
            [sys.executable, "-c", RMTREE_PROBE, "verify", "--checkout", str(co), "--config", str(project.config.path)],
            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd=tmp_path,
        )
        seen = json.loads(proc.stderr.strip().splitlines()[-1])
        assert seen == {"code": 0, "shutil imported": True, "safe": True, "stat": True, "lstat": True}, extra
    assert list((tmp_path / "xdg" / "sgpatch" / "results").iterdir())  # the cache was in use
    record("cache-rmtree-safe", exit=0, shown="shutil.rmtree.avoids_symlink_attacks: true", roots=(tmp_path,))


def test_the_torch_found_now_is_what_counts(tree: Path, tmp_path: Path) -> None:
    """torch.nn.Module's members come from the torch this process finds (here on PYTHONPATH), read every
    run: cached and --no-cache agree when it appears, changes and goes."""
    site = tmp_path / "site"
    module = site / "torch" / "nn" / "modules" / "module.py"
    module.parent.mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise ImportError('never imported')\n")
    config = copy_project(tmp_path / "proj") / "VERSIONS.toml"
    check = ["check-interface", "--checkout", str(tree), "--config", str(config), "--json"]

    def both(env: dict[str, str]) -> tuple[int, str, str]:
        cached = sgpatch_run(*check, xdg=tmp_path / "xdg", env=env)
        assert cached == sgpatch_run(*check, "--no-cache", xdg=tmp_path / "none", env=env)
        return cached

    without = both({})
    assert without[0] == 1
    module.write_text("class Module:\n    def get_embed_and_head(self):\n        pass\n")
    one = both({"PYTHONPATH": str(site)})
    module.write_text("class Module:\n    def set_eagle3_layers_to_capture(self, ids):\n        pass\n")
    other = both({"PYTHONPATH": str(site)})
    gaps = [sorted(g["name"] for g in json.loads(out)["gaps"]) for _, out, _ in (without, one, other)]
    assert gaps == [
        ["get_embed_and_head", "set_eagle3_layers_to_capture"],
        ["set_eagle3_layers_to_capture"],
        ["get_embed_and_head"],
    ]
    assert both({}) == without
