"""``sgpatch init`` and ``sgpatch status`` on real releases, real git repositories and real checkouts."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from sgpatch.config import load_config
from sgpatch.series.patch import read_series
from sgpatch.wheel.last import last_build, record_build
from sgpatch.wheel.results import BuildResult, WheelReport
from sgpatch.workspace.hooks import HOOKS
from sgpatch.workspace.labels import BUILD_REQUIRES, LABELS, REFERENCE_VERSION

from .helpers import REPO, copy_project, git, json_out, run_cli
from .port_fixtures import commit, edit
from .reliability import CASES, first_error, record

STACK = "0.5.9-cu130"


def init(*args: str) -> object:
    return run_cli("init", *args)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A repository made by ``sgpatch init`` for 0.5.9 on cu130, and init's JSON document."""
    where = tmp_path_factory.mktemp("init") / "team"
    result = init(str(where), "--release", "0.5.9", "--cuda", "cu130", "--json")
    assert result.exit_code == 0, result.stderr  # type: ignore[attr-defined]
    return where, json_out(result)


# --------------------------------------------------------------------------- init


def test_the_labels_are_the_shipped_reference_stacks() -> None:
    """A CUDA label's reference pins are exactly those of the shipped stack of that label."""
    config = load_config(REPO / "VERSIONS.toml")
    for name, label in LABELS.items():
        shipped = config.stacks[f"{REFERENCE_VERSION}-{name}"]
        ref = label.reference_stack()
        assert (ref.cuda, ref.local_label) == (shipped.cuda, shipped.local_label)
        assert ref.install.pins == shipped.install.pins  # the note is the label's own, for any release
        assert ref.install.extra_index_urls == shipped.install.extra_index_urls
        assert [(o.dist, o.text) for o in ref.requires] == [(o.dist, o.text) for o in shipped.requires]
        assert shipped.build_requires == BUILD_REQUIRES


def test_init_writes_one_complete_stack(team: tuple[Path, dict[str, object]]) -> None:
    where, doc = team
    shipped = load_config(REPO / "VERSIONS.toml").stacks[STACK]
    config = load_config(where / "VERSIONS.toml")
    assert config.default_stack == STACK and list(config.stacks) == [STACK]
    stack = config.stacks[STACK]
    # the shipped stack's pins, but for the upstream commit (init asks PyPI only, not GitHub)
    assert stack.artifacts == shipped.artifacts
    assert stack.install == shipped.install
    assert stack.requires == shipped.requires
    assert stack.build_requires == shipped.build_requires
    assert stack.commit is None and stack.default_source == "pypi"
    assert stack.series_dir == where / "patches" / "0.5.9"
    assert read_series(stack.series_dir).patches == ()
    assert (stack.series_dir / "anchors.toml").is_file()
    # every key says what it pins, in a comment on the line above
    lines = (where / "VERSIONS.toml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[a-z_-]+ = ", line):
            assert lines[i - 1].startswith("# "), line
    assert (where / ".gitignore").read_text().splitlines()[-1] == ".sgpatch/"
    assert doc["git_init"] is True and (where / ".git").is_dir()
    assert git(where, "rev-parse", "--show-toplevel") == str(where)
    assert git(where, "log", "--all", "--oneline") == ""  # nothing committed: the team reviews first
    assert git(where, "check-ignore", ".sgpatch/checkouts") == ".sgpatch/checkouts"
    # the release, laid out as the stack's checkout: fetch accepts it as it is
    checkout = where / ".sgpatch" / "checkouts" / STACK
    assert doc["checkout"] == str(checkout)
    assert git(checkout, "rev-parse", "HEAD") == stack.pypi_commit == doc["pypi_commit"]
    fetched = run_cli("fetch", "--config", str(where / "VERSIONS.toml"), "--json")
    assert fetched.exit_code == 0, fetched.stderr
    assert json_out(fetched)["created"] is False


def test_init_a_wheel_only_release_pins_what_port_pinned() -> None:
    """0.5.23 (platform wheels only) on cu130: the same stack 'sgpatch port' wrote into VERSIONS.toml."""
    import tempfile

    shipped = load_config(REPO / "VERSIONS.toml").stacks["0.5.23-cu130"]
    with tempfile.TemporaryDirectory() as tmp:
        result = init(tmp, "--release", "0.5.23", "--cuda", "cu130", "--json")
        assert result.exit_code == 0, result.stderr
        stack = load_config(Path(tmp) / "VERSIONS.toml").stacks["0.5.23-cu130"]
    assert stack.artifacts == shipped.artifacts and len(stack.wheels) == 6
    assert stack.pypi_commit == shipped.pypi_commit
    assert stack.install == shipped.install
    assert stack.requires == shipped.requires == ()  # 0.5.23 asks for cuda-python>=13 itself
    assert stack.build_requires == ()  # no sdist: build repacks the wheels


