"""Faults, kills and races lose nothing (issue 7): real `sgpatch` subprocesses killed at named points.

Each test runs the real CLI as a subprocess, stops it where ``SGPATCH_TEST_PAUSE``
(or a git hook/filter for points inside git) says, kills it, and checks that the
next command leaves the checkout *exactly* pristine or *exactly* patched: HEAD,
index, status, every file's bytes and every ref equal a reference copy's, no
journal or lock file is left, and ``git fsck --strict`` is clean.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sgpatch.checkout.apply import apply_series
from sgpatch.checkout.fetch import create_pypi_checkout
from sgpatch.config import load_config
from sgpatch.git.repo import TEST_CONFIG_ENV
from sgpatch.lock import PAUSE_ENV, PAUSE_FILE_ENV, LockBusy
from sgpatch.project import Project, load_project

from .helpers import git, run_cli, snapshot
from .reliability import CASES, KILL_POINTS, first_error, record
from .smallrepo import Tiny, make_tiny

SGPATCH = [sys.executable, "-m", "sgpatch.cli"]
STATE_FILES = ("sgpatch-apply.json", "sgpatch-apply.json.tmp", "sgpatch.lock", "index.lock", "HEAD.lock")


# --------------------------------------------------------------------------- helpers


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
    env.update(extra)
    return env


@dataclass
class Run:
    proc: subprocess.Popen[str]
    marker: Path

    def wait_paused(self, timeout: float = 60) -> str:
        """Wait until the process (or its git hook) reached the pause point; the marker's text."""
        end = time.monotonic() + timeout
        while not self.marker.exists():
            if self.proc.poll() is not None:
                _, err = self.proc.communicate()
                pytest.fail(f"exited {self.proc.returncode} before pausing: {err}")
            if time.monotonic() > end:
                self.proc.kill()
                pytest.fail("never reached the pause point")
            time.sleep(0.005)
        for _ in range(100):
            text = self.marker.read_text()
            if text.endswith("\n"):
                return text
            time.sleep(0.005)
        return self.marker.read_text()

    def release(self) -> None:
        self.marker.unlink(missing_ok=True)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        os.kill(self.proc.pid, sig)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err


def start(
    tmp: Path, *args: str, pause: str | None = None, env: dict[str, str] | None = None, marker: Path | None = None
) -> Run:
    marker = marker or tmp / f"paused-{time.monotonic_ns()}"
    extra = dict(env or {})
    if pause:
        extra.update({PAUSE_ENV: pause, PAUSE_FILE_ENV: str(marker)})
    proc = subprocess.Popen(
        [*SGPATCH, *args],
        env=_env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interactive_signals,
    )
    return Run(proc, marker)


