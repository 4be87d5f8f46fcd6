"""Hostile input is refused with exit 2 and nothing is written outside the test's temp dir (issue 7).

Each case runs the real CLI (in-process) against a small real repository or a
fetch target, and checks: the exit code and message, that the checkout is
byte-for-byte unchanged (HEAD, index, status, files, refs), that no checkout or
staging directory appeared, and that the directory the input aims at (outside
the checkout) is exactly as it was.  The parse-level checks of the same inputs
live in test_patchset.py, test_config.py and test_fetch.py.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import io
import json
import os
import resource
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from sgpatch.config import load_config
from sgpatch.deployed.answer import imported_failure
from sgpatch.errors import SgpatchError
from sgpatch.project import load_project
from sgpatch.source.archive import ArchiveError, check_member_name
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.source.tree import DirTree, LinkInPath
from sgpatch.wheel.provenance import wheel_version

from .fakeprobe import make_fake_python
from .helpers import REPO, copy_project, run_cli, snapshot
from .port_fixtures import SDIST_0510
from .reliability import CASES, HOSTILE, first_error, record
from .smallrepo import HEADER, STACK, Tiny, add_traps, git, make_tiny, versions_toml
from .zipcraft import deflate_offset, patch_member, zeros_bomb, zip_bytes


@dataclass(frozen=True)
class Hostile:
    """The tiny project with traps: a tracked symlink out, a tracked symlink file, an ignored symlink out."""

    tiny: Tiny
    outside: Path  # what the traps point at; must stay exactly as it is


@pytest.fixture(scope="module")
def hostile_template(tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    where = tmp_path_factory.mktemp("hostile")
    outside = where / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text("do not touch\n")
    tiny = add_traps(make_tiny(where), outside)
    return Hostile(tiny, outside)


def _tree_state(path: Path) -> dict[str, bytes | str]:
    state: dict[str, bytes | str] = {}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        state[rel] = f"-> {p.readlink()}" if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return state


def _new_file(path: str, *, mode: str = "100644") -> bytes:
    return (
        HEADER.format(desc="hostile").encode()
        + f"diff --git a/{path} b/{path}\nnew file mode {mode}\nindex 0000000..1111111\n--- /dev/null\n"
        f"+++ b/{path}\n@@ -0,0 +1 @@\n+pwned\n".encode()
    )


def _edit_file(path: str) -> bytes:
    return (
        HEADER.format(desc="hostile").encode()
        + f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1,2 @@\n x\n+pwned\n".encode()
    )


# Each patch case: the third patch of the series, and the paths it aims at that must not appear.
PATCHES: dict[str, Callable[[Path], bytes]] = {
    "patch-dotdot": lambda out: _new_file("../outside/pwned.py"),
    "patch-absolute": lambda out: _new_file(f"/{out}/pwned.py"),
    "patch-dotgit": lambda out: _edit_file(".git/config"),
    "patch-dotgit-case": lambda out: _new_file(".GIT/hooks/post-checkout"),
    "patch-gitattributes": lambda out: _new_file(".gitattributes"),
    "patch-creates-symlink": lambda out: _new_file("python/pkg/evil.py", mode="120000"),
    "patch-through-tracked-symlink": lambda out: _new_file("python/link/pwned.py"),
    "patch-through-untracked-symlink": lambda out: _new_file("build/pwned.py"),
    "patch-onto-symlink": lambda out: _edit_file("python/pkg/alias.py"),
    "patch-over-ignored-file": lambda out: _new_file("python/pkg/build"),
    "patch-nul-in-path": lambda out: _new_file("python/pkg/a\x00b.py"),
    "patch-cr-in-path": lambda out: _new_file("python/pkg/a\rb.py"),
    "patch-control-in-path": lambda out: _new_file("python/pkg/a\x01b.py"),
}


def _check_refused(case_id: str, result: Any, roots: tuple[Path, ...]) -> None:
    case = CASES[case_id]
    assert result.exit_code == case.exit, result.stderr
    assert case.expect in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    # The one line is safe to print: hostile names are shown escaped, never as raw control bytes.
    assert not any(ord(c) < 32 and c not in "\n\t" for c in result.stderr), repr(result.stderr)
    record(case_id, exit=result.exit_code, shown=first_error(result.stderr), roots=roots)


@pytest.mark.parametrize("case_id", list(PATCHES))
def test_hostile_patch_is_refused(case_id: str, hostile_template: Hostile, tmp_path: Path) -> None:
    tiny = hostile_template.tiny.copy(tmp_path)
    outside = hostile_template.outside
    (tiny.series / "0003-hostile.patch").write_bytes(PATCHES[case_id](outside))
    (tiny.series / "series").write_text((tiny.series / "series").read_text() + "0003-hostile.patch\n")
    before, around = snapshot(tiny.checkout), _tree_state(outside)
    result = run_cli("apply", "--checkout", str(tiny.checkout), "--config", str(tiny.config))
    _check_refused(case_id, result, (tmp_path, outside.parent))
    assert snapshot(tiny.checkout) == before
    assert (tiny.checkout / "python/pkg/build").read_text() == "the user's ignored file\n"
    assert _tree_state(outside) == around
    assert not (tmp_path / "outside").exists()


SERIES: dict[str, str] = {
    "series-outside": "../evil.patch",
    "series-symlink": "0003-evil.patch",
    "series-option": "--upload-pack=touch pwned",
}


@pytest.mark.parametrize("case_id", list(SERIES))
def test_hostile_series_entry_is_refused(case_id: str, hostile_template: Hostile, tmp_path: Path) -> None:
    tiny = hostile_template.tiny.copy(tmp_path)
    evil = tmp_path / "evil.patch"
    evil.write_bytes(_new_file("python/pkg/evil.py"))
    (tmp_path / "proj/patches/evil.patch").write_bytes(evil.read_bytes())
    (tiny.series / "0003-evil.patch").symlink_to(evil)
    (tiny.series / "series").write_text((tiny.series / "series").read_text() + SERIES[case_id] + "\n")
    before = snapshot(tiny.checkout)
    result = run_cli("apply", "--checkout", str(tiny.checkout), "--config", str(tiny.config))
    _check_refused(case_id, result, (tmp_path,))
    assert snapshot(tiny.checkout) == before
    assert not (tiny.checkout / "python/pkg/evil.py").exists()


CONFIGS: dict[str, tuple[str, str]] = {
    "config-series-dotdot": (f'series = "patches/{STACK}"', 'series = "../outside"'),
    "config-series-absolute": (f'series = "patches/{STACK}"', 'series = "/etc"'),
    "config-series-symlink": (f'series = "patches/{STACK}"', 'series = "patches/linked"'),
    "config-artifact-path": ('filename = "tiny-0.0.1.tar.gz"', 'filename = "../../evil.tar.gz"'),
    "config-git-url-ext": ('default = "git"', 'default = "git"\ngit_url = "ext::sh -c touch% pwned"'),
    "config-tag-option": ('tag = "v0.0.1"', 'tag = "--upload-pack=touch pwned"'),
    "config-files-nul": (
        'local_label = "cu130"',
        'local_label = "cu130"\nfiles = { "python/a\\u0000b.py" = { pristine = "%s" } }' % ("0" * 40),
    ),
}


@pytest.mark.parametrize("case_id", list(CONFIGS))
def test_hostile_versions_toml_is_refused(
    case_id: str, hostile_template: Hostile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = hostile_template.tiny.copy(tmp_path)
    (tiny.root / "patches/linked").symlink_to(hostile_template.outside)
    old, new = CONFIGS[case_id]
    text = tiny.config.read_text()
    assert old in text
    tiny.config.write_text(text.replace(old, new))
    into = tmp_path / "co"
    monkeypatch.chdir(tmp_path)
    args = ["fetch", "--source", "git", "--into", str(into), "--config", str(tiny.config)]
    if case_id in ("config-tag-option", "config-files-nul"):
        args += ["--url", str(tiny.checkout)]
    around = _tree_state(hostile_template.outside)
    result = run_cli(*args)
    _check_refused(case_id, result, (tmp_path,))
    assert not into.exists() and not (tmp_path / "pwned").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".co")] == []
    assert _tree_state(hostile_template.outside) == around


URLS = {
    cid: CASES[cid].fault.split("--url '", 1)[1].rsplit("'", 1)[0]
    for cid in CASES
    if cid.startswith("url-") and CASES[cid].area == HOSTILE
}


@pytest.mark.parametrize("case_id", list(URLS))
def test_hostile_git_url_is_refused(
    case_id: str, hostile_template: Hostile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    into = tmp_path / "co"
    result = run_cli(
        "fetch",
        "--source",
        "git",
        "--url",
        URLS[case_id],
        "--into",
        str(into),
        "--config",
        str(hostile_template.tiny.config),
    )
    _check_refused(case_id, result, (tmp_path,))
    assert not into.exists() and not (tmp_path / "pwned").exists() and not Path("/tmp/pwned").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_local_path_and_allowed_urls_still_clone(hostile_template: Hostile, tmp_path: Path) -> None:
    """The URL check lets through what it should: a local path (relative to the cwd) and file://."""
    tiny = hostile_template.tiny.copy(tmp_path / "t")
    for n, url in enumerate((str(tiny.checkout), f"file://{tiny.checkout}")):
        into = tmp_path / f"co{n}"
        result = run_cli("fetch", "--source", "git", "--url", url, "--into", str(into), "--config", str(tiny.config))
        assert result.exit_code == 0, result.stderr
        assert git(into, "rev-parse", "HEAD").decode().strip() == tiny.base


