"""A pin is checked before anything runs: hostile indexes, sdists and exports (issue 18).

Every index here is a real HTTP server on 127.0.0.1 (tests/indexserver.py) that
answers what the test crafted; pip's configuration is the test's own (no config
file, the crafted index as ``PIP_INDEX_URL``).  Each test runs the real CLI and
asserts the exit code, the one line the user reads, and what was not written or
not sent: the marker a crafted build backend would write, the cache entry, the
checkout, the project's files, the ``Authorization`` header another host saw.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sgpatch.config import Artifact, load_config
from sgpatch.series.patch import parse_patch

from .helpers import REPO, copy_project, run_cli
from .indexserver import JSON_TYPE, CraftedIndex, Reply, crafted_index, self_signed
from .port_fixtures import SDIST_0510
from .reliability import CASES, first_error, record
from .smallrepo import Tiny, git, make_tiny
from .zipcraft import patch_member

SDIST_059 = load_config(REPO / "VERSIONS.toml").stack("0.5.9-cu130").source_artifact
WHEEL_059 = load_config(REPO / "VERSIONS.toml").stack("0.5.9-cu130").artifact("wheel")
assert SDIST_059 is not None and WHEEL_059 is not None
DEADLINE = "2"  # SGPATCH_DEADLINE for the trickle tests, in seconds: named in the error


# --------------------------------------------------------------------------- crafted artifacts


def _targz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1700000000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def evil_sdist(version: str, marker: Path, *, pkg_info: bytes | None = None) -> bytes:
    """An sdist whose in-tree build backend writes ``marker`` the moment it is imported
    (pip imports it to prepare the metadata of an sdist it downloads)."""
    top = f"sglang-{version}"
    members = {
        f"{top}/pyproject.toml": b"[build-system]\nrequires = []\n"
        b'build-backend = "evil_backend"\nbackend-path = ["."]\n',
        f"{top}/evil_backend.py": f"open({str(marker)!r}, 'w').write('the backend ran')\n".encode(),
        f"{top}/sglang/__init__.py": b"",
    }
    if pkg_info is not None:
        members[f"{top}/PKG-INFO"] = pkg_info
    return _targz(members)


def pkg_info(version: str, *requires: str) -> bytes:
    lines = ["Metadata-Version: 2.1", "Name: sglang", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    return ("\n".join(lines) + "\n\n").encode()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def real_artifacts() -> dict[str, Path]:
    """The real files the tests start from (sgpatch's cache, downloaded once by the suite)."""
    from sgpatch.source.artifacts import fetch_artifact

    out = {}
    for artifact, version in ((SDIST_059, "0.5.9"), (WHEEL_059, "0.5.9"), (SDIST_0510, "0.5.10")):
        assert artifact is not None
        out[artifact.filename] = fetch_artifact(artifact, version)
    return out


def seed(cache: Path, artifact: Artifact, source: Path) -> None:
    """Put ``source`` into the test's own artifact cache under ``artifact``'s pin."""
    entry = cache / "sgpatch" / "artifacts" / artifact.sha256
    entry.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, entry / artifact.filename)


@pytest.fixture
def use_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, real_artifacts: dict[str, Path]) -> Callable[..., Path]:
    """pip configured with nothing but the crafted index; sgpatch's cache empty but for ``seeded`` files
    (the old stack's own sdist, for ``port``); returns the cache directory."""

    def use(
        index: CraftedIndex,
        *,
        credentials: str = "",
        deadline: str | None = None,
        seeded: tuple[tuple[Artifact, Path], ...] = (),
        port: bool = False,
    ) -> Path:
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        scheme = "https" if index.tls else "http"
        monkeypatch.setenv("PIP_INDEX_URL", f"{scheme}://{credentials}{index.host}:{index.port}/simple")
        if index.tls:
            monkeypatch.setenv("PIP_CERT", str(index.tls[0]))
        monkeypatch.setenv("PIP_RETRIES", "0")
        cache = tmp_path / "cache"
        cache.mkdir(exist_ok=True)
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
        if deadline is not None:
            monkeypatch.setenv("SGPATCH_DEADLINE", deadline)
        if port:
            assert SDIST_059 is not None
            seeded = ((SDIST_059, real_artifacts[SDIST_059.filename]), *seeded)
        for artifact, path in seeded:
            seed(cache, artifact, path)
        return cache

    return use


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(case_id: str, result: Any, roots: tuple[Path, ...] = ()) -> str:
    """The run ended as the case says, with one error line and no traceback; record what the user saw."""
    case = CASES[case_id]
    assert result.exit_code == case.exit, (result.exit_code, result.stderr, result.exception)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("sgpatch: error:")]
    assert len(errors) == 1, result.stderr
    shown = first_error(result.stderr)
    assert case.expect in shown, shown
    record(case_id, exit=result.exit_code, shown=shown, roots=roots)
    return shown