def _interactive_signals() -> None:
    """Ctrl-C reaches the command as it does from a terminal, even when the suite itself was started as a
    background job (a shell starts those with SIGINT ignored, and the ignore is inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sgpatch(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SGPATCH, *args], env=_env(**(env or {})), capture_output=True, text=True, timeout=timeout)


def assert_clean_git(co: Path) -> None:
    """No journal, no lock file, and ``git fsck --strict`` finds nothing wrong."""
    left = [name for name in STATE_FILES if (co / ".git" / name).exists()]
    left += [str(p) for p in (co / ".git/refs").rglob("*.lock")]
    assert not left, f"left behind: {left}"
    fsck = subprocess.run(
        ["git", "fsck", "--strict", "--no-dangling", "--no-progress"], cwd=co, capture_output=True, text=True
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert not any(w in (fsck.stdout + fsck.stderr).lower() for w in ("error", "missing", "broken", "corrupt"))


def _proc_stat(pid: int) -> tuple[str, str, int] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    state, ppid = text[text.rindex(")") + 2 :].split()[:2]
    return comm, state, int(ppid)


def ancestor(pid: int, name: str) -> int | None:
    while pid > 1:
        stat = _proc_stat(pid)
        if stat is None:
            return None
        if stat[0] == name:
            return pid
        pid = stat[2]
    return None


def dies(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        stat = _proc_stat(pid)
        if stat is None or stat[1] in ("Z", "X"):
            return True
        time.sleep(0.01)
    return False


def quick_copy(src: Path, dest: Path) -> Path:
    """A copy of a checkout that hard-links git's objects.

    Safe because git never changes an object file.  Everything else (the work tree, the index, refs, logs
    appended in place, config) is copied: a work-tree file hard-linked by another xdist worker meanwhile would
    have its ctime changed under this test's index, and ``read-tree -m`` would take it for modified.
    """

    def link_or_copy(a: str, b: str) -> object:
        rel = Path(a).relative_to(src)
        if rel.parts[0] == ".git" and rel.parts[1] == "objects":
            os.link(a, b)
            return b
        return shutil.copy2(a, b)

    shutil.copytree(src, dest, symlinks=True, copy_function=link_or_copy)
    return dest


@pytest.fixture
def pristine(template_checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Path]:
    """Factory: a quick copy of the pristine 0.5.9 checkout."""
    return lambda: quick_copy(template_checkout, tmp_path_factory.mktemp("quick") / "checkout")


@dataclass(frozen=True)
class Refs:
    pristine: dict[str, str]
    patched: dict[str, str]

    def of(self, phase: str) -> dict[str, str]:
        return self.pristine if phase == "pristine" else self.patched


@pytest.fixture(scope="module")
def refs(template_checkout: Path, template_patched: Path) -> Refs:
    return Refs(snapshot(template_checkout), snapshot(template_patched))


# A pause inside git: a smudge filter (read-tree writing files) or a reference-transaction hook (update-ref).
_SMUDGE = """#!/bin/sh
n=$(( $(cat "{dir}/count" 2>/dev/null || echo 0) + 1 )); echo $n > "{dir}/count"
if [ $n -ge 2 ]; then echo "$$ $1" > "{marker}.tmp"; mv "{marker}.tmp" "{marker}"; exec sleep 120; fi
exec cat
"""
# A transaction that moves no reference is not a pause point: ``git fast-import`` (a commit's objects, written by
# ``Git.commit_files``) runs one at its end, with nothing on the hook's standard input.
_HOOK = """#!/bin/sh
[ "$1" = {state} ] || exit 0
[ -n "$(cat)" ] || exit 0
echo "$$ $1" > "{marker}.tmp"; mv "{marker}.tmp" "{marker}"; exec sleep 120
"""


@contextlib.contextmanager
def git_pause(co: Path, point: str, marker: Path) -> Iterator[dict[str, str]]:
    """Make git itself stop at ``point`` while the test holds it; undo it afterwards.

    The filter driver and the hook come from sgpatch's test hook (``TEST_CONFIG_ENV``, the
    environment of the run), never from the checkout's own configuration, which sgpatch refuses
    or overrides; only the attribute naming the driver is in the checkout.
    """
    tool = marker.parent / f"{marker.name}.sh"
    attributes = co / ".git/info/attributes"
    saved = attributes.read_text()
    if point == "git:read-tree":
        tool.write_text(_SMUDGE.format(dir=marker.parent, marker=marker))
        tool.chmod(0o755)
        setting = f"filter.sgpatchtest.smudge={tool} %f"
        attributes.write_text(saved + "*.py filter=sgpatchtest\n")
    else:
        state = "prepared" if point == "git:update-ref" else "committed"
        hooks = marker.parent / f"{marker.name}.hooks"
        hooks.mkdir()
        hook = hooks / "reference-transaction"
        hook.write_text(_HOOK.format(state=state, marker=marker))
        hook.chmod(0o755)
        setting = f"core.hooksPath={hooks}"
    try:
        yield {TEST_CONFIG_ENV: setting}
    finally:
        attributes.write_text(saved)


# --------------------------------------------------------------------------- kill -9 at every point


def next_apply(co: Path, cfg: Path) -> tuple[Any, dict[str, Any]]:
    """The next command a user runs after the kill: ``sgpatch apply --json`` (in-process CLI)."""
    res = run_cli("apply", "--checkout", str(co), "--config", str(cfg), "--json")
    assert res.exit_code == 0, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return res, doc


def after_kill(co: Path, refs: Refs) -> str:
    """What a kill left: exactly pristine, exactly patched, or a journalled move for the next command."""
    if (co / ".git/sgpatch-apply.json").exists():
        return "mid-move"
    now = snapshot(co)
    assert now in (refs.pristine, refs.patched), "neither exactly pristine nor exactly patched"
    return "pristine" if now == refs.pristine else "patched"


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_apply_at_each_point(
    point: str, pristine: Callable[[], Path], project: Project, refs: Refs, tmp_path: Path
) -> None:
    co, cfg = pristine(), project.config.path
    end = KILL_POINTS[point][1]
    marker = tmp_path / "paused"
    with git_pause(co, point, marker) if point.startswith("git:") else contextlib.nullcontext({}) as env:
        run = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause=point, env=env, marker=marker)
        paused = run.wait_paused()
        helper = int(paused.split()[0])
        git_pid = ancestor(helper, "git") if point.startswith("git:") else None
        run.kill()
        run.finish()
        if point.startswith("git:"):
            assert git_pid is not None
            assert dies(git_pid), "git outlived the sgpatch that ran it"
            os.kill(helper, signal.SIGKILL)
    left = after_kill(co, refs)
    if end == "pristine":
        assert left == "pristine"  # only unreachable objects were written
    else:
        assert left in ("mid-move", "patched")
    if point == "git:read-tree":
        assert left == "mid-move" and (co / ".git/index.lock").exists()
    # The next command finishes the journalled move, or finds nothing to undo and applies.
    res, doc = next_apply(co, cfg)
    assert doc["changed"] is (end == "pristine")
    assert snapshot(co) == refs.patched
    assert_clean_git(co)
    notices = [ln for ln in res.stderr.splitlines() if ln.startswith("sgpatch:")]
    what = {"pristine": "exactly pristine", "patched": "exactly patched", "mid-move": "a journalled move"}[left]
    then = "applies the series" if doc["changed"] else "finds it patched"
    record(
        f"kill-{point.replace(':', '-')}",
        exit=res.exit_code,
        shown=f"left {what}; next `sgpatch apply`: exit 0, {then}" + (f"; {notices[-1]}" if notices else ""),
    )


def test_kill_during_recovery(pristine: Callable[[], Path], project: Project, refs: Refs, tmp_path: Path) -> None:
    co, cfg = pristine(), project.config.path
    first = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause="apply:tree")
    first.wait_paused()
    first.kill()
    first.finish()
    # The commands that would finish the move are killed too: before and after their own read-tree.
    for command, point in (("verify", "recover:start"), ("apply", "recover:tree")):
        again = start(tmp_path, command, "--checkout", str(co), "--config", str(cfg), pause=point)
        again.wait_paused()
        again.kill()
        again.finish()
        assert (co / ".git/sgpatch-apply.json").exists()
    res, doc = next_apply(co, cfg)
    assert doc["changed"] is False
    assert snapshot(co) == refs.patched
    assert_clean_git(co)
    record("kill-recover", exit=res.exit_code, shown="next `sgpatch apply`: exit 0, finds it patched")


def test_sigint_and_sigterm(pristine: Callable[[], Path], project: Project, refs: Refs, tmp_path: Path) -> None:
    cfg = project.config.path
    # Ctrl-C before the move: nothing moved, exit 130.
    co = pristine()
    run = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause="apply:classified")
    run.wait_paused()
    run.kill(signal.SIGINT)
    code, _, err = run.finish()
    assert code == 130 and "sgpatch: interrupted" in err
    assert snapshot(co) == refs.pristine
    assert_clean_git(co)
    record("sigint-before-move", exit=code, shown=first_error(err))
    # Ctrl-C during the move: the move completes first, then exit 130.
    co = pristine()
    run = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause="apply:journal")
    run.wait_paused()
    run.kill(signal.SIGINT)
    time.sleep(0.2)
    assert run.proc.poll() is None  # held until the move is whole
    run.release()
    code, _, err = run.finish()
    assert code == 130 and "sgpatch: interrupted" in err
    assert snapshot(co) == refs.patched
    assert_clean_git(co)
    record("sigint-during-move", exit=code, shown=first_error(err))
    # SIGTERM during the move: deferred, then re-delivered once the move is whole.
    co = pristine()
    run = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause="apply:tree")
    run.wait_paused()
    run.kill(signal.SIGTERM)
    time.sleep(0.2)
    assert run.proc.poll() is None
    run.release()
    code, _, err = run.finish()
    assert code == -signal.SIGTERM
    assert snapshot(co) == refs.patched
    assert not (co / ".git/sgpatch-apply.json").exists()
    next_apply(co, cfg)  # takes over the lock file the terminated process left
    assert_clean_git(co)
    record("sigterm-during-move", exit=None, shown="terminated by SIGTERM after the move completed")


def test_user_edit_after_kill_is_never_overwritten(
    pristine: Callable[[], Path], project: Project, tmp_path: Path
) -> None:
    co, cfg = pristine(), project.config.path
    run = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause="apply:tree")
    run.wait_paused()
    run.kill()
    run.finish()
    kimi = co / "python/sglang/srt/models/kimi_k25.py"
    mine = kimi.read_bytes() + b"# my hotfix, typed after the crash\n"
    kimi.unlink()  # (hard-linked to the template: replace, never write in place)
    kimi.write_bytes(mine)
    res = sgpatch("apply", "--checkout", str(co), "--config", str(cfg))
    assert res.returncode == 2, res.stderr
    assert "sgpatch will not overwrite them" in res.stderr and "kimi_k25.py" in res.stderr
    assert kimi.read_bytes() == mine
    assert (co / ".git/sgpatch-apply.json").exists()
    record("user-edit-after-kill", exit=res.returncode, shown=first_error(res.stderr), roots=(co,))


def _edit(co: Path) -> tuple[Path, bytes]:
    """The user's edit of a file the series changes (replaced: the quick copy hard-links files)."""
    kimi = co / "python/sglang/srt/models/kimi_k25.py"
    mine = kimi.read_bytes() + b"# my hotfix\n"
    kimi.unlink()
    kimi.write_bytes(mine)
    return kimi, mine


