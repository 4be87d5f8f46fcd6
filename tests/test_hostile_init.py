"""Odd places for ``sgpatch init`` (issue 28): never exit 4, all or nothing, the real cause named.

Each case runs the whole ``sgpatch`` process and compares the directory's every path (and its bytes) before
and after; the places are refused before the index is asked (pip pointed at a closed port: asking it would
be exit 3).  ``--release 0.5.9.0`` asks pip's configured index, as the other init tests do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .reliability import CASES, first_error, record
from .sshd import free_port


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path below ``root`` (links not followed): a file's bytes, a link's target, a directory's mark."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_bytes() if path.is_file() else "dir"
    return out


def init(cwd: Path, *args: str, index: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if not index:
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=f"http://127.0.0.1:{free_port()}/simple", PIP_RETRIES="0")
    return subprocess.run(
        [sys.executable, "-m", "sgpatch", "init", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _dangling_dir(root: Path) -> str:
    (root / "team").symlink_to(root / "nowhere")
    return str(root / "team")


def _gitignore_dir(root: Path) -> str:
    (root / "team" / ".gitignore").mkdir(parents=True)
    return str(root / "team")


def _patches_file(root: Path) -> str:
    (root / "team").mkdir()
    (root / "team" / "patches").write_text("not a directory\n")
    return str(root / "team")


def _parent_file(root: Path) -> str:
    (root / "a-file").write_text("x\n")
    return str(root / "a-file" / "team")


def _dangling_config(root: Path) -> str:
    (root / "team").mkdir()
    (root / "team" / "VERSIONS.toml").symlink_to(root / "gone.toml")
    return str(root / "team")


def _sgpatch_file(root: Path) -> str:
    (root / "team").mkdir()
    (root / "team" / ".sgpatch").write_text("x\n")
    return str(root / "team")


PLACES: dict[str, tuple[Callable[[Path], str], tuple[str, ...], str]] = {
    "init-dangling-dir": (_dangling_dir, (), "a symbolic link to nothing"),
    "init-gitignore-dir": (_gitignore_dir, (), ".gitignore: exists and is not a file"),
    "init-patches-file": (_patches_file, (), "patches: not a directory"),
    "init-parent-file": (_parent_file, (), "a-file: exists and is not a directory"),
    "init-force-dangling-config": (_dangling_config, ("--force",), "sgpatch writes no file through a link"),
    "init-sgpatch-file": (_sgpatch_file, (), ".sgpatch: not a directory"),
}


@pytest.mark.parametrize("case_id", list(PLACES))
def test_an_odd_place_is_refused_before_anything_is_asked_or_written(tmp_path: Path, case_id: str) -> None:
    make, extra, expect = PLACES[case_id]
    where = make(tmp_path)
    before = snapshot(tmp_path)
    result = init(tmp_path, where, "--release", "0.5.9", "--cuda", "cu130", *extra)
    assert result.returncode == 2, result.stderr
    line = first_error(result.stderr)
    assert expect in line and CASES[case_id].expect in line and "Traceback" not in result.stderr
    assert "pass --force" not in line
    assert snapshot(tmp_path) == before  # all or nothing: nothing
    record(case_id, exit=result.returncode, shown=line, roots=(tmp_path,))


def test_a_release_spelled_otherwise_names_the_spelling_not_the_sdist(tmp_path: Path) -> None:
    result = init(tmp_path, str(tmp_path / "team"), "--release", "0.5.9.0", "--cuda", "cu130", index=True)
    assert result.returncode == 2, result.stderr
    line = first_error(result.stderr)
    assert "the index names this release 0.5.9" in line and "give the version as the release spells it" in line
    assert not (tmp_path / "team").exists()
    record("init-release-spelling", exit=result.returncode, shown=line, roots=(tmp_path,))
