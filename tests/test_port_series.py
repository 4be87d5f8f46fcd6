"""Upgrade day for a real series (issue 19): slime's 49-file patch on SGLang 0.5.9, carried hunk by hunk.

The series is the RL framework slime's own (``tests/data/series``, a copy with its source, Apache-2.0): test
data, never one of the project's own ``patches/``.  It is adopted as the maintainers of a stack would:
``git apply`` in a 0.5.9 checkout, commit, ``sgpatch export``.  Every command then runs as a whole ``sgpatch`` process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sgpatch.config import load_config
from sgpatch.lock import PAUSE_ENV, PAUSE_FILE_ENV
from sgpatch.series.patch import read_series

from .helpers import DATA, empty_series_project, git, snapshot
from .reliability import first_error, record
from .shared import copy, once

# tests/data/series (a copy of slime's own patch, with its source and licence); SGPATCH_SLIME_PATCH names another
SLIME = Path(os.environ.get("SGPATCH_SLIME_PATCH", str(DATA / "series" / "slime-sglang-0.5.9.patch")))
PATCH = "0001-slime-the-rl-framework-s-changes-to-sglang-0-5-9.patch"
NEW = "0.5.12.post1-cu130"
RECORD = "sgpatch-port.json"
SGPATCH = [sys.executable, "-m", "sgpatch.cli"]
GONE = {  # the files 0.5.12.post1 no longer has, and where their code went (by its lines, else its definitions)
    "python/sglang/srt/layers/moe/routed_experts_capturer.py": "python/sglang/srt/state_capturer/routed_experts.py",
    "python/sglang/srt/managers/scheduler_metrics_mixin.py": (
        "python/sglang/srt/observability/scheduler_metrics_mixin.py"
    ),
    "python/sglang/srt/managers/tokenizer_communicator_mixin.py": (
        "python/sglang/srt/managers/tokenizer_control_mixin.py"
    ),
    "python/sglang/srt/metrics/collector.py": "python/sglang/srt/observability/metrics_collector.py",
}
MOVED_TO = "python/sglang/srt/observability/metrics_collector.py"
MESSAGE = (
    "slime: the RL framework's changes to SGLang 0.5.9\n\nFrom THUDM/slime docker/patch/v0.5.9/sglang.patch.\n\n"
    "Origin: vendor, https://github.com/THUDM/slime\nUpstream-Status: Inappropriate [RL framework integration]\n"
)

if not SLIME.is_file():
    raise RuntimeError(f"the slime series is not at {SLIME}")


def sg(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """One whole ``sgpatch`` process."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")} | env
    full.pop("CI", None)
    return subprocess.run([*SGPATCH, *args], cwd=cwd, env=full, capture_output=True, text=True, check=False)


def _project_files(proj: Path) -> dict[str, bytes]:
    """VERSIONS.toml and patches/, byte for byte."""
    files = {"VERSIONS.toml": (proj / "VERSIONS.toml").read_bytes()}
    files.update(
        {str(p.relative_to(proj)): p.read_bytes() for p in sorted((proj / "patches").rglob("*")) if p.is_file()}
    )
    return files


@pytest.fixture(scope="session")
def slime_project(tmp_path_factory: pytest.TempPathFactory, template_checkout: Path) -> tuple[Path, Path]:
    """A project whose 0.5.9-cu130 stack carries slime's patch, adopted with git apply, commit, export:
    (project, the patched 0.5.9 checkout)."""

    def make(root: Path) -> None:
        proj = empty_series_project(root / "proj")
        co = copy(template_checkout, root / "co-0.5.9")
        git(co, "apply", str(SLIME))
        git(co, "-c", "user.name=slime", "-c", "user.email=slime@example.com", "commit", "-qam", MESSAGE)
        done = sg("export", "--config", str(proj / "VERSIONS.toml"), "--checkout", str(co))
        assert done.returncode == 0, done.stderr

    root = once(tmp_path_factory, "slime", make)
    assert [p.name for p in read_series(root / "proj/patches/empty").patches] == [PATCH]
    return root / "proj", root / "co-0.5.9"


@pytest.fixture(scope="session")
def stopped(
    tmp_path_factory: pytest.TempPathFactory, slime_project: tuple[Path, Path]
) -> tuple[Path, dict[str, Any], dict[str, bytes]]:
    """slime's series ported to 0.5.12.post1, stopped at its conflicts: (project, JSON report, project files before)."""

    def make(root: Path) -> None:
        proj = copy(slime_project[0], root / "proj")
        result = sg("port", "0.5.9-cu130", "--to", "0.5.12.post1", "--json", "--config", str(proj / "VERSIONS.toml"))
        assert result.returncode == 1, result.stderr
        (root / "port.json").write_text(result.stdout)

    root = once(tmp_path_factory, "stopped", make)
    # the project's files before the port: the adopted project's, which the port was run on a copy of
    return root / "proj", json.loads((root / "port.json").read_text()), _project_files(slime_project[0])