def test_journal_that_moved_nothing_is_cleared(
    pristine: Callable[[], Path], project: Project, refs: Refs, tmp_path: Path
) -> None:
    co, cfg = pristine(), project.config.path
    run = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause="apply:journal")
    run.wait_paused()
    kimi, mine = _edit(co)  # before the move: git refuses to overwrite it
    run.release()
    code, _, err = run.finish()
    assert code == 2, err
    assert CASES["journal-nothing-moved"].expect in err
    assert not (co / ".git/sgpatch-apply.json").exists()
    assert kimi.read_bytes() == mine
    assert git(co, "rev-parse", "HEAD") == refs.pristine["head"]
    record("journal-nothing-moved", exit=code, shown=first_error(err), roots=(co,))
    # The next command is not blocked by anything the refused apply left.
    res = sgpatch("verify", "--checkout", str(co), "--config", str(cfg))
    assert res.returncode in (0, 1), res.stderr
    assert "interrupted" not in res.stderr + res.stdout
    assert_clean_git(co)


def test_journal_that_moved_nothing_before_a_kill_is_cleared(
    pristine: Callable[[], Path], project: Project, refs: Refs, tmp_path: Path
) -> None:
    co, cfg = pristine(), project.config.path
    run = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause="apply:journal")
    run.wait_paused()
    run.kill()
    run.finish()
    assert (co / ".git/sgpatch-apply.json").exists()
    kimi, mine = _edit(co)
    res = sgpatch("verify", "--checkout", str(co), "--config", str(cfg))
    assert res.returncode in (0, 1), res.stderr
    assert CASES["journal-nothing-moved-after-kill"].expect in res.stdout, res.stdout
    assert not (co / ".git/sgpatch-apply.json").exists()
    assert kimi.read_bytes() == mine
    assert git(co, "rev-parse", "HEAD") == refs.pristine["head"]
    assert git(co, "diff", "--cached", "--name-only") == ""
    assert_clean_git(co)
    note = next(ln for ln in res.stdout.splitlines() if "nothing changed" in ln)
    record("journal-nothing-moved-after-kill", exit=res.returncode, shown=note.strip(), roots=(co,))


