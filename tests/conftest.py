"""Shared fixtures: the real SGLang release files from PyPI, real git checkouts, the session's own cache.

Artifacts are downloaded once (from pip's index, by sgpatch) into the sgpatch cache
(``$XDG_CACHE_HOME/sgpatch/artifacts``) and checked against their sha256 pins before use: they stay
shared between sessions.  What the checks keep (``results/``: parsed facts, landing results, exports)
does not: each test session has its own, so the suite tests the checker, not an earlier run's entries.
A pristine 0.5.9 checkout is made once per test run (shared by the workers: tests/shared.py) and copied for each
test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import sgpatch.cache
from sgpatch.cache import Cache
from sgpatch.checkout.apply import apply_series
from sgpatch.checkout.extract import extract_archive
from sgpatch.checkout.fetch import fetch
from sgpatch.config import Artifact, Config, load_config
from sgpatch.project import Project, load_project
from sgpatch.source.artifacts import fetch_artifact

from .deployed_fixtures import (  # noqa: F401 (the venv fixtures, session-wide for every test module)
    bare_venv,
    modified_venv,
    patched_venv,
    patched_wheel,
    pypi_venv,
    pypi_wheel,
)
from .helpers import REPO, copy_project  # noqa: F401 (re-exported for tests)
from .shared import copy, once
from .sshd import Sshd, have_sshd, start_sshd

# Releases used as data by the tests (upstream's PyPI files, pinned like VERSIONS.toml pins 0.5.9).
# Every release from 0.5.10 to 0.5.23 (``pip index versions sglang``): the py3 wheel while one exists, then
# the cp311 manylinux x86_64 wheel (from 0.5.11 on only platform wheels are published).  About 300 MB in all.
RELEASES: dict[str, Artifact] = {
    "0.5.10": Artifact(
        "wheel",
        "sglang-0.5.10-py3-none-any.whl",
        "ac8855a5d57dac8831fee526bca5212f1ae451f378e2ab08b3baecbc4deb4076",
    ),
    "0.5.10.post1": Artifact(
        "wheel",
        "sglang-0.5.10.post1-py3-none-any.whl",
        "a854a68b11caf6b4b55c241a44378a7cdede7ede325db85c955f131506703bc6",
    ),
    "0.5.11": Artifact(
        "wheel",
        "sglang-0.5.11-cp311-cp311-manylinux_2_34_x86_64.whl",
        "fe0748beaff218d3e16c9018a5e19f018db06fc3c7ac4f90d2f93da1cf074b6f",
    ),
    "0.5.12": Artifact(
        "wheel",
        "sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl",
        "4ed786a38655851fd055ef57380c34d29b87753b53f63457309f51e5bf48c2e6",
    ),
    "0.5.12.post1": Artifact(
        "wheel",
        "sglang-0.5.12.post1-cp311-cp311-manylinux_2_34_x86_64.whl",
        "94b3f3cc6b97f1364f247b8d9c1d106ec63cf22c55d6b65bc40ff29b0206ef5f",
    ),
    "0.5.13": Artifact(
        "wheel",
        "sglang-0.5.13-cp311-cp311-manylinux_2_34_x86_64.whl",
        "9d26266ab7e99165098f9e173f4a5a0ef6a0b64a6f30ef0b5ee859eead37e75a",
    ),
    "0.5.13.post1": Artifact(
        "wheel",
        "sglang-0.5.13.post1-cp311-cp311-manylinux_2_34_x86_64.whl",
        "1c1653ecf2893c7d7b1cf0c3e1cc9b7550ebad95c809de2f44bcc91b7a1e1fe3",
    ),
    "0.5.14": Artifact(
        "wheel",
        "sglang-0.5.14-cp311-cp311-manylinux_2_34_x86_64.whl",
        "4fe16056b45c8aca00f5f90ceb174dc3a62a3f5dccf159c791370795cd00fc99",
    ),
    "0.5.15": Artifact(
        "wheel",
        "sglang-0.5.15-cp311-cp311-manylinux_2_34_x86_64.whl",
        "21492759b4b99e117bd81610f633422f3fdae2896c2cde6931eab886deccc44f",
    ),
    "0.5.15.post1": Artifact(
        "wheel",
        "sglang-0.5.15.post1-cp311-cp311-manylinux_2_34_x86_64.whl",
        "8e182e1c449197cb6f98716a7cf432a3ea7af78c172f9b840ab28ad9e6cda9b4",
    ),
    "0.5.16": Artifact(
        "wheel",
        "sglang-0.5.16-cp311-cp311-manylinux_2_34_x86_64.whl",
        "d5f345a18953dd35df568ac56bdcb7f5ee910ab39efea4469b714556d1070713",
    ),
    "0.5.17": Artifact(
        "wheel",
        "sglang-0.5.17-cp311-cp311-manylinux_2_34_x86_64.whl",
        "575e38f5683624ded3b4bb267f637a098e5ed37d13a1d1ff5ea09bd781a04d16",
    ),
    "0.5.18": Artifact(
        "wheel",
        "sglang-0.5.18-cp311-cp311-manylinux_2_34_x86_64.whl",
        "e97b585dd2d5db2802599feba47c84cce972f5e1231a6816fef996200207b5cf",
    ),
    "0.5.19": Artifact(
        "wheel",
        "sglang-0.5.19-cp311-cp311-manylinux_2_34_x86_64.whl",
        "425e87377e725d03db8262382008f3fd9561a6cf5d82f485f8b9929f02ffe12b",
    ),
    "0.5.20": Artifact(
        "wheel",
        "sglang-0.5.20-cp311-cp311-manylinux_2_34_x86_64.whl",
        "1573527042f4f6b4ead838302818595fc77fdc611dbcc2e40cd150fbc8f8513c",
    ),
    "0.5.21": Artifact(
        "wheel",
        "sglang-0.5.21-cp311-cp311-manylinux_2_34_x86_64.whl",
        "96c029f75dec99baa33a5db3d41b1bebefdd6bcfba3a2f7c807fe1cf49a87c20",
    ),
    "0.5.22": Artifact(
        "wheel",
        "sglang-0.5.22-cp311-cp311-manylinux_2_34_x86_64.whl",
        "cc9a0f15bd8f877a0584fdb7a1702240177a1f1cc8d17c978715161717b9037b",
    ),
    "0.5.23": Artifact(
        "wheel",
        "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
    ),
}


USER_RESULTS_ROOT = sgpatch.cache.results_root  # the real one, for the tests of the cache's own directory


@pytest.fixture(scope="session", autouse=True)
def result_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cache]:
    """This session's own result cache (every in-process command, and any test asking for it, uses it);
    downloads stay in the user's cache.  A command run as a separate process uses ``$XDG_CACHE_HOME``:
    such tests point it at a temporary directory when the cache matters to them."""
    root = tmp_path_factory.mktemp("results")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sgpatch.cache, "results_root", lambda: root)
        yield Cache(root)


@pytest.fixture(scope="session")
def config() -> Config:
    return load_config(REPO / "VERSIONS.toml")


@pytest.fixture(scope="session")
def project(config: Config) -> Project:
    return load_project(config, None)


@pytest.fixture(scope="session")
def template_checkout(tmp_path_factory: pytest.TempPathFactory, config: Config) -> Path:
    def make(root: Path) -> None:
        fetch(config.stack(None), root / "checkout")
        _packed(root / "checkout")

    return once(tmp_path_factory, "template", make) / "checkout"


@pytest.fixture(scope="session")
def template_patched(tmp_path_factory: pytest.TempPathFactory, template_checkout: Path, project: Project) -> Path:
    def make(root: Path) -> None:
        into = copy(template_checkout, root / "checkout")
        apply_series(project.stack, project.series, into)
        _packed(into)

    return once(tmp_path_factory, "template-patched", make) / "checkout"


def _packed(checkout: Path) -> Path:
    """The checkout's objects in one pack: each of the suite's many copies copies a few files instead of the
    2,100 loose objects ``fetch`` and ``apply`` write (git reads either the same; a copy takes about a third
    less time)."""
    subprocess.run(["git", "-C", str(checkout), "repack", "-adq"], check=True)
    return checkout


@pytest.fixture(scope="session")
def installed_root(tmp_path_factory: pytest.TempPathFactory, template_patched: Path) -> Path:
    """The patched checkout laid out as an install of the built wheel holds it: with the ``_version.py`` the
    build writes (the root a fake probe reports its sglang from, so the file-set check sees a wheel's files)."""

    def make(root: Path) -> None:
        copy(template_patched / "python", root / "checkout/python")
        (root / "checkout/python/sglang/_version.py").write_text('__version__ = version = "0.5.9"\n')

    return once(tmp_path_factory, "installed-root", make) / "checkout"


def _copier(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, source: Path, name: str
) -> Iterator[Callable[[], Path]]:
    made: list[Path] = []

    def make() -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return copy(source, made[-1] / "checkout")

    yield make
    if _passed(request):  # as tmp_path_retention_policy = "failed" does for tmp_path: a failure's copies stay
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[_PASSED] = report.passed
    return report


def _passed(request: pytest.FixtureRequest) -> bool:
    return request.node.stash.get(_PASSED, False)


@pytest.fixture
def pristine_checkout(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, template_checkout: Path
) -> Iterator[Callable[[], Path]]:
    """Factory: a fresh copy of a pristine 0.5.9 checkout made from the real sdist."""
    yield from _copier(request, tmp_path_factory, template_checkout, "pristine")


@pytest.fixture
def patched_checkout(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, template_patched: Path
) -> Iterator[Callable[[], Path]]:
    """Factory: a fresh copy of a 0.5.9 checkout with the shipped series applied."""
    yield from _copier(request, tmp_path_factory, template_patched, "patched")


@pytest.fixture(scope="session")
def release_tree(tmp_path_factory: pytest.TempPathFactory, config: Config) -> Callable[[str], Path]:
    """Factory: a directory in upstream's layout (python/sglang/...) from a real PyPI release."""

    def get(version: str) -> Path:
        if version == "0.5.9":
            artifact = config.stack(None).source_artifact
            assert artifact is not None
        else:
            artifact = RELEASES[version]
        return once(
            tmp_path_factory,
            f"release-{version}",
            lambda root: extract_archive(fetch_artifact(artifact, version), root),
        )

    return get


@pytest.fixture(scope="session")
def release_py(release_tree: Callable[[str], Path]) -> dict[str, bytes]:
    """The Python files of the real 0.5.9 release, by path (the parse tests' texts)."""
    root = release_tree("0.5.9")
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.py"))}
    assert len(files) > 1000
    return files


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
