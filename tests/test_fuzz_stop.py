"""Fuzzing the stop records (issue 28): random JSON, shapes, sizes and file types as ``.git/sgpatch-edit.json``,
``sgpatch-port.json`` and ``sgpatch-apply.json``, then one of the commands that read them, as a whole process.

Never exit 4, never a traceback, never a hang; nothing outside the project written or removed (the tree around
it, where the planted links point, snapshotted before and after); the checkout never removed (it is not a
port's).  ``SGPATCH_FUZZ_SCALE=N`` multiplies the budget, as in test_fuzz.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from .reliability import record
from .smallrepo import Tiny, make_tiny
from .test_fuzz import fuzz_settings

SGPATCH = [sys.executable, "-m", "sgpatch.cli"]
RECORDS = ("sgpatch-edit.json", "sgpatch-port.json", "sgpatch-apply.json")
OID = "a" * 40
PORT_SHAPE: dict[str, Any] = {
    "schema_version": 1,
    "phase": "stopped",
    "from": "tiny",
    "stack": "tiny-0.0.2",
    "version": "0.0.2",
    "source": "pypi",
    "commit": None,
    "base": OID,
    "pypi_commit": OID,
    "head": OID,
    "tip": OID,
    "stop": OID,
    "artifacts": [{"kind": "sdist", "filename": "tiny-0.0.2.tar.gz", "sha256": "0" * 64}],
    "series": {"0001-change-1.patch": "0" * 64},
    "kept": [],
    "conflict": "0001-change-1.patch",
    "decided": [],
    "conflicted": {"name": "0001-change-1.patch", "state": "conflict", "detail": "x"},
    "rejects": [],
    "strict": False,
    "force": False,
    "existed_empty": False,
    "replaced": None,
}
COMMANDS = (
    ("verify",),
    ("apply",),
    ("export",),
    ("status",),
    ("edit", "--continue"),
    ("edit", "--abort"),
    ("port", "--continue", "--checkout", "CO"),
    ("port", "--abort", "--checkout", "CO"),
)
seen: Counter[int] = Counter()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def contents(draw: st.DrawFn, real: dict[str, Any]) -> tuple[str, bytes]:
    """What goes at the record's name: a kind of file and its bytes."""
    how = draw(st.sampled_from(["json", "mutated-edit", "mutated-port", "bytes", "deep", "big", "fifo", "link", "dir"]))
    if how == "json":
        return "file", json.dumps(draw(json_values)).encode()
    if how in ("mutated-edit", "mutated-port"):
        doc = dict(real if how == "mutated-edit" else PORT_SHAPE)
        for _ in range(draw(st.integers(1, 3))):
            key = draw(st.sampled_from([*doc, "extra"]))
            if draw(st.booleans()):
                doc[key] = draw(json_values)
            else:
                doc.pop(key, None)
        return "file", json.dumps(doc).encode()
    if how == "bytes":
        return "file", draw(st.binary(max_size=200))
    if how == "deep":
        return "file", draw(st.sampled_from([b"[", b'{"a":'])) * draw(st.integers(30, 120_000))
    if how == "big":
        return "file", b'{"schema_version": 1, "phase": "stopped", "x": "' + b"y" * (1 << 20) + b'"}'
    return how, draw(st.sampled_from([b"/dev/zero", b"outside/victim.json", b"nowhere"]))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tiny, dict[str, Any]]:
    """The tiny project with its checkout at the default place, an edit of 0001 started (its real record)."""
    t = make_tiny(tmp_path_factory.mktemp("fuzzstop"))
    home = t.root / ".sgpatch" / "checkouts" / "tiny"
    home.parent.mkdir(parents=True)
    shutil.move(t.checkout, home)
    t = Tiny(t.root, home, t.base)
    real: dict[str, Any] = {}
    for args in (("apply",), ("edit", "0001"), ("edit", "--abort")):
        if args == ("edit", "--abort"):  # the record of a real edit, its objects kept; the checkout back
            real = json.loads((home / ".git" / RECORDS[0]).read_text())
        done = subprocess.run([*SGPATCH, *args], cwd=t.root, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    return t, real


def around(top: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``top`` but the project: kind and bytes (links not followed)."""
    found = {}
    for dirpath, dirs, files in os.walk(top):
        if Path(dirpath) == top and "proj" in dirs:
            dirs.remove("proj")
        for name in dirs + files:
            path = Path(dirpath, name)
            kind = "link" if path.is_symlink() else "file" if path.is_file() else "dir" if path.is_dir() else "other"
            data = os.readlink(path).encode() if kind == "link" else path.read_bytes() if kind == "file" else b""
            found[str(path.relative_to(top))] = (kind, data)
    return found


def test_fuzz_stop_records(template: tuple[Tiny, dict[str, Any]]) -> None:
    t, real = template

    @fuzz_settings(30)
    @given(which=st.sampled_from(RECORDS), content=contents(real), command=st.sampled_from(COMMANDS))
    def run(which: str, content: tuple[str, bytes], command: tuple[str, ...]) -> None:
        with tempfile.TemporaryDirectory(prefix="fuzzstop-") as tmp:
            top = Path(tmp)
            shutil.copytree(t.root, top / "proj", symlinks=True)
            (top / "outside").mkdir()
            (top / "outside" / "victim.json").write_text(json.dumps({**PORT_SHAPE, "replaced": str(top / "outside")}))
            co = top / "proj" / ".sgpatch" / "checkouts" / "tiny"
            path = co / ".git" / which
            kind, data = content
            if kind == "file":
                path.write_bytes(data)
            elif kind == "fifo":
                os.mkfifo(path)
            elif kind == "link":
                path.symlink_to(data.decode() if data.startswith(b"/") else top / data.decode())
            else:
                path.mkdir()
            before = around(top)
            argv = [str(co) if a == "CO" else a for a in command]
            env = {k: v for k, v in os.environ.items() if not k.startswith("SGPATCH_TEST_")}
            done = subprocess.run(
                [*SGPATCH, *argv], cwd=top / "proj", env=env, capture_output=True, text=True, timeout=60
            )
            seen[done.returncode] += 1
            assert done.returncode in (0, 1, 2, 3), (which, kind, command, done.stderr[-2000:])
            assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr[-2000:]
            assert around(top) == before, (which, kind, command)
            assert (co / ".git").is_dir() and (co / "python/pkg/mod0.py").is_file()

    run()
    assert seen[2] > 0  # the bad records were refused, not only read past
    record("stop-fuzz-records", exit=None, shown=f"exit codes seen: {dict(sorted(seen.items()))}")
