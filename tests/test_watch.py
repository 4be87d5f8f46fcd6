"""``sgpatch watch`` against a local PEP 691 index serving the real release files (issue 22 items 2-4).

The index is tests/indexserver.py's HTTP server, pip pointed at it and at nothing else; the files it serves
are upstream's own (0.5.9 and 0.5.10, from sgpatch's cache, checked against their pins), so each port is
the real port of the real release.  The project is a copy whose newest stack is 0.5.9 (the 0.5.23 table
cut off), or the whole project (newest 0.5.23: nothing the index lists is newer).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sgpatch.source.artifacts import fetch_artifact

from .conftest import RELEASES
from .helpers import REPO, copy_project, git, json_out, run_cli
from .indexserver import CraftedIndex, crafted_index
from .port_fixtures import KIMI, SDIST_0510, edited_project  # noqa: F401 (fixture)
from .reliability import CASES, first_error, record

SDIST_059 = "sglang-0.5.9.tar.gz"
WORKFLOW = REPO / ".github/workflows/watch.yml"
PINNED = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}")  # owner/name@full commit SHA


def _files() -> dict[str, bytes]:
    """The real 0.5.9 sdist and 0.5.10 sdist and wheel, as PyPI serves them."""
    from sgpatch.config import load_config

    old = load_config(REPO / "VERSIONS.toml").stack("0.5.9-cu130")
    out = {}
    for artifact, version in ((old.artifacts[0], "0.5.9"), (SDIST_0510, "0.5.10"), (RELEASES["0.5.10"], "0.5.10")):
        out[artifact.filename] = fetch_artifact(artifact, version).read_bytes()
    return out


@pytest.fixture(scope="module")
def real_files() -> dict[str, bytes]:
    return _files()


@pytest.fixture
def use_index(monkeypatch: pytest.MonkeyPatch) -> Callable[[CraftedIndex], None]:
    """pip configured with the crafted index only (sgpatch's cache stays: the pinned files are hits)."""

    def use(index: CraftedIndex) -> None:
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("PIP_INDEX_URL", f"{index.url}/simple")
        monkeypatch.setenv("PIP_RETRIES", "0")

    return use


def newest_059(proj: Path) -> Path:
    """Cut the 0.5.23 stack off the project's VERSIONS.toml: its newest stack is 0.5.9."""
    path = proj / "VERSIONS.toml"
    text = path.read_text()
    cut = text.index("# SGLang 0.5.23 on CUDA 13.0")
    path.write_text(text[:cut].rstrip().rsplit("\n", 1)[0] + "\n")
    return proj


def watch(proj: Path, *args: str) -> Any:
    return run_cli("watch", "--config", str(proj / "VERSIONS.toml"), *args, catch=True)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_nothing_newer_is_exit_0_and_writes_nothing(
    tmp_path: Path, real_files: dict[str, bytes], use_index: Callable[[CraftedIndex], None]
) -> None:
    proj = copy_project(tmp_path / "proj", {})
    before = tree(proj)
    with crafted_index() as index:
        index.serve_files(real_files)
        use_index(index)
        result = watch(proj, "--json")
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert doc["base"] == "0.5.23-cu130" and doc["newest"] == "0.5.23"
    assert doc["releases"] == [] and doc["total"]["attempted"] == 0
    assert tree(proj) == before and not (proj / "watch").exists()
    assert [s.path for s in index.seen] == ["/simple/sglang/"]  # asked for the list, downloaded nothing
    human = watch_human(proj, real_files, use_index)
    assert human.exit_code == 0 and "nothing newer than sglang 0.5.23" in human.stdout


def watch_human(proj: Path, files: dict[str, bytes], use_index: Callable[[CraftedIndex], None]) -> Any:
    with crafted_index() as index:
        index.serve_files(files)
        use_index(index)
        return watch(proj)


def test_a_newer_release_that_ports_cleanly_is_written_with_its_report(
    tmp_path: Path, real_files: dict[str, bytes], use_index: Callable[[CraftedIndex], None]
) -> None:
    """0.5.9 -> 0.5.10: 0001 is upstream (PR #19689 released), 0002 applies; the stack, its series and the
    report land in the project, the checkout where port puts it, and the interface check passes.  A
    pre-release, a wholly yanked release and a file whose version is not PEP 440 are named and left out."""
    proj = newest_059(copy_project(tmp_path / "proj", {}))
    files = {
        **real_files,
        "sglang-0.5.11rc1.tar.gz": b"never read",
        "sglang-0.5.12.tar.gz": b"never read",
        "sglang-latest.tar.gz": b"never read",
    }
    with crafted_index() as index:
        index.serve_files(files, extra={"sglang-0.5.12.tar.gz": {"yanked": "broken"}})
        use_index(index)
        result = watch(proj, "--json")
    assert result.exit_code == 10, result.stderr + result.stdout
    doc = json_out(result)
    assert doc["base"] == "0.5.9-cu130" and doc["total"] == {
        "attempted": 1,
        "succeeded": 1,
        "needs_person": 0,
        "failed": 0,
        "new": 0,
    }
    [rel] = doc["releases"]
    assert rel["version"] == "0.5.10" and rel["stack"] == "0.5.10-cu130" and rel["state"] == "ported"
    states = {p["name"]: p["state"] for p in rel["port"]["patches"]}
    assert states == {
        "0001-kimi-k25-eagle3-delegation.patch": "upstream",
        "0002-deepseek-eagle3-layer-offset.patch": "applies",
        "0003-eagle3-no-deferred-allreduce.patch": "applies",
    }, states
    assert rel["interface"] == {"ok": True, "gaps": [], "error": ""}
    assert any(p.startswith("torch==") for p in rel["pins"])
    skipped = "\n".join(doc["skipped"])
    assert "0.5.11rc1: a pre-release" in skipped and "0.5.12: every file is yanked" in skipped
    assert "sglang-latest.tar.gz: its version is not PEP 440" in skipped
    assert not any("0.5.11rc1" in s.path or "0.5.12" in s.path or "latest" in s.path for s in index.seen)

    text = (proj / "VERSIONS.toml").read_text()
    assert '[stacks."0.5.10-cu130"]' in text and '[stacks."0.5.10-cu128"]' not in text
    series = (proj / "patches/0.5.10/series").read_text().splitlines()
    assert [ln for ln in series if not ln.startswith("#")] == [
        "0002-deepseek-eagle3-layer-offset.patch",
        "0003-eagle3-no-deferred-allreduce.patch",
    ]
    assert (proj / "patches/0.5.10/0002-deepseek-eagle3-layer-offset.patch").is_file()
    assert rel["report"] == str(proj / "watch" / "0.5.10.md")
    report = (proj / "watch/0.5.10.md").read_text()
    assert report.startswith("# sglang 0.5.10: ported cleanly\n")
    assert "| `0001-kimi-k25-eagle3-delegation.patch` | **upstream** |" in report
    assert "| `0002-deepseek-eagle3-layer-offset.patch` | **applies** |" in report
    assert "## Install pins" in report and "torch==" in report and "**ok**" in report
    checkout = proj / ".sgpatch/checkouts/0.5.10-cu130"
    assert git(checkout, "status", "--porcelain") == ""
    verified = run_cli("verify", "0.5.10-cu130", "--config", str(proj / "VERSIONS.toml"), "--json")
    assert verified.exit_code == 0, verified.stderr  # the stack watch wrote verifies on its checkout
    assert run_cli("stacks", "--config", str(proj / "VERSIONS.toml")).exit_code == 0


def test_a_conflict_needs_a_person_and_names_patch_file_and_hunk(
    tmp_path: Path,
    real_files: dict[str, bytes],
    use_index: Callable[[CraftedIndex], None],
    edited_project: Callable[[], tuple[Path, Path]],  # noqa: F811
) -> None:
    """The series gained 0005, which edits the line 0.5.10 rewrote: exit 1; the report and the JSON name the
    patch, the file and the hunk; VERSIONS.toml and patches/ are untouched; the port waits in its checkout
    for 'sgpatch port --continue', and the carried part is a diff beside the report."""
    proj, _ = edited_project()
    newest_059(proj)
    before = {k: v for k, v in tree(proj).items() if not k.startswith(".sgpatch")}
    with crafted_index() as index:
        index.serve_files(real_files)
        use_index(index)
        result = watch(proj, "--json", "--out", str(tmp_path / "reports"), "--release", "0.5.10")
    assert result.exit_code == 1, result.stderr + result.stdout
    [rel] = json_out(result)["releases"]
    assert rel["state"] == "needs-person"
    conflict = [p for p in rel["problems"] if p.startswith("0005-")]
    assert conflict and f": {KIMI}: hunk 1 @@" in conflict[0], rel["problems"]
    assert rel["port"]["stopped"].startswith("0005-") and rel["interface"] is None
    after = {k: v for k, v in tree(proj).items() if not k.startswith(".sgpatch")}
    assert after == before  # reports went to --out
    report = (tmp_path / "reports/0.5.10.md").read_text()
    assert report.startswith("# sglang 0.5.10: needs a person\n")
    assert conflict[0].replace("`", "'") in report and "sgpatch port --continue" in report
    carried = (tmp_path / "reports/0.5.10.carried.diff").read_text()
    assert "<<<<<<<" in carried and f"+++ b/{KIMI}" in carried
    checkout = proj / ".sgpatch/checkouts/0.5.10-cu130"
    assert (checkout / ".git/sgpatch-port.json").is_file()
    again = run_cli("port", "--continue", "--config", str(proj / "VERSIONS.toml"), catch=True)
    assert again.exit_code == 1 and "conflict marker is still there" in again.stderr  # the project's own port


def test_dry_run_lists_and_json_shape(
    tmp_path: Path, real_files: dict[str, bytes], use_index: Callable[[CraftedIndex], None]
) -> None:
    proj = newest_059(copy_project(tmp_path / "proj", {}))
    before = tree(proj)
    with crafted_index() as index:
        index.serve_files(real_files)
        use_index(index)
        result = watch(proj, "--dry-run", "--json")
        human = watch(proj, "--dry-run")
        unlisted = watch(proj, "--release", "0.5.11")
        older = watch(proj, "--release", "0.5.9")
    assert result.exit_code == 10, result.stderr
    doc = json_out(result)
    assert set(doc) == {
        "schema_version",
        "base",
        "newest",
        "index",
        "dry_run",
        "exit_code",
        "total",
        "releases",
        "skipped",
    }
    assert doc["exit_code"] == 10 and doc["dry_run"] is True and doc["index"] == f"{index.url}/simple"
    assert [(r["version"], r["state"], r["port"]) for r in doc["releases"]] == [("0.5.10", "new", None)]
    assert tree(proj) == before
    assert human.exit_code == 10 and "0.5.10       new" in human.stdout and "TOTAL: attempted 0" in human.stdout
    assert unlisted.exit_code == 2 and "lists no usable file of sglang 0.5.11" in unlisted.stderr
    assert older.exit_code == 2 and "not newer than 0.5.9" in older.stderr
    assert tree(proj) == before
    for case_id, refused in (("watch-release-unlisted", unlisted), ("watch-release-older", older)):
        shown = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", first_error(refused.stderr))
        assert CASES[case_id].expect in shown and "Traceback" not in refused.stderr
        record(case_id, exit=refused.exit_code, shown=shown, roots=(tmp_path,))


NOT_PEP440 = {
    "watch-release-word": "latest",
    "watch-release-shell": "0.5.10;rm -rf /",
    "watch-release-path": "../0.5.10",
}


@pytest.mark.parametrize("case_id", list(NOT_PEP440))
def test_a_release_that_is_not_pep440_is_one_line_exit_2(
    case_id: str, tmp_path: Path, use_index: Callable[[CraftedIndex], None]
) -> None:
    release = NOT_PEP440[case_id]
    proj = newest_059(copy_project(tmp_path / "proj", {}))
    with crafted_index() as index:
        index.serve_files({})
        use_index(index)
        result = watch(proj, "--release", release)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("sgpatch: error:") == 1 and "is not a PEP 440 version" in result.stderr
    assert index.seen == []
    record(case_id, exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path,))


