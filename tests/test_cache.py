"""The result cache (interface report, landing results, git-config verdict): a hit is only ever the answer
a full run would give.

A cache is a correctness risk, so: changing any one input (a byte of a file the check read, a file in a
directory it listed, the stack's interface table, where torch's members come from) must miss and give the
uncached answer; corrupt entries are misses, rewritten; cached and ``--no-cache`` output are byte-identical.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from sgpatch.checkout.verify import verify_checkout
from sgpatch.errors import ConfigError
from sgpatch.git.repo import Git
from sgpatch.interface import ClassRef, ExternalBases, InterfaceReport, check_interface
from sgpatch.interface.cache import RecordingTree, check_interface_cached, report_from_dict
from sgpatch.interface.external import kept_nn_module
from sgpatch.project import Project
from sgpatch.source.tree import DirTree

from .helpers import git, git_shim, run_cli
from .reliability import record

KIMI = ClassRef.parse("python/sglang/srt/models/kimi_k25.py:KimiK25ForConditionalGeneration")
LLAMA_EAGLE3 = ClassRef.parse("python/sglang/srt/models/llama_eagle3.py:LlamaForCausalLMEagle3")
KEPT = ExternalBases(kept_nn_module())
ARGS = {"target": KIMI, "draft": LLAMA_EAGLE3, "externals": KEPT}


@pytest.fixture(scope="module")
def tree(release_tree: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of pristine 0.5.9's python/sglang/srt (the hypothesis test edits it and restores it)."""
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


# ---------------------------------------------------------------------------------------- the key


def test_a_report_round_trips_through_its_json(tree: Path) -> None:
    report = check_interface(DirTree(tree), **ARGS)
    assert report.gaps  # pristine 0.5.9 lacks two target methods: a report with every part filled
    again = report_from_dict(json.loads(json.dumps(report.as_dict())))
    assert again == report


def test_a_second_check_hits_and_gives_the_same_report(tree: Path, tmp_path: Path) -> None:
    first = check_interface_cached(DirTree(tree), cache=tmp_path, **ARGS)
    second = check_interface_cached(DirTree(tree), cache=tmp_path, **ARGS)
    assert (first.hit, second.hit) == (False, True)
    assert second.report == first.report == check_interface(DirTree(tree), **ARGS)
    assert len(list((tmp_path / "interface").iterdir())) == 1


def test_the_recording_covers_listings_and_missing_files(recorded: RecordingTree) -> None:
    assert "python/sglang/srt/speculative/" in recorded.lists
    assert "python/sglang/srt/model_executor/" in recorded.lists
    assert any(v is None for v in recorded.reads.values())  # module probes (x.py vs x/__init__.py) count too
    assert len(recorded.reads) > 100


@st.composite
def one_change(draw: st.DrawFn, recorded: RecordingTree) -> tuple[str, str, int, int]:
    kind = draw(st.sampled_from(["byte", "byte", "byte", "create", "listing", "unlist"]))
    present = sorted(p for p, sha in recorded.reads.items() if sha is not None)
    absent = sorted(p for p, sha in recorded.reads.items() if sha is None)
    path = draw(st.sampled_from(absent if kind == "create" else present))
    return kind, path, draw(st.integers(0, 1 << 20)), draw(st.integers(0, 255))


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
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def baseline(tree: Path, cache_dir: Path) -> InterfaceReport:
    """The report on the unchanged tree; its entry is in ``cache_dir``."""
    return check_interface_cached(DirTree(tree), cache=cache_dir, **ARGS).report


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # each example is three full checks: no shrinking
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_one_changed_input_misses_and_gives_the_uncached_answer(
    tree: Path, recorded: RecordingTree, baseline: InterfaceReport, cache_dir: Path, data: st.DataObject
) -> None:
    kind = data.draw(st.sampled_from(["byte", "byte", "byte", "create", "listing", "remove"]), label="kind")
    present = sorted(p for p, sha in recorded.reads.items() if sha is not None)
    absent = sorted(p for p, sha in recorded.reads.items() if sha is None and not p.endswith("/__init__.py"))
    choices = {"create": absent, "listing": sorted(recorded.lists)}.get(kind, present)
    path = data.draw(st.sampled_from(choices), label="path")
    pos, value = data.draw(st.integers(0, 1 << 20), label="pos"), data.draw(st.integers(0, 255), label="value")

    hits: list[bool] = []

    def cached() -> InterfaceReport:
        found = check_interface_cached(DirTree(tree), cache=cache_dir, **ARGS)
        hits.append(found.hit)
        return found.report

    with changed(tree, kind, path, pos, value):
        got = outcome(cached)
        want = outcome(lambda: check_interface(DirTree(tree), **ARGS))
        again = outcome(cached)  # now the entry is for the changed tree
    event(f"{kind}: {got[0]}")
    assert hits[:1] in ([False], [])  # [] : the check raised (no entry either way)
    assert got == want
    assert again == want
    assert hits[1:] in ([True], [])
    restored = check_interface_cached(DirTree(tree), cache=cache_dir, **ARGS)  # and the entry for the next example
    assert restored.report == baseline