# --------------------------------------------------------------------------- kill at timed moments (tiny repo)


@pytest.fixture(scope="module")
def tiny_big(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return make_tiny(tmp_path_factory.mktemp("tiny-big"), modules=12, patches=6, files_per_patch=3)


def test_kill_at_timed_moments(tiny_big: Tiny, tmp_path: Path) -> None:
    """SIGKILL at evenly spaced moments of the real work (timed from the lock, past Python's start-up)."""

    def launch(t: Tiny) -> Run:
        run = start(tmp_path, "apply", "--checkout", str(t.checkout), "--config", str(t.config), pause="apply:locked")
        run.wait_paused()
        return run

    ref = tiny_big.copy(tmp_path / "ref")
    pristine_ref = snapshot(ref.checkout)
    run = launch(ref)
    began = time.monotonic()
    run.release()
    assert run.finish()[0] == 0
    took = time.monotonic() - began
    tiny_refs = Refs(pristine_ref, snapshot(ref.checkout))
    runs = 10
    outcomes: Counter[str] = Counter()
    for i in range(runs):
        t = tiny_big.copy(tmp_path / f"run{i}")
        run = launch(t)
        run.release()
        time.sleep(1.25 * took * i / (runs - 1))
        run.kill()
        run.finish()
        outcomes[after_kill(t.checkout, tiny_refs)] += 1
        next_apply(t.checkout, t.config)
        assert snapshot(t.checkout) == tiny_refs.patched
        assert_clean_git(t.checkout)
    shown = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items()))
    record(
        "kill-timed-sweep",
        exit=0,
        shown=f"{runs} kills spread over the {took:.2f} s of work left: {shown}; "
        "next `sgpatch apply` exit 0, exactly patched",
    )