@pytest.fixture
def stopped_copy(tmp_path: Path, stopped: tuple[Path, dict[str, Any], dict[str, bytes]]) -> Callable[..., Path]:
    """Factory: a copy of the stopped project (its checkout included) for a test that changes it."""

    def make(name: str = "proj") -> Path:
        return copy(stopped[0], tmp_path / name)

    return make


def resolve(checkout: Path, *, theirs: Callable[[str, int], bool] = lambda path, n: False) -> int:
    """Resolve every conflict in the checkout: the release's side, or the patch's where ``theirs(path, n)``
    says so (``n``: the conflict's number in its file).  Returns how many conflicts were resolved."""
    resolved = 0
    for rel in git(checkout, "diff", "--name-only").splitlines():
        path = checkout / rel
        if not path.is_file():
            continue
        out: list[str] = []
        side: str | None = None
        n = 0
        for line in path.read_text().splitlines(keepends=True):
            if line.startswith("<<<<<<< "):
                side, n = "ours", n + 1
            elif side and line.startswith("||||||| "):
                side = "base"
            elif side and line == "=======\n":
                side = "theirs"
            elif side and line.startswith(">>>>>>> "):
                side, resolved = None, resolved + 1
            elif side is None or side == ("theirs" if theirs(rel, n) else "ours"):
                out.append(line)
        path.write_text("".join(out))
    return resolved


# --------------------------------------------------------------------------- the table


def test_every_file_and_hunk_of_the_slime_series_is_judged(
    stopped: tuple[Path, dict[str, Any], dict[str, bytes]],
) -> None:
    proj, doc, before = stopped
    (patch,) = doc["patches"]
    assert patch["name"] == PATCH and patch["state"] == "conflict" and doc["stopped"] == PATCH
    files = {f["file"]: f for f in patch["files"]}
    assert len(files) == 49 and sum(len(f["hunks"]) for f in files.values()) == 167
    # The counts per state, as observed on the real files (files: the strongest state of their hunks).
    none = {"superseded": 0, "obsolete": 0}
    assert doc["counts"]["hunks"] == {"upstream": 14, **none, "applies": 60, "merged": 23, "conflict": 70}
    assert doc["counts"]["files"] == {"upstream": 1, **none, "applies": 13, "merged": 6, "conflict": 29}
    assert patch["counts"] == doc["counts"]
    # Upstream, with its proof: model_config.py's one hunk is 0.5.12.post1's own text.
    model_config = files["python/sglang/srt/configs/model_config.py"]
    assert model_config["state"] == "upstream" and model_config["hunks"][0]["proof"] == "reverse-apply"
    deepseek = {h["index"]: h for h in files["python/sglang/srt/models/deepseek_v2.py"]["hunks"]}
    assert [deepseek[i]["proof"] for i in (1, 15, 16)] == ["reverse-apply"] * 3
    assert deepseek[14]["state"] == "upstream" and deepseek[14]["proof"] == "verbatim"
    # Applies, with its offset; merged; conflict with where its markers are.
    (base_conn,) = files["python/sglang/srt/disaggregation/base/conn.py"]["hunks"]
    assert (base_conn["state"], base_conn["offset"]) == ("applies", 15)
    assert [h["state"] for h in files["python/sglang/srt/layers/moe/fused_moe_triton/layer.py"]["hunks"]] == [
        "merged",
        "merged",
    ]
    environ = files["python/sglang/srt/environ.py"]
    assert environ["state"] == "conflict" and len(environ["regions"]) == 1
    # The files the release lacks: conflicts, with where their code seems to have gone.
    gone = {path: f["renamed"] or None for path, f in files.items() if f["gone"]}
    assert gone == GONE
    assert all(h["state"] == "conflict" for path in GONE for h in files[path]["hunks"])
    # Nothing of the project was written.
    assert _project_files(proj) == before and not (proj / "patches/0.5.12.post1").exists()
    assert doc["written"] == [] and doc["failures"] and doc["next"][-1].startswith("then run 'sgpatch port --continue'")


