"""A private index (basic auth, credentials in ~/.netrc or keyring) and no index at all (find-links, --no-index).

The index is a real HTTP server on 127.0.0.1 (``tests/indexserver.py``) that answers 401 to any request
without the right ``Authorization``; it records what each request carried, so the tests prove where the
credentials went.  The keyring is a ``keyring`` command on PATH that answers ``keyring get SERVICE USER`` as
the real one does (its output, exit 0; exit 1 when it has nothing) and logs every call.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sgpatch.config import Artifact
from sgpatch.errors import EnvironmentFailure
from sgpatch.project import Project
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.source.credentials import basic

from .helpers import REPO
from .indexserver import CraftedIndex, Reply, crafted_index
from .reliability import CASES, first_error, record

NAME = "sglang-0.5.9-cp312-cp312-manylinux_2_34_aarch64.whl"
DATA = b"PK\x05\x06" + bytes(18)  # an empty zip: only its bytes matter here
PIN = Artifact("wheel", NAME, hashlib.sha256(DATA).hexdigest())
TOKEN = basic("user", "s3cret")
CONFIG = str(REPO / "VERSIONS.toml")


@pytest.fixture
def pip_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """pip configured by the environment only; sgpatch's cache empty; no .netrc but the test's."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_PROXY", "PIP_KEYRING_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


def _private(index: CraftedIndex) -> None:
    index.auth = TOKEN
    index.serve_files({NAME: DATA})


def test_netrc_credentials_go_to_their_own_host_only(
    pip_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "netrc").write_text(
        "machine 127.0.0.1\n  login user\n  password s3cret\nmachine localhost login x password leak\n"
    )
    (tmp_path / "netrc").chmod(0o600)
    with crafted_index() as index:
        _private(index)
        monkeypatch.setenv("PIP_INDEX_URL", f"{index.url}/simple")
        got = fetch_artifact(PIN, "0.5.9")
    assert got.read_bytes() == DATA
    assert [(s.path, s.headers.get("Authorization")) for s in index.seen] == [
        ("/simple/sglang/", TOKEN),
        (f"/files/{NAME}", TOKEN),
    ]


def test_netrc_credentials_are_dropped_on_a_redirect_to_another_host(
    pip_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "netrc").write_text("machine 127.0.0.1 login user password s3cret\n")
    with crafted_index("localhost") as other, crafted_index() as index:
        index.auth = TOKEN
        index.replies["/simple/sglang/"] = Reply(status=302, headers=(("Location", f"{other.url}/simple/sglang/"),))
        other.serve_files({NAME: DATA})
        monkeypatch.setenv("PIP_INDEX_URL", f"{index.url}/simple")
        fetch_artifact(PIN, "0.5.9")
    assert [s.headers.get("Authorization") for s in index.seen] == [TOKEN]
    assert other.seen and all("Authorization" not in s.headers for s in other.seen)


