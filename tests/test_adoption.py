"""The adoption path as a new team walks it: sgpatch's sdist installed into a fresh venv (no checkout of
sgpatch on the path), ``init`` in an empty directory, the pinned release fetched and applied, a change
committed and exported as a patch, verified, built into a wheel and the wheel verified."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sgpatch.config import load_config
from sgpatch.source.artifacts import artifacts_root, fetch_artifact

from .helpers import REPO

pytestmark = pytest.mark.slow

STACK = "0.5.9-cu130"
KIMI = "python/sglang/srt/models/kimi_k25.py"
OLD = "logger = logging.getLogger(__name__)\n"
NEW = "logger = logging.getLogger(__name__)  # the team's first fix\n"


def _env(cache: Path) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, sgpatch's cache of its own, pip's cache shared."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GIT_", "VIRTUAL_ENV"))}
    env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    env["XDG_CACHE_HOME"] = str(cache)
    env["CI"] = "true"
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str], *, code: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == code, f"{argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _doc(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert doc["schema_version"] == 1
    return doc


def test_a_new_team_adopts_sgpatch(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cache = tmp_path / "cache"
    env = _env(cache)
    # The downloads sgpatch checks by sha256 are shared (copied into this test's cache); nothing else is.
    for artifact in load_config(REPO / "VERSIONS.toml").stacks[STACK].artifacts:
        path = fetch_artifact(artifact, "0.5.9")
        copy = cache / "sgpatch" / path.relative_to(artifacts_root().parent)
        copy.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copyfile(path, copy)
    for d in (cache, cache / "sgpatch"):
        d.chmod(0o700)

    # 1. sgpatch's sdist (PyPA build), installed into a fresh venv from an empty directory
    dist = tmp_path / "sdist"
    _run([sys.executable, "-m", "build", "--sdist", "--outdir", str(dist), str(REPO)], empty, env)
    (sdist,) = dist.glob("sgpatch-*.tar.gz")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], empty, env)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", str(sdist)], empty, env)
    where = _run([str(python), "-c", "import sgpatch; print(sgpatch.__file__)"], empty, env).stdout.strip()
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(REPO)
    installed = _run([str(python), "-m", "pip", "list", "--format=json"], empty, env).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert not names & {"pytest", "hypothesis", "ruff", "mypy", "check-jsonschema"}  # runtime dependencies only
    sgpatch = str(venv / "bin" / "sgpatch")

    # 2. init in an empty directory
    team = tmp_path / "team"
    team.mkdir()
    doc = _doc(_run([sgpatch, "init", "--release", "0.5.9", "--cuda", "cu130", "--json"], team, env))
    assert doc["stack"] == STACK and doc["git_init"] is True
    for name in ("VERSIONS.toml", ".gitignore", ".pre-commit-config.yaml", "patches/0.5.9/series"):
        assert (team / name).is_file(), name

    # 3. fetch and apply (the series is empty: the checkout is the pinned source)
    assert _doc(_run([sgpatch, "fetch", "--json"], team, env))["created"] is False  # init laid it out
    _run([sgpatch, "apply", "--json"], team, env)
    checkout = team / ".sgpatch" / "checkouts" / STACK

    # 4. a change, committed in the checkout, exported as the first patch
    path = checkout / KIMI
    text = path.read_text()
    assert text.count(OLD) == 1
    path.write_text(text.replace(OLD, NEW))
    git = ["git", "-C", str(checkout), "-c", "user.name=Team Dev", "-c", "user.email=dev@team.invalid"]
    _run([*git, "commit", "-q", "-am", "kimi_k25: the team's first fix\n\nWhy it matters, in a sentence."], team, env)
    stale = _run([sgpatch, "export", "--check"], team, env, code=1)
    assert "STALE" in stale.stdout
    doc = _doc(_run([sgpatch, "export", "--json"], team, env))
    assert [p["status"] for p in doc["patches"]] == ["new"]
    patch = team / "patches" / "0.5.9" / "0001-kimi-k25-the-team-s-first-fix.patch"
    data = patch.read_text()
    assert data.startswith("Description: kimi_k25: the team's first fix\n")
    assert "Author: Team Dev <dev@team.invalid>\n" in data
    assert f"--- a/{KIMI}\n+++ b/{KIMI}\n" in data
    assert f"-{OLD}+{NEW}" in data
    series = [ln for ln in (team / "patches/0.5.9/series").read_text().splitlines() if not ln.startswith("#")]
    assert series == [patch.name]
    stack = load_config(team / "VERSIONS.toml").stacks[STACK]
    assert [f.path for f in stack.files] == [KIMI]  # export pinned the file's blobs
    _run([sgpatch, "export", "--check"], team, env)

    # 5. verify, build, verify the wheel
    verified = _doc(_run([sgpatch, "verify", "--json"], team, env))
    assert verified["ok"] is True
    built = _doc(_run([sgpatch, "build", "--out", str(team / "dist"), "--json"], team, env))
    wheel = Path(built["wheel"])
    assert built["ok"] is True and wheel.parent == team / "dist"
    assert wheel.name.startswith("sglang-0.5.9+cu130.") and wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert NEW in zf.read(KIMI.removeprefix("python/")).decode()
    checked = _doc(_run([sgpatch, "verify", "--wheel", str(wheel), "--json"], team, env))
    assert checked["ok"] is True

    # 6. status: patched, nothing left to export, the last wheel is of the current series
    (row,) = _doc(_run([sgpatch, "status", "--json"], team, env))["stacks"]
    assert (row["state"], row["applied"], row["unexported"], row["uncommitted"]) == ("patched", 1, [], [])
    assert row["build_current"] is True and row["last_build"]["wheels"][0]["wheel"] == str(wheel)
