"""Small helpers the tests share: the CLI, git state snapshots."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from sgpatch.cli import app
from sgpatch.git import git_env


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


def copy_project_with(dest: Path, replacements: dict[str, str]) -> Path:
    """A copy of VERSIONS.toml and patches/ with text replacements in VERSIONS.toml."""
    import shutil

    repo = Path(__file__).resolve().parent.parent
    dest.mkdir(parents=True, exist_ok=True)
    text = (repo / "VERSIONS.toml").read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    (dest / "VERSIONS.toml").write_text(text)
    shutil.copytree(repo / "patches", dest / "patches")
    return dest