# --------------------------------------------------------------------------- row 1: nothing runs before the pin


def test_fetch_never_runs_a_crafted_sdist(use_index: Callable[..., Path], tmp_path: Path) -> None:
    """The index serves a crafted sglang-0.5.9.tar.gz: listed with its own sha256, then listed with the pinned
    one (the index lies).  Either way: exit 2, the backend never imported, nothing cached, no checkout."""
    assert SDIST_059 is not None
    marker = tmp_path / "MARKER"
    crafted = evil_sdist("0.5.9", marker, pkg_info=pkg_info("0.5.9"))
    for case_id, listed in (
        ("supply-sdist-backend-fetch", None),
        ("supply-sdist-backend-fetch-lying", {SDIST_059.filename: SDIST_059.sha256}),
    ):
        with crafted_index() as index:
            index.serve_files({SDIST_059.filename: crafted}, listed=listed)
            cache = use_index(index)
            into = tmp_path / case_id / "co"
            result = run_cli("fetch", "--into", str(into), "--config", str(REPO / "VERSIONS.toml"), catch=True)
        assert not marker.exists(), "the crafted sdist's build backend ran"
        _one_line(case_id, result, (tmp_path,))
        assert not into.exists()
        assert not list((cache / "sgpatch/artifacts").rglob("*.tar.gz"))  # nothing unchecked is kept
        downloads = [s.path for s in index.seen if s.path.startswith("/files/")]
        assert downloads == ([] if listed is None else [f"/files/{SDIST_059.filename}"])


def test_port_reads_a_new_release_as_an_archive(use_index: Callable[..., Path], tmp_path: Path) -> None:
    """``port --to 0.5.10`` where the index lists a crafted sdist (with its true sha256): it is downloaded by
    that hash and read as an archive; its backend never runs."""
    marker = tmp_path / "MARKER"
    proj = copy_project(tmp_path / "proj")
    before = _tree(proj)
    with crafted_index() as index:
        index.serve_files({"sglang-0.5.10.tar.gz": evil_sdist("0.5.10", marker)})
        use_index(index, port=True)
        result = run_cli("port", "--to", "0.5.10", "--config", str(proj / "VERSIONS.toml"), catch=True)
    assert not marker.exists(), "the crafted sdist's build backend ran"
    _one_line("supply-sdist-backend-port", result, (tmp_path,))
    assert _tree(proj) == before
    assert [s.path for s in index.seen if s.path.startswith("/files/")] == ["/files/sglang-0.5.10.tar.gz"]


def test_builds_download_is_checked_before_use(
    use_index: Callable[..., Path], tmp_path: Path, patched_checkout: Callable[[], Path]
) -> None:
    """``build`` downloads upstream's pinned wheel to compare with: crafted bytes under its name are refused
    by the pin before anything is built or read."""
    assert WHEEL_059 is not None
    marker = tmp_path / "MARKER"
    co = patched_checkout()
    proj = copy_project(tmp_path / "proj")
    crafted = evil_sdist("0.5.9", marker)
    with crafted_index() as index:
        index.serve_files({WHEEL_059.filename: crafted}, listed={WHEEL_059.filename: WHEEL_059.sha256})
        cache = use_index(index)
        out = tmp_path / "dist"
        result = run_cli(
            "build", "--checkout", str(co), "--out", str(out), "--config", str(proj / "VERSIONS.toml"), catch=True
        )
    assert not marker.exists()
    _one_line("supply-build-download", result, (tmp_path,))
    assert not out.exists() or not list(out.glob("*.whl"))
    assert not list((cache / "sgpatch/artifacts").rglob("*.whl"))


