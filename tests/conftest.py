"""Shared fixtures: the real SGLang release files from PyPI, real git checkouts.

Artifacts are downloaded once through pip into the sgpatch cache
(``$XDG_CACHE_HOME/sgpatch``) and checked against their sha256 pins before use.
A pristine 0.5.9 checkout is made once per session and copied for each test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sgpatch.apply import apply_series
from sgpatch.artifacts import fetch_artifact
from sgpatch.config import Artifact, Config, load_config
from sgpatch.source import fetch, read_archive
from sgpatch.verify import Project, load_project

from .sshd import Sshd, have_sshd, start_sshd

REPO = Path(__file__).resolve().parent.parent

# Releases used as data by the tests (upstream's PyPI files, pinned like VERSIONS.toml pins 0.5.9).
RELEASES: dict[str, Artifact] = {
    "0.5.10": Artifact(
        "wheel", "sglang-0.5.10-py3-none-any.whl", "ac8855a5d57dac8831fee526bca5212f1ae451f378e2ab08b3baecbc4deb4076"
    ),
    "0.5.15": Artifact(
        "wheel",
        "sglang-0.5.15-cp311-cp311-manylinux_2_34_x86_64.whl",
        "21492759b4b99e117bd81610f633422f3fdae2896c2cde6931eab886deccc44f",
    ),
}


@pytest.fixture(scope="session")
def config() -> Config:
    return load_config(REPO / "VERSIONS.toml")


@pytest.fixture(scope="session")
def project(config: Config) -> Project:
    return load_project(config, None)


def copy_project(dest: Path) -> Path:
    """A copy of the project's VERSIONS.toml and patches/ (for tests that edit them)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / "VERSIONS.toml", dest / "VERSIONS.toml")
    shutil.copytree(REPO / "patches", dest / "patches")
    return dest


@pytest.fixture(scope="session")
def template_checkout(tmp_path_factory: pytest.TempPathFactory, config: Config) -> Path:
    into = tmp_path_factory.mktemp("template") / "checkout"
    fetch(config.stack(None), into)
    return into


@pytest.fixture(scope="session")
def template_patched(tmp_path_factory: pytest.TempPathFactory, template_checkout: Path, project: Project) -> Path:
    into = tmp_path_factory.mktemp("template-patched") / "checkout"
    shutil.copytree(template_checkout, into, symlinks=True)
    apply_series(project.stack, project.series, into)
    return into


def _copier(tmp_path_factory: pytest.TempPathFactory, source: Path, name: str) -> Callable[[], Path]:
    def make() -> Path:
        into = tmp_path_factory.mktemp(name) / "checkout"
        shutil.copytree(source, into, symlinks=True)
        return into

    return make


@pytest.fixture
def pristine_checkout(tmp_path_factory: pytest.TempPathFactory, template_checkout: Path) -> Callable[[], Path]:
    """Factory: a fresh copy of a pristine 0.5.9 checkout made from the real sdist."""
    return _copier(tmp_path_factory, template_checkout, "pristine")


@pytest.fixture
def patched_checkout(tmp_path_factory: pytest.TempPathFactory, template_patched: Path) -> Callable[[], Path]:
    """Factory: a fresh copy of a 0.5.9 checkout with the shipped series applied."""
    return _copier(tmp_path_factory, template_patched, "patched")


@pytest.fixture(scope="session")
def release_tree(tmp_path_factory: pytest.TempPathFactory, config: Config) -> Callable[[str], Path]:
    """Factory: a directory in upstream's layout (python/sglang/...) from a real PyPI release."""
    made: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version in made:
            return made[version]
        if version == "0.5.9":
            artifact = config.stack(None).source_artifact
            assert artifact is not None
        else:
            artifact = RELEASES[version]
        path = fetch_artifact(artifact, version)
        members, _ = read_archive(path)
        root = tmp_path_factory.mktemp(f"release-{version}")
        for m in members:
            target = root / m.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(m.data)
        made[version] = root
        return root

    return get


@pytest.fixture(scope="session")
def patched_059_tree(template_patched: Path) -> Path:
    """A 0.5.9 tree (python/sglang/...) with the shipped series applied (read-only use)."""
    return template_patched


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A real OpenSSH server on 127.0.0.1 with throwaway keys (tests/sshd.py)."""
    if not have_sshd():
        if os.environ.get("CI"):
            pytest.fail("/usr/sbin/sshd is missing: .ci/run installs openssh-server")
        pytest.skip("needs OpenSSH's sshd (apt-get install openssh-server)")
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()