def test_without_credentials_the_401_says_where_they_go(pip_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with crafted_index() as index:
        _private(index)
        monkeypatch.setenv("PIP_INDEX_URL", f"{index.url}/simple")
        with pytest.raises(EnvironmentFailure, match="answered HTTP 401") as info:
            fetch_artifact(PIN, "0.5.9")
    assert info.value.exit_code == 3 and info.value.hint is not None and "~/.netrc" in info.value.hint


def _keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service: str) -> Path:
    """A ``keyring`` command on PATH knowing one password, logging its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "keyring.log"
    script = bin_dir / "keyring"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        f'if [ "$1 $2 $3" = "get {service} user" ]; then echo s3cret; exit 0; fi\n'
        "exit 1\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_keyring_is_asked_only_when_pip_is_configured_to(
    pip_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with crafted_index() as index:
        _private(index)
        service = f"127.0.0.1:{index.port}"
        log = _keyring(tmp_path, monkeypatch, service)
        monkeypatch.setenv("PIP_INDEX_URL", f"http://user@{service}/simple")
        with pytest.raises(EnvironmentFailure, match="answered HTTP 401"):
            fetch_artifact(PIN, "0.5.9")  # keyring-provider not set: keyring never asked
        assert not log.exists()
        monkeypatch.setenv("PIP_KEYRING_PROVIDER", "subprocess")
        got = fetch_artifact(PIN, "0.5.9")
    assert got.read_bytes() == DATA
    assert log.read_text().splitlines() == [f"get {service} user"]  # asked once, kept for the file's request
    assert [s.headers.get("Authorization") for s in index.seen][-2:] == [TOKEN, TOKEN]


# --------------------------------------------------------------------------- air-gapped: find-links, no-index


@pytest.fixture(scope="module")
def real_sdist(project: Project) -> Path:
    artifact = project.stack.artifact("sdist")
    assert artifact is not None
    return fetch_artifact(artifact, project.stack.sglang_version)  # the user's cache, before pip_env moves it


def _fetch(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``sgpatch fetch`` as a whole process, pip configured by ``env`` only."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    clean.update(PIP_CONFIG_FILE=os.devnull, XDG_CACHE_HOME=str(tmp_path / "cache"), **env)
    return subprocess.run(
        [sys.executable, "-m", "sgpatch", "fetch", "--into", str(tmp_path / "co"), "--config", CONFIG],
        capture_output=True,
        text=True,
        env=clean,
        timeout=600,
    )


def test_no_index_and_find_links_fetch_the_pinned_sdist_without_asking_an_index(
    real_sdist: Path, tmp_path: Path
) -> None:
    """Measured on main: with these two set, fetch still asked the index and failed ("connection refused")."""
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    shutil.copyfile(real_sdist, wheelhouse / real_sdist.name)
    with crafted_index() as index:
        result = _fetch(
            tmp_path, {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse), "PIP_INDEX_URL": f"{index.url}/simple"}
        )
    assert result.returncode == 0, result.stderr
    assert index.seen == []
    assert (tmp_path / "co" / "python/sglang/srt/models/kimi_k25.py").is_file()
    cached = tmp_path / "cache/sgpatch/artifacts" / hashlib.sha256(real_sdist.read_bytes()).hexdigest()
    assert (cached / real_sdist.name).read_bytes() == real_sdist.read_bytes()


def test_a_file_url_find_links_from_pip_conf_comes_before_the_index(real_sdist: Path, tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheel house"
    wheelhouse.mkdir()
    shutil.copyfile(real_sdist, wheelhouse / real_sdist.name)
    with crafted_index() as index:
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {index.url}/simple\n\n[download]\nfind-links = {wheelhouse.as_uri()}\n")
        clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        result = subprocess.run(
            [sys.executable, "-m", "sgpatch", "fetch", "--into", str(tmp_path / "co"), "--config", CONFIG],
            capture_output=True,
            text=True,
            env={**clean, "PIP_CONFIG_FILE": str(conf), "XDG_CACHE_HOME": str(tmp_path / "cache")},
            timeout=600,
        )
    assert result.returncode == 0, result.stderr
    assert index.seen == []


def test_a_find_links_file_with_another_sha256_is_refused(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "sglang-0.5.9.tar.gz").write_bytes(b"not the pinned sdist")
    result = _fetch(tmp_path, {"PIP_NO_INDEX": "true", "PIP_FIND_LINKS": str(wheelhouse)})
    line = _line("airgap-pin-mismatch", result, tmp_path)
    assert f"find-links {wheelhouse} holds sha256 {hashlib.sha256(b'not the pinned sdist').hexdigest()}" in line
    assert not (tmp_path / "co").exists()


def test_nothing_found_says_where_it_looked(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    links = f"{empty} https://example.invalid/links/"
    result = _fetch(tmp_path, {"PIP_NO_INDEX": "yes", "PIP_FIND_LINKS": links})
    line = _line("airgap-not-found", result, tmp_path)
    assert (
        f"looked in find-links {empty}, find-links https://example.invalid/links/ (a web page: not read), "
        "no index (pip's no-index is set)" in line
    )


def _line(case_id: str, result: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    case = CASES[case_id]
    assert result.returncode == case.exit, result.stderr
    assert "Traceback" not in result.stderr
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("sgpatch: error:")]
    assert case.expect in line
    record(case_id, exit=result.returncode, shown=first_error(result.stderr), roots=(tmp_path,))
    return line
