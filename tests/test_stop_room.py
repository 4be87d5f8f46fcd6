"""The stop for a person (``sgpatch/checkout/stop/``) against hostile records, kills and other commands, as whole
``sgpatch`` processes on the tiny project (its checkout at the default place, so every command finds it).

Each class of issue 28's stop records has a test here: a record that is not a plain file, one nested deeply,
one that lies, a way out that loops, two commands at once, what a kill leaves behind, an abort that would undo
others' work; and issue 27's "one truth for a stack": every command knows a stop is there."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sgpatch.checkout.stop.markers import marker_lines
from sgpatch.config import load_config
from sgpatch.lock import PAUSE_ENV, PAUSE_FILE_ENV

from .helpers import git
from .reliability import CASES, first_error, record
from .smallrepo import Tiny, make_tiny, versions_toml

SGPATCH = [sys.executable, "-m", "sgpatch.cli"]
P1, P2 = "0001-change-1.patch", "0002-change-2.patch"
MOD1, MOD2 = "python/pkg/mod1.py", "python/pkg/mod2.py"
ADDED_1B = "    def added_1b(self):\n        return 1\n\n"
ADDED_2 = "    def added_2(self):\n        return 2\n\n"
HANG = 30  # seconds: a command that takes longer than this on the tiny project is hanging


def sg(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")} | env
    full.pop("CI", None)
    return subprocess.run([*SGPATCH, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=HANG)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    t = make_tiny(tmp_path_factory.mktemp("stoproom"))
    home = t.root / ".sgpatch" / "checkouts" / "tiny"
    home.parent.mkdir(parents=True)
    shutil.move(t.checkout, home)
    t = Tiny(t.root, home, t.base)
    applied = sg(t.root, "apply")
    assert applied.returncode == 0, applied.stderr
    return t


@pytest.fixture
def tiny(template: Tiny, tmp_path: Path) -> Tiny:
    root = tmp_path / "proj"
    shutil.copytree(template.root, root, symlinks=True)
    return Tiny(root, root / ".sgpatch" / "checkouts" / "tiny", template.base)


def tree(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``root`` (links not followed): its kind and, for a file, its bytes."""
    found: dict[str, tuple[str, bytes]] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path).encode())
            elif path.is_file():
                found[rel] = ("file", path.read_bytes())
            elif path.is_dir():
                found[rel] = ("dir", b"")
            else:
                found[rel] = ("other", b"")
    return found


