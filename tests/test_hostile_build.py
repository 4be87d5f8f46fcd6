"""A failed build never replaces a good one (issue 28): a wheel takes its name in the out directory only once
its checks pass.  Whole ``sgpatch build`` processes on a real patched 0.5.9 checkout, building the real sdist."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .helpers import REPO
from .port_fixtures import DEEPSEEK, commit, edit
from .reliability import CASES, record

CONFIG = str(REPO / "VERSIONS.toml")


def build(checkout: Path, out: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    args = ["build", "--config", CONFIG, "--checkout", str(checkout), "--out", str(out), "--no-cache", "--json"]
    env = {**os.environ, "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")}
    return subprocess.run(
        [sys.executable, "-m", "sgpatch", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_failed_build_never_takes_the_good_wheels_name(tmp_path: Path, patched_checkout: Callable[[], Path]) -> None:
    co = patched_checkout()
    dist = tmp_path / "dist"
    good = build(co, dist, tmp_path)
    assert good.returncode == 0, good.stderr[-2000:]
    wheel = Path(json.loads(good.stdout)["wheel"])
    assert wheel.parent == dist and wheel.name.endswith(".whl")
    verified = sha(wheel)
    # an edit of a patched line amended into the series commit: the same wheel name, checks that fail
    edit(co / DEEPSEEK, "            # adjustment\n", "            # adjustment (amended)\n")
    commit(co, "", amend=True)
    failed = build(co, dist, tmp_path)
    assert failed.returncode == 1, failed.stderr[-2000:]
    doc = json.loads(failed.stdout)
    assert sha(wheel) == verified  # the verified wheel, byte for byte, under its name
    assert doc["wheel"] == str(dist / "failed" / wheel.name) and Path(doc["wheel"]).is_file()
    assert sorted(p.name for p in dist.iterdir()) == sorted([wheel.name, "failed", *_recipes(dist)])
    shown = f"{wheel.name}: sha256 unchanged; the failed build kept as failed/{wheel.name}"
    assert CASES["build-failed-keeps-good"].expect in shown
    record("build-failed-keeps-good", exit=failed.returncode, shown=shown)


def _recipes(dist: Path) -> list[str]:
    return [p.name for p in dist.iterdir() if p.is_file() and not p.name.endswith(".whl")]