# --------------------------------------------------------------------------- concurrency


def test_second_apply_fails_cleanly_or_waits(
    pristine: Callable[[], Path], project: Project, refs: Refs, tmp_path: Path
) -> None:
    co, cfg = pristine(), project.config.path
    holder = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause="apply:locked")
    holder.wait_paused()
    busy = sgpatch("apply", "--checkout", str(co), "--config", str(cfg), env={"SGPATCH_LOCK_TIMEOUT": "1"})
    assert busy.returncode == 3, busy.stderr
    assert f"is in use by sgpatch pid {holder.proc.pid} (apply, since" in busy.stderr
    assert "Traceback" not in busy.stderr
    # The core says whom it waits for (the CLI prints it on stderr), then gives up cleanly.
    heard: list[str] = []
    os.environ["SGPATCH_LOCK_TIMEOUT"] = "0.3"
    try:
        with pytest.raises(LockBusy):
            apply_series(project.stack, project.series, co, notify=heard.append)
    finally:
        del os.environ["SGPATCH_LOCK_TIMEOUT"]
    assert len(heard) == 1 and heard[0].startswith(f"waiting for sgpatch pid {holder.proc.pid} (apply, since ")
    assert heard[0].endswith(f"to finish with checkout {co} (up to 0.3 s)")
    assert snapshot(co) == refs.pristine
    record("lock-busy", exit=busy.returncode, shown=first_error(busy.stderr), roots=(co,))

    waiter = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), "--json")
    time.sleep(1.0)
    assert waiter.proc.poll() is None  # waiting for the lock
    holder.release()
    code, _, err = holder.finish()
    assert code == 0, err
    code, out, err = waiter.finish()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["changed"] is False and [p["state"] for p in doc["patches"]] == ["applied"] * 3
    assert snapshot(co) == refs.patched
    assert_clean_git(co)
    waiting = [ln for ln in err.splitlines() if "waiting for" in ln]
    shown = (waiting[0] + "; then " if waiting else "waits silently; then ") + "exit 0, already patched"
    record("lock-wait", exit=code, shown=shown, roots=(co,))