def test_a_hostile_version_listing_is_left_out_never_a_traceback(
    tmp_path: Path, use_index: Callable[[CraftedIndex], None]
) -> None:
    """Names the index lists whose version packaging cannot read (a crafted '0.5.99x', one with a control
    character, a PEP 700 'versions' list of junk) are skipped with one line each; nothing is downloaded."""
    proj = newest_059(copy_project(tmp_path / "proj", {}))
    files = {"sglang-0.5.99x.tar.gz": b"x", "sglang-0.6.0_evil-py3-none-any.whl": b"x"}
    with crafted_index() as index:
        page = index.serve_files(files)
        page["versions"] = ["0.5.99x", "\u001b[31mred"]
        index.page(json.dumps(page).encode())
        use_index(index)
        result = watch(proj, "--json")
        human = watch(proj)
    assert result.exit_code == 0, result.stderr
    doc = json_out(result)
    assert doc["releases"] == [] and len(doc["skipped"]) == 2, doc["skipped"]
    assert human.exit_code == 0 and "Traceback" not in human.stderr + human.stdout
    assert [s.path for s in index.seen] == ["/simple/sglang/", "/simple/sglang/"]
    skipped = [" ".join(ln.split()) for ln in human.stdout.splitlines() if ln.startswith("skip ")]
    assert len(skipped) == 2 and all("left out" in ln for ln in skipped), human.stdout
    shown = f"{' / '.join(skipped)}; {human.stdout.strip().splitlines()[-1]}"
    assert CASES["watch-hostile-listing"].expect in shown
    record("watch-hostile-listing", exit=result.exit_code, shown=shown, roots=(tmp_path,))


