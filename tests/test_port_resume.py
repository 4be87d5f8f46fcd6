"""port --continue across several stops: a series whose 0005 and 0006 both conflict on 0.5.10, a kill while
the port moves to its second stop, and the resolution of each, as whole ``sgpatch`` processes."""

# ruff: noqa: F811  (pytest fixtures imported from port_fixtures are used as arguments)

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sgpatch.lock import PAUSE_ENV, PAUSE_FILE_ENV
from sgpatch.port.record import read_record
from sgpatch.series.patch import read_series

from .helpers import git, snapshot
from .port_fixtures import (  # noqa: F401  (fixtures)
    KIMI,
    MLP_NEW,
    MLP_OLD,
    commit,
    edit,
    edited_project,
    export,
    ported_0510,
    project_bytes,
    release_side,
    releases_cached,
)
from .reliability import first_error, record

SGPATCH = [sys.executable, "-m", "sgpatch.cli"]
CONV_OLD = "        self.proj = nn.Conv2d(\n"  # 0.5.10 made it Conv2dLayer: a second conflict
CONV_NEW = "        self.proj = nn.Conv2d(  # the patch embedding\n"


def sg(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")} | env
    full.pop("CI", None)
    return subprocess.run([*SGPATCH, *args], env=full, capture_output=True, text=True, check=False)


@pytest.fixture
def two_conflicts(edited_project: Callable[[], tuple[Path, Path]]) -> Path:
    """The project of ``edited_project`` with 0006, a comment on a line 0.5.10 rewrote."""
    proj, co = edited_project()
    edit(co / KIMI, CONV_OLD, CONV_NEW)
    commit(co, "kimi_k25: say what the MoonViT projection is")
    assert export(proj / "VERSIONS.toml", "--checkout", str(co)).exit_code == 0
    return proj


def test_continue_stops_again_and_a_kill_on_the_way_is_finished(two_conflicts: Path, tmp_path: Path) -> None:
    proj = two_conflicts
    config = str(proj / "VERSIONS.toml")
    first = sg("port", "--to", "0.5.10", "--json", "--config", config)
    assert first.returncode == 1, first.stderr
    doc = json.loads(first.stdout)
    assert doc["stopped"].startswith("0005-") and [p["state"] for p in doc["patches"]] == [
        "upstream",
        "applies",
        "applies",
        "merged",
        "conflict",
        "conflict",
    ]
    co = Path(doc["checkout"])
    assert git(co, "log", "--format=%s", f"{doc['base']}..HEAD").count("\n") == 2  # 0002, 0003, 0004 committed
    release_side(co / KIMI)  # 0005: the release's call, which names the weights already; say so
    mlp = '            prefix=add_prefix("mlp", prefix),'
    edit(co / KIMI, f"{mlp}\n", f"{mlp}  # 0005\n")

    # --continue takes 0005's resolution and stops at 0006; killed after recording the stop, before moving.
    marker = tmp_path / "paused"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
    env.update({PAUSE_ENV: "port:stopping", PAUSE_FILE_ENV: str(marker)})
    proc = subprocess.Popen([*SGPATCH, "port", "--continue", "--config", config], env=env, stderr=subprocess.PIPE)
    end = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < end
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((co / ".git/sgpatch-port.json").read_text())["phase"] == "stopping"

    # The next --continue finishes the move to the stop, then refuses: 0006's conflict is there to resolve.
    again = sg("port", "--continue", "--config", config)
    record("port-continue-killed-stopping", exit=again.returncode, shown=first_error(again.stderr), roots=(proj,))
    assert again.returncode == 1 and "a conflict marker is still there" in again.stderr
    assert json.loads((co / ".git/sgpatch-port.json").read_text())["phase"] == "stopped"
    found = read_record(co)  # the stop room's recovery finished the step port registers: moved, at the tip
    assert found is not None and found.moved and git(co, "rev-parse", "HEAD").strip() == found.tip
    assert git(co, "rev-parse", "refs/sgpatch/port-stop").strip() == found.stop
    log = git(co, "log", "--format=%s", f"{doc['base']}..HEAD").splitlines()
    assert log[0] == "kimi_k25: name the MoonViT MLP weights" and len(log) == 4  # 0005 resolved, committed
    text = (co / KIMI).read_text()
    assert "<<<<<<< sglang 0.5.10" in text and CONV_NEW in text and "Conv2dLayer(" in text
    assert subprocess.run(["git", "fsck", "--strict"], cwd=co, capture_output=True).returncode == 0
    stopped = snapshot(co)
    assert sg("port", "--continue", "--config", config).returncode == 1 and snapshot(co) == stopped

    # 0006 resolved (the release's call, with the patch's comment): the port finishes and verifies.
    release_side(co / KIMI)
    edit(co / KIMI, "        self.proj = Conv2dLayer(\n", "        self.proj = Conv2dLayer(  # the patch embedding\n")
    done = sg("port", "--continue", "--json", "--config", config)
    assert done.returncode == 0, done.stderr
    assert [p["state"] for p in json.loads(done.stdout)["patches"]] == [
        "upstream",
        "applies",
        "applies",
        "merged",
        "resolved",
        "resolved",
    ]
    series = read_series(proj / "patches/0.5.10")
    assert [p.name[:4] for p in series.patches] == ["0002", "0003", "0004", "0005", "0006"]
    assert b"+        self.proj = Conv2dLayer(  # the patch embedding\n" in series.patches[4].path.read_bytes()
    assert sg("verify", "0.5.10-cu130", "--config", config).returncode == 0
    assert git(co, "for-each-ref", "refs/sgpatch") == "" and not (co / ".git/sgpatch-port.json").exists()


def test_force_port_that_stops_keeps_the_replaced_checkout_until_it_finishes(
    ported_0510: tuple[Path, dict[str, object], bytes], patched_checkout: Callable[[], Path], tmp_path: Path
) -> None:
    """--force over a stack port made: at a stop the checkout it replaces is kept aside; --abort puts it back,
    --continue removes it once the new stack is written."""
    proj = tmp_path / "proj"
    shutil.copytree(ported_0510[0], proj, symlinks=True)
    config = str(proj / "VERSIONS.toml")
    co = patched_checkout()
    edit(co / KIMI, MLP_OLD, MLP_NEW)
    commit(co, "kimi_k25: name the MoonViT MLP weights")
    assert export(proj / "VERSIONS.toml", "--checkout", str(co)).exit_code == 0
    target = proj / ".sgpatch/checkouts/0.5.10-cu130"
    aside = target.parent / ".0.5.10-cu130.sgpatch-replaced"
    before, files = snapshot(target), project_bytes(proj)

    stopped = sg("port", "--to", "0.5.10", "--force", "--json", "--config", config)
    assert stopped.returncode == 1, stopped.stderr
    assert json.loads(stopped.stdout)["stopped"].startswith("0004-")
    assert snapshot(aside) == before and (target / ".git/sgpatch-port.json").exists()
    aborted = sg("port", "--abort", "--config", config)
    assert aborted.returncode == 0 and "put back the checkout it was replacing" in aborted.stdout
    assert snapshot(target) == before and not aside.exists()
    assert project_bytes(proj) == files

    assert sg("port", "--to", "0.5.10", "--force", "--config", config).returncode == 1
    release_side(target / KIMI)
    mlp = '            prefix=add_prefix("mlp", prefix),'
    edit(target / KIMI, f"{mlp}\n", f"{mlp}  # 0004\n")
    done = sg("port", "--continue", "--config", config)
    assert done.returncode == 0, done.stderr
    assert not aside.exists() and not (target / ".git/sgpatch-port.json").exists()
    assert [p.name[:4] for p in read_series(proj / "patches/0.5.10").patches] == ["0002", "0003", "0004"]
    assert (proj / "VERSIONS.toml").read_text().count('[stacks."0.5.10-cu130"]') == 1
    assert sg("verify", "0.5.10-cu130", "--config", config).returncode == 0