def test_parallel_applies(pristine: Callable[[], Path], project: Project, refs: Refs, tmp_path: Path) -> None:
    co, cfg = pristine(), project.config.path
    runs = [start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), "--json") for _ in range(4)]
    results = [r.finish() for r in runs]
    assert all(code == 0 for code, _, _ in results), results
    changed = [json.loads(out)["changed"] for _, out, _ in results]
    assert sorted(changed) == [False, False, False, True]
    assert snapshot(co) == refs.patched
    assert_clean_git(co)
    assert len(git(co, "log", "--format=%H", f"{refs.pristine['head']}..HEAD").split()) == len(project.series.patches)
    record("parallel-apply", exit=0, shown="all exit 0: 1 applied, 3 found it already patched")


def test_verify_waits_for_a_running_apply(
    pristine: Callable[[], Path], project: Project, refs: Refs, tmp_path: Path
) -> None:
    co, cfg = pristine(), project.config.path
    applying = start(tmp_path, "apply", "--checkout", str(co), "--config", str(cfg), pause="apply:tree")
    applying.wait_paused()
    checking = start(tmp_path, "verify", "--checkout", str(co), "--config", str(cfg), "--json")
    time.sleep(0.8)
    assert checking.proc.poll() is None  # waits: the journal says a move is under way
    applying.release()
    assert applying.finish()[0] == 0
    code, out, err = checking.finish()
    assert code == 0, err
    assert json.loads(out)["phase"] == "patched"
    assert snapshot(co) == refs.patched
    record("verify-during-apply", exit=code, shown="verify waits for the lock, then: exit 0, phase patched")


def test_stale_lock_of_a_dead_process(pristine: Callable[[], Path], project: Project, refs: Refs) -> None:
    co = pristine()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = co / ".git/sgpatch.lock"
    owner = {"pid": dead.pid, "host": socket.gethostname(), "command": "apply", "since": time.time() - 60}
    lock.write_text(json.dumps(owner))
    heard: list[str] = []
    began = time.monotonic()
    result = apply_series(project.stack, project.series, co, notify=heard.append)
    assert time.monotonic() - began < 5
    assert result.changed
    assert any(f"pid {dead.pid}" in h and "was killed" in h for h in heard), heard
    assert snapshot(co) == refs.patched
    assert_clean_git(co)
    record("stale-lock", exit=0, shown=f"{heard[0]}; then 3 patch(es) applied")


def test_parallel_fetches_make_one_checkout(net: Net) -> None:
    runs = [start(net.root, "fetch", "--into", str(net.into), "--config", str(net.config), "--json") for _ in range(2)]
    results = [r.finish() for r in runs]
    assert all(code == 0 for code, _, _ in results), results
    docs = [json.loads(out) for _, out, _ in results]
    assert sorted(d["created"] for d in docs) == [False, True]
    assert docs[0]["commit"] == docs[1]["commit"] == git(net.into, "rev-parse", "HEAD")
    assert git(net.into, "status", "--porcelain") == ""
    assert [p.name for p in net.root.iterdir() if p.name.startswith(".co")] == []
    assert sorted(p.name for p in net.entry.iterdir()) == [WHEEL_NAME]
    record("parallel-fetch", exit=0, shown="both exit 0: one created the checkout, the other found it already present")