def test_the_stop_carries_the_clean_part_and_marks_the_rest(
    stopped: tuple[Path, dict[str, Any], dict[str, bytes]], release_tree: Callable[[str], Path]
) -> None:
    proj, doc, _ = stopped
    co = Path(doc["checkout"])
    assert co == proj / ".sgpatch/checkouts" / NEW
    release = release_tree("0.5.12.post1")
    files = {f["file"]: f for f in doc["patches"][0]["files"]}
    # HEAD is the new release (no patch before this one); the patch, as far as it goes, is in the files.
    assert git(co, "rev-parse", "HEAD") == doc["base"] == doc["pypi_commit"]
    changed = set(git(co, "diff", "--name-only").splitlines())
    kept = {p for p, f in files.items() if f["state"] in ("applies", "merged", "conflict") and not f["gone"]}
    assert changed == kept
    # Upstream hunks dropped: the release's own file.
    assert (co / "python/sglang/srt/configs/model_config.py").read_bytes() == (
        release / "python/sglang/srt/configs/model_config.py"
    ).read_bytes()
    # A file whose hunks all apply: the release's text with the patch's lines in.
    weights = (co / "python/sglang/srt/utils/weight_checker.py").read_text()
    assert "<<<<<<<" not in weights and weights != (release / "python/sglang/srt/utils/weight_checker.py").read_text()
    # Conflicts marked diff3-style against the old base, where the report says.
    environ = (co / "python/sglang/srt/environ.py").read_text().splitlines()
    ((start, end),) = files["python/sglang/srt/environ.py"]["regions"]
    region = environ[start - 1 : end]
    assert region[0] == "<<<<<<< sglang 0.5.12.post1" and "||||||| sglang 0.5.9" in region
    assert region[-1] == f">>>>>>> {PATCH} on sglang 0.5.9"
    # A file the release lacks stays absent; its hunks wait in a reject file that says where it went.
    assert sorted(doc["rejects"]) == sorted(f"{p}.rej" for p in GONE)
    for path, renamed in GONE.items():
        assert not (co / path).exists()
        text = (co / f"{path}.rej").read_text()
        assert text.count("\ndiff --git a/") == 1 and f"diff --git a/{path} b/{path}\n" in text
        assert (f"moved to {renamed}" in text) if renamed else ("No file of the release looks like it" in text)
    assert (co / ".git" / RECORD).is_file() and git(co, "rev-parse", "refs/sgpatch/port-stop")


# --------------------------------------------------------------------------- refusals, abort


def test_continue_refuses_while_a_marker_remains(stopped_copy: Callable[..., Path]) -> None:
    proj = stopped_copy()
    co = proj / ".sgpatch/checkouts" / NEW
    for rej in co.rglob("*.rej"):
        rej.unlink()  # only the markers are left
    before, files = snapshot(co), _project_files(proj)
    result = sg("port", "--continue", "--config", str(proj / "VERSIONS.toml"))
    record("port-continue-marker-left", exit=result.returncode, shown=first_error(result.stderr), roots=(proj,))
    assert result.returncode == 1
    assert re.search(r"python/sglang/srt/\S+\.py:\d+: a conflict marker is still there", result.stderr)
    assert snapshot(co) == before and _project_files(proj) == files


def test_continue_refuses_while_a_reject_file_remains(stopped_copy: Callable[..., Path]) -> None:
    proj = stopped_copy()
    co = proj / ".sgpatch/checkouts" / NEW
    assert resolve(co) == 58
    before, files = snapshot(co), _project_files(proj)
    result = sg("port", "--continue", "--config", str(proj / "VERSIONS.toml"))
    record("port-continue-reject-left", exit=result.returncode, shown=first_error(result.stderr), roots=(proj,))
    assert result.returncode == 1 and ".rej: the reject file is still there (4 left)" in result.stderr
    assert snapshot(co) == before and _project_files(proj) == files


def test_a_second_port_while_one_is_stopped_is_refused(stopped_copy: Callable[..., Path]) -> None:
    proj = stopped_copy()
    co = proj / ".sgpatch/checkouts" / NEW
    before, files = snapshot(co), _project_files(proj)
    result = sg("port", "--to", "0.5.12.post1", "--config", str(proj / "VERSIONS.toml"))
    record("port-again-while-stopped", exit=result.returncode, shown=first_error(result.stderr), roots=(proj,))
    assert result.returncode == 2 and "in progress here, stopped at 0001-slime" in result.stderr
    assert "sgpatch port --continue" in result.stderr
    assert snapshot(co) == before and _project_files(proj) == files


