"""Hosts that answer without end or against themselves, and numbers from outside (issue 28).

Each case runs the whole ``sgpatch`` process (``python -m sgpatch``) against real targets: the test sshd
(tests/sshd.py) whose "interpreter" is a hostile script, or fake interpreters (tests/fakeprobe.py) that
answer the probe's protocol with one answer spoiled, checked as a fleet of ``ansible_connection=local``
hosts.  Each asserts the exit code, the host's row and that nothing was written.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .fakeprobe import make_fake_python
from .helpers import REPO
from .reliability import CASES, record
from .sshd import Sshd

CONFIG = str(REPO / "VERSIONS.toml")
MEMORY_CAP = 3 << 30  # bytes of address space the sgpatch process may use: an unbounded read dies under it


def sgpatch(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """The whole CLI as a user runs it, its address space capped (a MemoryError would be exit 4)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    return subprocess.run(
        [sys.executable, "-m", "sgpatch", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=cap,
    )


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --------------------------------------------------------------------------- a host that never ends its line

ENDLESS = {
    # case id: (the host's "interpreter", a shell script run over ssh in place of python; what its row says)
    "host-endless-answer": ("printf 'sgpatch-probe-answer {'; exec cat /dev/zero", "an answer line longer than"),
    "host-endless-noline": ("exec cat /dev/zero", "bytes of other output before its answer"),
    "host-endless-noise": ("exec yes 'Welcome to the serving host'", "bytes of other output before its answer"),
    "host-endless-stderr": (
        "head -c 67108864 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'python3: the last word' >&2; exit 1",
        "the last word",
    ),
}


@pytest.mark.slow
def test_a_host_that_never_ends_its_line_is_an_error_not_a_memory_error(sshd: Sshd, tmp_path: Path) -> None:
    aliases = {case_id: {} for case_id in ENDLESS}
    config = sshd.config_for("endless_config", aliases)
    lines = []
    for case_id, (script, _) in ENDLESS.items():
        exe = tmp_path / case_id
        exe.write_text(f"#!/bin/sh\n{script}\n")
        exe.chmod(0o755)
        lines.append(f"{case_id} ansible_python_interpreter={exe}\n")
    inventory = tmp_path / "hosts"
    inventory.write_text("".join(lines))
    before = listing(tmp_path)
    started = time.monotonic()
    result = sgpatch(
        "verify", "--config", CONFIG, "--hosts", str(inventory), "--timeout", "60", "--json",
        cwd=tmp_path, env={"SGPATCH_SSH_CONFIG": str(config)},
    )  # fmt: skip
    elapsed = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10
    assert result.returncode == 3, result.stderr[-2000:]
    doc = json.loads(result.stdout)
    rows = {h["host"]: h for h in doc["hosts"]}
    for case_id, (_, expect) in ENDLESS.items():
        row = rows[case_id]
        assert row["status"] == "error" and expect in row["detail"], row
        assert CASES[case_id].expect in row["detail"]
        assert len(row["detail"]) < 1000
        record(case_id, exit=result.returncode, shown=f"{case_id}: error: {row['detail']}", roots=(tmp_path,))
    assert listing(tmp_path) == before and "Traceback" not in result.stderr
    assert elapsed < 60  # cut at the bound, not at the deadline
    print(f"4 endless hosts: {elapsed:.1f}s, peak RSS of any child {peak} MiB")


# --------------------------------------------------------------------------- an answer that contradicts itself

CONTRADICTIONS: dict[str, dict[str, Any]] = {
    # case id: the fields of sglang's answer replaced (tests/fakeprobe.py's op "sglang")
    "answer-root-null-files-read": {"package_root": None},
    "answer-no-dist-info-yet-record": {"dist_info": None},
    "answer-record-absent-yet-rows": {
        "record": {"present": False, "paths": ["sglang/__init__.py"], "modified": [], "missing": [], "unhashed": 0}
    },
    "answer-record-stray-row": {
        "record": {"present": True, "paths": ["sglang/__init__.py"], "modified": [], "missing": ["x.py"], "unhashed": 0}
    },
    "answer-other-name": {"name": "torch"},
    "answer-read-not-listed": {"tree": ["sglang/__init__.py"]},
    "answer-dist-left-out": {"drop": True},
    "answer-tree-left-out": {"tree": None},
    "answer-record-left-out": {"record": None},
}


def test_an_answer_that_contradicts_itself_is_an_error_never_ok(installed_root: Path, tmp_path: Path) -> None:
    """Each host's interpreter answers as sgpatch's probe would for the patched tree, but for one field."""
    lines = []
    clean = make_fake_python(tmp_path / "clean", root=installed_root)
    lines.append(f"clean ansible_connection=local ansible_python_interpreter={clean}\n")
    for case_id, fields in CONTRADICTIONS.items():
        mutation: dict[str, Any] = {"answer": 0, "op": "sglang", "value": fields}
        if fields.get("drop"):
            mutation = {"answer": 0, "op": "sglang", "value": {}, "drop": True}
        fake = make_fake_python(tmp_path / case_id, mutation, root=installed_root)
        lines.append(f"{case_id} ansible_connection=local ansible_python_interpreter={fake}\n")
    inventory = tmp_path / "hosts"
    inventory.write_text("".join(lines))
    before = listing(tmp_path)
    result = sgpatch("verify", "--config", CONFIG, "--hosts", str(inventory), "--json", cwd=tmp_path)
    assert result.returncode == 3, result.stderr[-2000:]
    rows = {h["host"]: h for h in json.loads(result.stdout)["hosts"]}
    assert rows.pop("clean")["status"] == "ok"  # the same answer, unspoiled, is ok: the check can pass
    for case_id, row in rows.items():
        assert row["status"] == "error", (case_id, row)
        assert "malformed answer" in row["detail"] and CASES[case_id].expect in row["detail"], (case_id, row)
        record(case_id, exit=result.returncode, shown=f"{case_id}: error: {row['detail']}", roots=(tmp_path,))
    # one host alone (verify --python): the same line, exit 3, never "verify: ok"
    alone = sgpatch(
        "verify", "--config", CONFIG, "--installed", "--python", str(tmp_path / "answer-root-null-files-read"),
        cwd=tmp_path,
    )  # fmt: skip
    assert alone.returncode == 3 and "package_root" in alone.stderr and "ok" not in alone.stdout, alone.stderr
    assert listing(tmp_path) == before


# --------------------------------------------------------------------------- numbers from outside

NUMBERS = {
    # case id: (inventory file name, its text, what the one line says); each refused before any host is asked
    "fleet-range-explodes": ("hosts", "a[0:99]b[0:99]c[0:99]d[0:99]\n", "more than 10000 hosts"),
    "fleet-range-huge-bound": ("hosts", "gpu[1:" + "9" * 5000 + "]\n", "a range bound of more than 9 digits"),
    "fleet-port-superscript": ("hosts", "h ansible_port=\u00b2\n", "not a port number"),
    "fleet-port-arabic-digits": ("hosts", "h:\u0663\u0663\n", "not a port number"),
    "fleet-yaml-port-huge": (
        "hosts.yml",
        "all:\n  hosts:\n    a:\n      ansible_port: " + "9" * 5000 + "\n",
        "not a port",
    ),
}
TIMEOUTS = ("1e10", "inf", "nan", "-1", "86401")


def test_numbers_from_outside_are_refused_before_anything_uses_them(tmp_path: Path) -> None:
    """Ranges counted before they expand, ports ASCII digits in range, timeouts finite and at most a day:
    one line, exit 2, no host asked (no ssh configured: an asked host would be unreachable, exit 3)."""
    for case_id, (name, text, expect) in NUMBERS.items():
        inventory = tmp_path / name
        inventory.write_text(text)
        result = sgpatch("verify", "--config", CONFIG, "--hosts", str(inventory), cwd=tmp_path, timeout=60)
        assert result.returncode == 2, (case_id, result.stderr[-500:])
        assert expect in result.stderr and CASES[case_id].expect in result.stderr, (case_id, result.stderr)
        assert result.stderr.startswith(f"sgpatch: error: {inventory}:") and result.stdout == ""
        record(case_id, exit=result.returncode, shown=result.stderr.splitlines()[0], roots=(tmp_path,))
        inventory.unlink()
    (tmp_path / "hosts").write_text("a\nb\n")
    for value in TIMEOUTS:
        result = sgpatch(
            "verify", "--config", CONFIG, "--hosts", str(tmp_path / "hosts"), "--timeout", value, cwd=tmp_path
        )
        assert result.returncode == 2 and "at most 86400" in result.stderr, (value, result.stderr)
        assert result.stdout == ""
    record("fleet-timeout-infinite", exit=2, shown=result.stderr.splitlines()[0])
    for span in ("deepseek_v2.py:\u00b2", "deepseek_v2.py:1-\u0663"):  # digits to str.isdigit, not to int()
        shown = sgpatch("show", "--config", CONFIG, span, cwd=tmp_path)
        assert shown.returncode == 2 and "cannot read" in shown.stderr and "internal error" not in shown.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts"]