def test_fetch_killed_before_publishing(net: Net) -> None:
    run = start(net.root, "fetch", "--into", str(net.into), "--config", str(net.config), pause="fetch:staged")
    run.wait_paused()
    run.kill()
    run.finish()
    assert not net.into.exists()
    staged = [p for p in net.root.iterdir() if p.name.startswith(".co.sgpatch-new-")]
    assert len(staged) == 1 and (staged[0] / ".git").is_dir()
    res = _fetch(net)
    assert res.exit_code == 0, res.stderr
    assert git(net.into, "status", "--porcelain") == ""
    assert (net.into / "python/sglang/payload.bin").is_file()
    assert [p.name for p in net.root.iterdir() if p.name.startswith(".co")] == []
    record("fetch-killed-staged", exit=None, shown="killed: no checkout at the target; next fetch: created")


# --------------------------------------------------------------------------- network faults (a local PEP 691 index)


def fake_wheel() -> bytes:
    """A small valid wheel named like sglang 0.5.9's, with an incompressible payload."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("sglang/__init__.py", "__version__ = '0.5.9'\n")
        zf.writestr("sglang/payload.bin", hashlib.sha512(b"x").digest() * 4096)
        zf.writestr("sglang-0.5.9.dist-info/METADATA", "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
        zf.writestr(
            "sglang-0.5.9.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr("sglang-0.5.9.dist-info/RECORD", "")
    return buf.getvalue()


WHEEL_NAME = "sglang-0.5.9-py3-none-any.whl"


class Index(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, payload: bytes) -> None:
        super().__init__(("127.0.0.1", 0), IndexHandler)
        self.payload = payload
        self.sha = hashlib.sha256(payload).hexdigest()
        self.mode = "ok"
        self.stalled = threading.Event()
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/simple/"


class IndexHandler(BaseHTTPRequestHandler):
    server: Index

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        srv = self.server
        if self.path.rstrip("/") == "/simple/sglang":
            listed = {"filename": WHEEL_NAME, "url": f"/files/{WHEEL_NAME}", "hashes": {"sha256": srv.sha}}
            page = json.dumps({"meta": {"api-version": "1.1"}, "name": "sglang", "files": [listed]}).encode()
            self._send(page, "application/vnd.pypi.simple.v1+json")
            return
        if self.path != f"/files/{WHEEL_NAME}":
            self.send_error(404)
            return
        data, half = srv.payload, len(srv.payload) // 2
        if srv.mode == "ok":
            self._send(data)
        elif srv.mode == "altered":
            self._send(data[:half] + bytes([data[half] ^ 1]) + data[half + 1 :])
        elif srv.mode == "short":
            self._send(data[:half])
        elif srv.mode in ("cut", "stall"):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:half])
            self.wfile.flush()
            if srv.mode == "stall":
                srv.stalled.set()
                srv.release.wait(60)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, body: bytes, kind: str = "application/octet-stream") -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@dataclass
class Net:
    index: Index
    config: Path
    cache: Path
    into: Path
    sha: str
    root: Path

    @property
    def entry(self) -> Path:
        return self.cache / "sgpatch/artifacts" / self.sha


@pytest.fixture
def net(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Net]:
    payload = fake_wheel()
    sha = hashlib.sha256(payload).hexdigest()
    index = Index(payload)
    thread = threading.Thread(target=index.serve_forever, daemon=True)
    thread.start()
    for key in list(os.environ):
        if key.startswith("PIP_") or key.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
            monkeypatch.delenv(key)
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "20")
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    proj = tmp_path / "proj"
    proj.mkdir()
    config = proj / "VERSIONS.toml"
    fake_commit = "a" * 40
    config.write_text(
        f"""schema_version = 1
default_stack = "fake"

[stacks.fake]
sglang_version = "0.5.9"
tag = "v0.5.9"
commit = "{fake_commit}"
series = "patches/fake"
cuda = "13.0"
local_label = "cu130"