def test_abort_leaves_everything_as_before(
    stopped_copy: Callable[..., Path], stopped: tuple[Path, dict[str, Any], dict[str, bytes]]
) -> None:
    proj = stopped_copy()
    co = proj / ".sgpatch/checkouts" / NEW
    resolve(co)  # half-way through resolving
    result = sg("port", "--abort", "--config", str(proj / "VERSIONS.toml"))
    record("port-abort", exit=result.returncode, shown=result.stdout.splitlines()[0], roots=(proj,))
    assert result.returncode == 0, result.stderr
    assert "gave up the port to 0.5.12.post1-cu130" in result.stdout
    assert _project_files(proj) == stopped[2]
    assert not co.exists() and list((proj / ".sgpatch/checkouts").iterdir()) == []
    again = sg("port", "--abort", "--config", str(proj / "VERSIONS.toml"))
    assert again.returncode == 2 and "no port in progress" in again.stderr


# --------------------------------------------------------------------------- resolve, continue, verify


def _resolve_by_hand(co: Path, old_checkout: Path) -> None:
    """The test's own resolution: the patch's side of environ.py's conflict, the release's elsewhere; the
    renamed scheduler_metrics_mixin.py recreated as 0.5.9 had it with the patch; collector.py's hunks "moved"
    to the file it became (a line saying so); the other gone files left absent; every reject file deleted."""
    resolve(co, theirs=lambda path, n: path.endswith("/environ.py"))
    recreated = "python/sglang/srt/managers/scheduler_metrics_mixin.py"
    (co / recreated).write_bytes((old_checkout / recreated).read_bytes())
    with (co / MOVED_TO).open("a") as fh:
        fh.write("# slime: the hunks of metrics/collector.py belong here\n")
    for rej in co.rglob("*.rej"):
        rej.unlink()


def test_resolve_continue_then_verify_and_apply_on_a_fresh_checkout(
    stopped_copy: Callable[..., Path], slime_project: tuple[Path, Path], tmp_path: Path
) -> None:
    proj = stopped_copy()
    config = str(proj / "VERSIONS.toml")
    co = proj / ".sgpatch/checkouts" / NEW
    _resolve_by_hand(co, slime_project[1])
    done = sg("port", "--continue", "--json", "--config", config)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["stopped"] is None and [p["state"] for p in doc["patches"]] == ["resolved"]
    assert doc["patches"][0]["counts"]["hunks"]["conflict"] == 70  # the table of the stop, kept for the record
    # One patch, the user's name and DEP-3 header, the resolution in it.
    new_dir = proj / "patches/0.5.12.post1"
    (patch,) = read_series(new_dir).patches
    old = (proj / "patches/empty" / PATCH).read_bytes()
    data = patch.path.read_bytes()
    assert patch.name == PATCH and data.split(b"diff --git", 1)[0] == old.split(b"diff --git", 1)[0]
    paths = {f.path: f for f in patch.files}
    assert "python/sglang/srt/configs/model_config.py" not in paths  # upstream: dropped
    assert paths["python/sglang/srt/managers/scheduler_metrics_mixin.py"].new_file  # recreated
    assert [h.added[-1][1] for h in paths[MOVED_TO].hunks] == [
        b"# slime: the hunks of metrics/collector.py belong here\n"
    ]
    assert not {p for p in GONE if p != "python/sglang/srt/managers/scheduler_metrics_mixin.py"} & set(paths)
    assert b"SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE" in data  # environ.py: the patch's side
    # The stack is in VERSIONS.toml, pinned; the record is gone; the checkout is the new series.
    stack = load_config(proj / "VERSIONS.toml").stack(NEW)
    assert stack.series_dir == new_dir and stack.pypi_commit == doc["pypi_commit"]
    assert not (co / ".git" / RECORD).exists() and git(co, "status", "--porcelain") == ""
    assert git(co, "rev-list", "--count", f"{doc['pypi_commit']}..HEAD") == "1"
    verified = sg("verify", NEW, "--json", "--config", config)
    assert verified.returncode == 0, verified.stdout
    assert json.loads(verified.stdout)["phase"] == "patched"
    # The new series applies strictly to a fresh checkout of the release, and verifies there.
    fresh = tmp_path / "fresh"
    assert sg("fetch", NEW, "--into", str(fresh), "--config", config).returncode == 0
    applied = sg("apply", NEW, "--checkout", str(fresh), "--json", "--config", config)
    assert applied.returncode == 0, applied.stdout
    assert [p["state"] for p in json.loads(applied.stdout)["patches"]] == ["applicable"]
    assert git(fresh, "rev-parse", "HEAD^{tree}") == git(co, "rev-parse", "HEAD^{tree}")
    assert sg("verify", NEW, "--checkout", str(fresh), "--config", config).returncode == 0