def test_the_pre_commit_config_runs_sgpatchs_own_hooks(team: tuple[Path, dict[str, object]]) -> None:
    from .test_export import _hooks

    where, _ = team
    published = {h["id"]: h for h in _hooks(REPO / ".pre-commit-hooks.yaml")}
    assert [h.id for h in HOOKS] == list(published)
    text = (where / ".pre-commit-config.yaml").read_text()
    assert "<you>" not in text and "repo: local" in text
    for hook in HOOKS:
        assert hook.entry == published[hook.id]["entry"]
        assert f"        entry: {hook.entry}\n" in text
        if hook.files is None:
            assert published[hook.id]["always_run"] == "true"
        else:
            assert hook.files == published[hook.id]["files"]
            assert f"        files: {hook.files}\n" in text


def test_init_refuses_an_existing_project_and_force_keeps_the_series(tmp_path: Path) -> None:
    where = copy_project(tmp_path / "proj")
    before = (where / "VERSIONS.toml").read_bytes()
    refused = init(str(where), "--release", "0.5.9", "--cuda", "cu130")
    assert refused.exit_code == 2
    assert "VERSIONS.toml: exists already" in refused.stderr and "--force" in refused.stderr
    assert (where / "VERSIONS.toml").read_bytes() == before and not (where / ".git").exists()
    record("init-existing-project", exit=refused.exit_code, shown=first_error(refused.stderr), roots=(tmp_path,))
    series = (where / "patches" / "0.5.9" / "series").read_bytes()
    forced = init(str(where), "--release", "0.5.9", "--cuda", "cu128", "--force", "--json")
    assert forced.exit_code == 0, forced.stderr
    doc = json_out(forced)
    assert str(where / "patches" / "0.5.9" / "series") in doc["kept"]
    assert (where / "patches" / "0.5.9" / "series").read_bytes() == series
    assert list(load_config(where / "VERSIONS.toml").stacks) == ["0.5.9-cu128"]


@pytest.mark.parametrize(
    ("case_id", "args", "message"),
    [
        ("init-unknown-cuda", ("--release", "0.5.9", "--cuda", "cu999"), "unknown CUDA label 'cu999'"),
        ("init-local-label", ("--release", "0.5.9+cu130", "--cuda", "cu130"), "no local label"),
        ("init-not-a-version", ("--release", "not-a-version", "--cuda", "cu130"), "is not a version"),
        ("init-no-release", ("--cuda", "cu130"), "needs --release VERSION and --cuda LABEL"),
        (
            "init-unknown-release",
            ("--release", "99.0.0", "--cuda", "cu130"),
            "sglang 99.0.0: the package index has no sdist or wheel",
        ),
    ],
    ids=["unknown-cuda", "local-label", "not-a-version", "no-release", "unknown-release"],
)
def test_init_bad_input_is_exit_2_and_writes_nothing(
    tmp_path: Path, case_id: str, args: tuple[str, ...], message: str
) -> None:
    result = init(str(tmp_path / "new"), *args)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.splitlines()) <= 2
    assert not (tmp_path / "new").exists()
    assert CASES[case_id].expect in message and CASES[case_id].exit == result.exit_code
    record(case_id, exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path,))


