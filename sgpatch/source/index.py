"""The package index's JSON API (PEP 691): every file a release publishes, with its sha256.

``port`` pins every wheel a stack may be served from (one per CPython version
and platform), not only the one pip would pick on the porting machine.  The
index asked is the one pip is configured with (``PIP_INDEX_URL``, else pip's
``index-url`` setting, else PyPI), with pip's certificate bundle and the
environment's proxy.  The answer is hostile input: read up to a bound, parsed,
and every field used is validated; a network failure or a malformed answer is
exit 3 with one line.  Only the names and hashes are taken from it: the files
themselves still come through pip and are checked against these hashes.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.tags import Tag
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from sgpatch.config import Artifact
from sgpatch.errors import EnvironmentFailure

DEFAULT_INDEX = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json"
MAX_ANSWER = 64 << 20  # sglang's page is ~0.2 MB today; a bigger answer is refused, not read
TIMEOUT = 60
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PLAIN = re.compile(r"^[A-Za-z0-9._+-]{1,255}$")
# Platforms the CUDA stacks are served on: Linux x86_64 and aarch64 (and pure-Python wheels).
_SERVED = re.compile(r"^(any|manylinux[0-9_]*_(x86_64|aarch64)|linux_(x86_64|aarch64))$")


@dataclass(frozen=True, slots=True)
class IndexFile:
    filename: str
    sha256: str
    kind: str  # "sdist" or "wheel"


def _pip_setting(key: str) -> str | None:
    """pip's own setting ``key`` (e.g. ``index-url``), environment first, as ``pip config list`` shows it."""
    env = os.environ.get(f"PIP_{key.upper().replace('-', '_')}")
    if env:
        return env.split()[0]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            timeout=TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found: dict[str, str] = {}
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        name, sep, value = line.partition("=")
        section, _, option = name.rpartition(".")
        if sep and option == key:
            found[section] = value.strip().strip("'\"")
    for section in (":env:", "site", "user", "global", "install", "download"):
        if found.get(section):
            return found[section].split()[0]
    return None


def index_url() -> str:
    """The index pip downloads from: its configured ``index-url``, else PyPI."""
    return (_pip_setting("index-url") or DEFAULT_INDEX).rstrip("/")


def shown(url: str) -> str:
    """``url`` as messages show it: without a ``user:password@`` part (index URLs may carry credentials)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def _context() -> ssl.SSLContext:
    cert = _pip_setting("cert")
    try:
        return ssl.create_default_context(cafile=cert) if cert else ssl.create_default_context()
    except (OSError, ssl.SSLError) as exc:
        raise EnvironmentFailure(f"pip's certificate bundle {cert}: cannot be read: {exc}") from None


def fetch_project_page(project: str, *, url: str | None = None) -> bytes:
    """The JSON project page of ``project`` at the index (bounded); EnvironmentFailure (exit 3) otherwise."""
    base = url or index_url()
    if not base.startswith(("https://", "http://", "file://")):
        raise EnvironmentFailure(
            f"pip's index URL {shown(base)!r} is not http(s) or file", hint="check pip config list"
        )
    page = f"{base}/{canonicalize_name(project)}/"
    where = shown(page)
    headers = {"Accept": ACCEPT, "User-Agent": "sgpatch"}
    parts = urllib.parse.urlsplit(page)
    if "@" in parts.netloc:  # credentials in the index URL, as pip accepts them: sent as HTTP basic auth
        userinfo, _, host = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        token = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        page = urllib.parse.urlunsplit(parts._replace(netloc=host))
    request = urllib.request.Request(page, headers=headers)
    hint = "check the package index configured for pip (pip config list)"
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=_context()) as answer:
            kind = (answer.headers.get("Content-Type") or "").split(";")[0].strip()
            if page.startswith("http") and kind != ACCEPT:
                raise EnvironmentFailure(
                    f"{where}: answered {kind or 'no content type'}, not the JSON API (PEP 691)",
                    hint="the index must serve application/vnd.pypi.simple.v1+json",
                )
            data: bytes = answer.read(MAX_ANSWER + 1)
    except urllib.error.HTTPError as exc:
        raise EnvironmentFailure(f"{where}: the index answered HTTP {exc.code}", hint=hint) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EnvironmentFailure(f"{where}: cannot reach the index: {reason}", hint=hint) from None
    if len(data) > MAX_ANSWER:
        raise EnvironmentFailure(f"{where}: the answer is over {MAX_ANSWER >> 20} MiB: refused")
    return data


def parse_project_page(data: bytes, project: str, version: str, *, where: str = "the index") -> list[IndexFile]:
    """The files of ``project`` ``version`` that a JSON project page lists (yanked ones left out).

    Every field used is checked: a malformed answer is EnvironmentFailure (exit 3) naming what is wrong.
    """

    def bad(what: str) -> EnvironmentFailure:
        return EnvironmentFailure(f"{where}: malformed answer: {what}", hint="the index is not a PEP 691 index")

    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    meta = doc.get("meta")
    if not isinstance(meta, dict) or not isinstance(meta.get("api-version"), str):
        raise bad("no meta.api-version")
    if not meta["api-version"].startswith("1."):
        raise bad(f"api-version {meta['api-version'][:20]!r} is not 1.x")
    files = doc.get("files")
    if not isinstance(files, list):
        raise bad("no files list")
    want = Version(version)
    out: dict[str, IndexFile] = {}
    for i, item in enumerate(files):
        if not isinstance(item, dict) or not isinstance(item.get("filename"), str):
            raise bad(f"files[{i}] has no filename")
        name = item["filename"]
        if not _PLAIN.match(name) or name.startswith("."):
            raise bad(f"files[{i}].filename {name[:80]!r} is not a plain file name")
        parsed = _release_of(name, project)
        if parsed is None or parsed[0] != want:
            continue
        if item.get("yanked") not in (None, False):
            continue
        hashes = item.get("hashes")
        sha = hashes.get("sha256") if isinstance(hashes, dict) else None
        if not isinstance(sha, str) or not _HEX64.match(sha):
            raise bad(f"{name}: no sha256 of 64 lowercase hex digits")
        if name in out and out[name].sha256 != sha:
            raise bad(f"{name} listed twice with different sha256")
        out[name] = IndexFile(name, sha, parsed[1])
    return sorted(out.values(), key=lambda f: f.filename)


def _release_of(filename: str, project: str) -> tuple[Version, str] | None:
    try:
        if filename.endswith(".whl"):
            name, ver, _, _ = parse_wheel_filename(filename)
            kind = "wheel"
        elif filename.endswith(".tar.gz"):
            name, ver = parse_sdist_filename(filename)
            kind = "sdist"
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return (ver, kind) if name == canonicalize_name(project) else None


def served(tags: Iterable[Tag]) -> bool:
    """Whether a wheel with ``tags`` can be installed on a Linux x86_64/aarch64 CPython serving host."""
    return any(
        _SERVED.match(t.platform) and (t.interpreter.startswith("cp3") or t.interpreter in ("py3", "py2.py3"))
        for t in tags
    )


def release_files(project: str, version: str, *, url: str | None = None) -> list[IndexFile]:
    """The sdist and the served wheels (Linux x86_64/aarch64 CPython, or pure) of a release, with sha256."""
    base = url or index_url()
    files = parse_project_page(fetch_project_page(project, url=base), project, version, where=shown(base))
    return [f for f in files if f.kind == "sdist" or served(parse_wheel_filename(f.filename)[3])]


def as_artifacts(files: Iterable[IndexFile]) -> tuple[Artifact, ...]:
    return tuple(Artifact(f.kind, f.filename, f.sha256) for f in files)