# --------------------------------------------------------------------------- hostile artifacts


def _sdist(members: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tar.addfile(info, io.BytesIO(m[1]))
    return buf.getvalue()


def _tarinfo(name: str, kind: bytes, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def _sdist_huge_member() -> bytes:
    """An sdist whose second member's header claims 3 GiB (the data is not even there)."""
    ok = tarfile.TarInfo(OK[0])
    ok.size = len(OK[1])
    huge = tarfile.TarInfo(f"{TOP}/sglang/zeros.bin")
    huge.size = 3 << 30
    padded = OK[1] + b"\0" * (-len(OK[1]) % tarfile.BLOCKSIZE)
    return gzip.compress(ok.tobuf(format=tarfile.GNU_FORMAT) + padded + huge.tobuf(format=tarfile.GNU_FORMAT))


def _sdist_pax_header() -> bytes:
    """An sdist whose member carries an 8 MiB pax header (tarfile would read it whole)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(OK[0])
        info.size = len(OK[1])
        info.pax_headers = {"comment": "x" * (8 << 20)}
        tar.addfile(info, io.BytesIO(OK[1]))
    return buf.getvalue()


def _wheel(members: list[zipfile.ZipInfo | tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name on purpose
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("sglang/__init__.py", "x = 1\n")
            for m in members:
                if isinstance(m, zipfile.ZipInfo):
                    zf.writestr(m, "/etc")
                else:
                    zf.writestr(m[0], m[1])
    return buf.getvalue()


def _symlink_zipinfo(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (0o120777 << 16) | 0x20
    info.create_system = 3
    return info


TOP = "sglang-0.5.9"
OK = (f"{TOP}/sglang/__init__.py", b"x = 1\n")
ARCHIVES: dict[str, Callable[[Path], tuple[str, bytes]]] = {
    "sdist-traversal": lambda out: ("sdist", _sdist([OK, (f"{TOP}/../../pwned.py", b"pwned\n")])),
    "sdist-absolute": lambda out: ("sdist", _sdist([OK, (f"{out}/pwned.py", b"pwned\n")])),
    "sdist-symlink": lambda out: ("sdist", _sdist([OK, _tarinfo(f"{TOP}/sglang/out", tarfile.SYMTYPE, str(out))])),
    "sdist-hardlink": lambda out: ("sdist", _sdist([OK, _tarinfo(f"{TOP}/sglang/pw", tarfile.LNKTYPE, "/etc/passwd")])),
    "sdist-fifo": lambda out: ("sdist", _sdist([OK, _tarinfo(f"{TOP}/sglang/fifo", tarfile.FIFOTYPE)])),
    "sdist-two-tops": lambda out: ("sdist", _sdist([OK, ("other/pwned.py", b"pwned\n")])),
    "sdist-dotgit": lambda out: ("sdist", _sdist([OK, (f"{TOP}/.git/hooks/post-checkout", b"#!/bin/sh\n")])),
    "sdist-clash": lambda out: ("sdist", _sdist([OK, (f"{TOP}/sglang/x", b"1\n"), (f"{TOP}/sglang/x/y.py", b"2\n")])),
    "wheel-traversal": lambda out: ("wheel", _wheel([("../../pwned.py", b"pwned\n")])),
    "wheel-absolute": lambda out: ("wheel", _wheel([(f"{out}/pwned.py", b"pwned\n")])),
    "wheel-backslash": lambda out: ("wheel", _wheel([("..\\pwned.py", b"pwned\n")])),
    "wheel-symlink": lambda out: ("wheel", _wheel([_symlink_zipinfo("sglang/out")])),
    "wheel-duplicate": lambda out: ("wheel", _wheel([("sglang/a.py", b"1\n"), ("sglang/a.py", b"2\n")])),
    "archive-sdist-huge-member": lambda out: ("sdist", _sdist_huge_member()),
    "archive-sdist-pax-header": lambda out: ("sdist", _sdist_pax_header()),
    "archive-wheel-method-99": lambda out: ("wheel", patch_member(_wheel([]), "sglang/__init__.py", method=99)),
}


@pytest.mark.parametrize("case_id", list(ARCHIVES))
def test_hostile_artifact_is_refused(case_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    kind, data = ARCHIVES[case_id](outside)
    filename = "sglang-0.5.9.tar.gz" if kind == "sdist" else "sglang-0.5.9-py3-none-any.whl"
    sha = hashlib.sha256(data).hexdigest()
    cache = tmp_path / "cache"
    entry = cache / "sgpatch/artifacts" / sha
    entry.mkdir(parents=True)
    (entry / filename).write_bytes(data)  # pinned and cached: only the member checks stand in the way
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    proj = tmp_path / "proj"
    proj.mkdir()
    text = versions_toml("a" * 40).replace('default = "git"', 'default = "pypi"')
    text = text.replace(f'sdist = {{ filename = "tiny-0.0.1.tar.gz", sha256 = "{"0" * 64}" }}', "")
    (proj / "VERSIONS.toml").write_text(text + f'{kind} = {{ filename = "{filename}", sha256 = "{sha}" }}\n')
    into = tmp_path / "work" / "co"
    result = run_cli("fetch", "--into", str(into), "--config", str(proj / "VERSIONS.toml"))
    _check_refused(case_id, result, (tmp_path,))
    assert not into.exists()
    assert [p.name for p in into.parent.iterdir()] == []  # no staging directory, no lock file
    assert sorted(p.name for p in outside.iterdir()) == []
    assert not (tmp_path / "pwned.py").exists() and not (tmp_path.parent / "pwned.py").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "outside", "proj", "work"]
    shutil.rmtree(tmp_path / "work")


def test_nul_in_series_path_is_a_clean_error(hostile_template: Hostile, tmp_path: Path) -> None:
    tiny = hostile_template.tiny.copy(tmp_path)
    tiny.config.write_text(tiny.config.read_text().replace(f'series = "patches/{STACK}"', 'series = "a\\u0000b"'))
    result = run_cli("stacks", "--config", str(tiny.config))
    assert result.exit_code == 2, result.stderr


# --------------------------------------------------------------------------- the command line (issue 10)

PROJECT_CONFIG = Path(__file__).resolve().parent.parent / "VERSIONS.toml"


def test_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    """``sgpatch show ... | head -1``: a real pipe whose reader closes after one line."""
    checkout = tmp_path / "co"
    checkout.mkdir()
    (checkout / "big.py").write_text("".join(f"line {i}\n" for i in range(1, 100_001)))  # far beyond a pipe buffer
    tmp = tmp_path / "tmp"  # where a bug's traceback file would land
    tmp.mkdir()
    cmd = [sys.executable, "-m", "sgpatch", "show", "--config", str(PROJECT_CONFIG)]
    proc = subprocess.Popen(
        [*cmd, "--checkout", str(checkout), "big.py:1-100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as head does after its line
    stderr = proc.stderr.read()
    code = proc.wait(timeout=60)
    assert first == b"     1\tline 1\n"
    assert code == CASES["cli-broken-pipe"].exit == 141
    assert stderr == b""
    assert list(tmp.iterdir()) == []
    record("cli-broken-pipe", exit=code, shown=stderr.decode() or "(nothing on stderr)")


def test_ssh_hint_quotes_the_host(tmp_path: Path) -> None:
    """The hint is a command to paste: pasted into a real shell, it must run ssh and nothing else."""
    marker = tmp_path / "pwned"
    host = "a;touch${IFS}" + str(marker)
    result = run_cli("doctor", "--ssh", host, "--config", str(PROJECT_CONFIG))
    case = CASES["cli-ssh-hint-quoted"]
    assert result.exit_code == case.exit, result.stderr
    hint = next(line for line in result.stderr.splitlines() if line.startswith("hint:"))
    assert shlex.quote(host) in hint and case.expect in hint
    command = hint.split("run: ", 1)[1]
    subprocess.run(["sh", "-c", command], capture_output=True, timeout=60, check=False)
    assert not marker.exists()
    record("cli-ssh-hint-quoted", exit=result.exit_code, shown=first_error(result.stderr), roots=(tmp_path,))


@pytest.mark.parametrize(
    "args",
    [("verify", "--installed"), ("verify", "--ssh", "host"), ("doctor",), ("doctor", "--ssh", "host")],
    ids=lambda a: " ".join(a),
)
def test_empty_python_is_bad_input(args: tuple[str, ...]) -> None:
    cmd = " ".join(a.upper() if a == "host" else a for a in args)
    case_id = f"cli-python-empty-{cmd.replace(' ', '-').replace('--', '').lower()}"
    result = run_cli(*args, "--python", "", "--config", str(PROJECT_CONFIG))
    _check_refused(case_id, result, ())
    assert "--python ''" in result.stderr


def test_show_never_reads_through_a_symlinked_directory(hostile_template: Hostile, tmp_path: Path) -> None:
    tiny = hostile_template.tiny.copy(tmp_path)
    co = tiny.checkout
    before = snapshot(co)
    for case_id, where in [
        ("tree-show-through-symlinked-dir", "python/link/canary.txt:1-1"),
        ("tree-show-through-untracked-symlinked-dir", "build/canary.txt:1-1"),
    ]:
        result = run_cli("show", where, "--checkout", str(co), "--config", str(tiny.config))
        assert "do not touch" not in result.stdout
        _check_refused(case_id, result, (tmp_path, hostile_template.outside))
    assert snapshot(co) == before


def test_anchor_never_reads_through_a_symlinked_directory(hostile_template: Hostile, tmp_path: Path) -> None:
    tiny = hostile_template.tiny.copy(tmp_path)
    run_cli("apply", "--checkout", str(tiny.checkout), "--config", str(tiny.config))
    text = "do not touch\n"
    (tiny.series / "anchors.toml").write_text(
        "schema_version = 1\n\n[[anchor]]\n"
        'id = "outside"\nfile = "python/link/canary.txt"\nlines = [1, 1]\nphase = "both"\n'
        'why = "a file outside the checkout, through a symlinked directory"\n'
        f'first_line = "do not touch"\nsha256 = "{hashlib.sha256(text.encode()).hexdigest()}"\n'
    )
    result = run_cli("verify", "--checkout", str(tiny.checkout), "--config", str(tiny.config))
    assert "outside" not in result.stdout or " ok" not in result.stdout
    _check_refused("tree-anchor-through-symlinked-dir", result, (tmp_path, hostile_template.outside))


def test_dirtree_lists_nothing_through_a_symlinked_directory(hostile_template: Hostile) -> None:
    """The interface check lists and reads through DirTree: the same rule holds for list()."""
    tree = DirTree(hostile_template.tiny.checkout)
    with pytest.raises(LinkInPath):
        tree.list("python/link")
    assert "python/pkg/mod0.py" in tree.list("python")
    assert not any(p.startswith(("python/link/", "build/")) for p in tree.list(""))


# --------------------------------------------------------------------------- deployed targets: what the probe answers

PROBE_ANSWERS: dict[str, dict[str, Any]] = {
    "probe-not-json": {"op": "raw", "value": "sgpatch-probe-answer {not json"},
    "probe-missing-key": {"op": "del", "path": [0]},  # sorted keys: dists, imported, python
    "probe-wrong-type": {"op": "set", "path": [0, 0], "value": ["a", "list"]},
    "probe-bad-base64": {"op": "set", "path": [0, 6, 1, 0], "value": "not base64!"},  # dists.torch.files[...]
    "probe-bad-base64-unicode": {"op": "set", "path": [0, 6, 1, 0], "value": "\u00e9t\u00e9=="},  # not ASCII
    "probe-nul": {"op": "set", "path": [0, 0, 4], "value": "sgl\u0000ang"},  # the first dist's name
}


@pytest.mark.parametrize("case_id", list(PROBE_ANSWERS))
@pytest.mark.parametrize("command", [("doctor",), ("verify", "--installed")], ids=lambda c: c[0])
def test_malformed_probe_answer_is_an_environment_failure(
    case_id: str, command: tuple[str, ...], tmp_path: Path
) -> None:
    """A real process answers (``--python FAKE``); only its answer is wrong."""
    mutation = PROBE_ANSWERS[case_id]
    if case_id.startswith("probe-bad-base64") and command[0] == "verify":
        mutation = {**mutation, "path": [0, 0, 1, 0]}  # verify asks only sglang
    fake = make_fake_python(tmp_path / "python", mutation)
    result = run_cli(*command, "--python", str(fake), "--config", str(PROJECT_CONFIG))
    _check_refused(case_id, result, (tmp_path,))
    assert "malformed answer from the probe" in result.stderr
    assert len([ln for ln in result.stderr.splitlines() if ln.startswith("sgpatch: error:")]) == 1


def test_doctor_and_verify_agree_on_the_probes_imports(installed_root: Path, tmp_path: Path) -> None:
    """One verdict (``remote.imported_failure``): torch loaded in the probe's process fails both checks."""
    fake = make_fake_python(
        tmp_path / "python", {"answer": 0, "op": "set", "path": [1], "value": ["torch"]}, root=installed_root
    )
    line = imported_failure(("torch",))
    assert line is not None
    doctor = run_cli("doctor", "--python", str(fake), "--config", str(PROJECT_CONFIG), "--json")
    verify = run_cli("verify", "--installed", "--python", str(fake), "--config", str(PROJECT_CONFIG), "--json")
    assert doctor.exit_code == verify.exit_code == CASES["probe-imported"].exit, (doctor.stderr, verify.stderr)
    assert line in json.loads(doctor.stdout)["failures"][-1]
    assert json.loads(verify.stdout)["failures"] == [line]  # the patched tree passes every other check
    clean = make_fake_python(tmp_path / "clean", root=installed_root)
    again = run_cli("verify", "--installed", "--python", str(clean), "--config", str(PROJECT_CONFIG), "--json")
    assert again.exit_code == 0 and line not in again.stdout, again.stdout
    record("probe-imported", exit=verify.exit_code, shown=line, note="doctor and verify --installed: the same line")


# --------------------------------------------------------------------------- port: stacks it must not write

_PORT_BAD = {
    # case id: (VERSIONS.toml replacements, extra port arguments)
    "port-force-hand-written": ({'[stacks."0.5.9-cu128': '[stacks."0.5.10-cu130'}, ("--force",)),
    "port-pin-contradicts": ({'  "cuda-python>=13.0,<14",\n]': '  "cuda-python>=13.0,<14",\n  "openai==1.0",\n]'}, ()),
}


@pytest.mark.parametrize("case_id", sorted(_PORT_BAD))
def test_port_refuses_to_write_a_wrong_stack(case_id: str, tmp_path: Path) -> None:
    fetch_artifact(SDIST_0510, "0.5.10")
    replacements, extra = _PORT_BAD[case_id]
    proj = copy_project(tmp_path / "proj", replacements)
    before = _tree_state(proj)
    result = run_cli("port", "0.5.9-cu130", "--to", "0.5.10", "--config", str(proj / "VERSIONS.toml"), *extra)
    case = CASES[case_id]
    assert result.exit_code == case.exit, result.stderr
    shown = first_error(result.stderr)
    assert case.expect in shown
    assert _tree_state(proj) == before
    record(case_id, exit=result.exit_code, shown=shown, roots=(tmp_path,))


# --------------------------------------------------------------------------- a checkout's configuration (issue 10)

HOOKS = [
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
]
PROGRAMS = [cid for cid in CASES if cid.startswith("git-") and CASES[cid].area == HOSTILE]


def _plant_program(case_id: str, co: Path, marker: Path) -> None:
    """Make the checkout's configuration name a program that creates ``marker``."""
    touch = f"touch {marker}"
    config = co / ".git/config"
    attributes = co / ".git/info/attributes"

    def set_config(text: str, where: Path = config) -> None:
        with where.open("a") as fh:
            fh.write(text)

    if case_id == "git-hooks":
        hooks = co / ".git/hooks"
        hooks.mkdir(exist_ok=True)
        for name in HOOKS:
            (hooks / name).write_text(f"#!/bin/sh\n{touch}\n")
            (hooks / name).chmod(0o755)
    elif case_id == "git-fsmonitor":
        set_config(f"[core]\n\tfsmonitor = {touch}; false #\n")
    elif case_id in ("git-filter", "git-include"):
        driver = f'[filter "evil"]\n\tclean = {touch}; cat\n\tsmudge = {touch}; cat\n\tprocess = {touch}; false\n'
        if case_id == "git-include":
            included = marker.parent / "included.gitconfig"
            included.write_text(driver.replace("\tsmudge", "\t#").replace("\tprocess", "\t#"))
            set_config(f"[include]\n\tpath = {included}\n")
        else:
            set_config(driver)
        set_config("* filter=evil\n", attributes)
    elif case_id == "git-diff-external":
        set_config(f"[diff]\n\texternal = {touch}; true\n")
    elif case_id == "git-textconv":
        set_config(f'[diff "evil"]\n\ttextconv = {touch}; cat\n')
        set_config("* diff=evil\n", attributes)
    elif case_id == "git-ssh-command":
        set_config(f"[core]\n\tsshCommand = {touch}; false\n")
    else:  # pragma: no cover - a case without a plant
        raise AssertionError(case_id)


def _plain_git_runs_it(co: Path, marker: Path) -> None:
    """The control: plain git commands in the same checkout do run the planted program."""
    from sgpatch.git.repo import git_env

    touched = co / "python/sglang/version.py"
    data = touched.read_bytes()
    touched.unlink()
    touched.write_bytes(data + b"# edited\n")
    for args in (
        ["status"],
        ["diff"],
        ["hash-object", str(touched.relative_to(co))],
        ["update-ref", "refs/sgpatch-control", "HEAD"],
        ["ls-remote", "ssh://example.invalid/x"],
    ):
        subprocess.run(["git", *args], cwd=co, capture_output=True, env=git_env(), timeout=60, check=False)
    assert marker.exists(), "the planted program did not run even under plain git: the test proves nothing"


@pytest.mark.parametrize("case_id", PROGRAMS)
def test_checkout_config_runs_no_program(
    case_id: str, pristine_checkout: Callable[[], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """apply, verify, export, fetch, build and port on a checkout whose config names a program: it never runs."""
    co = pristine_checkout()
    marker = tmp_path / "MARKER"
    _plant_program(case_id, co, marker)
    proj = copy_project(tmp_path / "proj")
    cfg = str(proj / "VERSIONS.toml")
    monkeypatch.chdir(tmp_path)
    before = _digest(co)  # no git here: plain git would run the planted program
    neutralized = CASES[case_id].exit == 0
    # build and port on a pristine checkout stop early (build needs it patched, port a free --checkout
    # directory), after the git commands that read the checkout: the cheap path through both.
    commands = {
        "verify": (["verify", "--checkout", str(co), "--config", cfg], 0),
        "fetch": (["fetch", "--into", str(co), "--config", cfg], 0),
        "build": (["build", "--checkout", str(co), "--out", str(tmp_path / "dist"), "--config", cfg], 2),
        "port": (["port", "--to", "0.5.15", "--checkout", str(co), "--config", cfg], 2),
        "apply": (["apply", "--checkout", str(co), "--config", cfg], 0),
        "export": (["export", "--checkout", str(co), "--config", cfg], 0),
    }
    codes = {}
    for name, (args, normal) in commands.items():
        result = run_cli(*args)
        codes[name] = result.exit_code
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
        assert not marker.exists(), f"{name} ran the program the checkout configures"
        if neutralized:
            assert result.exit_code == normal, (name, result.stderr)
        else:
            assert result.exit_code == 2, (name, result.stderr)
            # port refuses a --checkout that is not a free directory before any git command reads it
            early = name == "port" and "exists and is not an empty directory" in result.stderr
            assert early or CASES[case_id].expect in result.stderr, (name, result.stderr)
        if name == "verify":
            first = result
    if not neutralized:
        assert _digest(co) == before
    assert not (tmp_path / "dist").exists()
    shown = (
        "; ".join(f"{name} exit {code}" for name, code in codes.items()) + "; no marker"
        if neutralized
        else first_error(first.stderr)
    )
    record(case_id, exit=codes["verify"], shown=shown, roots=(tmp_path, co.parent))
    _plain_git_runs_it(co, marker)


# --------------------------------------------------------------------------- lock files and links (issue 10)


def _digest(root: Path) -> dict[str, str]:
    """Every path below ``root`` (``.git`` included) with a hash of its bytes or its link target."""
    state = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            state[rel] = f"-> {p.readlink()}"
        elif p.is_file():
            state[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            state[rel] = "dir"
    return state


def test_lock_link_in_checkout_is_refused(pristine_checkout: Callable[[], Path], tmp_path: Path) -> None:
    co = pristine_checkout()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    lock = co / ".git/sgpatch.lock"
    lock.symlink_to(victim)
    before = snapshot(co)
    cfg = str(REPO / "VERSIONS.toml")
    shown = []
    for command in ("verify", "apply"):
        result = run_cli(command, "--checkout", str(co), "--config", cfg)
        assert result.exit_code == 2, result.stderr
        assert CASES["lock-link-checkout"].expect in result.stderr, result.stderr
        assert victim.read_text() == "precious\n"
        assert lock.is_symlink() and snapshot(co) == before
        shown.append(first_error(result.stderr))
    record("lock-link-checkout", exit=2, shown=shown[1], roots=(tmp_path, co.parent))


def test_fetch_lock_link_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sgpatch.checkout.fetch import target_lock_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    into = tmp_path / "co"
    lock = target_lock_path(into)
    assert lock.is_relative_to(tmp_path / "cache") and not lock.is_relative_to(into.parent / "co")
    lock.parent.mkdir(parents=True)
    lock.symlink_to(victim)
    result = run_cli("fetch", "--into", str(into), "--config", str(REPO / "VERSIONS.toml"))
    assert result.exit_code == 2, result.stderr
    assert CASES["lock-link-fetch"].expect in result.stderr, result.stderr
    assert victim.read_text() == "precious\n" and lock.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "victim.txt"]
    record("lock-link-fetch", exit=2, shown=first_error(result.stderr), roots=(tmp_path,))
    # The directory of the locks is a link: refused, nothing created where it points.
    lock.unlink()
    lock.parent.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lock.parent.symlink_to(elsewhere)
    result = run_cli("fetch", "--into", str(into), "--config", str(REPO / "VERSIONS.toml"))
    assert result.exit_code == 2, result.stderr
    assert CASES["lock-link-fetch-dir"].expect in result.stderr, result.stderr
    assert list(elsewhere.iterdir()) == [] and not into.exists()
    record("lock-link-fetch-dir", exit=2, shown=first_error(result.stderr), roots=(tmp_path,))


def test_no_fetch_lock_beside_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old lock's place beside --into (a shared parent) is never opened: a link planted there stays inert."""
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    into = tmp_path / "shared" / "co"
    into.parent.mkdir()
    planted = into.parent / f".{into.name}.sgpatch-lock"
    planted.symlink_to(victim)
    result = run_cli("fetch", "--into", str(into), "--config", str(REPO / "VERSIONS.toml"))
    assert result.exit_code == 0, result.stderr
    assert (into / ".git").is_dir()
    assert victim.read_text() == "precious\n" and planted.is_symlink()
    assert sorted(p.name for p in into.parent.iterdir()) == [".co.sgpatch-lock", "co"]
    record("lock-beside-target", exit=0, shown="checkout created; the planted link and its target untouched")


def test_interface_helper_fanout_is_bounded(pristine_checkout: Callable[[], Path], project: Any) -> None:
    from .helpers import json_out

    co = pristine_checkout()
    worker = co / "python/sglang/srt/speculative/eagle_worker.py"
    lines = [""]
    for level in range(4):
        callee = f"_fan{level + 1}(m)" if level < 3 else "m.get_embed_and_head()"
        lines.append(f"def _fan{level}(m):")
        lines += [f"    if _flag{i}:\n        {callee}" for i in range(50)]
    lines.append("def _hostile(self):\n    _fan0(self.target_worker.model_runner.model)\n")
    worker.write_text(worker.read_text() + "\n".join(lines))
    before = snapshot(co)

    result = run_cli("check-interface", "--checkout", str(co), "--config", str(project.config.path), "--json")

    assert result.exit_code == 1
    doc = json_out(result)
    assert sorted(g["name"] for g in doc["gaps"]) == ["get_embed_and_head", "set_eagle3_layers_to_capture"]
    [note] = [n for n in doc["notes"] if "helper calls" in n]
    assert note == (
        "python/sglang/srt/speculative/eagle_worker.py: more than 2000 helper calls given a model; "
        "the rest not followed"
    )
    assert CASES["interface-helper-fanout"].expect in note
    assert snapshot(co) == before
    record("interface-helper-fanout", exit=result.exit_code, shown=note)


def test_a_nul_byte_in_a_source_the_interface_check_reads_is_exit_2(
    pristine_checkout: Callable[[], Path], project: Any
) -> None:
    co = pristine_checkout()
    source = co / "python/sglang/srt/layers/logits_processor.py"
    source.write_bytes(b"\0" + source.read_bytes()[1:])
    before = snapshot(co)
    for command in ("check-interface", "verify"):
        result = run_cli(command, "--checkout", str(co), "--config", str(project.config.path), "--no-cache")
        assert result.exit_code == 2, (command, result.stderr)
        assert result.stderr.startswith("sgpatch: error: python/sglang/srt/layers/logits_processor.py: "), result.stderr
        assert CASES["interface-nul-in-source"].expect in result.stderr
        assert "internal error" not in result.stderr
    assert snapshot(co) == before
    record("interface-nul-in-source", exit=2, shown=first_error(result.stderr), roots=(co,))


# --------------------------------------------------------------------------- hostile wheels for verify --wheel


@functools.cache
def _upstream_members() -> tuple[str, tuple[tuple[str, bytes], ...]]:
    project = load_project(load_config(REPO / "VERSIONS.toml"), None)
    artifact = project.stack.artifact("wheel")
    assert artifact is not None
    with zipfile.ZipFile(fetch_artifact(artifact, project.stack.sglang_version)) as zf:
        members = tuple((i.filename, zf.read(i)) for i in zf.infolist() if not i.is_dir())
    return wheel_version(project.stack, project.series), members


def _base_wheel() -> dict[str, bytes]:
    """upstream's 0.5.9 wheel under the default stack's patched version, with a provenance naming the stack:
    it reaches every check, which fails cleanly (exit 1: it is not patched)."""
    version, members = _upstream_members()
    dist_info = f"sglang-{version}.dist-info"
    out = {name.replace("sglang-0.5.9.dist-info", dist_info): data for name, data in members}
    out[f"{dist_info}/sgpatch.json"] = json.dumps({"schema_version": 1, "stack": "0.5.9-cu130"}).encode()
    return out


def _with(**replace: bytes) -> bytes:
    members = _base_wheel()
    for suffix, data in replace.items():
        name = next(n for n in members if n.endswith(suffix.replace("_", ".")))
        members[name] = data
    return zip_bytes(members, compression=zipfile.ZIP_STORED, deflate={"sglang/__init__.py"})


def _bad_deflate() -> bytes:
    data = _with()
    at = deflate_offset(data, "sglang/__init__.py")
    return data[:at] + b"\xff" + data[at + 1 :]  # BTYPE 11: a block type deflate does not have


def _many_members() -> bytes:
    return zip_bytes({f"sglang/m{i}.py": b"" for i in range(50_001)}, compression=zipfile.ZIP_STORED)


def _ratio(path: Path) -> None:
    zeros_bomb(path, "sglang/zeros.bin", 128 << 20, extra={"sglang/__init__.py": b"x = 1\n"})


WHEELS: dict[str, Callable[[Path], None]] = {
    "archive-encrypted": lambda p: p.write_bytes(patch_member(_with(), "sglang/__init__.py", flags=0x1)),
    "archive-method-99": lambda p: p.write_bytes(patch_member(_with(), "sglang/__init__.py", method=99)),
    "archive-bad-deflate": lambda p: p.write_bytes(_bad_deflate()),
    "archive-bad-crc": lambda p: p.write_bytes(patch_member(_with(), "sglang/__init__.py", crc=0xDEADBEEF)),
    "archive-ratio": _ratio,
    "archive-many-members": lambda p: p.write_bytes(_many_members()),
    "archive-record-field": lambda p: p.write_bytes(_with(RECORD=b'"' + b"a" * 200_000 + b'",,\n')),
    "archive-record-row": lambda p: p.write_bytes(_with(RECORD=b"sglang/__init__.py,md5,many\n")),
    "archive-provenance-type": lambda p: p.write_bytes(
        _with(sgpatch_json=json.dumps({"schema_version": 1, "stack": {"name": "x"}}).encode())
    ),
    "archive-provenance-nested": lambda p: p.write_bytes(
        _with(sgpatch_json=b'{"schema_version": 1, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    ),
    "archive-requires-dist": lambda p: p.write_bytes(
        _with(METADATA=b"Metadata-Version: 2.1\nName: sglang\nVersion: 0\nRequires-Dist: foo ==== bar!!\n\n")
    ),
    "archive-metadata-utf8": lambda p: p.write_bytes(
        _with(METADATA=b"Metadata-Version: 2.1\nName: sgl\xffang\nVersion: 0\n\n")
    ),
}


def _check_wheel_refused(case_id: str, code: int, stdout: str, stderr: str, roots: tuple[Path, ...]) -> None:
    case = CASES[case_id]
    assert code == case.exit, (code, stderr)
    assert "Traceback" not in stderr and "internal error" not in stderr
    assert not any(ord(c) < 32 and c not in "\n\t" for c in stderr), repr(stderr)
    if code == 2:
        assert case.expect in stderr, stderr
        assert json.loads(stdout)["exit_code"] == 2  # --json: the error as one document
        shown = first_error(stderr)
    else:
        failures = json.loads(stdout)["failures"]
        shown = next((f for f in failures if case.expect in f), "")
        assert shown, failures
    record(case_id, exit=code, shown=shown, roots=roots)


@pytest.mark.parametrize("case_id", list(WHEELS))
def test_hostile_wheel_is_refused(case_id: str, tmp_path: Path) -> None:
    wheel = tmp_path / "sglang-0.5.9-py3-none-any.whl"
    WHEELS[case_id](wheel)
    before = sorted(tmp_path.iterdir())
    result = run_cli("verify", "--wheel", str(wheel), "--json", "--config", str(REPO / "VERSIONS.toml"))
    _check_wheel_refused(case_id, result.exit_code, result.stdout, result.stderr, (tmp_path,))
    assert sorted(tmp_path.iterdir()) == before


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bomb") / "sglang-0.5.9-py3-none-any.whl"
    zeros_bomb(path, "sglang/zeros.bin", 3 << 30, extra={"sglang/__init__.py": b"x = 1\n"})
    return path


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize("case_id", ["archive-bomb", "archive-bomb-lying-size"])
def test_zip_bomb_is_refused_in_bounded_memory(case_id: str, bomb: Path, tmp_path: Path) -> None:
    """The 3 GiB member is refused by a process that may not map more than 1 GiB in all."""
    wheel = tmp_path / bomb.name
    data = bomb.read_bytes()
    assert len(data) < 8 << 20
    if case_id == "archive-bomb-lying-size":
        data = patch_member(data, "sglang/zeros.bin", size=1000)
    wheel.write_bytes(data)
    sgpatch = Path(sys.executable).with_name("sgpatch")
    proc = subprocess.run(
        [str(sgpatch), "verify", "--wheel", str(wheel), "--json", "--config", str(REPO / "VERSIONS.toml")],
        capture_output=True,
        text=True,
        preexec_fn=_limit_memory,
        check=False,
    )
    _check_wheel_refused(case_id, proc.returncode, proc.stdout, proc.stderr, (tmp_path,))
    assert "'sglang/zeros.bin'" in proc.stderr


def test_memory_limit_is_real() -> None:
    """The limit the bomb test runs under stops a process that would hold the 3 GiB member (or even 1 GiB)."""
    proc = subprocess.run(
        [sys.executable, "-c", "b = bytes(1 << 30)"], capture_output=True, preexec_fn=_limit_memory, check=False
    )
    assert proc.returncode != 0 and b"MemoryError" in proc.stderr


# --------------------------------------------------------------------------- wheel-only releases: the index, the pins


_PAGE_OK = {
    "meta": {"api-version": "1.1"},
    "name": "sglang",
    "files": [
        {
            "filename": "sglang-0.5.22-cp311-cp311-manylinux_2_34_x86_64.whl",
            "hashes": {"sha256": "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"},
        }
    ],
}


def _page(**changes: Any) -> bytes:
    doc = json.loads(json.dumps(_PAGE_OK))
    doc["files"][0].update(changes)
    return json.dumps(doc).encode()


_JSON_TYPE = "application/vnd.pypi.simple.v1+json"
INDEX_ANSWERS: dict[str, tuple[int, str, bytes]] = {
    "wheels-index-not-json": (200, _JSON_TYPE, b"<html>not json"),
    "wheels-index-other-type": (200, "application/json", b'{"files": []}'),
    "wheels-index-oversize": (200, _JSON_TYPE, b" " * ((16 << 20) + 1)),
    "wheels-index-bad-sha256": (200, _JSON_TYPE, _page(hashes={"sha256": "ABC"})),
    "wheels-index-path-filename": (200, _JSON_TYPE, _page(filename="../../sglang-0.5.22-py3-none-any.whl")),
    "wheels-index-no-files": (200, _JSON_TYPE, json.dumps({"meta": {"api-version": "1.0"}, "files": {}}).encode()),
    "wheels-index-http-error": (500, "text/plain", b"down"),
}


class _Index(http.server.BaseHTTPRequestHandler):
    answer: tuple[int, str, bytes] = (404, "text/plain", b"")

    def do_GET(self) -> None:
        status, kind, body = self.answer
        if self.headers.get("Authorization") != "Basic dXNlcjpzM2NyZXQ=":  # user:s3cret, from the URL
            status, kind, body = 401, "text/plain", b"who are you"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client may stop reading at its bound
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.mark.parametrize("case_id", [*INDEX_ANSWERS, "wheels-index-unreachable"])
def test_hostile_index_answer_is_an_environment_failure(
    case_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proj = copy_project(tmp_path / "proj", {})
    before = _digest(proj)
    if case_id == "wheels-index-unreachable":
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port_number = s.getsockname()[1]
        server = None
    else:
        handler = type("Handler", (_Index,), {"answer": INDEX_ANSWERS[case_id]})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        port_number = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
    # Credentials in pip's index URL are used, never shown.
    monkeypatch.setenv("PIP_INDEX_URL", f"http://user:s3cret@127.0.0.1:{port_number}/simple")
    try:
        result = run_cli("port", "--config", str(proj / "VERSIONS.toml"), "--to", "0.5.22", catch=True)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    _check_refused(case_id, result, (tmp_path,))
    assert len([ln for ln in result.stderr.splitlines() if ln.startswith("sgpatch: error:")]) == 1
    assert f"127.0.0.1:{port_number}" in result.stderr and "s3cret" not in result.stderr  # names the index it asked
    assert _digest(proj) == before and not (proj / ".sgpatch/checkouts/0.5.22-cu130").exists()


def test_pinned_wheels_that_disagree_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from sgpatch.checkout.extract import check_wheels_agree

    pins = []
    for arch, body in (("x86_64", b"x = 1\n"), ("aarch64", b"x = 2\n")):
        name = f"sglang-0.5.9-cp311-cp311-manylinux_2_34_{arch}.whl"
        data = zip_bytes({"sglang/__init__.py": body, f"sglang/_core.cpython-311-{arch}-linux-gnu.so": arch.encode()})
        sha = hashlib.sha256(data).hexdigest()
        (tmp_path / "cache/sgpatch/artifacts" / sha).mkdir(parents=True)
        (tmp_path / "cache/sgpatch/artifacts" / sha / name).write_bytes(data)
        pins.append(f'  {{ filename = "{name}", sha256 = "{sha}" }},\n')
    wheel_line = next(ln for ln in (REPO / "VERSIONS.toml").read_text().splitlines() if ln.startswith("wheel = "))
    proj = copy_project(tmp_path / "proj", {wheel_line + "\n": "wheels = [\n" + "".join(pins) + "]\n"})
    stack = load_config(proj / "VERSIONS.toml").stack("0.5.9-cu130")
    with pytest.raises(SgpatchError) as caught:
        check_wheels_agree(stack)
    case = CASES["wheels-disagree"]
    message = caught.value.message
    assert caught.value.exit_code == case.exit and case.expect in message, message
    assert "sglang/__init__.py" in message and "manylinux_2_34_x86_64" in message  # the file and the wheel named
    record("wheels-disagree", exit=caught.value.exit_code, shown=message, roots=(tmp_path,))


def _two_wheel_stack(tmp_path: Path, second: bytes) -> tuple[Any, Path]:
    """A 0.5.9 stack pinning two wheels, both in the cache: the x86_64 one holds ``x = 1``, the other ``second``."""
    pins, paths = [], []
    for arch, body in (("x86_64", b"x = 1\n"), ("aarch64", second)):
        name = f"sglang-0.5.9-cp311-cp311-manylinux_2_34_{arch}.whl"
        data = zip_bytes({"sglang/__init__.py": body, f"sglang/_core.cpython-311-{arch}-linux-gnu.so": arch.encode()})
        sha = hashlib.sha256(data).hexdigest()
        (tmp_path / "cache/sgpatch/artifacts" / sha).mkdir(parents=True)
        paths.append(tmp_path / "cache/sgpatch/artifacts" / sha / name)
        paths[-1].write_bytes(data)
        pins.append(f'  {{ filename = "{name}", sha256 = "{sha}" }},\n')
    wheel_line = next(ln for ln in (REPO / "VERSIONS.toml").read_text().splitlines() if ln.startswith("wheel = "))
    proj = copy_project(tmp_path / "proj", {wheel_line + "\n": "wheels = [\n" + "".join(pins) + "]\n"})
    return load_config(proj / "VERSIONS.toml").stack("0.5.9-cu130"), paths[1]


def test_a_port_s_wheel_check_beside_it_refuses_wheels_that_disagree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check a port runs beside its judging (a forked child, which reads and checks each cached wheel
    itself) refuses what ``check_wheels_agree`` refuses, with the same message."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from sgpatch.port.parallel import can_fork
    from sgpatch.port.stack import WheelsAgree

    stack, _ = _two_wheel_stack(tmp_path, b"x = 2\n")
    check = WheelsAgree(stack)
    assert can_fork() == (check._check is not None and type(check._check).__name__ == "Forked")
    with pytest.raises(SgpatchError) as caught:
        check.result()
    assert "sglang/__init__.py differs from" in caught.value.message and "manylinux_2_34_x86_64" in caught.value.message


def test_a_port_s_wheel_check_beside_it_reads_no_cached_wheel_unchecked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached wheel whose bytes are not its pin's (the same bytes as the other wheel: they would agree) is not
    compared: the child checks its sha256, finds it wrong and downloads it, from an index that does not answer;
    the error reaches the port.  Nothing in the cache is taken on trust because it is there."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_PROXY", "PIP_CERT"):
        monkeypatch.delenv(name, raising=False)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    closed = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{closed}/simple")
    from sgpatch.port.stack import WheelsAgree

    stack, second = _two_wheel_stack(tmp_path, b"x = 2\n")
    first = next(p for p in (tmp_path / "cache/sgpatch/artifacts").glob("*/*x86_64.whl"))
    second.write_bytes(first.read_bytes())  # the cached file now agrees with the first wheel, and not with its pin
    with pytest.raises(SgpatchError) as caught:
        WheelsAgree(stack).result()
    assert "differs" not in caught.value.message, caught.value.message
    assert f"127.0.0.1:{closed}" in caught.value.message and "connection refused" in caught.value.message


def test_a_wheel_pinned_twice_is_refused(tmp_path: Path) -> None:
    wheel_line = next(ln for ln in (REPO / "VERSIONS.toml").read_text().splitlines() if ln.startswith("wheel = "))
    entry = wheel_line.removeprefix("wheel = ")
    proj = copy_project(tmp_path / "proj", {wheel_line + "\n": f"wheels = [\n  {entry},\n  {entry},\n]\n"})
    result = run_cli("stacks", "--config", str(proj / "VERSIONS.toml"), catch=True)
    _check_refused("wheels-pinned-twice", result, (tmp_path,))
    assert "VERSIONS.toml:" in result.stderr


def test_dirtree_keeping_its_directories_reads_the_same_and_never_through_a_link(hostile_template: Hostile) -> None:
    """Inside ``with``, DirTree opens each directory once and keeps it: the same bytes, the same refusal of
    a symlinked directory, and a directory swapped for a link after it was kept is never read through."""
    root = hostile_template.tiny.checkout
    plain = DirTree(root)
    with DirTree(root) as kept:
        assert kept.read("python/pkg/mod0.py") == plain.read("python/pkg/mod0.py") is not None
        assert kept.read("python/pkg/absent.py") is None and kept.read("python/absent/x.py") is None
        with pytest.raises(LinkInPath):
            kept.read("python/link/anything.py")
        assert kept.list("python") == plain.list("python")
        assert kept._dirs  # kept open while the block runs
        fds = list(kept._dirs.values())
    assert kept._dirs is None
    for fd in fds:  # every kept directory was closed on leaving
        with pytest.raises(OSError):
            os.fstat(fd)


@pytest.mark.parametrize(
    "name",
    ["a/b.py", "a//b", "./a", "a/./b", "a/", "/a", "//a", "..", "a/../b", "", ".", "a\\b", ".GIT/x", "x/.git", "a\x01"],
)
def test_member_names_are_judged_as_pathlib_judges_them(name: str) -> None:
    """The member-name check splits strings (a wheel lists thousands of names): the same verdict and parts
    as the pathlib rule it replaced."""
    pure = PurePosixPath(name)
    bad = (
        name.startswith("/")
        or pure.is_absolute()
        or ".." in pure.parts
        or "\\" in name
        or not pure.parts
        or any(p.lower() == ".git" for p in pure.parts)
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    )
    if bad:
        with pytest.raises(ArchiveError):
            check_member_name(name, "w.whl")
    else:
        assert check_member_name(name, "w.whl") == list(pure.parts)
