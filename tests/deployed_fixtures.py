"""Real venvs with real sglang wheels installed, shared session-wide by the tests of installs and fleets.

The venvs are made once per session (``python -m venv``, then ``pip install --no-deps`` of the
real wheels).  Each carries a ``.pth`` guard: an audit hook that logs any import of sglang or torch
in that interpreter to a file, so the tests prove the probe never imports them.  conftest.py
registers the fixtures; the tests import ``Venv`` and ``make_venv``.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from sgpatch.config import Config
from sgpatch.project import Project
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.wheel import build_wheel

from .shared import copy, once

PIP = (sys.executable, "-m", "pip")
KIMI = "sglang/srt/models/kimi_k25.py"
UNTOUCHED = "sglang/srt/server_args.py"


@dataclasses.dataclass
class Venv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return next(self.root.glob("lib/python3*/site-packages"))

    @property
    def import_log(self) -> Path:
        return self.root / "imports.log"

    def imported(self) -> list[str]:
        return self.import_log.read_text().split() if self.import_log.exists() else []


def make_venv(root: Path, *wheels: Path) -> Venv:
    """A real venv with ``wheels`` installed (no dependencies) and the import guard."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    venv = Venv(root)
    if wheels:
        subprocess.run(
            [*PIP, "--python", str(venv.python), "install", "--quiet", "--no-deps", "--no-index", "--no-compile"]
            + [str(w) for w in wheels],
            check=True,
            capture_output=True,
        )
    add_guard(venv)
    return venv


def add_guard(venv: Venv) -> None:
    """A .pth line that logs every import of sglang or torch in this interpreter (and says hello on stdout,
    as a chatty site customisation would: the probe's answers must survive it)."""
    hook = (
        "import sys; sys.addaudithook(lambda e, a: e == 'import' and str(a[0]).split('.')[0] in "
        f"('sglang', 'torch') and open({str(venv.import_log)!r}, 'a').write(str(a[0]) + '\\n'))"
    )
    noise = "import sys; sys.stdout.write('welcome to the serving host\\n')"
    (venv.site_packages / "zz_sgpatch_test_guard.pth").write_text(hook + "\n" + noise + "\n")


def shared_venv(factory: pytest.TempPathFactory, name: str, *wheels: Path) -> Venv:
    """A venv made by ``make_venv`` once per test run, shared by the workers (tests/shared.py)."""
    return Venv(once(factory, name, lambda root: make_venv(root / "venv", *wheels)) / "venv")


@pytest.fixture(scope="session")
def patched_wheel(
    tmp_path_factory: pytest.TempPathFactory, config: Config, project: Project, template_patched: Path
) -> Path:
    def make(root: Path) -> None:
        checkout = copy(template_patched, root / "checkout")  # the build reads a checkout of its own
        result = build_wheel(config, project.stack, project.series, checkout, root / "dist", cache_dir=root / "cache")
        assert result.checks.ok, result.checks.failures

    (wheel,) = (once(tmp_path_factory, "deployed-dist", make) / "dist").glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def pypi_wheel(project: Project) -> Path:
    artifact = project.stack.artifact("wheel")
    assert artifact is not None
    return fetch_artifact(artifact, project.stack.sglang_version)


@pytest.fixture(scope="session")
def patched_venv(tmp_path_factory: pytest.TempPathFactory, patched_wheel: Path) -> Venv:
    return shared_venv(tmp_path_factory, "venv-patched", patched_wheel)


@pytest.fixture(scope="session")
def pypi_venv(tmp_path_factory: pytest.TempPathFactory, pypi_wheel: Path) -> Venv:
    return shared_venv(tmp_path_factory, "venv-pypi", pypi_wheel)


@pytest.fixture(scope="session")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return shared_venv(tmp_path_factory, "venv-bare")


@pytest.fixture(scope="session")
def modified_venv(tmp_path_factory: pytest.TempPathFactory, patched_wheel: Path) -> Venv:
    """The patched wheel, installed, then two files edited in place: a patched one and an untouched one."""

    def make(root: Path) -> None:
        venv = make_venv(root / "venv", patched_wheel)
        for rel in (KIMI, UNTOUCHED):
            path = venv.site_packages / rel
            path.write_bytes(path.read_bytes() + b"# hotfix applied by hand on the host\n")

    return Venv(once(tmp_path_factory, "venv-modified", make) / "venv")
