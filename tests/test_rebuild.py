"""A cached rebuild (issue 29): ``sgpatch build`` again with the same inputs reuses the wheel and runs every check
on it again.  Whole ``sgpatch build`` processes on a real patched 0.5.9 checkout, building the real sdist, with
their own cache (the downloads copied in): a rebuild says byte for byte what ``--no-cache`` says, on a wheel
that passes and on one that fails, and imports none of what only making a wheel needs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sgpatch.config import load_config

from .helpers import copy_project
from .shared import copy
from .test_startup import NEVER, THIRD_PARTY, VERIFY_ROOMS, imported, outside_budget

# a rebuild: a verify's rooms, the wheel's, and atomic writes; installer reads RECORD
REBUILD_ROOMS = VERIFY_ROOMS | {"sgpatch.wheel", "sgpatch.atomic"}
# what only making a wheel needs: the export, PEP 517, the zip writer, the repacking, the download (its lock) and
# the HTTP client
NOT_ON_A_REBUILD = {
    "sgpatch.source.artifacts",
    "sgpatch.wheel.fresh",
    "sgpatch.wheel.export",
    "sgpatch.wheel.writer",
    "sgpatch.wheel.repack",
    "build",
    "pyproject_hooks",
    "http.client",
    "ssl",
    "urllib.request",
}


@dataclass(frozen=True, slots=True)
class Project:
    root: Path
    checkout: Path
    out: Path
    env: dict[str, str]

    def build(self, *more: str) -> subprocess.CompletedProcess[str]:
        args = ["build", "--config", str(self.root / "VERSIONS.toml"), "--checkout", str(self.checkout)]
        return subprocess.run(
            [sys.executable, "-m", "sgpatch", *args, "--out", str(self.out), "--json", *more],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )


def _own_cache(xdg: Path) -> dict[str, str]:
    """An environment whose ``$XDG_CACHE_HOME`` is ``xdg``: no result kept by another run, the pinned
    downloads of the default stack copied from the user's cache where they are (else downloaded)."""
    config = load_config(Path(__file__).resolve().parent.parent / "VERSIONS.toml")
    stack = config.stack(None)
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sgpatch" / "artifacts"
    for artifact in [a for a in (stack.source_artifact, *stack.wheels) if a is not None]:
        found = user / artifact.sha256 / artifact.filename
        if found.is_file():
            dest = xdg / "sgpatch" / "artifacts" / artifact.sha256
            for level in (xdg, xdg / "sgpatch", dest.parent, dest):
                level.mkdir(mode=0o700, exist_ok=True)
            shutil.copyfile(found, dest / artifact.filename)
    return {**os.environ, "XDG_CACHE_HOME": str(xdg)}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, template_patched: Path) -> Project:
    """A project copy whose wheel was built once (with the cache): the next build is a rebuild (one full build
    for this module's tests; each leaves the project as it found it)."""
    tmp = tmp_path_factory.mktemp("rebuild")
    checkout = tmp / "checkout"
    copy(template_patched, checkout)
    project = Project(copy_project(tmp / "project"), checkout, tmp / "dist", _own_cache(tmp / "xdg"))
    first = project.build()
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout)["cached"] is False
    return project


def _as_without_cache(rebuild: str) -> str:
    assert rebuild.count('"cached": true') == 2  # the document, and its one wheel under "wheels"
    return rebuild.replace('"cached": true', '"cached": false')


@pytest.mark.slow
def test_a_rebuild_says_what_a_build_without_cache_says(built: Project) -> None:
    """Passing, then failing (an anchor the wheel's files no longer hold: anchors.toml is not part of the
    wheel's key, so the wheel is reused and its check must fail): the rebuild's JSON is byte for byte the
    ``--no-cache`` build's but for ``cached``, with the same exit code and the same wheel bytes."""
    rebuild, fresh = built.build(), built.build("--no-cache")
    assert (rebuild.returncode, fresh.returncode) == (0, 0), rebuild.stderr[-2000:] + fresh.stderr[-2000:]
    assert _as_without_cache(rebuild.stdout) == fresh.stdout
    assert json.loads(fresh.stdout)["ok"] is True

    anchors = built.root / "patches" / "0.5.9" / "anchors.toml"
    text = anchors.read_text()
    first = text.index('sha256 = "', text.index('phase = "both"')) + len('sha256 = "')
    anchors.write_text(text[:first] + "0" * 64 + text[first + 64 :])
    try:
        rebuild, fresh = built.build(), built.build("--no-cache")
    finally:
        anchors.write_text(text)
    assert (rebuild.returncode, fresh.returncode) == (1, 1), rebuild.stderr[-2000:] + fresh.stderr[-2000:]
    assert _as_without_cache(rebuild.stdout) == fresh.stdout
    doc = json.loads(fresh.stdout)
    failed = {c["name"] for c in doc["checks"]["checks"] if not c["ok"]}
    assert doc["ok"] is False and "anchors" in failed
    assert Path(doc["wheel"]).parent.name == "failed"


@pytest.mark.slow
def test_a_rebuild_imports_nothing_only_making_a_wheel_needs(built: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cached rebuild's imports stay in their budget: no export, PEP 517 build, zip writer, repacking or
    HTTP client (a new import of one fails here; raise the budget only with a measurement)."""
    monkeypatch.setenv("XDG_CACHE_HOME", built.env["XDG_CACHE_HOME"])
    args = ["build", "--config", str(built.root / "VERSIONS.toml"), "--checkout", str(built.checkout)]
    code, modules = imported(built.root, *args, "--out", str(built.out), "--json")
    assert code == 0
    assert "sgpatch.wheel.check" in modules and "sgpatch.verify.engine" in modules  # it checked the wheel
    assert modules & (NEVER | NOT_ON_A_REBUILD) == set()
    assert outside_budget(modules, REBUILD_ROOMS, third_party=THIRD_PARTY | {"installer"}) == []