[stacks.fake.source]
default = "pypi"
wheel = {{ filename = "{WHEEL_NAME}", sha256 = "{sha}" }}
"""
    )
    # Pin the commit sgpatch makes from the fake wheel, as VERSIONS.toml pins 0.5.9's.
    stack = load_config(config).stack(None)
    assert stack.source_artifact is not None
    (tmp_path / "pin").mkdir()
    (tmp_path / "pin" / WHEEL_NAME).write_bytes(payload)
    commit = create_pypi_checkout(stack, tmp_path / "pin" / WHEEL_NAME, tmp_path / "pin/co", stack.source_artifact)
    config.write_text(config.read_text().replace('default = "pypi"\n', f'default = "pypi"\npypi_commit = "{commit}"\n'))
    shutil.rmtree(tmp_path / "pin")
    yield Net(index, config, cache, tmp_path / "co", sha, tmp_path)
    index.release.set()
    index.shutdown()
    index.server_close()


def _fetch(net: Net) -> Any:
    return run_cli("fetch", "--into", str(net.into), "--config", str(net.config))


def _nothing_cached(net: Net) -> None:
    left = sorted(p.name for p in net.entry.iterdir()) if net.entry.exists() else []
    assert left == [], left
    assert not net.into.exists()


@pytest.mark.parametrize(
    ("mode", "case_id", "codes", "message"),
    [
        ("cut", "net-cut", (3,), "cannot download"),
        ("short", "net-short", (2,), "sha256 mismatch"),
        ("altered", "net-altered", (2,), "sha256 mismatch"),
    ],
)
def test_download_faults_leave_nothing_and_retry_works(
    net: Net, mode: str, case_id: str, codes: tuple[int, ...], message: str
) -> None:
    net.index.mode = mode
    bad = _fetch(net)
    assert bad.exit_code in codes, bad.stderr
    assert message in bad.stderr and "Traceback" not in bad.stderr
    _nothing_cached(net)
    record(case_id, exit=bad.exit_code, shown=first_error(bad.stderr), roots=(net.root,))
    net.index.mode = "ok"
    good = _fetch(net)
    assert good.exit_code == 0, good.stderr
    assert hashlib.sha256((net.entry / WHEEL_NAME).read_bytes()).hexdigest() == net.sha
    assert sorted(p.name for p in net.entry.iterdir()) == [WHEEL_NAME]
    assert (net.into / "python/sglang/payload.bin").is_file()


def test_unreachable_index(net: Net, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple/")
    bad = _fetch(net)
    assert bad.exit_code == 3, bad.stderr
    assert "cannot download" in bad.stderr
    _nothing_cached(net)
    record("net-unreachable", exit=bad.exit_code, shown=first_error(bad.stderr), roots=(net.root,))


def test_fetch_killed_mid_download(net: Net) -> None:
    net.index.mode = "stall"
    run = start(net.root, "fetch", "--into", str(net.into), "--config", str(net.config))
    assert net.index.stalled.wait(60), "the download never started"
    children = Path(f"/proc/{run.proc.pid}/task/{run.proc.pid}/children").read_text().split()
    assert children == [], "sgpatch downloads by itself: no process of the index's runs"
    assert [p.name for p in net.entry.iterdir() if p.name.startswith(".download-")]
    run.kill()
    run.finish()
    left = [p for p in net.entry.iterdir() if p.name.startswith(".download-")]
    assert left, "the kill should leave the temporary download directory behind"
    net.index.release.set()
    net.index.mode = "ok"
    good = _fetch(net)
    assert good.exit_code == 0, good.stderr
    assert sorted(p.name for p in net.entry.iterdir()) == [WHEEL_NAME]
    record("net-killed", exit=None, shown="killed; next fetch removes the leftover `.download-*` and succeeds")


def test_lock_env_is_validated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = make_tiny(tmp_path / "t")
    monkeypatch.setenv("SGPATCH_LOCK_TIMEOUT", "soon")
    res = run_cli("apply", "--checkout", str(tiny.checkout), "--config", str(tiny.config))
    assert res.exit_code == 3 and "SGPATCH_LOCK_TIMEOUT='soon' is not a number" in res.stderr
    cfg = load_config(tiny.config)
    assert load_project(cfg, None).series.patches
