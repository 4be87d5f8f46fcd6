"""A private index (basic auth, credentials in ~/.netrc or keyring) and no index at all (find-links, --no-index).

The index is a real HTTP server on 127.0.0.1 (``tests/indexserver.py``) that answers 401 to any request
without the right ``Authorization``; it records what each request carried, so the tests prove where the
credentials went.  The keyring is a ``keyring`` command on PATH that answers ``keyring get SERVICE USER`` as
the real one does (its output, exit 0; exit 1 when it has nothing) and logs every call.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sgpatch.config import Artifact
from sgpatch.errors import EnvironmentFailure
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.source.credentials import basic

from .indexserver import CraftedIndex, Reply, crafted_index

NAME = "sglang-0.5.9-cp312-cp312-manylinux_2_34_aarch64.whl"
DATA = b"PK\x05\x06" + bytes(18)  # an empty zip: only its bytes matter here
PIN = Artifact("wheel", NAME, hashlib.sha256(DATA).hexdigest())
TOKEN = basic("user", "s3cret")


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