def _kill_at(point: str, args: list[str], marker: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
    env.update({PAUSE_ENV: point, PAUSE_FILE_ENV: str(marker)})
    proc = subprocess.Popen([*SGPATCH, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 300
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"exited {proc.returncode} before {point}: {proc.communicate()[1]}")
        assert time.monotonic() < end, f"never reached {point}"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_an_interrupted_continue_is_finished_by_the_next(
    stopped_copy: Callable[..., Path], slime_project: tuple[Path, Path], tmp_path: Path
) -> None:
    # The reference: a continue nobody interrupts.
    ref = stopped_copy("reference")
    _resolve_by_hand(ref / ".sgpatch/checkouts" / NEW, slime_project[1])
    assert sg("port", "--continue", "--config", str(ref / "VERSIONS.toml")).returncode == 0
    # The same resolution, killed after writing the new series, before VERSIONS.toml.
    killed = stopped_copy("killed")
    co = killed / ".sgpatch/checkouts" / NEW
    _resolve_by_hand(co, slime_project[1])
    config = str(killed / "VERSIONS.toml")
    _kill_at("port:finish-series", ["port", "--continue", "--config", config], tmp_path / "paused")
    assert (co / ".git" / RECORD).exists() and (killed / "patches/0.5.12.post1" / PATCH).exists()
    assert b"0.5.12.post1-cu130" not in (killed / "VERSIONS.toml").read_bytes()
    # --abort may not undo a stack half-written; --continue finishes it.
    refused = sg("port", "--abort", "--config", config)
    record("port-abort-while-finishing", exit=refused.returncode, shown=first_error(refused.stderr), roots=(killed,))
    assert refused.returncode == 2 and "is writing the new stack" in refused.stderr
    done = sg("port", "--continue", "--config", config)
    record("port-continue-killed", exit=done.returncode, shown=done.stdout.splitlines()[-2], roots=(killed,))
    assert done.returncode == 0, done.stderr
    assert "finished writing the new stack" in done.stdout
    assert _project_files(killed) == _project_files(ref)
    ref_co = ref / ".sgpatch/checkouts" / NEW
    assert git(co, "rev-parse", "HEAD") == git(ref_co, "rev-parse", "HEAD")
    assert git(co, "status", "--porcelain") == "" and not (co / ".git" / RECORD).exists()
    assert subprocess.run(["git", "fsck", "--strict"], cwd=co, capture_output=True).returncode == 0


# --------------------------------------------------------------------------- another release


def test_slime_onto_0510_stops_resolves_and_verifies(slime_project: tuple[Path, Path], tmp_path: Path) -> None:
    """0.5.10 (an sdist release, a smaller step): the table a person reads, then the release's side of every
    conflict, the files 0.5.10 lacks left absent, --continue, verify."""
    proj = copy(slime_project[0], tmp_path / "proj")
    config = str(proj / "VERSIONS.toml")
    result = sg("port", "0.5.9-cu130", "--to", "0.5.10", "--config", config)
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert f"{PATCH}: 49 file(s), file by file and hunk by hunk:" in out
    assert re.search(r"^  python/sglang/srt/configs/model_config\.py +\S+ +#1 ", out, re.MULTILINE)
    states = r"\d+ upstream, \d+ superseded, \d+ obsolete, \d+ applies, \d+ merged, \d+ conflict"
    assert re.search(rf"^hunks: 167 = {states}$", out, re.M)
    assert f"port: STOPPED at {PATCH} for a person; VERSIONS.toml and patches/ are unchanged" in out
    assert "then run 'sgpatch port --continue' (or 'sgpatch port --abort' to give the port up)" in out
    co = proj / ".sgpatch/checkouts/0.5.10-cu130"
    rejects = sorted(str(r.relative_to(co)) for r in co.rglob("*.rej"))
    # scheduler_metrics_mixin.py moved to observability/: its hunk followed get_load there (issue 27).
    assert rejects == ["python/sglang/srt/metrics/collector.py.rej"]
    assert resolve(co) > 0
    for rej in rejects:
        (co / rej).unlink()
    done = sg("port", "--continue", "--to", "0.5.10", "--config", config)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "port: wrote stack 0.5.10-cu130" in done.stdout
    verified = sg("verify", "0.5.10-cu130", "--config", config)
    assert verified.returncode == 0, verified.stdout
    (patch,) = read_series(proj / "patches/0.5.10").patches
    assert patch.name == PATCH and not {f.path for f in patch.files} & {r.removesuffix(".rej") for r in rejects}
    assert "python/sglang/srt/observability/scheduler_metrics_mixin.py" in {f.path for f in patch.files}