@pytest.mark.parametrize(
    "change",
    [
        {"declared_target": ("get_embed_and_head", "not_used_anywhere")},
        {"declared_draft": ("load_lm_head_from_target",)},
        {"draft": None},
        {"target": ClassRef.parse("python/sglang/srt/models/deepseek_v2.py:DeepseekV2ForCausalLM")},
        {"algorithm": "eagle"},
        {"externals": ExternalBases(None)},  # torch here if installed, else the kept list: another origin
    ],
    ids=["declared-target", "declared-draft", "no-draft", "target", "algorithm", "externals"],
)
def test_a_changed_interface_table_misses(tree: Path, tmp_path: Path, change: dict[str, object]) -> None:
    check_interface_cached(DirTree(tree), cache=tmp_path, **ARGS)
    args = {**ARGS, **change}
    found = check_interface_cached(DirTree(tree), cache=tmp_path, **args)
    assert not found.hit
    assert found.report == check_interface(DirTree(tree), **args)  # type: ignore[arg-type]


def test_another_origin_of_torch_members_misses(tree: Path, tmp_path: Path) -> None:
    check_interface_cached(DirTree(tree), cache=tmp_path, **ARGS)
    kept = kept_nn_module()
    fewer = type(kept)(kept.name, kept.source, kept.origin, {k: v for k, v in kept.members.items() if k != "modules"})
    found = check_interface_cached(DirTree(tree), cache=tmp_path, **{**ARGS, "externals": ExternalBases(fewer)})
    assert not found.hit
    assert found.report == check_interface(DirTree(tree), **{**ARGS, "externals": ExternalBases(fewer)})


# ---------------------------------------------------------------------------------------- the CLI


def _runs(co: Path, config: Path, *extra: str) -> list[tuple[int, str, str]]:
    out = []
    for cmd in ("verify", "check-interface"):
        for fmt in (("--json",), ()):
            r = run_cli(cmd, "--checkout", str(co), "--config", str(config), *fmt, *extra)
            out.append((r.exit_code, r.stdout, r.stderr))
    return out


