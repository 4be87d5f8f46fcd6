"""The stop room's typed records, its one recovery after a kill, and hashing the bytes that are used.

A record is read once into a frozen dataclass (``PortRecord``, ``EditRecord``) and written back equal; a record
in the exact form the previous sgpatch wrote is read the same way.  A kill while an edit moves its checkout is
finished by the room's recovery (the step edit registered), said so, and leaves the same bytes as an
uninterrupted run.  A wheel's member digests are kept under the digest of the bytes read, never of a second
read of its path; a cached wheel is read once, through no link and no FIFO.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sgpatch.cache import Cache, key
from sgpatch.checkout.stop.kinds import EDIT, PORT, Conflict, EditRecord, PortRecord, RecordError
from sgpatch.checkout.stop.record import load, write
from sgpatch.checkout.stop.recovery import Steps
from sgpatch.checkout.writeback import STEPS as EDIT_STEPS
from sgpatch.lock import PAUSE_ENV, PAUSE_FILE_ENV
from sgpatch.port.stop import STEPS as PORT_STEPS
from sgpatch.results import SCHEMA_VERSION
from sgpatch.series.hunks import FileVerdict, HunkVerdict
from sgpatch.series.obsolete import Finding
from sgpatch.series.verdict import ConflictHunk, PortedPatch
from sgpatch.source.archive import open_archive
from sgpatch.wheel.cache import cached_wheel, store_wheel
from sgpatch.wheel.check import _kept_or_read

from .helpers import git
from .reliability import record
from .smallrepo import Tiny, make_tiny

SGPATCH = [sys.executable, "-m", "sgpatch.cli"]
P1, P2 = "0001-change-1.patch", "0002-change-2.patch"
MOD1, MOD2 = "python/pkg/mod1.py", "python/pkg/mod2.py"
ADDED_1B = "    def added_1b(self):\n        return 1\n\n"
OID = "a" * 40


def sg(t: Tiny, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")} | (env or {})
    full.pop("CI", None)
    argv = [*SGPATCH, *args, "--checkout", str(t.checkout), "--config", str(t.config)]
    return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    t = make_tiny(tmp_path_factory.mktemp("stoptyped"))
    applied = sg(t, "apply")
    assert applied.returncode == 0, applied.stderr
    return t


@pytest.fixture
def tiny(template: Tiny, tmp_path: Path) -> Tiny:
    root = tmp_path / "t"
    shutil.copytree(template.root.parent, root, symlinks=True)
    return Tiny(root / template.root.relative_to(template.root.parent), root / "checkout", template.base)


def edit_file(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def series_bytes(t: Tiny) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(t.series.iterdir())}


# --------------------------------------------------------------------------- typed records


def test_an_edit_record_is_typed_and_round_trips(tiny: Tiny) -> None:
    git_dir = tiny.checkout / ".git"
    assert sg(tiny, "edit", P1).returncode == 0
    editing = load(git_dir, EditRecord, tiny.checkout)
    assert isinstance(editing, EditRecord) and editing.phase == "editing" and editing.patch == P1
    assert [s.path for s in editing.saved][-1] == "VERSIONS.toml" and all(s.blob for s in editing.saved[:2])
    on_disk = (git_dir / "sgpatch-edit.json").read_bytes()
    write(git_dir, editing)
    assert load(git_dir, EditRecord, tiny.checkout) == editing  # write -> read: an equal object
    assert (git_dir / "sgpatch-edit.json").read_bytes() == on_disk  # and the very bytes sgpatch wrote

    # Stopped at patch 2's conflict: the conflicts are typed too, and round-trip.
    edit_file(tiny.checkout / MOD2, "    def method_3(self, x):\n", f"{ADDED_1B}    def method_3(self, x):\n")
    assert sg(tiny, "export").returncode == 1
    stopped = load(git_dir, EditRecord, tiny.checkout)
    assert stopped is not None and stopped.phase == "stopped" and stopped.conflict_index == 1
    assert stopped.conflicts and isinstance(stopped.conflicts[0], Conflict) and stopped.conflicts[0].path == MOD2
    write(git_dir, stopped)
    assert load(git_dir, EditRecord, tiny.checkout) == stopped


def test_an_edit_record_of_the_previous_version_is_read_and_continued(tiny: Tiny) -> None:
    """The previous sgpatch wrote no ``restore`` key until an abort: its record is read, the edit goes on."""
    git_dir = tiny.checkout / ".git"
    assert sg(tiny, "edit", P1).returncode == 0
    now = load(git_dir, EditRecord, tiny.checkout)
    doc = json.loads((git_dir / "sgpatch-edit.json").read_text())
    previous = {k: v for k, v in doc.items() if k != "restore"}  # exactly the keys main's `edit` wrote
    assert set(previous) == {"phase", "stack", "patch", "index", "base", "head", "commits", "series", "saved"} | {
        "schema_version"
    }
    (git_dir / "sgpatch-edit.json").write_text(json.dumps(previous, indent=1) + "\n")
    assert load(git_dir, EditRecord, tiny.checkout) == now
    edit_file(tiny.checkout / MOD1, "        return 1\n", "        return 100\n")
    done = sg(tiny, "edit", "--continue")
    assert done.returncode == 0, done.stderr
    assert b"+        return 100\n" in (tiny.series / P1).read_bytes()
    assert not (git_dir / "sgpatch-edit.json").exists() and sg(tiny, "verify").returncode == 0
    record(
        "stop-record-previous-version",
        exit=done.returncode,
        shown=done.stdout.splitlines()[0],
        roots=(tiny.root, tiny.checkout),
    )


def _ported(name: str, state: str) -> PortedPatch:
    hunk = HunkVerdict(index=1, header="@@ -1,3 +1,4 @@ def f():", state=state, detail="d", offset=2)
    files = (FileVerdict(path="python/a.py", state=state, hunks=(hunk,), regions=((3, 9),), renamed="b.py"),)
    conflicts = (ConflictHunk(path="python/a.py", failure="hunk 1 does not apply", regions=((3, 9),)),)
    evidence = (Finding(path="python/a.py", claim="defines f", holds=True, line=4, detail=""),)
    return PortedPatch(
        name=name, state=state, detail="x", proof="", files=files, conflicts=conflicts, evidence=evidence
    )


def port_doc() -> dict[str, Any]:
    """A port record exactly as the previous sgpatch wrote it (no ``moved`` until the move was done)."""
    return {
        "from": "tiny",
        "stack": "tiny-0.0.2",
        "version": "0.0.2",
        "source": "pypi",
        "commit": None,
        "base": OID,
        "pypi_commit": OID,
        "artifacts": [{"kind": "sdist", "filename": "tiny-0.0.2.tar.gz", "sha256": "0" * 64}],
        "series": {P1: "0" * 64, P2: "1" * 64},
        "kept": [P1],
        "conflict": P2,
        "decided": [_ported(P1, "applies").record()],
        "conflicted": _ported(P2, "conflict").record(),
        "strict": False,
        "force": True,
        "existed_empty": False,
        "replaced": "/somewhere/.tiny-0.0.2.sgpatch-replaced",
        "phase": "stopped",
        "head": OID,
        "tip": "b" * 40,
        "stop": "c" * 40,
        "rejects": ["python/gone.py.rej"],
        "schema_version": SCHEMA_VERSION,
    }


def test_a_port_record_is_typed_and_round_trips(tmp_path: Path) -> None:
    (tmp_path / "sgpatch-port.json").write_text(json.dumps(port_doc()))
    found = load(tmp_path, PortRecord, tmp_path)
    assert isinstance(found, PortRecord) and found.old_stack == "tiny" and found.force and not found.moved
    assert found.decided == (_ported(P1, "applies"),) and found.conflicted == _ported(P2, "conflict")
    assert found.artifacts[0].filename == "tiny-0.0.2.tar.gz" and found.rejects == ("python/gone.py.rej",)
    write(tmp_path, found)
    assert load(tmp_path, PortRecord, tmp_path) == found
    assert json.loads((tmp_path / "sgpatch-port.json").read_text()) == {**port_doc(), "moved": False}

    finishing = {**port_doc(), "phase": "finishing", "final": "d" * 40, "config_before": "e" * 64}
    (tmp_path / "sgpatch-port.json").write_text(json.dumps({**finishing, "outputs": {"VERSIONS.toml": OID}}))
    done = load(tmp_path, PortRecord, tmp_path)
    assert done is not None and done.outputs == {"VERSIONS.toml": OID} and done.final == "d" * 40
    write(tmp_path, done)
    assert load(tmp_path, PortRecord, tmp_path) == done


@pytest.mark.parametrize(
    ("key", "value"),
    [("decided", [{"name": 1}]), ("conflicted", {"files": "x"}), ("moved", "yes"), ("tip", "HEAD"), ("kept", ["z"])],
)
def test_a_port_record_field_that_lies_is_refused_naming_it(tmp_path: Path, key: str, value: object) -> None:
    (tmp_path / "sgpatch-port.json").write_text(json.dumps({**port_doc(), key: value}))
    with pytest.raises(RecordError) as refused:
        load(tmp_path, PortRecord, tmp_path)
    assert str(tmp_path / "sgpatch-port.json") in refused.value.message and refused.value.exit_code == 2
    assert "sgpatch port --abort --checkout" in str(refused.value.hint)


# --------------------------------------------------------------------------- one recovery after a kill


def _kill_at(t: Tiny, point: str, *args: str) -> None:
    marker = t.root.parent / f"paused-{point.replace(':', '-')}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
    env.update({PAUSE_ENV: point, PAUSE_FILE_ENV: str(marker)})
    argv = [*SGPATCH, *args, "--checkout", str(t.checkout), "--config", str(t.config)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < end, f"never reached {point}"
        time.sleep(0.01)
    proc.kill()
    proc.wait()


FINISHED = "finished the edit's write-back move, which a killed 'sgpatch edit' had left half done"


def test_a_killed_edit_move_is_finished_by_the_rooms_recovery_and_said(tiny: Tiny, tmp_path: Path) -> None:
    """Killed after taking the person's work, before moving the checkout: the next command finishes the move
    through the room's one recovery (the step edit registered), says so, and writes what an uninterrupted
    write-back writes, byte for byte."""
    calm = Tiny(tmp_path / "calm" / tiny.root.name, tmp_path / "calm" / "checkout", tiny.base)
    shutil.copytree(tiny.root.parent, calm.root.parent, symlinks=True)
    for t in (tiny, calm):
        assert sg(t, "edit", P1).returncode == 0
        edit_file(t.checkout / MOD1, "        return 1\n", "        return 100\n")
    assert sg(calm, "export").returncode == 0
    _kill_at(tiny, "edit:taken", "export")
    left = load(tiny.checkout / ".git", EditRecord, tiny.checkout)
    assert left is not None and left.phase == "moving" and not left.moved  # what the kill left
    done = sg(tiny, "edit", "--continue", "--json")
    assert done.returncode == 0, done.stderr
    assert FINISHED in json.loads(done.stdout)["notes"]
    assert series_bytes(tiny) == series_bytes(calm) and (tiny.config).read_bytes() == calm.config.read_bytes()
    assert git(tiny.checkout, "rev-parse", "HEAD") == git(calm.checkout, "rev-parse", "HEAD")
    assert not (tiny.checkout / ".git/sgpatch-edit.json").exists() and sg(tiny, "verify").returncode == 0
    record(
        "stop-kill-one-recovery",
        exit=done.returncode,
        shown=f"next `sgpatch edit --continue`: exit 0: {FINISHED}",
        roots=(tiny.root, tiny.checkout),
    )


def test_a_killed_edit_start_is_finished_by_the_rooms_recovery_then_goes_on(tiny: Tiny) -> None:
    """``edit 0001`` killed after recording the edit, before moving the checkout into the patch: the next
    ``--continue`` finishes the move (the step edit registered), says so, and reports the edit ready (the
    person never saw it start); the person's change then writes back as in any edit."""
    head = git(tiny.checkout, "rev-parse", "HEAD")
    _kill_at(tiny, "edit:recorded", "edit", P1)
    left = load(tiny.checkout / ".git", EditRecord, tiny.checkout)
    assert left is not None and left.phase == "entering" and git(tiny.checkout, "rev-parse", "HEAD") == head
    ready = sg(tiny, "edit", "--continue", "--json")
    assert ready.returncode == 0, ready.stderr
    doc = json.loads(ready.stdout)
    said = "finished the edit's move into its patch, which a killed 'sgpatch edit' had left half done"
    assert doc["action"] == "started" and said in doc["notes"]
    assert git(tiny.checkout, "rev-parse", "HEAD") == left.commits[0]
    edit_file(tiny.checkout / MOD1, "        return 1\n", "        return 100\n")
    done = sg(tiny, "edit", "--continue")
    assert done.returncode == 0, done.stderr
    assert b"+        return 100\n" in (tiny.series / P1).read_bytes() and sg(tiny, "verify").returncode == 0