def project(t: Tiny) -> dict[str, bytes]:
    """The project's own files (VERSIONS.toml, patches/), byte for byte."""
    return {k: v[1] for k, v in tree(t.root).items() if not k.startswith(".sgpatch") and v[0] == "file"}


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def kill_at(t: Tiny, point: str, *args: str) -> None:
    marker = t.root.parent / f"paused-{point.replace(':', '-')}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
    env.update({PAUSE_ENV: point, PAUSE_FILE_ENV: str(marker)})
    proc = subprocess.Popen([*SGPATCH, *args], cwd=t.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < end, f"never reached {point}"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.fixture
def paused(tiny: Tiny) -> Iterator[tuple[Tiny, subprocess.Popen[bytes]]]:
    """``sgpatch edit 0001`` paused while it holds the project's lock (after recording the edit)."""
    marker = tiny.root.parent / "paused"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
    env.update({PAUSE_ENV: "edit:recorded", PAUSE_FILE_ENV: str(marker)})
    proc = subprocess.Popen([*SGPATCH, "edit", P1], cwd=tiny.root, env=env, stderr=subprocess.PIPE)
    end = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < end
        time.sleep(0.01)
    yield tiny, proc
    marker.unlink(missing_ok=True)
    proc.wait(timeout=60)


# --------------------------------------------------------------------------- a record that is not a plain file

RECORDS = {"edit": "sgpatch-edit.json", "port": "sgpatch-port.json", "apply": "sgpatch-apply.json"}
PLANTS = ("fifo", "link-dev-zero", "dangling-link", "directory")
COMMANDS = {  # the command, and its exit code with each record there
    "verify": (("verify",), {"edit": 1, "port": 1, "apply": 2}),
    "apply": (("apply",), {"edit": 2, "port": 2, "apply": 2}),
    "export": (("export",), {"edit": 2, "port": 2, "apply": 2}),
    "edit": (("edit", "0001"), {"edit": 2, "port": 2, "apply": 2}),
    "edit --continue": (("edit", "--continue"), {"edit": 2, "port": 2, "apply": 2}),
    "port --continue": (("port", "--continue", "--checkout", "CO"), {"edit": 2, "port": 2, "apply": 2}),
    "port --to": (("port", "--to", "0.0.2"), {"edit": 2, "port": 2}),  # with a journal it would ask the index
}


def plant(t: Tiny, which: str, kind: str) -> Path:
    path = t.checkout / ".git" / RECORDS[which]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling-link":
        path.symlink_to(t.root.parent / "nowhere")
    else:
        path.mkdir()
        (path / "x").write_text("{}")
    return path


@pytest.mark.parametrize("which", list(RECORDS))
@pytest.mark.parametrize("kind", PLANTS)
def test_a_record_that_is_not_a_plain_file_is_refused_never_waited_on(tiny: Tiny, which: str, kind: str) -> None:
    path = plant(tiny, which, kind)
    before, co = project(tiny), git(tiny.checkout, "rev-parse", "HEAD")
    for name, (args, codes) in COMMANDS.items():
        if which not in codes:
            continue
        argv = [tiny.checkout.as_posix() if a == "CO" else a for a in args]
        done = sg(tiny.root, *argv)  # a hang is subprocess.TimeoutExpired: a failure
        assert done.returncode == codes[which], (name, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and len(first_error(done.stderr)) < 600
        assert os.path.lexists(path), name  # the record is left for the person (or --abort) to deal with
        assert project(tiny) == before and git(tiny.checkout, "rev-parse", "HEAD") == co
    if which == "port" and kind == "fifo":
        case = "stop-record-fifo"
        shown = sg(tiny.root, "port", "--continue", "--checkout", str(tiny.checkout))
        assert CASES[case].expect in shown.stderr
        record(case, exit=shown.returncode, shown=first_error(shown.stderr), roots=(tiny.root,))


def test_a_record_nested_deeply_is_bad_input_naming_the_file(tiny: Tiny) -> None:
    before = project(tiny)
    co = str(tiny.checkout)
    expect = {  # (record, command): what is said (exit 2 each time)
        ("edit", "export"): "unreadable edit record: its JSON is nested deeper than",
        ("edit", "edit --continue"): "unreadable edit record: its JSON is nested deeper than",
        ("edit", "edit --abort"): None,  # the way out: exit 0 (tested below)
        ("edit", "port --continue"): "no port in progress",
        ("port", "export"): "a port is stopped here",
        ("port", "edit --continue"): "no edit in progress",
        ("port", "port --continue"): "unreadable port record: its JSON is nested deeper than",
    }
    commands = {
        "export": ("export",),
        "edit --continue": ("edit", "--continue"),
        "port --continue": ("port", "--continue", "--checkout", co),
    }
    for which in ("edit", "port"):
        path = tiny.checkout / ".git" / RECORDS[which]
        for name, args in commands.items():
            path.write_text("[" * 200_000)
            done = sg(tiny.root, *args)
            assert done.returncode == 2 and "Traceback" not in done.stderr, (which, name, done.stderr)
            said = expect[(which, name)]
            assert said is not None and said in done.stderr, (which, name, done.stderr)
            if "nested" in said:
                assert f"{path}: unreadable {which} record" in done.stderr
                shown = done
        path.unlink()
    assert project(tiny) == before
    record("stop-record-deep", exit=shown.returncode, shown=first_error(shown.stderr), roots=(tiny.root,))


# --------------------------------------------------------------------------- a record that lies


def test_an_edit_record_that_lies_removes_nothing(tiny: Tiny) -> None:
    before = project(tiny)
    assert sg(tiny.root, "edit", P1).returncode == 0
    path = tiny.checkout / ".git" / RECORDS["edit"]
    doc = json.loads(path.read_text())
    doc["saved"] = dict.fromkeys(doc["saved"])  # "nothing existed": an abort that trusted it would delete all
    path.write_text(json.dumps(doc))
    aborted = sg(tiny.root, "edit", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert "did not exist when the edit started" in aborted.stdout and "removed the record" in aborted.stdout
    assert project(tiny) == before and not os.path.lexists(path)
    record("stop-record-lies-edit", exit=aborted.returncode, shown=aborted.stdout.splitlines()[-1], roots=(tiny.root,))
    # A record naming a file outside the stack's series is refused the same way.
    assert sg(tiny.root, "edit", "--abort").returncode == 2  # nothing in progress now


def test_a_port_record_that_lies_never_removes_a_directory(tiny: Tiny) -> None:
    victim = tiny.root.parent / "victim"
    shutil.copytree(tiny.checkout, victim, symlinks=True)
    (victim / "precious.txt").write_text("mine\n")
    path = victim / ".git" / RECORDS["port"]
    shapes = [
        {"schema_version": 1, "phase": "stopped"},
        {"schema_version": 1, "phase": "stopped", "stack": "x", "version": "1", "conflict": "p", "from": "y"},
    ]
    for shape in shapes:
        path.write_text(json.dumps(shape))
        before = tree(victim)
        aborted = sg(tiny.root, "port", "--abort", "--checkout", str(victim))
        assert aborted.returncode == 0, aborted.stderr
        assert "removed the record and left" in aborted.stdout
        after = tree(victim)
        del before[".git/" + RECORDS["port"]]
        assert {k: v for k, v in after.items() if not k.startswith(".git/sgpatch")} == {
            k: v for k, v in before.items() if not k.startswith(".git/sgpatch")
        }
        assert (victim / "precious.txt").read_text() == "mine\n"
    record("stop-record-lies-port", exit=0, shown=aborted.stdout.splitlines()[0], roots=(tiny.root.parent,))


# --------------------------------------------------------------------------- a way out that loops

HINT = re.compile(r"'(sgpatch [^']+)'")


@pytest.mark.parametrize("which", ["edit", "port"])
@pytest.mark.parametrize("content", ["fifo", "deep", "garbage", "wrong-shape", "lie", "dir"])
def test_every_refusal_hint_works(tiny: Tiny, which: str, content: str) -> None:
    """Each refusal's hint is run as written; then the command that refused goes on."""
    path = tiny.checkout / ".git" / RECORDS[which]
    if content == "fifo":
        os.mkfifo(path)
    elif content == "deep":
        path.write_text("{" * 100_000)
    elif content == "garbage":
        path.write_bytes(b"\xff\xfe not json")
    elif content == "wrong-shape":
        path.write_text("[1, 2, 3]")
    elif content == "lie":
        path.write_text(json.dumps({"schema_version": 1, "phase": "stopped", "series": {"a": 1}}))
    else:
        path.mkdir()
    before = project(tiny)
    refused = sg(tiny.root, "verify")
    assert refused.returncode in (1, 2), refused.stderr
    hints = [ln for ln in refused.stderr.splitlines() if ln.startswith("hint:")]
    assert hints, refused.stderr
    ways = HINT.findall(hints[0])
    abort = next(w for w in ways if "--abort" in w)
    out = sg(tiny.root, *shlex.split(abort)[1:])
    if content == "dir":  # sgpatch made no directory there: it says how to remove it, and that works too
        assert out.returncode == 2 and "rm -r" in out.stderr, out.stderr
        shutil.rmtree(path)
    else:
        assert out.returncode == 0, (abort, out.stderr)
    assert not os.path.lexists(path)
    assert sg(tiny.root, "verify").returncode == 0
    assert project(tiny) == before
    if (which, content) == ("port", "garbage"):
        record("stop-hint-works", exit=out.returncode, shown=f"`{abort}`: {out.stdout.splitlines()[0]}")


# --------------------------------------------------------------------------- two commands at once


def test_a_second_command_on_the_project_waits_then_refuses_with_one_line(
    paused: tuple[Tiny, subprocess.Popen[bytes]],
) -> None:
    t, _ = paused
    before = project(t)
    for args in (("edit", "--abort"), ("export",), ("port", "--to", "0.0.2"), ("edit", P2)):
        second = sg(t.root, *args, SGPATCH_LOCK_TIMEOUT="0.5")
        assert second.returncode == 3, (args, second.stderr)
        assert f"project {t.root} is in use by sgpatch pid" in second.stderr and "Traceback" not in second.stderr
    assert project(t) == before
    record("stop-two-at-once", exit=3, shown=first_error(second.stderr), roots=(t.root,))


# --------------------------------------------------------------------------- what a kill leaves behind


def test_what_a_killed_port_left_is_cleaned_up_by_the_next_and_said(tiny: Tiny) -> None:
    """A killed first port's staging directory, and a --force port killed between its two renames."""
    checkouts = tiny.checkout.parent
    staging = checkouts / ".port-tiny-0.0.2-abc123" / "checkout"
    staging.mkdir(parents=True)
    (staging / "big").write_bytes(b"x" * 2_000_000)
    mine = checkouts / ".port-tiny-0.0.2-abc123.user"  # a file of the user's with a like name: left alone
    mine.write_text("keep\n")
    target = checkouts / "tiny-0.0.2"
    aside = checkouts / ".tiny-0.0.2.sgpatch-replaced"
    aside.mkdir()
    (aside / "file").write_text("the replaced checkout\n")
    out = sg(tiny.root, "port", "--abort", "--checkout", str(target))
    assert out.returncode == 0, out.stderr
    assert f"removed {staging.parent}, left by a port that was killed (2 MB)" in out.stdout
    assert f"put back {target}, which a killed 'port --force' or 'port --abort' had moved aside" in out.stdout
    assert not staging.parent.exists() and not aside.exists() and mine.read_text() == "keep\n"
    assert (target / "file").read_text() == "the replaced checkout\n"
    record("stop-kill-leftovers", exit=out.returncode, shown=out.stdout.splitlines()[0], roots=(tiny.root,))


# --------------------------------------------------------------------------- an abort that undoes others' work


def _add_stack(t: Tiny, name: str) -> None:
    """Append a stack as a port would (its own series directory)."""
    block = versions_toml(t.base).split("\n\n", 1)[1]
    block = block.replace("[stacks.tiny", f"[stacks.{name}").replace('"patches/tiny"', f'"patches/{name}"')
    with (t.root / "VERSIONS.toml").open("a") as fh:
        fh.write("\n" + block)


def test_edit_abort_keeps_a_stack_added_meanwhile(tiny: Tiny) -> None:
    before = project(tiny)
    assert sg(tiny.root, "edit", P1).returncode == 0
    _add_stack(tiny, "other")  # a port (say) added a stack while the edit waited
    added = (tiny.root / "VERSIONS.toml").read_bytes()
    aborted = sg(tiny.root, "edit", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert (tiny.root / "VERSIONS.toml").read_bytes() == added
    assert {k: v for k, v in project(tiny).items() if k != "VERSIONS.toml"} == {
        k: v for k, v in before.items() if k != "VERSIONS.toml"
    }

    # Killed after writing the series back: the abort puts back the series and only the edit's pins.
    assert sg(tiny.root, "edit", P1).returncode == 0
    replace(tiny.checkout / MOD1, "        return 1\n", "        return 100\n")
    kill_at(tiny, "edit:exported", "export")
    written = load_config(tiny.root / "VERSIONS.toml").stack("tiny").files
    assert written  # export pinned the files the series touches
    _add_stack(tiny, "third")
    aborted = sg(tiny.root, "edit", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    config = load_config(tiny.root / "VERSIONS.toml")
    assert set(config.stacks) == {"tiny", "other", "third"} and config.stack("tiny").files == ()
    assert {k: v for k, v in project(tiny).items() if k != "VERSIONS.toml"} == {
        k: v for k, v in before.items() if k != "VERSIONS.toml"
    }
    assert sg(tiny.root, "verify").returncode == 0
    record("stop-abort-others-work", exit=0, shown=aborted.stdout.splitlines()[0], roots=(tiny.root,))


# --------------------------------------------------------------------------- one truth for a stack (issue 27)


def test_every_command_knows_an_edit_is_stopped(tiny: Tiny) -> None:
    assert sg(tiny.root, "edit", P1).returncode == 0
    replace(tiny.checkout / MOD2, "    def method_3(self, x):\n", f"{ADDED_1B}    def method_3(self, x):\n")
    stopped = sg(tiny.root, "export")
    assert stopped.returncode == 1 and "STOPPED" in stopped.stdout
    before = project(tiny)
    said = "an edit is stopped here"
    for args, code in ((("verify",), 1), (("apply",), 2), (("build",), 2), (("port", "--to", "0.0.2"), 2)):
        done = sg(tiny.root, *args)
        assert done.returncode == code and said in done.stderr, (args, done.stderr)
        assert "'sgpatch edit --continue --checkout" in done.stderr
    status = sg(tiny.root, "status")
    assert status.returncode in (0, 1) and f"tiny: stopped: {said}" in status.stdout, status.stdout
    assert project(tiny) == before
    verify = sg(tiny.root, "verify")
    record("stop-known-everywhere", exit=verify.returncode, shown=first_error(verify.stderr), roots=(tiny.root,))


def test_markers_are_complete_triples() -> None:
    assert marker_lines(b"Title\n=======\n\ntext\n") == []  # an RST underline is text
    assert marker_lines(b"<<<<<<< a\nx\n") == []
    conflict = b"<<<<<<< a\nx\n||||||| b\ny\n=======\nz\n>>>>>>> c\n"
    assert marker_lines(b"Title\n=======\n" + conflict) == [3, 5, 7, 9]


def test_a_resolution_with_an_rst_underline_continues(tiny: Tiny) -> None:
    assert sg(tiny.root, "edit", P1).returncode == 0
    replace(tiny.checkout / MOD2, "    def method_3(self, x):\n", f"{ADDED_1B}    def method_3(self, x):\n")
    assert sg(tiny.root, "export").returncode == 1
    text = (tiny.checkout / MOD2).read_text()
    lines = text.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("<<<<<<<"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith(">>>>>>>"))
    underline = '    """Added.\n\n    Notes\n    =======\n    """\n'
    resolved = "".join(lines[:start]) + ADDED_1B + ADDED_2.replace("return 2\n", f"{underline}        return 2\n")
    (tiny.checkout / MOD2).write_text(resolved + "".join(lines[end + 1 :]))
    done = sg(tiny.root, "edit", "--continue")
    assert done.returncode == 0, done.stderr
    assert b"+    =======\n" in (tiny.series / P2).read_bytes()
    assert sg(tiny.root, "verify").returncode == 0
    record("stop-rst-underline", exit=0, shown=done.stdout.splitlines()[0], roots=(tiny.root,))


def test_edit_continue_runs_apply_checks(tiny: Tiny) -> None:
    """A resolution that defines a method twice: --continue stops with apply's finding, nothing written."""
    assert sg(tiny.root, "edit", P1).returncode == 0
    replace(tiny.checkout / MOD2, "    def method_3(self, x):\n", f"{ADDED_1B}    def method_3(self, x):\n")
    assert sg(tiny.root, "export").returncode == 1
    before = project(tiny)
    text = (tiny.checkout / MOD2).read_text()
    lines = text.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("<<<<<<<"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith(">>>>>>>"))
    twice = ADDED_1B + ADDED_2 + ADDED_2.replace("return 2", "return 22")
    (tiny.checkout / MOD2).write_text("".join(lines[:start]) + twice + "".join(lines[end + 1 :]))
    done = sg(tiny.root, "edit", "--continue")
    assert done.returncode == 1, done.stderr
    assert "would define python/pkg/mod2.py: added_2 in class Model2 twice" in done.stderr, done.stderr
    assert project(tiny) == before
    assert json.loads((tiny.checkout / ".git" / RECORDS["edit"]).read_text())["phase"] == "stopped"
    record("stop-continue-apply-checks", exit=1, shown=first_error(done.stderr), roots=(tiny.root,))
    # The hint works: fixed where it was left, --continue writes the series back.
    fixed = (tiny.checkout / MOD2).read_text().replace(ADDED_2.replace("return 2", "return 22"), "", 1)
    (tiny.checkout / MOD2).write_text(fixed)
    assert sg(tiny.root, "edit", "--continue").returncode == 0
    assert sg(tiny.root, "verify").returncode == 0
