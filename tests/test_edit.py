"""The edit loop: ``sgpatch edit PATCH``, write-back by ``export`` / ``edit --continue``, ``edit --abort``.

Real git checkouts (tests/smallrepo.py's tiny project, and the real 0.5.9 checkout), the real CLI, and
real processes killed at the edit's pause points.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sgpatch.checkout.chain import change_of
from sgpatch.checkout.edit import RECORD
from sgpatch.lock import PAUSE_ENV, PAUSE_FILE_ENV
from sgpatch.series.patch import parse_patch

from .helpers import REPO, copy_project, git, json_out, run_cli
from .reliability import CASES, first_error, record
from .smallrepo import Tiny, make_tiny

SGPATCH = [sys.executable, "-m", "sgpatch.cli"]
P1, P2 = "0001-change-1.patch", "0002-change-2.patch"
MOD1, MOD2 = "python/pkg/mod1.py", "python/pkg/mod2.py"
ADDED_1B = "    def added_1b(self):\n        return 1\n\n"  # where patch 2 adds its method too
ADDED_2 = "    def added_2(self):\n        return 2\n\n"


@pytest.fixture
def tiny(tmp_path: Path) -> Tiny:
    """A tiny project whose two patches are applied to its checkout."""
    t = make_tiny(tmp_path / "tiny")
    applied = sg(t, "apply")
    assert applied.exit_code == 0, applied.stderr
    return t


def sg(t: Tiny, *args: str) -> Any:
    return run_cli(*args, "--checkout", str(t.checkout), "--config", str(t.config))


def project_bytes(t: Tiny) -> dict[str, bytes]:
    return {str(p.relative_to(t.root)): p.read_bytes() for p in sorted(t.root.rglob("*")) if p.is_file()}


def field(data: bytes, name: str) -> str | None:
    return parse_patch(data, Path(P1)).field(name)


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_edit_the_bottom_patch_writes_it_back_and_carries_the_next(tiny: Tiny) -> None:
    before = project_bytes(tiny)
    head = git(tiny.checkout, "rev-parse", "HEAD")
    started = sg(tiny, "edit", "0001", "--json")
    assert started.exit_code == 0, started.stderr
    assert json_out(started)["action"] == "started"
    # The checkout is at patch 1: its commit is HEAD, patch 2's change is not in the files.
    assert git(tiny.checkout, "rev-parse", "HEAD") == git(tiny.checkout, "rev-parse", f"{head}~1")
    assert "added_2" not in (tiny.checkout / MOD2).read_text()
    # One edit inside patch 1's change (mod1), one that only moves patch 2's lines (three lines atop mod2).
    replace(tiny.checkout / MOD1, "        return 1\n", "        return 100\n")
    replace(tiny.checkout / MOD2, '"""Module 2 of the tiny project."""\n', '"""Module 2.\n\nMore.\n"""\n')
    days = {datetime.date.today().isoformat()}
    written = run_cli("export", "--checkout", str(tiny.checkout), "--config", str(tiny.config), "--json")
    days.add(datetime.date.today().isoformat())
    assert written.exit_code == 0, written.stderr
    doc = json_out(written)
    assert doc["action"] == "written" and doc["last_update_bumped"] == [P1]
    new1, new2 = (tiny.series / P1).read_bytes(), (tiny.series / P2).read_bytes()
    old2 = before[f"patches/tiny/{P2}"]
    assert b"+        return 100\n" in new1 and field(new1, "Last-Update") in days
    # Patch 2: carried to new line numbers, the same change, so no Last-Update; its header bytes kept.
    assert new2 != old2 and change_of(new2) == change_of(old2)
    assert new2.split(b"diff --git", 1)[0] == old2.split(b"diff --git", 1)[0]
    # The checkout holds the whole series again, exactly: verify passes, apply is a no-op, no record.
    assert not (tiny.checkout / ".git" / RECORD).exists()
    assert git(tiny.checkout, "status", "--porcelain") == ""
    assert "added_2" in (tiny.checkout / MOD2).read_text()
    assert sg(tiny, "verify").exit_code == 0
    again = sg(tiny, "apply", "--json")
    assert again.exit_code == 0 and json_out(again)["changed"] is False
    # A fresh checkout with the written series applied makes the same files.
    fresh = make_tiny(tiny.root.parent / "fresh")
    applied = run_cli("apply", "--checkout", str(fresh.checkout), "--config", str(tiny.config))
    assert applied.exit_code == 0, applied.stderr
    assert git(fresh.checkout, "rev-parse", "HEAD^{tree}") == git(tiny.checkout, "rev-parse", "HEAD^{tree}")


def _conflicting_edit(t: Tiny) -> None:
    """Start an edit of patch 1 that adds a method in mod2 where patch 2 adds one."""
    assert sg(t, "edit", P1).exit_code == 0
    replace(t.checkout / MOD2, "    def method_3(self, x):\n", f"{ADDED_1B}    def method_3(self, x):\n")


def test_a_later_patch_that_conflicts_stops_then_continues(tiny: Tiny) -> None:
    _conflicting_edit(tiny)
    stopped = run_cli("export", "--checkout", str(tiny.checkout), "--config", str(tiny.config))
    assert stopped.exit_code == 1, stopped.stderr
    assert f"STOPPED: {P2} conflicts with your edit of {P1}" in stopped.stdout
    assert f"conflict: {MOD2}:" in stopped.stdout and "'sgpatch edit --continue'" in stopped.stdout
    text = (tiny.checkout / MOD2).read_text()
    assert "<<<<<<< the series with your edit" in text and f">>>>>>> {P2}" in text
    # Markers left: --continue refuses, naming the file and line.
    again = sg(tiny, "edit", "--continue")
    assert again.exit_code == 1 and f"{MOD2}:" in again.stderr and "conflict marker" in again.stderr
    # Resolved by hand: the edit's method and patch 2's both kept.
    lines = text.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("<<<<<<<"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith(">>>>>>>"))
    (tiny.checkout / MOD2).write_text("".join(lines[:start]) + ADDED_1B + ADDED_2 + "".join(lines[end + 1 :]))
    done = sg(tiny, "edit", "--continue", "--json")
    assert done.exit_code == 0, done.stderr
    assert sorted(json_out(done)["last_update_bumped"]) == [P1, P2]  # patch 2's context changed: its change did
    assert sg(tiny, "verify").exit_code == 0
    assert b" def added_1b(self):\n" in (tiny.series / P2).read_bytes()  # its context is the edit's method
    assert git(tiny.checkout, "status", "--porcelain") == ""


def test_abort_restores_the_files_and_the_checkout_byte_for_byte(tiny: Tiny) -> None:
    before, head = project_bytes(tiny), git(tiny.checkout, "rev-parse", "HEAD")
    _conflicting_edit(tiny)
    assert run_cli("export", "--checkout", str(tiny.checkout), "--config", str(tiny.config)).exit_code == 1
    aborted = sg(tiny, "edit", "--abort")
    assert aborted.exit_code == 0, aborted.stderr
    assert project_bytes(tiny) == before
    assert git(tiny.checkout, "rev-parse", "HEAD") == head
    assert git(tiny.checkout, "status", "--porcelain") == ""
    assert not any(p.name.startswith("sgpatch-edit") for p in (tiny.checkout / ".git").iterdir())
    assert git(tiny.checkout, "for-each-ref", "refs/sgpatch/") == ""
    said = aborted.stdout.splitlines()[0]
    assert CASES["edit-abort-after-conflict"].expect in said
    record("edit-abort-after-conflict", exit=aborted.exit_code, shown=said, roots=(tiny.root, tiny.checkout.parent))
    # Aborting while editing (nothing written yet) goes back too; a second abort has nothing to do.
    assert sg(tiny, "edit", "0002").exit_code == 0
    replace(tiny.checkout / MOD2, "        return 2\n", "        return 22\n")
    check = sg(tiny, "export", "--check")
    assert check.exit_code == 2 and "an edit is in progress" in check.stderr
    record(
        "edit-export-check-during",
        exit=check.exit_code,
        shown=first_error(check.stderr),
        roots=(tiny.root, tiny.checkout.parent),
    )
    assert sg(tiny, "edit", "--abort").exit_code == 0
    assert project_bytes(tiny) == before and git(tiny.checkout, "rev-parse", "HEAD") == head
    assert git(tiny.checkout, "status", "--porcelain") == ""
    nothing = sg(tiny, "edit", "--abort")
    assert nothing.exit_code == 2 and "no edit in progress" in nothing.stderr
    assert project_bytes(tiny) == before and git(tiny.checkout, "rev-parse", "HEAD") == head
    record(
        "edit-abort-nothing",
        exit=nothing.exit_code,
        shown=first_error(nothing.stderr),
        roots=(tiny.root, tiny.checkout.parent),
    )


def test_a_dirty_or_unpatched_checkout_is_refused(tiny: Tiny) -> None:
    replace(tiny.checkout / MOD1, "        return 1\n", "        return 5\n")
    head = git(tiny.checkout, "rev-parse", "HEAD")
    dirty = sg(tiny, "edit", "0001")
    assert dirty.exit_code == 2 and "uncommitted changes" in dirty.stderr and MOD1 in dirty.stderr
    assert not (tiny.checkout / ".git" / RECORD).exists()
    assert "        return 5\n" in (tiny.checkout / MOD1).read_text()  # the change kept
    record("edit-dirty", exit=dirty.exit_code, shown=first_error(dirty.stderr), roots=(tiny.root, tiny.checkout.parent))
    git(tiny.checkout, "checkout", "--", MOD1)
    unknown = sg(tiny, "edit", "0009")
    assert unknown.exit_code == 2 and "no patch '0009'" in unknown.stderr
    assert git(tiny.checkout, "rev-parse", "HEAD") == head and git(tiny.checkout, "status", "--porcelain") == ""
    record(
        "edit-unknown-patch",
        exit=unknown.exit_code,
        shown=first_error(unknown.stderr),
        roots=(tiny.root, tiny.checkout.parent),
    )
    git(tiny.checkout, "reset", "-q", "--hard", tiny.base)
    pristine = sg(tiny, "edit", "0001")
    assert pristine.exit_code == 2 and "sgpatch apply" in pristine.stderr
    assert git(tiny.checkout, "rev-parse", "HEAD") == tiny.base and not (tiny.checkout / ".git" / RECORD).exists()
    record(
        "edit-pristine",
        exit=pristine.exit_code,
        shown=first_error(pristine.stderr),
        roots=(tiny.root, tiny.checkout.parent),
    )


def _kill_at(t: Tiny, point: str, *args: str) -> None:
    marker = t.root.parent / f"paused-{point.replace(':', '-')}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
    env.update({PAUSE_ENV: point, PAUSE_FILE_ENV: str(marker)})
    argv = [*SGPATCH, *args, "--checkout", str(t.checkout), "--config", str(t.config)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"exited {proc.returncode} before {point}: {proc.communicate()[1]}")
        assert time.monotonic() < end, f"never reached {point}"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


KILLS = {  # point: (command killed, reliability case)
    "edit:recorded": ("edit", "edit-kill-recorded"),
    "apply:journal": ("edit", "edit-kill-entering"),
    "edit:taken": ("export", "edit-kill-taken"),
    "apply:tree": ("export", "edit-kill-carrying"),
    "edit:exported": ("export", "edit-kill-exported"),
    "edit:restored": ("abort", "edit-kill-abort"),
}


@pytest.mark.parametrize(("point", "command"), [(point, cmd) for point, (cmd, _) in KILLS.items()])
def test_a_killed_edit_is_recovered_by_abort(tiny: Tiny, point: str, command: str) -> None:
    before, head = project_bytes(tiny), git(tiny.checkout, "rev-parse", "HEAD")
    if command == "edit":
        _kill_at(tiny, point, "edit", P1)
    else:
        assert sg(tiny, "edit", P1).exit_code == 0
        replace(tiny.checkout / MOD1, "        return 1\n", "        return 100\n")
        if command == "export":
            _kill_at(tiny, point, "export")
        else:
            _kill_at(tiny, point, "edit", "--abort")
    assert (tiny.checkout / ".git" / RECORD).exists()
    aborted = sg(tiny, "edit", "--abort")
    assert aborted.exit_code == 0, aborted.stderr
    assert project_bytes(tiny) == before
    assert git(tiny.checkout, "rev-parse", "HEAD") == head
    assert git(tiny.checkout, "status", "--porcelain") == ""
    assert sg(tiny, "verify").exit_code == 0
    said = aborted.stdout.splitlines()[0]
    record(
        KILLS[point][1],
        exit=aborted.exit_code,
        shown=f"next `sgpatch edit --abort`: exit 0: {said}",
        roots=(tiny.root, tiny.checkout.parent),
    )


def test_an_abort_killed_before_restoring_is_finished_only_by_abort(tiny: Tiny) -> None:
    """``edit --abort`` killed once it recorded ``aborting``: the phase restores the project, so ``--continue``
    refuses naming ``--abort``, every other command names it too, and the next ``--abort`` puts everything back."""
    before, head = project_bytes(tiny), git(tiny.checkout, "rev-parse", "HEAD")
    assert sg(tiny, "edit", P1).exit_code == 0
    replace(tiny.checkout / MOD1, "        return 1\n", "        return 100\n")
    _kill_at(tiny, "edit:aborting", "edit", "--abort")
    refused = sg(tiny, "edit", "--continue")
    assert refused.exit_code == 2 and "an abort of this edit was interrupted" in refused.stderr
    assert "run 'sgpatch edit --abort'" in refused.stderr
    owner = f"'sgpatch edit --abort --checkout {tiny.checkout}' finishes what a killed 'sgpatch edit --abort' left"
    verified = sg(tiny, "verify")
    assert verified.exit_code == 1 and owner in verified.stderr, verified.stderr
    aborted = sg(tiny, "edit", "--abort")
    assert aborted.exit_code == 0, aborted.stderr
    assert project_bytes(tiny) == before
    assert git(tiny.checkout, "rev-parse", "HEAD") == head
    assert git(tiny.checkout, "status", "--porcelain") == ""
    assert not (tiny.checkout / ".git" / RECORD).exists()
    record(
        "edit-kill-aborting",
        exit=aborted.exit_code,
        shown=f"`edit --continue`: {first_error(refused.stderr)}; next `sgpatch edit --abort`: exit 0",
        roots=(tiny.root, tiny.checkout.parent),
    )


def test_a_killed_write_back_is_finished_by_continue(tiny: Tiny) -> None:
    assert sg(tiny, "edit", P1).exit_code == 0
    replace(tiny.checkout / MOD1, "        return 1\n", "        return 100\n")
    _kill_at(tiny, "edit:taken", "export")
    done = sg(tiny, "edit", "--continue")
    assert done.exit_code == 0, done.stderr
    assert b"+        return 100\n" in (tiny.series / P1).read_bytes()
    assert not (tiny.checkout / ".git" / RECORD).exists()
    assert sg(tiny, "verify").exit_code == 0
    said = done.stdout.splitlines()[0]
    record(
        "edit-kill-continue",
        exit=done.exit_code,
        shown=f"next `sgpatch edit --continue`: exit 0: {said}",
        roots=(tiny.root, tiny.checkout.parent),
    )


def test_edit_on_the_real_checkout(patched_checkout: Callable[[], Path], tmp_path: Path) -> None:
    """On the 0.5.9 checkout: edit 0001 (the Kimi delegation), write it back; the later patches keep their bytes."""
    proj = copy_project(tmp_path / "proj", {})
    config, co = proj / "VERSIONS.toml", patched_checkout()
    series = proj / "patches/0.5.9"
    p1, *later = (series / n for n in sorted(os.listdir(series)) if n.endswith(".patch"))
    assert len(later) == 2  # 0002 and 0003
    old_later = [p.read_bytes() for p in later]
    args = ("--checkout", str(co), "--config", str(config))
    assert run_cli("edit", "0.5.9-cu130", "0001", *args).exit_code == 0
    kimi = co / "python/sglang/srt/models/kimi_k25.py"
    old = "    def get_embed_and_head(self) -> Tuple[torch.Tensor, torch.Tensor]:\n"
    replace(kimi, old, old.replace(":\n", ":  # for EAGLE-3\n"))
    written = run_cli("export", *args, "--json")
    assert written.exit_code == 0, written.stderr
    assert json.loads(written.stdout)["last_update_bumped"] == [p1.name]
    assert b"Tuple[torch.Tensor, torch.Tensor]:  # for EAGLE-3\n" in p1.read_bytes()
    assert [p.read_bytes() for p in later] == old_later
    verify = run_cli("verify", *args, "--json")
    assert verify.exit_code == 0, json_out(verify)["failures"]
    assert (REPO / "patches/0.5.9").is_dir()