def test_a_malformed_index_answer_is_exit_3(tmp_path: Path, use_index: Callable[[CraftedIndex], None]) -> None:
    proj = newest_059(copy_project(tmp_path / "proj", {}))
    with crafted_index() as index:
        index.page(b'{"meta": {"api-version": "1.1"}, "files": [{"filename": 7}]}')
        use_index(index)
        result = watch(proj)
    assert result.exit_code == 3 and result.stderr.count("sgpatch: error:") == 1, result.stderr
    assert "malformed answer" in result.stderr and "Traceback" not in result.stderr
    shown = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", first_error(result.stderr))
    record("watch-malformed-answer", exit=result.exit_code, shown=shown, roots=(tmp_path,))


# --------------------------------------------------------------------------- the scheduled workflow


def test_the_watch_workflow_is_valid_pinned_and_least_privilege(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "check-jsonschema"
    assert exe.is_file(), "check-jsonschema is in the test extras: pip install -e '.[test]'"
    checked = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(WORKFLOW.read_text())
    triggers = doc[True] if True in doc else doc["on"]  # YAML 1.1 reads a bare 'on' as true
    assert set(triggers) == {"schedule", "workflow_dispatch"} and triggers["schedule"][0]["cron"].count(" ") == 4
    assert doc["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert all("permissions" not in job or job["permissions"] == doc["permissions"] for job in doc["jobs"].values())
    assert doc["concurrency"]["group"] and doc["concurrency"]["cancel-in-progress"] is False
    steps = [step for job in doc["jobs"].values() for step in job["steps"]]
    uses = [step["uses"] for step in steps if "uses" in step]
    assert uses and all(PINNED.fullmatch(u) for u in uses), uses
    assert not any("${{" in step.get("run", "") for step in steps)  # expressions reach scripts through env only
    text = WORKFLOW.read_text()
    assert "sgpatch watch --dry-run --json" in text and 'sgpatch watch --release "$version" --json' in text
    assert "--draft" in text and "gh pr ready" in text
    broken = tmp_path / "watch.yml"
    broken.write_text(text.replace("runs-on:", "runs_on:", 1))
    refused = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-workflows", str(broken)], capture_output=True
    )
    assert refused.returncode != 0  # the check can fail
    assert not PINNED.fullmatch("actions/checkout@v5") and not PINNED.fullmatch("actions/checkout@" + "f" * 39)


def test_versions_are_compared_as_pep440_and_local_versions_are_not_releases(
    tmp_path: Path, use_index: Callable[[CraftedIndex], None]
) -> None:
    """``0.5.10`` and ``0.5.10.0`` are one release; ``0.5.11+mirror.1`` (a rebuild) is left out, never ported."""
    proj = newest_059(copy_project(tmp_path / "proj", {}))
    before = tree(proj)
    files = {
        "sglang-0.5.10.tar.gz": b"x",
        "sglang-0.5.10.0-py3-none-any.whl": b"y",
        "sglang-0.5.11+mirror.1-py3-none-any.whl": b"z",
    }
    with crafted_index() as index:
        index.serve_files(files)
        use_index(index)
        result = watch(proj, "--dry-run", "--json")
        same = watch(proj, "--release", "0.5.10.0", "--dry-run", "--json")
        local = watch(proj, "--release", "0.5.11+mirror.1", "--dry-run")
    assert result.exit_code == 10, result.stderr
    doc = json_out(result)
    assert [r["version"] for r in doc["releases"]] == ["0.5.10.0"]  # one release, by its longest spelling
    assert doc["skipped"] == ["0.5.11+mirror.1: a local version (a rebuild, not a release of sglang); left out"]
    assert same.exit_code == 10 and [r["version"] for r in json_out(same)["releases"]] == ["0.5.10.0"]
    assert local.exit_code == 2 and "a local version (a rebuild), not a release" in local.stderr
    assert all(s.path == "/simple/sglang/" for s in index.seen)  # nothing downloaded
    assert tree(proj) == before
    record("watch-versions-equal", exit=result.exit_code, shown=f"releases: {doc['releases'][0]['version']} (once)")
    record("watch-local-version", exit=result.exit_code, shown=doc["skipped"][0])


# --------------------------------------------------------------------------- the workflow's script, run

STAND_IN_SGPATCH = """#!/bin/sh
# 'sgpatch watch --release V --json' as the workflow calls it: the new stack and its report, exit 10
v="$3"
mkdir -p "watch" "patches/$v"
printf '# sglang %s: ported cleanly\\n' "$v" > "watch/$v.md"
printf '# series for %s\\n' "$v" > "patches/$v/series"
printf '# stack %s (run %s)\\n' "$v" "$$" >> VERSIONS.toml
echo '{"schema_version": 1}'
exit 10
"""
STAND_IN_GH = """#!/bin/sh
echo "gh $*" >> "$GH_LOG"
"""


def _step_script(name: str) -> str:
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(WORKFLOW.read_text())
    steps = [step for job in doc["jobs"].values() for step in job["steps"]]
    return next(step["run"] for step in steps if step.get("name") == name)


def _run_step(tmp_path: Path, remote: Path, name: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The workflow's step in a fresh clone of ``remote`` (as actions/checkout makes it), bash -eo pipefail as
    GitHub runs it, with stand-ins for gh and sgpatch on PATH."""
    work = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}"
    subprocess.run(["git", "clone", "-q", str(remote), str(work)], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool, text in (("sgpatch", STAND_IN_SGPATCH), ("gh", STAND_IN_GH)):
        (bin_dir / tool).write_text(text)
        (bin_dir / tool).chmod(0o755)
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RUNNER_TEMP": str(tmp_path)}
    full.update(GH_LOG=str(tmp_path / "gh.log"), BASE="main", GH_TOKEN="x", **env)
    for key in [k for k in full if k.startswith("GIT_")]:
        del full[key]
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", _step_script(name)],
        cwd=work, env=full, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _log(remote: Path, ref: str) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", str(remote), "log", "--format=%an|%s", f"main..{ref}"], capture_output=True, text=True
    )
    return out.stdout.splitlines()


def test_the_workflow_installs_pinned_and_keeps_a_persons_commits(tmp_path: Path) -> None:
    text = WORKFLOW.read_text()
    assert "pip install --disable-pip-version-check . -c constraints.txt" in text  # as the README's CI does
    assert "push --force " not in text and "--force-with-lease=" in text
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    seed = tmp_path / "seed"
    subprocess.run(["git", "clone", "-q", str(remote), str(seed)], check=True, capture_output=True)
    (seed / "VERSIONS.toml").write_text("# the project\n")
    (seed / "patches" / "0.5.9").mkdir(parents=True)
    (seed / "patches" / "0.5.9" / "series").write_text("")
    person = ["-c", "user.name=Dev One", "-c", "user.email=dev@example.com"]
    git(seed, "add", "-A")
    git(seed, *person, "commit", "-q", "-m", "the project")
    git(seed, "push", "-q", "origin", "HEAD:main")
    branch = "watch/sglang-0.5.10"
    first = _run_step(tmp_path, remote, "One pull request per release", VERSIONS="0.5.10")
    assert first.returncode == 0, first.stdout + first.stderr
    assert _log(remote, branch) == ["sgpatch watch|sglang 0.5.10: ported cleanly (sgpatch watch)"]
    again = _run_step(tmp_path, remote, "One pull request per release", VERSIONS="0.5.10")
    assert again.returncode == 0 and len(_log(remote, branch)) == 1  # its own commit: made anew
    # a person resumes the port on the pull request's branch and pushes
    mine = tmp_path / "mine"
    subprocess.run(["git", "clone", "-q", "-b", branch, str(remote), str(mine)], check=True, capture_output=True)
    (mine / "patches" / "0.5.10" / "0003-resolved.patch").write_text("the person's resolution\n")
    git(mine, "add", "-A")
    git(mine, *person, "commit", "-q", "-m", "port --continue: 0003 resolved")
    git(mine, "push", "-q", "origin", branch)
    tip = git(mine, "rev-parse", "HEAD")
    calls = (tmp_path / "gh.log").read_text()
    kept = _run_step(tmp_path, remote, "One pull request per release", VERSIONS="0.5.10")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert f"{branch} has commits by a person" in kept.stdout and "left as it is" in kept.stdout
    assert git(mine, "ls-remote", "origin", branch).split()[0] == tip  # nothing discarded
    assert _log(remote, branch)[0] == "Dev One|port --continue: 0003 resolved"
    assert (tmp_path / "gh.log").read_text() == calls  # its pull request untouched too
    line = next(ln for ln in kept.stdout.splitlines() if "has commits by a person" in ln)
    record("watch-keeps-a-persons-commits", exit=kept.returncode, shown=re.sub(r"\b[0-9a-f]{40}\b", "SHA", line))