def test_init_below_the_top_of_a_repository_writes_no_pre_commit_config(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    result = init(str(tmp_path / "sub"), "--release", "0.5.9", "--cuda", "cu128", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert doc["git_init"] is False and not (tmp_path / "sub" / ".git").exists()
    assert not (tmp_path / "sub" / ".pre-commit-config.yaml").exists()
    assert any("no .pre-commit-config.yaml written" in n for n in doc["notes"])
    assert load_config(tmp_path / "sub" / "VERSIONS.toml").default_stack == "0.5.9-cu128"


# --------------------------------------------------------------------------- status


def _rows(config: Path) -> dict[str, dict[str, object]]:
    result = run_cli("status", "--config", str(config), "--json")
    assert result.exit_code == 0, result.stderr
    return {row["stack"]: row for row in json_out(result)["stacks"]}


def test_status_follows_a_checkout_through_the_edit_loop(tmp_path: Path, patched_checkout: Callable[[], Path]) -> None:
    proj = copy_project(tmp_path / "proj")
    config = proj / "VERSIONS.toml"
    rows = _rows(config)
    assert list(rows) == list(load_config(config).stacks)
    assert {r["state"] for r in rows.values()} == {"absent"}
    assert rows[STACK]["series"] == 3 and rows[STACK]["default"] is True

    co = proj / ".sgpatch" / "checkouts" / STACK
    co.parent.mkdir(parents=True)
    shutil.move(patched_checkout(), co)
    row = _rows(config)[STACK]
    assert (row["state"], row["applied"], row["uncommitted"], row["unexported"]) == ("patched", 3, [], [])

    communicator = "python/sglang/srt/layers/communicator.py"
    edit(co / communicator, "its own layer.\n", "its own layer!\n")  # in 0003, the last series commit
    row = _rows(config)[STACK]
    assert row["state"] == "patched" and row["uncommitted"] == [" M " + communicator]

    commit(co, "", amend=True)  # an edited series commit: export has not written it yet
    row = _rows(config)[STACK]
    assert row["uncommitted"] == [] and len(row["unexported"]) == 1
    assert "0003-eagle3-no-deferred-allreduce.patch (edited since it was recorded)" in row["unexported"][0]

    assert run_cli("export", "--config", str(config)).exit_code == 0
    row = _rows(config)[STACK]
    assert (row["state"], row["unexported"]) == ("patched", [])

    (co / "NEW.txt").write_text("new\n")
    git(co, "add", "NEW.txt")
    git(co, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a new fix")
    row = _rows(config)[STACK]
    assert row["state"] == "patched" and [u.split(" ", 1)[1] for u in row["unexported"]] == ["a new fix"]
    human = run_cli("status", "--config", str(config))
    assert "unexported: " in human.stdout and f"'sgpatch export {STACK}'" in human.stdout

    git(co, "reset", "-q", "--hard", "HEAD~1")
    patch = proj / "patches" / "0.5.9" / "0001-kimi-k25-eagle3-delegation.patch"
    patch.write_bytes(patch.read_bytes().replace(b"Description: ", b"Description: (edited) ", 1))
    row = _rows(config)[STACK]
    assert row["state"] == "drifted" and "0001-kimi-k25-eagle3-delegation.patch changed" in row["detail"]


def test_status_of_a_checkout_that_is_not_the_stacks(tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj")
    co = proj / ".sgpatch" / "checkouts" / STACK
    co.mkdir(parents=True)
    git(co, "init", "-q")
    (co / "f").write_text("x\n")
    git(co, "add", "f")
    git(co, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "another project")
    row = _rows(proj / "VERSIONS.toml")[STACK]
    assert row["state"] == "other" and "is not below HEAD" in row["detail"]
    (proj / "patches" / "0.5.9" / "series").write_text("0009-missing.patch\n")
    row = _rows(proj / "VERSIONS.toml")[STACK]
    assert row["state"] == "error" and "0009-missing.patch: no such patch file" in row["detail"]


def test_status_names_the_last_built_wheel(tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj")
    config = load_config(proj / "VERSIONS.toml")
    row = _rows(config.path)[STACK]
    assert row["last_build"] is None and row["build_current"] is None
    wheel = tmp_path / "dist" / f"sglang-{row['wheel_version']}-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"not really a wheel")
    report = WheelReport(
        wheel=wheel, stack=STACK, version=str(row["wheel_version"]), checks=(), verify=None, sha256=_sha256(wheel)
    )
    record_build(proj, STACK, (BuildResult(wheel, tmp_path / "r.txt", str(row["wheel_version"]), False, report),))
    row = _rows(config.path)[STACK]
    assert row["build_current"] is True
    assert row["last_build"]["wheels"] == [  # type: ignore[index]
        {"wheel": str(wheel), "sha256": _sha256(wheel), "ok": True, "exists": True}
    ]
    wheel.unlink()
    assert "(gone)" in run_cli("status", "--config", str(config.path)).stdout
    # a record of another shape is no record
    path = proj / ".sgpatch" / "builds" / "last" / f"{STACK}.json"
    path.write_text('{"format": 1, "stack": "x", "version": 3}')
    assert last_build(proj, STACK) is None


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
