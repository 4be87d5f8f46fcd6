"""The stop for a person with a real port: a ``port --force`` over the 0.5.10 stack stopped at its conflict
(slime-like: the stack's own checkout holds the half-ported tree), as whole ``sgpatch`` processes.

Every other command knows the port is stopped there; ``--continue`` runs apply's checks on the resolution;
``--abort`` through a link; two ports at once; a first port killed mid-way and what the next one does."""

# ruff: noqa: F811  (pytest fixtures imported from port_fixtures are used as arguments)

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sgpatch.lock import PAUSE_ENV, PAUSE_FILE_ENV

from .helpers import snapshot
from .port_fixtures import (  # noqa: F401  (fixtures)
    KIMI,
    MLP_NEW,
    MLP_OLD,
    commit,
    edit,
    export,
    ported_0510,
    project_bytes,
    release_side,
    releases_cached,
)
from .reliability import CASES, first_error, record
from .shared import copy

SGPATCH = [sys.executable, "-m", "sgpatch.cli"]
STACK = "0.5.10-cu130"
END_OF_LAYER = "        return hidden_states\n\n\ndef get_rope_shape_decorate("
TWICE = "    def extra(self):\n        return 1\n\n    def extra(self):\n        return 2\n\n"


def sg(proj: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")} | env
    full.pop("CI", None)
    argv = [*SGPATCH, *args, "--config", str(proj / "VERSIONS.toml")]
    return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def force_stopped(
    ported_0510: tuple[Path, dict[str, object], bytes],
    template_patched: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """A project whose 0.5.10 stack is being replaced by a ``port --force`` stopped at 0004's conflict."""
    where = tmp_path_factory.mktemp("forcestop")
    proj, co = where / "proj", where / "checkout"
    shutil.copytree(ported_0510[0], proj, symlinks=True)
    copy(template_patched, co)
    edit(co / KIMI, MLP_OLD, MLP_NEW)
    commit(co, "kimi_k25: name the MoonViT MLP weights")
    assert export(proj / "VERSIONS.toml", "--checkout", str(co)).exit_code == 0
    stopped = sg(proj, "port", "--to", "0.5.10", "--force", "--json")
    assert stopped.returncode == 1, stopped.stderr
    assert json.loads(stopped.stdout)["stopped"].startswith("0004-")
    return proj


@pytest.fixture
def proj(force_stopped: Path, tmp_path: Path) -> Path:
    duplicate = tmp_path / "proj"
    shutil.copytree(force_stopped, duplicate, symlinks=True)
    return duplicate


def test_every_command_knows_the_port_is_stopped(proj: Path) -> None:
    target = proj / ".sgpatch/checkouts" / STACK
    before, files = snapshot(target), project_bytes(proj)
    said = "a port is stopped here"
    for args, code in (
        (("export", STACK), 2),
        (("export", STACK, "--check"), 2),
        (("verify", STACK), 1),
        (("apply", STACK), 2),
        (("build", STACK), 2),
        (("port", "--to", "0.5.10", "--force"), 2),
    ):
        done = sg(proj, *args)
        assert done.returncode == code and said in done.stderr, (args, done.stderr)
        assert f"'sgpatch port --continue --checkout {target}'" in done.stderr, done.stderr
        if args == ("export", STACK):
            record("stop-known-port", exit=done.returncode, shown=first_error(done.stderr), roots=(proj,))
    status = sg(proj, "status")
    assert f"{STACK}: stopped: {said}" in status.stdout, status.stdout
    assert snapshot(target) == before and project_bytes(proj) == files


def test_port_continue_runs_apply_checks_on_the_resolution(proj: Path) -> None:
    target = proj / ".sgpatch/checkouts" / STACK
    files = project_bytes(proj)
    release_side(target / KIMI)
    mlp = '            prefix=add_prefix("mlp", prefix),'
    edit(target / KIMI, f"{mlp}\n", f"{mlp}  # 0003\n")
    edit(target / KIMI, END_OF_LAYER, END_OF_LAYER.replace("\n\n\ndef", f"\n\n{TWICE}\ndef", 1))
    refused = sg(proj, "port", "--continue")
    assert refused.returncode == 1, refused.stderr
    assert "extra in class MoonViTEncoderLayer twice" in refused.stdout + refused.stderr
    assert "then run 'sgpatch port --continue' again" in refused.stdout
    assert project_bytes(proj) == files and (target / ".git/sgpatch-port.json").exists()
    shown = next(ln for ln in refused.stdout.splitlines() if "twice" in ln)
    record("stop-port-continue-apply-checks", exit=refused.returncode, shown=shown.strip(), roots=(proj,))
    edit(target / KIMI, TWICE, "")
    done = sg(proj, "port", "--continue")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (target / ".git/sgpatch-port.json").exists()
    assert sg(proj, "verify", STACK).returncode == 0


def test_port_abort_through_a_link_is_handled_like_the_checkout(proj: Path, tmp_path: Path) -> None:
    target = proj / ".sgpatch/checkouts" / STACK
    aside = target.parent / f".{STACK}.sgpatch-replaced"
    replaced, files = snapshot(aside), project_bytes(proj)
    link = tmp_path / "link"
    link.symlink_to(target)
    aborted = sg(proj, "port", "--abort", "--checkout", str(link))
    assert aborted.returncode == 0, aborted.stderr
    assert CASES["stop-link-checkout"].expect in aborted.stdout
    assert link.is_symlink() and os.readlink(link) == str(target)  # the link itself left as it was
    assert snapshot(target) == replaced and not aside.exists()  # the checkout --force replaced, back in place
    assert project_bytes(proj) == files
    record("stop-link-checkout", exit=0, shown=aborted.stdout.splitlines()[0], roots=(proj, tmp_path))


@pytest.mark.parametrize("how", ["plain", "the hint"])
def test_a_port_abort_killed_between_its_two_renames_is_finished_by_the_rooms_recovery(
    proj: Path, tmp_path: Path, how: str
) -> None:
    """``port --abort`` of a ``--force`` port killed after removing the new checkout, before putting the one it
    replaced back: the stack's checkout is hidden.  The next command puts it back through the stop room's one
    recovery, says so, and leaves the replaced checkout and the project byte for byte."""
    target = proj / ".sgpatch/checkouts" / STACK
    aside = target.parent / f".{STACK}.sgpatch-replaced"
    replaced, files = snapshot(aside), project_bytes(proj)
    marker = tmp_path / "paused"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
    env.update({PAUSE_ENV: "port:abort-removed", PAUSE_FILE_ENV: str(marker)})
    argv = [*SGPATCH, "port", "--abort", "--checkout", str(target), "--config", str(proj / "VERSIONS.toml")]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < end
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not target.exists() and snapshot(aside) == replaced  # the window: the stack's checkout hidden
    put_back = f"'sgpatch port --abort --checkout {target}' puts it back"
    verified = sg(proj, "verify", STACK)  # every command names the way back, none says "fetch" over it
    assert verified.returncode == 2 and "left it moved aside to" in verified.stderr, verified.stderr
    assert put_back in verified.stderr and "sgpatch fetch" not in verified.stderr
    status = sg(proj, "status")
    assert f"{STACK}: stopped: a killed 'port --force' or 'port --abort' left the checkout moved aside" in status.stdout
    assert put_back in status.stdout, status.stdout
    # plain, as a person runs it (the hidden checkout is found without --checkout), or the hint as written
    given = () if how == "plain" else ("--checkout", str(target))
    again = sg(proj, "port", "--abort", *given)
    assert again.returncode == 0, again.stderr
    said = f"put back {target}, which a killed 'port --force' or 'port --abort' had moved aside"
    assert said in again.stdout
    assert snapshot(target) == replaced and not aside.exists() and project_bytes(proj) == files
    assert sg(proj, "verify", STACK).returncode == 0
    if how == "plain":
        record("stop-kill-abort-window", exit=again.returncode, shown=said, roots=(proj, tmp_path))


def _resolve(proj: Path) -> None:
    """Resolve 0004's conflict as a person would: the release's side, with the one line 0003 adds."""
    target = proj / ".sgpatch/checkouts" / STACK
    release_side(target / KIMI)
    mlp = '            prefix=add_prefix("mlp", prefix),'
    edit(target / KIMI, f"{mlp}\n", f"{mlp}  # 0003\n")


def _relative(proj: Path) -> dict[str, bytes]:
    return {str(p.relative_to(proj)): data for p, data in project_bytes(proj).items()}


@pytest.mark.parametrize("point", ["port:finishing", "port:finish-moved"])
def test_a_continue_killed_while_writing_the_stack_is_finished_only_by_continue(
    force_stopped: Path, tmp_path: Path, point: str
) -> None:
    """``port --continue`` killed once it recorded the new series (before the checkout moved, or after): the
    phase writes the project, so only ``port --continue`` finishes it; every other command names that command,
    ``--abort`` refuses, and the next ``--continue`` leaves the project and the checkout as an uninterrupted
    one does."""
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    for proj in (ref, killed):
        shutil.copytree(force_stopped, proj, symlinks=True)
        _resolve(proj)
    assert sg(ref, "port", "--continue").returncode == 0
    paused = _paused_port(killed, tmp_path / "paused", point, "port", "--continue")
    paused.send_signal(signal.SIGKILL)
    paused.wait()
    target = killed / ".sgpatch/checkouts" / STACK
    assert (target / ".git/sgpatch-port.json").exists() and _relative(killed) != _relative(ref)
    owner = f"'sgpatch port --continue --checkout {target}' finishes what a killed 'sgpatch port --continue' left"
    verified = sg(killed, "verify", STACK)
    assert verified.returncode == 1 and owner in verified.stderr, verified.stderr
    assert owner in sg(killed, "status").stdout
    refused = sg(killed, "port", "--abort")
    assert refused.returncode == 2 and "run 'sgpatch port --continue' to finish it" in refused.stderr
    done = sg(killed, "port", "--continue", "--checkout", str(target))  # the hint, as written
    assert done.returncode == 0, done.stderr
    assert "finished writing the new stack" in done.stdout
    assert _relative(killed) == _relative(ref)
    ref_co = ref / ".sgpatch/checkouts" / STACK
    assert snapshot(target) == snapshot(ref_co)
    assert not (target.parent / f".{STACK}.sgpatch-replaced").exists()
    assert sg(killed, "verify", STACK).returncode == 0
    if point == "port:finishing":
        record("stop-kill-finishing", exit=verified.returncode, shown=first_error(verified.stderr), roots=(killed,))


def _paused_port(proj: Path, marker: Path, point: str = "port:stopping", *args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
    env.update({PAUSE_ENV: point, PAUSE_FILE_ENV: str(marker)})
    args = args or ("port", "--to", "0.5.10", "--force")
    argv = [*SGPATCH, *args, "--config", str(proj / "VERSIONS.toml")]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + 600
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < end
        time.sleep(0.05)
    return proc


def test_two_ports_at_once_and_a_killed_first_port(proj: Path, tmp_path: Path) -> None:
    checkouts = proj / ".sgpatch/checkouts"
    assert sg(proj, "port", "--abort").returncode == 0  # back to the 0.5.10 stack as port wrote it
    files = project_bytes(proj)
    first = _paused_port(proj, tmp_path / "paused")
    second = sg(proj, "port", "--to", "0.5.10", "--force", SGPATCH_LOCK_TIMEOUT="0.5")
    assert second.returncode == 3 and f"project {proj} is in use by sgpatch pid {first.pid}" in second.stderr
    record("stop-two-ports", exit=3, shown=first_error(second.stderr), roots=(proj,))
    first.send_signal(signal.SIGKILL)
    first.wait()
    left = [p for p in checkouts.iterdir() if p.name.startswith(f".port-{STACK}-")]
    assert len(left) == 1 and project_bytes(proj) == files  # what a kill leaves: the staging directory
    again = sg(proj, "port", "--to", "0.5.10", "--force")
    assert again.returncode == 1, again.stderr  # stopped at the conflict, as a first port does
    assert f"removed {left[0]}, left by a port that was killed (" in again.stdout
    assert not left[0].exists() and (checkouts / STACK / ".git/sgpatch-port.json").exists()
    assert [p.name for p in checkouts.iterdir() if p.name.startswith(".port-")] == []
    shown = next(ln for ln in again.stdout.splitlines() if "left by a port that was killed" in ln)
    record("stop-kill-first-port", exit=again.returncode, shown=shown.strip(), roots=(proj,))