# --------------------------------------------------------------------------- rows 2, 3, 10: hostile answers


_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: " + JSON_TYPE.encode() + b"\r\n"
RAW_ANSWERS: dict[str, Reply] = {
    "supply-http-bad-status": Reply(raw=b"HTTP/1.1 twohundred OK\r\n\r\n{}"),
    "supply-http-long-header": Reply(raw=_HEAD + b"X-Long: " + b"a" * (70 << 10) + b"\r\n\r\n{}"),
    "supply-http-many-headers": Reply(raw=_HEAD + b"".join(b"X-%d: 1\r\n" % i for i in range(150)) + b"\r\n{}"),
    "supply-http-broken-chunk": Reply(raw=_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
}
_META = b'{"meta": {"api-version": "1.1"}, "name": "sglang", "files": '
PAGES: dict[str, bytes] = {
    "supply-json-deep": _META + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "supply-json-many-values": _META + b"[" + b"[]," * ((15 << 20) // 3) + b"[]]}",
    "supply-json-yanked-type": json.dumps(
        {
            "meta": {"api-version": "1.1"},
            "name": "sglang",
            "files": [
                {
                    "filename": "sglang-0.5.22.tar.gz",
                    "url": "../../files/sglang-0.5.22.tar.gz",
                    "hashes": {"sha256": "0" * 64},
                    "yanked": {"x": 1},
                }
            ],
        }
    ).encode(),
}


@pytest.mark.parametrize("case_id", [*RAW_ANSWERS, *PAGES])
def test_a_hostile_answer_is_one_line_and_exit_3(case_id: str, use_index: Callable[..., Path], tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj")
    before = _tree(proj)
    with crafted_index() as index:
        if case_id in RAW_ANSWERS:
            index.replies["/simple/sglang/"] = RAW_ANSWERS[case_id]
        else:
            index.page(PAGES[case_id])
        use_index(index, port=True)
        result = run_cli("port", "--to", "0.5.22", "--config", str(proj / "VERSIONS.toml"), catch=True)
    shown = _one_line(case_id, result, (tmp_path,))
    assert f"127.0.0.1:{index.port}" in shown
    assert _tree(proj) == before


def test_a_broken_download_is_one_line_and_exit_3(use_index: Callable[..., Path], tmp_path: Path) -> None:
    """The same hostile HTTP on the download of the file itself."""
    assert SDIST_059 is not None
    with crafted_index() as index:
        index.serve_files({SDIST_059.filename: b""}, listed={SDIST_059.filename: SDIST_059.sha256})
        index.replies[f"/files/{SDIST_059.filename}"] = RAW_ANSWERS["supply-http-broken-chunk"]
        cache = use_index(index)
        into = tmp_path / "co"
        result = run_cli("fetch", "--into", str(into), "--config", str(REPO / "VERSIONS.toml"), catch=True)
    _one_line("supply-http-broken-download", result, (tmp_path,))
    assert not into.exists() and not list((cache / "sgpatch/artifacts").rglob("*.tar.gz"))


# --------------------------------------------------------------------------- row 4: deadlines


@pytest.mark.parametrize("case_id", ["supply-trickle-page", "supply-trickle-headers", "supply-trickle-file"])
def test_a_trickling_index_meets_the_deadline(case_id: str, use_index: Callable[..., Path], tmp_path: Path) -> None:
    """One byte every 0.25 s, forever (bounded only by the server's own 30 s): the deadline ends the request."""
    assert SDIST_059 is not None
    with crafted_index() as index:
        page = index.serve_files({SDIST_059.filename: b"x" * 4096}, listed={SDIST_059.filename: SDIST_059.sha256})
        body = json.dumps(page).encode() + b" " * 4096
        if case_id == "supply-trickle-page":
            index.page(body, trickle=True)
        elif case_id == "supply-trickle-headers":
            index.page(body, trickle=True, trickle_headers=True)
        else:
            index.replies[f"/files/{SDIST_059.filename}"] = Reply(b"x" * 4096, trickle=True)
        use_index(index, deadline=DEADLINE)
        into = tmp_path / "co"
        result = run_cli("fetch", "--into", str(into), "--config", str(REPO / "VERSIONS.toml"), catch=True)
    shown = _one_line(case_id, result, (tmp_path,))
    assert "SGPATCH_DEADLINE" in shown
    assert not into.exists()


# --------------------------------------------------------------------------- row 5: credentials


def test_credentials_never_reach_another_host(use_index: Callable[..., Path], tmp_path: Path) -> None:
    """``PIP_INDEX_URL=http://user:s3cret@127.0.0.1:P/simple``; the index redirects (302) to another host: that
    host never sees the credentials.  A redirect on the same host keeps them (a private index needs them)."""
    proj = copy_project(tmp_path / "proj")
    with crafted_index("localhost") as other, crafted_index() as index:
        index.replies["/simple/sglang/"] = Reply(status=302, headers=(("Location", "/simple/SGLang/"),))
        index.replies["/simple/SGLang/"] = Reply(status=302, headers=(("Location", f"{other.url}/simple/sglang/"),))
        other.serve_files({})  # lists nothing for 0.5.22
        use_index(index, credentials="user:s3cret@", port=True)
        result = run_cli("port", "--to", "0.5.22", "--config", str(proj / "VERSIONS.toml"), catch=True)
    token = "Basic dXNlcjpzM2NyZXQ="  # user:s3cret
    assert [s.headers.get("Authorization") for s in index.seen] == [token, token]
    assert other.seen and all("Authorization" not in s.headers for s in other.seen), other.seen
    shown = _one_line("supply-credentials-redirect", result, (tmp_path,))
    assert "s3cret" not in result.stderr and "s3cret" not in result.stdout
    assert shown


REDIRECTS = {
    "supply-redirect-loop": (("Location", "/simple/sglang/"),),
    "supply-redirect-file": (("Location", "file:///etc/passwd"),),
}


@pytest.mark.parametrize("case_id", list(REDIRECTS))
def test_a_redirect_is_followed_only_where_it_may_go(
    case_id: str, use_index: Callable[..., Path], tmp_path: Path
) -> None:
    proj = copy_project(tmp_path / "proj")
    before = _tree(proj)
    with crafted_index() as index:
        index.replies["/simple/sglang/"] = Reply(status=302, headers=REDIRECTS[case_id])
        use_index(index, port=True)
        result = run_cli("port", "--to", "0.5.22", "--config", str(proj / "VERSIONS.toml"), catch=True)
    _one_line(case_id, result, (tmp_path,))
    assert len(index.seen) <= 6 and _tree(proj) == before


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


def test_https_index_keeps_its_deadline_and_never_downgrades(
    use_index: Callable[..., Path], tmp_path: Path, tls: tuple[Path, Path]
) -> None:
    """Over TLS (pip's ``cert`` trusted): a trickling file meets the deadline as over plain http, and a
    redirect from https to http is refused with the credentials never sent over it."""
    assert SDIST_059 is not None
    with crafted_index("localhost") as plain, crafted_index(tls=tls) as index:
        index.serve_files({SDIST_059.filename: b"x" * 4096}, listed={SDIST_059.filename: SDIST_059.sha256})
        index.replies[f"/files/{SDIST_059.filename}"] = Reply(b"x" * 4096, trickle=True)
        use_index(index, deadline=DEADLINE, credentials="user:s3cret@")
        trickled = run_cli(
            "fetch", "--into", str(tmp_path / "co1"), "--config", str(REPO / "VERSIONS.toml"), catch=True
        )
        index.replies[f"/files/{SDIST_059.filename}"] = Reply(
            status=302, headers=(("Location", f"{plain.url}/files/{SDIST_059.filename}"),)
        )
        downgraded = run_cli(
            "fetch", "--into", str(tmp_path / "co2"), "--config", str(REPO / "VERSIONS.toml"), catch=True
        )
    assert trickled.exit_code == 3 and "deadline of 2 s (SGPATCH_DEADLINE)" in trickled.stderr, trickled.stderr
    assert downgraded.exit_code == 3, downgraded.stderr
    assert "redirects from https to plain http; refusing" in downgraded.stderr
    assert plain.seen == [] and "s3cret" not in trickled.stderr + downgraded.stderr
    assert index.seen and all(s.headers.get("Authorization") == "Basic dXNlcjpzM2NyZXQ=" for s in index.seen)


# --------------------------------------------------------------------------- rows 7, 11: pins a person could type


PIN_CASES = {
    "supply-pin-digits": "cuda-python==1." + "0" * 5000,
    "supply-pin-url": "sglang-kernel @ https://example.invalid/sglang_kernel-0.4.10-py3-none-any.whl",
}


@pytest.mark.parametrize("case_id", list(PIN_CASES))
def test_an_absurd_requirement_is_bad_input(case_id: str, use_index: Callable[..., Path], tmp_path: Path) -> None:
    proj = copy_project(tmp_path / "proj")
    before = _tree(proj)
    requires = ("torch==2.9.1", "flashinfer-python==0.6.3", PIN_CASES[case_id])
    sdist = _targz(
        {
            "sglang-0.5.10/PKG-INFO": pkg_info("0.5.10", *requires),
            "sglang-0.5.10/pyproject.toml": b'[build-system]\nrequires = ["setuptools==84.2.1"]\n',
        }
    )
    crafted = tmp_path / "sglang-0.5.10.tar.gz"
    crafted.write_bytes(sdist)
    pin = Artifact("sdist", crafted.name, hashlib.sha256(sdist).hexdigest())
    with crafted_index() as index:
        index.serve_files({crafted.name: sdist})
        use_index(index, port=True, seeded=((pin, crafted),))  # cached: only its requirements are at stake
        result = run_cli("port", "--to", "0.5.10", "--config", str(proj / "VERSIONS.toml"), catch=True)
    shown = _one_line(case_id, result, (tmp_path,))
    assert "sglang-0.5.10.tar.gz" in shown and "PKG-INFO" in shown  # the file
    assert PIN_CASES[case_id][:20] in shown and len(shown) < 600  # the requirement, shortened
    assert _tree(proj) == before


# --------------------------------------------------------------------------- row 8: bounded memory


def _peak_rss(args: list[str], env: dict[str, str]) -> tuple[int, str, int]:
    """Run the sgpatch CLI in a fresh process; its exit code, stderr and the peak RSS (bytes) of it and its
    children (git), measured by a parent that starts nothing else."""
    sgpatch = str(Path(sys.executable).with_name("sgpatch"))
    code = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,\n"
        "                   stderr=subprocess.PIPE)\n"
        "sys.stderr.buffer.write(p.stderr)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, sgpatch, *args], capture_output=True, text=True, env=env, check=True
    )
    rc, kib = proc.stdout.split()
    return int(rc), proc.stderr, int(kib) * 1024


RSS_BOUND = 400 << 20  # far below what holding the crafted content would take (over 1 GB each)


def test_a_huge_index_answer_is_refused_in_bounded_memory(use_index: Callable[..., Path], tmp_path: Path) -> None:
    """62 MB of JSON (a million tiny objects): refused at the byte cap, never parsed."""
    proj = copy_project(tmp_path / "proj")
    body = _META + b"[" + b"{}," * ((62 << 20) // 3) + b"{}]}"
    with crafted_index() as index:
        index.page(body)
        use_index(index, port=True)
        rc, stderr, peak = _peak_rss(
            ["port", "--to", "0.5.22", "--config", str(proj / "VERSIONS.toml")], dict(os.environ)
        )
    case = CASES["supply-json-huge"]
    assert peak < RSS_BOUND, f"peak RSS {peak >> 20} MiB"
    assert rc == case.exit and case.expect in stderr, stderr
    record("supply-json-huge", exit=rc, shown=first_error(stderr), note=f"peak RSS {peak >> 20} MiB", roots=(tmp_path,))


def ratio_wheel(path: Path, members: int, member_size: int) -> None:
    """A wheel whose ``members`` members unpack to ``member_size`` bytes each at about 50:1 (under the
    archive's ratio limit): 1 MiB blocks of 20 KiB of noise and zeros, one deflated block repeated."""
    noise = b"".join(hashlib.sha256(b"%d" % i).digest() for i in range(640))  # 20 KiB that does not compress
    block = noise + bytes((1 << 20) - len(noise))
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    packed = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    count = member_size // len(block)
    stream = packed * count + zlib.compressobj(6, zlib.DEFLATED, -15).flush()
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    buf = io.BytesIO()
    names = [f"sglang/blob{i}.bin" for i in range(members)]
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("sglang/__init__.py", b"")
        for name in names:
            zf.writestr(zipfile.ZipInfo(name), stream)
    data = buf.getvalue()
    for name in names:
        data = patch_member(data, name, method=zipfile.ZIP_DEFLATED, crc=crc, size=member_size)
    path.write_bytes(data)


def test_a_wheel_is_laid_out_in_bounded_memory(tmp_path: Path) -> None:
    """A pinned 21 MB wheel that unpacks to 1 GiB: its members are streamed to disk, never all held."""
    wheel = tmp_path / "sglang-0.5.9-py3-none-any.whl"
    ratio_wheel(wheel, 16, 64 << 20)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    seed(cache, Artifact("wheel", wheel.name, sha), wheel)
    assert SDIST_059 is not None and WHEEL_059 is not None
    text = (REPO / "VERSIONS.toml").read_text()
    sdist_line = f'sdist = {{ filename = "{SDIST_059.filename}", sha256 = "{SDIST_059.sha256}" }}\n'
    proj = copy_project(tmp_path / "proj", {sdist_line: "", WHEEL_059.sha256: sha})
    assert text.count(sdist_line) == 2
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    into = tmp_path / "co"
    rc, stderr, peak = _peak_rss(
        ["fetch", "0.5.9-cu130", "--into", str(into), "--config", str(proj / "VERSIONS.toml")], env
    )
    case = CASES["supply-wheel-ratio"]
    assert peak < RSS_BOUND, f"peak RSS {peak >> 20} MiB"
    assert rc == case.exit and case.expect in stderr, stderr
    assert not into.exists()
    record(
        "supply-wheel-ratio", exit=rc, shown=first_error(stderr), note=f"peak RSS {peak >> 20} MiB", roots=(tmp_path,)
    )


# --------------------------------------------------------------------------- rows 6, 8, 9: export


@pytest.fixture(scope="module")
def tiny_template(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    tiny = make_tiny(tmp_path_factory.mktemp("tiny"))
    result = run_cli("apply", "--checkout", str(tiny.checkout), "--config", str(tiny.config))
    assert result.exit_code == 0, result.stderr
    return tiny


@pytest.fixture
def tiny(tiny_template: Tiny, tmp_path: Path) -> Iterator[Tiny]:
    yield tiny_template.copy(tmp_path)


EXPORT_PATHS = {"supply-export-gitattributes": ".gitattributes", "supply-export-gitmodules": "python/.gitmodules"}


@pytest.mark.parametrize("case_id", [*EXPORT_PATHS, "supply-export-huge-file"])
def test_export_never_writes_what_apply_refuses(case_id: str, tiny: Tiny, tmp_path: Path) -> None:
    co = tiny.checkout
    path = EXPORT_PATHS.get(case_id, "python/pkg/huge.py")
    target = co / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if case_id == "supply-export-huge-file":
        target.write_bytes(b"x = 1\n" * ((8 << 20) // 6 + 2))  # just over the 8 MiB limit
    else:
        target.write_text("* text eol=crlf\n" if path.endswith("attributes") else '[submodule "x"]\n\tpath = x\n')
    git(co, "add", "-f", path)
    git(co, "commit", "-q", "-m", "local: a file apply refuses")
    before = _tree(tiny.root)
    result = run_cli("export", "--checkout", str(co), "--config", str(tiny.config))
    _one_line(case_id, result, (tmp_path,))
    assert _tree(tiny.root) == before
    assert path in result.stderr


def test_dep3_header_values_stay_one_line(tiny: Tiny, tmp_path: Path) -> None:
    """A commit whose author and message carry Unicode line breaks: export writes each header value on one line
    (the breaks escaped), and sgpatch's own parser reads back exactly what was written, no forged field."""
    co = tiny.checkout
    (co / "python/pkg/mod0.py").write_text((co / "python/pkg/mod0.py").read_text() + "\nX = 1\n")
    author = "Eve\u2028Origin: https://evil\rUpstream-Status: Accepted"
    message = "local: subject\u2029Origin: forged\n\nbody line\x85Upstream-Status: Accepted\x0cBug: x\n"
    env = {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": "eve@example.invalid"}
    subprocess.run(["git", "add", "-A"], cwd=co, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message],
        cwd=co,
        check=True,
        env={**os.environ, **env},
    )
    result = run_cli("export", "--checkout", str(co), "--config", str(tiny.config))
    assert result.exit_code == CASES["supply-dep3-line-breaks"].exit, result.stderr
    [new] = [p for p in tiny.series.glob("0003-*.patch")]
    data = new.read_bytes()
    header = data.split(b"\n---\n", 1)[0].decode()
    breaks = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    assert not any(c in header for c in breaks), repr(header)
    patch = parse_patch(data, new)
    fields = dict(patch.fields)
    assert fields["Forwarded"] == "no"  # the commit never set it: the forged Upstream-Status is only text
    assert "Upstream-Status" not in fields
    assert fields["Origin"] == "vendor"
    assert fields["Author"] == "Eve\\u2028Origin: https://evil\\rUpstream-Status: Accepted <eve@example.invalid>"
    assert fields["Description"].startswith("local: subject\\u2029Origin: forged\n")
    assert [k for k, _ in patch.fields] == ["Description", "Origin", "Author", "Forwarded", "Last-Update"]
    record("supply-dep3-line-breaks", exit=0, shown=f"Author: {fields['Author']}", roots=(tmp_path,))


# --------------------------------------------------------------------------- what still works


def test_a_pinned_file_for_another_platform_is_downloaded_by_name(
    use_index: Callable[..., Path], tmp_path: Path
) -> None:
    """Any pinned wheel is fetched by its file name and sha256, whatever this host's tags (an aarch64 cp312
    wheel on this x86_64 host), with the index's credentials when it is on the index's own host; an index
    that lists other files too, a yanked copy and md5-only entries of other versions, is read as it should."""
    from sgpatch.source.artifacts import fetch_artifact

    name = "sglang-0.5.9-cp312-cp312-manylinux_2_34_aarch64.whl"
    data = b"PK\x05\x06" + bytes(18)  # an empty zip: only its bytes matter here
    pin = Artifact("wheel", name, hashlib.sha256(data).hexdigest())
    with crafted_index() as index:
        page = index.serve_files({name: data, "sglang-0.5.8.tar.gz": b"old"}, extra={name: {"yanked": "a reason"}})
        page["files"][1]["hashes"] = {"md5": "0" * 32}
        index.page(json.dumps(page).encode())
        cache = use_index(index, credentials="user:s3cret@")
        got = fetch_artifact(pin, "0.5.9")
    assert got == cache / "sgpatch/artifacts" / pin.sha256 / name and got.read_bytes() == data
    token = "Basic dXNlcjpzM2NyZXQ="
    assert [(s.path, s.headers.get("Authorization")) for s in index.seen] == [
        ("/simple/sglang/", token),
        (f"/files/{name}", token),
    ]


def test_verify_wheel_names_an_absurd_requirement(tmp_path: Path) -> None:
    """The same rule for a wheel handed to ``verify --wheel``: its check fails naming the requirement."""
    from .test_hostile import _with

    wheel = tmp_path / "sglang-0.5.9-py3-none-any.whl"
    absurd = b"cuda-python==1." + b"0" * 5000
    wheel.write_bytes(
        _with(METADATA=b"Metadata-Version: 2.1\nName: sglang\nVersion: 0\nRequires-Dist: " + absurd + b"\n\n")
    )
    result = run_cli("verify", "--wheel", str(wheel), "--json", "--config", str(REPO / "VERSIONS.toml"), catch=True)
    assert result.exit_code == 1, result.stderr
    [failure] = [f for f in json.loads(result.stdout)["failures"] if f.startswith("requires:")]
    assert "cuda-python==1.000" in failure and "a number of 5000 digits" in failure
