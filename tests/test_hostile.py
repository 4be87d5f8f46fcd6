"""Hostile input is refused with exit 2 and nothing is written outside the test's temp dir (issue 7).

Each case runs the real CLI (in-process) against a small real repository or a
fetch target, and checks: the exit code and message, that the checkout is
byte-for-byte unchanged (HEAD, index, status, files, refs), that no checkout or
staging directory appeared, and that the directory the input aims at (outside
the checkout) is exactly as it was.  The parse-level checks of the same inputs
live in test_patchset.py, test_config.py and test_fetch.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sgpatch.remote import imported_failure
from sgpatch.tree import DirTree, LinkInPath

from .fakeprobe import make_fake_python
from .helpers import run_cli, snapshot
from .reliability import CASES, HOSTILE, first_error, record
from .smallrepo import HEADER, STACK, Tiny, add_traps, git, make_tiny, versions_toml


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
    "probe-nul": {"op": "set", "path": [0, 0, 4], "value": "sgl\u0000ang"},  # the first dist's name
}


@pytest.mark.parametrize("case_id", list(PROBE_ANSWERS))
@pytest.mark.parametrize("command", [("doctor",), ("verify", "--installed")], ids=lambda c: c[0])
def test_malformed_probe_answer_is_an_environment_failure(
    case_id: str, command: tuple[str, ...], tmp_path: Path
) -> None:
    """A real process answers (``--python FAKE``); only its answer is wrong."""
    mutation = PROBE_ANSWERS[case_id]
    if case_id == "probe-bad-base64" and command[0] == "verify":
        mutation = {"op": "set", "path": [0, 0, 1, 0], "value": "not base64!"}  # verify asks only sglang
    fake = make_fake_python(tmp_path / "python", mutation)
    result = run_cli(*command, "--python", str(fake), "--config", str(PROJECT_CONFIG))
    _check_refused(case_id, result, (tmp_path,))
    assert "malformed answer from the probe" in result.stderr
    assert len([ln for ln in result.stderr.splitlines() if ln.startswith("sgpatch: error:")]) == 1


def test_doctor_and_verify_agree_on_the_probes_imports(template_patched: Path, tmp_path: Path) -> None:
    """One verdict (``remote.imported_failure``): torch loaded in the probe's process fails both checks."""
    fake = make_fake_python(
        tmp_path / "python", {"answer": 0, "op": "set", "path": [1], "value": ["torch"]}, root=template_patched
    )
    line = imported_failure(("torch",))
    assert line is not None
    doctor = run_cli("doctor", "--python", str(fake), "--config", str(PROJECT_CONFIG), "--json")
    verify = run_cli("verify", "--installed", "--python", str(fake), "--config", str(PROJECT_CONFIG), "--json")
    assert doctor.exit_code == verify.exit_code == CASES["probe-imported"].exit, (doctor.stderr, verify.stderr)
    assert line in json.loads(doctor.stdout)["failures"][-1]
    assert json.loads(verify.stdout)["failures"] == [line]  # the patched tree passes every other check
    clean = make_fake_python(tmp_path / "clean", root=template_patched)
    again = run_cli("verify", "--installed", "--python", str(clean), "--config", str(PROJECT_CONFIG), "--json")
    assert again.exit_code == 0 and line not in again.stdout, again.stdout
    record("probe-imported", exit=verify.exit_code, shown=line, note="doctor and verify --installed: the same line")