def test_a_killed_edit_move_to_a_stop_is_finished_and_reported_stopped(tiny: Tiny) -> None:
    """Killed on the way to a later patch's conflict: the next ``--continue`` finishes the move (the room's
    recovery) and reports the stop, exit 1, the markers in place; nothing of the project written."""
    before = series_bytes(tiny)
    assert sg(tiny, "edit", P1).returncode == 0
    edit_file(tiny.checkout / MOD2, "    def method_3(self, x):\n", f"{ADDED_1B}    def method_3(self, x):\n")
    _kill_at(tiny, "edit:taken", "edit", "--continue")
    stopped = sg(tiny, "edit", "--continue")
    assert stopped.returncode == 1, stopped.stderr
    assert FINISHED in stopped.stdout and f"STOPPED: {P2} conflicts with your edit of {P1}" in stopped.stdout
    found = load(tiny.checkout / ".git", EditRecord, tiny.checkout)
    assert found is not None and found.phase == "stopped" and found.moved
    assert "<<<<<<< the series with your edit" in (tiny.checkout / MOD2).read_text()
    assert series_bytes(tiny) == before


# --------------------------------------------------------------------------- hash the bytes you use


def _wheel(path: Path, text: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", text)
        z.writestr("pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    return path


def test_wheel_digests_are_kept_under_the_bytes_read_not_a_second_read(tmp_path: Path) -> None:
    """The wheel is swapped for another right after it is opened: what is kept, and under which key, is the
    first wheel's, the one the archive reads; the second is a miss of its own."""
    cache = Cache(tmp_path / "cache")
    cache.root.mkdir()
    first, second = _wheel(tmp_path / "a.whl", "A = 1\n"), _wheel(tmp_path / "b.whl", "B = 2\n")
    path = tmp_path / "pkg-1.0-py3-none-any.whl"
    shutil.copyfile(first, path)
    with open_archive(path, "wheel", digest=True) as archive:
        os.replace(second, path)  # the swap, between the open and the use
        members, _ = _kept_or_read(archive, cache)
    digest_a = hashlib.sha256(first.read_bytes()).hexdigest()
    assert archive.sha256 == digest_a
    assert members["pkg/__init__.py"][0] == hashlib.sha256(b"A = 1\n").digest()
    assert cache.get("wheel-digests", key("wheel-digests", digest_a)) is not None
    with open_archive(path, "wheel", digest=True) as archive:
        now, _ = _kept_or_read(archive, cache)
    assert now["pkg/__init__.py"][0] == hashlib.sha256(b"B = 2\n").digest()


def test_a_cached_wheel_is_read_once_and_never_through_a_fifo_or_link(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl", "A = 1\n")
    entry = tmp_path / "entry"
    store_wheel(entry, wheel, checked=hashlib.sha256(wheel.read_bytes()).hexdigest())
    data = cached_wheel(entry, wheel.name)
    assert data == wheel.read_bytes()
    assert hashlib.sha256(data).hexdigest() == (entry / "sha256").read_text().strip()
    other = tmp_path / "other"
    store_wheel(other, wheel, checked="0" * 64)  # changed since its checks: not kept
    assert not other.exists()
    (entry / wheel.name).unlink()
    os.mkfifo(entry / wheel.name)
    assert cached_wheel(entry, wheel.name) is None  # refused at once, never waited on
    os.unlink(entry / wheel.name)
    (entry / wheel.name).symlink_to(wheel)
    assert cached_wheel(entry, wheel.name) is None


def test_every_phase_of_each_kind_is_accounted_for_once() -> None:
    """Each phase a record may be in waits for a person, is finished from the record by a step its command
    registered with the one recovery, or is owned by the one command that writes the project in it; a
    registration that leaves a phase out (or claims one another command owns) is refused."""
    for kind, steps in ((PORT, PORT_STEPS), (EDIT, EDIT_STEPS)):
        owned = {phase for phase, _ in kind.owned}
        waits, finished = set(kind.waits), set(steps.finish)
        assert waits | owned | finished == set(kind.phases)
        assert not (waits & owned or waits & finished or owned & finished)
    assert PORT.owner("finishing") == "port --continue" and EDIT.owner("aborting") == "edit --abort"
    with pytest.raises(ValueError, match="not its phases"):
        Steps(record=PortRecord, finish={}, doing={})
    with pytest.raises(ValueError, match="not its phases"):
        Steps(record=EditRecord, finish={**EDIT_STEPS.finish, "aborting": EDIT_STEPS.finish["moving"]}, doing={})
