"""Fixtures for port and export: the new releases in the cache, a ported project, edited series.

Everything runs on copies of the project (``copy_project``), never on the
repository's own VERSIONS.toml or patches/.  The expensive results (the 0.5.10
port) are made once per session and only read by the tests that share them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sgpatch.config import Artifact
from sgpatch.source.artifacts import fetch_artifact

from .conftest import RELEASES
from .helpers import copy_project, git, json_out, run_cli

KIMI = "python/sglang/srt/models/kimi_k25.py"
DEEPSEEK = "python/sglang/srt/models/deepseek_v2.py"

# PyPI ships an sdist of 0.5.10 (port prefers it to the wheel); pinned here like RELEASES.
SDIST_0510 = Artifact(
    "sdist", "sglang-0.5.10.tar.gz", "db78367f41a1f385f8624a10e9506b671e788f9943978df6a37a486867c1edc7"
)

# Two local fixes on 0.5.9's kimi_k25.py, next to lines 0.5.10 rewrote (MoonViTEncoderLayer.__init__):
# the first only shares context with upstream's change (a clean 3-way merge), the second edits the
# very line upstream rewrote (a conflict).
NORM_OLD = "        self.norm0 = nn.LayerNorm(hidden_dim)\n"
NORM_NEW = "        self.norm0 = nn.LayerNorm(hidden_dim, eps=1e-6)\n"
MLP_OLD = "        self.mlp = MLP2([hidden_dim, mlp_dim, hidden_dim], activation)\n"
MLP_NEW = '        self.mlp = MLP2([hidden_dim, mlp_dim, hidden_dim], activation, prefix=add_prefix("mlp", prefix))\n'


@pytest.fixture(scope="session")
def releases_cached() -> None:
    """0.5.10 (sdist and wheel) and 0.5.15 (wheel) in sgpatch's artifact cache, checked against their pins."""
    fetch_artifact(SDIST_0510, "0.5.10")
    for version, artifact in RELEASES.items():
        fetch_artifact(artifact, version)


def port(config: Path, *args: str, catch: bool = False) -> Any:
    return run_cli("port", "--config", str(config), *args, catch=catch)


def export(config: Path, *args: str) -> Any:
    return run_cli("export", "--config", str(config), *args)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def commit(checkout: Path, message: str, *, amend: bool = False) -> None:
    args = ["-c", "user.name=Dev One", "-c", "user.email=dev@example.com", "commit", "-q", "-a"]
    args += ["--amend", "--no-edit"] if amend else ["-m", message]
    git(checkout, *args)


def release_side(path: Path) -> None:
    """Resolve every conflict of ``path`` to the release's side."""
    out, side = [], None
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("<<<<<<< "):
            side = "ours"
        elif side and line.startswith("||||||| "):
            side = "base"
        elif side and line == "=======\n":
            side = "theirs"
        elif side and line.startswith(">>>>>>> "):
            side = None
        elif side in (None, "ours"):
            out.append(line)
    path.write_text("".join(out))


def project_bytes(proj: Path) -> dict[Path, bytes]:
    """Every file of the project (its ``.sgpatch/`` left out) with its bytes."""
    return {p: p.read_bytes() for p in proj.rglob("*") if p.is_file() and ".sgpatch" not in p.parts}


@pytest.fixture(scope="session")
def ported_0510(tmp_path_factory: pytest.TempPathFactory, releases_cached: None) -> tuple[Path, dict[str, Any], bytes]:
    """A copy of the project ported to 0.5.10: (project dir, the JSON report, VERSIONS.toml before)."""
    proj = copy_project(tmp_path_factory.mktemp("ported") / "proj", {})
    before = (proj / "VERSIONS.toml").read_bytes()
    result = port(proj / "VERSIONS.toml", "--to", "0.5.10", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    return proj, json_out(result), before


@pytest.fixture
def edited_project(tmp_path: Path, patched_checkout: Callable[[], Path]) -> Callable[[], tuple[Path, Path]]:
    """Factory: a project copy whose series gained 0004 (merges into 0.5.10) and 0005 (conflicts), via export."""

    def make() -> tuple[Path, Path]:
        proj = copy_project(tmp_path / "proj", {})
        co = patched_checkout()
        edit(co / KIMI, NORM_OLD, NORM_NEW)
        commit(co, "kimi_k25: MoonViT norm0 eps 1e-6\n\nThe vision checkpoint was trained with eps=1e-6.\n")
        edit(co / KIMI, MLP_OLD, MLP_NEW)
        commit(co, "kimi_k25: name the MoonViT MLP weights")
        result = export(proj / "VERSIONS.toml", "--checkout", str(co))
        assert result.exit_code == 0, result.stderr + result.stdout
        return proj, co

    return make


def clean_copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest
