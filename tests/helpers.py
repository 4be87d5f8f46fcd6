"""Small helpers the tests share: the CLI, git state snapshots."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from sgpatch.cli import app
from sgpatch.git.repo import git_env

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"  # public test data kept in the repository, each file with its source and licence


def run_cli(*args: str, catch: bool = False) -> Any:
    """Invoke the real CLI in-process; exceptions propagate unless ``catch``."""
    return CliRunner().invoke(app, list(args), catch_exceptions=catch)


def json_out(result: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(result.stdout)
    assert doc["schema_version"] == 1
    return doc


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=git_env()
    ).stdout.strip()


def git_shim(where: Path) -> tuple[Path, Path]:
    """A ``git`` in ``where/bin`` (put it first on PATH) that appends its subcommand (the first argument
    after the ``-c key=value`` pairs sgpatch puts first) to ``where/git-calls`` and runs the real git.
    Returns the directory and the log."""
    real = shutil.which("git")
    assert real
    log = where / "git-calls"
    shim = where / "bin" / "git"
    shim.parent.mkdir()
    shim.write_text(
        '#!/bin/sh\nfor a in "$@"; do case "$a" in -c) skip=1;; *) if [ -n "$skip" ]; then skip=; '
        f'else echo "$a" >> {log}; break; fi;; esac; done\nexec {real} "$@"\n'
    )
    shim.chmod(0o755)
    return shim.parent, log


def snapshot(repo: Path) -> dict[str, str]:
    """HEAD, index, status and a hash of every file in the work tree (``.git`` excluded)."""
    h = hashlib.sha256()
    for path in sorted(p for p in repo.rglob("*") if ".git" not in p.relative_to(repo).parts):
        h.update(str(path.relative_to(repo)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "index": git(repo, "ls-files", "-s", "-z"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "files": h.hexdigest(),
        "refs": git(repo, "for-each-ref"),
    }


def copy_project(dest: Path, replacements: dict[str, str] | None = None) -> Path:
    """A copy of the project's VERSIONS.toml and patches/ (for tests that edit them), with text replacements
    in VERSIONS.toml (each must occur)."""
    dest.mkdir(parents=True, exist_ok=True)
    text = (REPO / "VERSIONS.toml").read_text()
    for old, new in (replacements or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    (dest / "VERSIONS.toml").write_text(text)
    shutil.copytree(REPO / "patches", dest / "patches")
    return dest


def empty_series_project(dest: Path) -> Path:
    """A project copy whose 0.5.9-cu130 stack carries nothing: an empty series, no pinned files, no interface."""
    text = (REPO / "VERSIONS.toml").read_text()
    head, sep, rest = text.partition('[stacks."0.5.9-cu130".files]\n')
    assert sep, "the cu130 files table"
    rest = rest.split("\n\n", 1)[1]  # its pins, up to the blank line after them
    text = head + rest
    interface = (
        '[stacks."0.5.9-cu130".interface]\nalgorithm = "eagle3"\n'
        'target = "python/sglang/srt/models/kimi_k25.py:KimiK25ForConditionalGeneration"\n'
        'draft = "python/sglang/srt/models/llama_eagle3.py:LlamaForCausalLMEagle3"\n'
    )
    replacements = {interface: "", 'series = "patches/0.5.9"\ncuda = "13.0"': 'series = "patches/empty"\ncuda = "13.0"'}
    proj = copy_project(dest, {})
    for old, new in replacements.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (proj / "VERSIONS.toml").write_text(text)
    (proj / "patches" / "empty").mkdir()
    (proj / "patches" / "empty" / "series").write_text("# everything is upstream: nothing left to carry\n")
    (proj / "patches" / "empty" / "anchors.toml").write_text("schema_version = 1\n")
    return proj


def make_venv(where: Path) -> Path:
    """A fresh venv (without pip: this environment's pip installs into it); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    return where / "bin" / "python"


def install_no_deps(python: Path, wheel: Path) -> None:
    """``pip install --no-deps`` of ``wheel`` into the venv of ``python``, as a serving host would."""
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