@pytest.fixture
def patched(patched_checkout: Callable[[], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return patched_checkout()


def entries(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "xdg" / "sgpatch").rglob("*") if p.is_file() or p.suffix)


def test_cached_output_is_byte_identical_to_no_cache(patched: Path, project: Project, tmp_path: Path) -> None:
    full = _runs(patched, project.config.path, "--no-cache")
    assert not (tmp_path / "xdg").exists()  # --no-cache keeps nothing
    assert [code for code, _, _ in full] == [0, 0, 0, 0]
    first = _runs(patched, project.config.path)
    kinds = sorted({p.parent.name for p in entries(tmp_path)})
    assert kinds == ["interface", "landing"]
    assert first == full
    assert _runs(patched, project.config.path) == full  # every entry hit this time


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
        doc = json.loads(data) if data.startswith((b"{", b"[")) else None
        if isinstance(doc, dict) and "report" in doc:
            doc["report"]["gaps"] = [{"role": 1}]  # right key, right reads, a report of the wrong types
            path.write_text(json.dumps(doc))
        else:
            path.write_text(json.dumps([["x", "y", "z", "not a bool", 5]]))
    else:  # a directory in its place
        path.unlink()
        path.mkdir()
        (path / "inner").write_text("{}")


@pytest.mark.parametrize("how", ["cache-truncated", "cache-garbage", "cache-wrong-shape", "cache-directory"])
def test_corrupt_entries_are_misses_and_are_rewritten(
    patched: Path, project: Project, tmp_path: Path, how: str
) -> None:
    full = _runs(patched, project.config.path, "--no-cache")
    _runs(patched, project.config.path)
    found = [p for p in entries(tmp_path) if p.suffix == ".json"]
    assert found
    for p in found:
        _corrupt(p, how)
    again = _runs(patched, project.config.path)
    assert again == full
    record(how, exit=again[0][0], shown="same output as --no-cache", roots=(tmp_path,))
    if how != "cache-directory":
        for p in found:
            json.loads(p.read_bytes())  # whole again
    assert _runs(patched, project.config.path) == full


def test_an_unwritable_cache_costs_nothing_but_time(patched: Path, project: Project, tmp_path: Path) -> None:
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "sgpatch").write_text("a file where the cache directory would be")
    assert _runs(patched, project.config.path) == _runs(patched, project.config.path, "--no-cache")
    record("cache-unwritable", exit=0, shown="same output as --no-cache", roots=(tmp_path,))


# ---------------------------------------------------------------------------------------- git


def _git_log_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``git`` first on PATH that notes its subcommand and runs the real git (which is what runs)."""
    bin_dir, log = git_shim(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return log


def test_verify_runs_at_most_three_git_processes(
    patched: Path, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _git_log_shim(tmp_path, monkeypatch)
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
    line = Git(patched).first_parent_line("HEAD", 5, paths)
    assert len(line) == 3  # two series commits and the base, which has no parent
    for k, commit in enumerate(line):
        assert commit.oid == git(patched, "rev-parse", f"HEAD~{k}")
        assert list(commit.parents) == git(patched, "rev-list", "--parents", "-n", "1", commit.oid).split()[1:]
        assert commit.message.strip() == git(patched, "log", "-1", "--format=%B", commit.oid).strip()
        for p in paths[:-1]:
            assert commit.blobs[p] == git(patched, "rev-parse", f"{commit.oid}:{p}")
        assert commit.blobs["no/such/file.py"] is None
    alone = Git(patched).first_parent_line("HEAD", 0)  # depth 0: HEAD alone
    assert [(c.oid, c.parents, c.message) for c in alone] == [(line[0].oid, line[0].parents, line[0].message)]
    assert Git(patched).first_parent_line("no-such-ref", 3) == []


# ---------------------------------------------------------------------------------------- landing


def test_landing_results_from_the_cache_follow_the_file(patched: Path, project: Project, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    first = verify_checkout(project, patched, cache=cache)
    assert first.as_dict() == verify_checkout(project, patched).as_dict()
    assert len(list((cache / "landing").iterdir())) == 2
    deepseek = patched / "python/sglang/srt/models/deepseek_v2.py"
    lines = deepseek.read_bytes().split(b"\n")
    landed = next(i for i, text in enumerate(lines) if b"if layer_ids and layer_ids[0] == 1:" in text)
    deepseek.write_bytes(b"\n".join([*lines[:landed], b"# moved", *lines[landed:]]))
    cached, full = verify_checkout(project, patched, cache=cache), verify_checkout(project, patched)
    assert cached.as_dict() == full.as_dict()
    assert not cached.ok
