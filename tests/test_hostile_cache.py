"""The download cache is trusted as the result cache is, and a pin is checked on the bytes then used (issue 28).

``sgpatch fetch`` runs as a whole process against a local index (tests/indexserver.py) serving the real 0.5.9
sdist, with ``$XDG_CACHE_HOME`` in tmp_path: a cache folder others may write is refused before the index is
asked; a link planted where the download goes is never followed; what sgpatch creates is 0700.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sgpatch.config import load_config
from sgpatch.errors import SourceError
from sgpatch.source.archive import open_archive
from sgpatch.source.artifacts import fetch_artifact

from .helpers import REPO
from .indexserver import crafted_index
from .reliability import CASES, first_error, record

CONFIG = str(REPO / "VERSIONS.toml")


@pytest.fixture(scope="module")
def sdist() -> tuple[str, str, bytes]:
    """The 0.5.9 sdist pinned by the default stack: its name, sha256 and bytes (from the shared download cache)."""
    artifact = load_config(REPO / "VERSIONS.toml").stack("0.5.9-cu130").source_artifact
    assert artifact is not None
    return artifact.filename, artifact.sha256, fetch_artifact(artifact, "0.5.9").read_bytes()


def fetch(tmp_path: Path, cache: Path, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PIP_CONFIG_FILE": os.devnull, "PIP_RETRIES": "0"}
    env["PIP_INDEX_URL"] = f"{url}/simple"
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_PROXY"):
        env.pop(name, None)
    into = tmp_path / "checkout"
    shutil.rmtree(into, ignore_errors=True)
    args = ["fetch", "--config", CONFIG, "--into", str(into)]
    return subprocess.run(
        [sys.executable, "-m", "sgpatch", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_download_cache_is_trusted_like_the_result_cache(tmp_path: Path, sdist: tuple[str, str, bytes]) -> None:
    name, sha, data = sdist
    with crafted_index() as index:
        index.serve_files({name: data})
        # a cache folder others may write: refused before the index is asked, nothing created in it
        shared = tmp_path / "shared"
        (shared / "sgpatch").mkdir(parents=True)
        os.chmod(shared / "sgpatch", 0o777)
        refused = fetch(tmp_path, shared, index.url)
        assert refused.returncode == 3, refused.stderr
        assert "writable by group or others" in refused.stderr and "Traceback" not in refused.stderr
        assert index.seen == [] and list((shared / "sgpatch").iterdir()) == []
        assert not (tmp_path / "checkout").exists()
        line = first_error(refused.stderr)
        assert CASES["cache-downloads-shared"].expect in line
        record("cache-downloads-shared", exit=refused.returncode, shown=line, roots=(tmp_path,))
        # a link planted where the download goes (to a file with the right bytes): never followed
        planted = tmp_path / "planted"
        entry = planted / "sgpatch" / "artifacts" / sha
        entry.mkdir(parents=True, mode=0o700)
        victim = tmp_path / "victim.tar.gz"
        victim.write_bytes(data)
        (entry / name).symlink_to(victim)
        linked = fetch(tmp_path, planted, index.url)
        assert linked.returncode == 0, linked.stderr
        assert stat.S_ISREG(os.lstat(entry / name).st_mode) and (entry / name).read_bytes() == data
        assert victim.read_bytes() == data and [s.path for s in index.seen][-1] == f"/files/{name}"
        record("cache-downloads-link", exit=linked.returncode, shown="the link replaced by the downloaded file")
        # a fresh cache: each folder sgpatch makes is 0700 (the docs' word), the file a regular file
        fresh = tmp_path / "fresh"
        made = fetch(tmp_path, fresh, index.url)
        assert made.returncode == 0, made.stderr
        root = fresh / "sgpatch"
        assert [mode(p) for p in (root, root / "artifacts", root / "artifacts" / sha)] == [0o700] * 3
        record("cache-downloads-mode", exit=made.returncode, shown="sgpatch/, artifacts/, <sha256>/: 0700")


def test_the_pin_is_checked_on_the_bytes_then_read(tmp_path: Path, sdist: tuple[str, str, bytes]) -> None:
    """The path swapped for other bytes after the check: the archive read is still the one checked."""
    name, sha, data = sdist
    path = tmp_path / name
    path.write_bytes(data)
    with open_archive(path, "sdist", sha256=sha) as archive:
        other = tmp_path / "other.tar.gz"
        other.write_bytes(b"\x1f\x8b" + b"\0" * 100)
        os.replace(other, path)  # what a second open by path would now read
        assert "sglang/__init__.py" in archive and archive.read("sglang/__init__.py")
    with pytest.raises(SourceError, match="sha256 mismatch"):
        open_archive(path, "sdist", sha256=sha)
    link = tmp_path / "link.tar.gz"
    link.symlink_to(path)
    with pytest.raises(Exception, match="symbolic link"):
        open_archive(link, "sdist", sha256=sha)
    record("cache-pin-on-bytes-used", exit=None, shown="the members read come from the descriptor that was hashed")


def test_a_listed_url_with_a_port_out_of_range_is_refused(tmp_path: Path, sdist: tuple[str, str, bytes]) -> None:
    """An index (given credentials) lists the file at ``:<its port + 65536>``: the socket would connect to the
    index's own port, so the credentials' origin check would be fooled.  Refused before any request for it."""
    name, _, data = sdist
    with crafted_index() as index:
        port = int(index.url.rsplit(":", 1)[1])
        for bad in (str(port + 65536), "\u00b2", "0"):
            url = f"http://127.0.0.1:{bad}/files/{name}"
            index.serve_files({name: data}, extra={name: {"url": url}})
            creds = index.url.replace("http://", "http://user:secret@")
            result = fetch(tmp_path, tmp_path / "cache", creds)
            assert result.returncode == 3, result.stderr
            assert "its port is not a port number (1-65535)" in result.stderr and "secret" not in result.stderr
            assert all(not s.path.startswith("/files/") for s in index.seen)
            assert not (tmp_path / "checkout").exists()
    line = first_error(result.stderr).replace(str(port), "PORT")
    record("index-url-port-out-of-range", exit=result.returncode, shown=line, roots=(tmp_path,))
