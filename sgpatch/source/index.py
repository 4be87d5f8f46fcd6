"""The package index's simple API: every file a release publishes, with its sha256 and URL.

Asked for the JSON API (PEP 691) and, on an index that serves only HTML, read
from its PEP 503 page (sgpatch.source.simple_html turns that into the same JSON
document, so both are checked and used by the one path below).

The indexes asked are the ones pip is configured with: ``index-url`` (else
PyPI) and each ``extra-index-url``, with pip's ``cert`` bundle and ``proxy``
(else the environment's), read from the environment (``PIP_INDEX_URL``, ...)
and from ``pip config list`` once (within the deadline); never a hard-coded
host but PyPI's as pip's own default.  ``port`` lists a release's files on the
first of them (the one pip downloads from), and pins every wheel a stack may be
served from (one per CPython version and platform).  ``locate`` finds a pinned
file on any of them: an index that lists it with another sha256 is passed over,
and the file itself is then downloaded by sgpatch.source.artifacts and checked
against the pin before any byte of it is used.

An answer is hostile input: at most MAX_ANSWER bytes, counted before it is
parsed (arrays and objects, values, nesting; tags and links for HTML), then
every field of every file checked for the type PEP 691/700 gives it, and every
file URL of the release for its scheme and for credentials (never taken from a
page).  Anything else is exit 3 with one line naming the index.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

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
from sgpatch.errors import EnvironmentFailure, SourceError
from sgpatch.source.failures import NotFound
from sgpatch.source.findlinks import find_pinned, not_found
from sgpatch.source.http import (
    Client,
    bad_port,
    origin,
    shown,
    split_credentials,
)
from sgpatch.source.pipconfig import pip_settings
from sgpatch.source.simple_html import read_page

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPES = ("text/html", "application/vnd.pypi.simple.v1+html")
ACCEPT = f"{JSON_TYPE}, {HTML_TYPES[1]};q=0.2, text/html;q=0.1"  # PEP 691's recommended form
MAX_FILE = 1 << 30  # bytes of a find-links file hashed (sgpatch.source.archive.MAX_DOWNLOAD)
MAX_ANSWER = 16 << 20  # bytes; sglang's page is 0.17 MB for 412 files today
MAX_CONTAINERS = 250_000  # arrays and objects in one answer (today: about 830)
MAX_VALUES = 1_000_000  # commas, i.e. values and keys beyond the first of each (today: about 3,000)
MAX_DEPTH = 32  # nesting (a PEP 691 page nests 4 deep)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PLAIN = re.compile(r"^[A-Za-z0-9._+-]{1,255}$")
# Platforms the CUDA stacks are served on: Linux x86_64 and aarch64 (and pure-Python wheels).
_SERVED = re.compile(r"^(any|manylinux[0-9_]*_(x86_64|aarch64)|linux_(x86_64|aarch64))$")
_HINT = "check the package index configured for pip (pip config list)"


@dataclass(frozen=True, slots=True)
class IndexFile:
    filename: str
    sha256: str
    kind: str  # "sdist" or "wheel"
    url: str = ""  # absolute, without credentials
    yanked: bool = False
    size: int | None = None
    version: str = ""  # normalized (PEP 440); "" for a name of the project whose version is not PEP 440


# --------------------------------------------------------------------------- pip's configuration


# --------------------------------------------------------------------------- asking an index


def fetch_project_page(project: str, base: str, client: Client) -> tuple[bytes, str, str]:
    """The project page of ``project`` at the index ``base`` (bounded), the URL it came from and its format
    (``json`` or ``html``); NotFound when the index has no such project, EnvironmentFailure (exit 3) otherwise.

    A local index (``file://``) is a directory: the page is its ``index.html`` (as pip reads it), or a
    JSON file if it starts with ``{``."""
    if not base.startswith(("https://", "http://", "file://")):
        raise EnvironmentFailure(f"pip's index URL {shown(base)!r} is not http(s) or file", hint=_HINT)
    page = f"{base}/{canonicalize_name(project)}/"
    if page.startswith("file:") and os.path.isdir(urllib.request.url2pathname(urllib.parse.urlsplit(page).path)):
        page += "index.html"
    buf = bytearray()
    answer = client.get(page, accept=ACCEPT, max_bytes=MAX_ANSWER, sink=buf.extend, what="the answer")
    if not page.startswith("http"):
        return bytes(buf), answer.url, "json" if buf.lstrip()[:1] == b"{" else "html"
    if answer.content_type == JSON_TYPE:
        return bytes(buf), answer.url, "json"
    if answer.content_type in HTML_TYPES:
        return bytes(buf), answer.url, "html"
    raise EnvironmentFailure(
        f"{shown(page)}: answered {answer.content_type[:60] or 'no content type'!r}, "
        "not the JSON (PEP 691) or HTML (PEP 503) simple API",
        hint=f"the index must serve {JSON_TYPE} or text/html",
    )


def _check_shape(data: bytes, bad: Any) -> None:
    """Refuse an answer that would make a huge or deep object, before it is parsed.

    Brackets and commas are counted in the raw bytes (inside strings too, so the counts are upper
    bounds); what they miss (a string's brackets hiding nesting) the parser's own recursion check catches.
    """
    containers = data.count(b"[") + data.count(b"{")
    if containers > MAX_CONTAINERS:
        raise bad(f"more than {MAX_CONTAINERS} arrays and objects")
    if data.count(b",") > MAX_VALUES:
        raise bad(f"more than {MAX_VALUES} values")
    brackets = data.translate(None, _NOT_BRACKETS)
    if max(accumulate(1 if b in b"[{" else -1 for b in brackets), default=0) > MAX_DEPTH:
        raise bad(f"nested deeper than {MAX_DEPTH} levels")


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")

# The fields of a file (PEP 691, 700, 714, 740) and the types they may have; others are ignored.
_STR, _OPT_STR, _BOOL = (str,), (str, type(None)), (bool,)
_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "filename": (_STR, "a string"),
    "url": (_STR, "a string"),
    "hashes": ((dict,), "an object"),
    "requires-python": (_OPT_STR, "a string or null"),
    "yanked": ((bool, str), "true, false or a reason"),
    "size": ((int,), "a non-negative integer"),
    "upload-time": (_OPT_STR, "a string or null"),
    "gpg-sig": (_BOOL, "true or false"),
    "dist-info-metadata": ((bool, dict), "true, false or an object of hashes"),
    "data-dist-info-metadata": ((bool, dict), "true, false or an object of hashes"),
    "core-metadata": ((bool, dict), "true, false or an object of hashes"),
    "provenance": (_OPT_STR, "a string or null"),
}


def _check_file(item: Any, i: int, bad: Any) -> None:
    if not isinstance(item, dict):
        raise bad(f"files[{i}] is not an object")
    for key, (types, words) in _FIELDS.items():
        if key not in item:
            if key in ("filename", "hashes"):
                raise bad(f"files[{i}] has no {key}")
            continue
        value = item[key]
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)  # True is an int
        if ok and isinstance(value, int) and value < 0:
            ok = False
        if ok and isinstance(value, dict):
            ok = all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        if not ok:
            name = item.get("filename") if isinstance(item.get("filename"), str) else f"files[{i}]"
            raise bad(f"{str(name)[:80]!r}: {key!r} is {type(value).__name__}, not {words}")


def parse_project_page(
    data: bytes, project: str, version: str | None, *, where: str = "the index", page_url: str = "", kind: str = "json"
) -> list[IndexFile]:
    """The files of ``project`` ``version`` (None: of every version) that a project page lists (yanked ones
    marked; with ``version=None`` also the names of the project whose version is not PEP 440, unchecked): a JSON page
    (PEP 691), or with ``kind="html"`` an HTML one (PEP 503), read as the JSON document it stands for.

    Every field of every file is checked by type, and the files of the release must carry a sha256 and a
    URL (resolved against ``page_url``): a malformed answer is EnvironmentFailure (exit 3) naming what is wrong.
    """
    html = kind == "html"

    def bad(what: str) -> EnvironmentFailure:
        return EnvironmentFailure(
            f"{where}: malformed {'HTML page' if html else 'answer'}: {what}",
            hint=f"the index is not a {'PEP 503' if html else 'PEP 691'} index",
        )

    if len(data) > MAX_ANSWER:
        raise bad(f"over {MAX_ANSWER >> 20} MiB")
    doc = read_page(data, bad) if html else _json_document(data, bad)
    return _release_files(doc, project, version, page_url, bad)


def _json_document(data: bytes, bad: Any) -> Any:
    _check_shape(data, bad)
    try:
        return json.loads(data)
    except RecursionError:
        raise bad("nested deeper than the parser's limit") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"not JSON ({str(exc)[:80]})") from None


def _release_files(doc: Any, project: str, version: str | None, page_url: str, bad: Any) -> list[IndexFile]:
    """The release's files in a PEP 691 document, every file checked (the one path for JSON and HTML)."""
    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    meta = doc.get("meta")
    if not isinstance(meta, dict) or not isinstance(meta.get("api-version"), str):
        raise bad("no meta.api-version")
    if not meta["api-version"].startswith("1."):
        raise bad(f"api-version {meta['api-version'][:20]!r} is not 1.x")
    if "name" in doc and not isinstance(doc["name"], str):
        raise bad("'name' is not a string")
    if "versions" in doc and not (
        isinstance(doc["versions"], list) and all(isinstance(v, str) for v in doc["versions"])
    ):
        raise bad("'versions' is not a list of strings")
    files = doc.get("files")
    if not isinstance(files, list):
        raise bad("no files list")
    want = Version(version) if version is not None else None
    out: dict[str, IndexFile] = {}
    for i, item in enumerate(files):
        _check_file(item, i, bad)
        name = item["filename"]
        if not _PLAIN.match(name) or name.startswith("."):
            raise bad(f"files[{i}].filename {name[:80]!r} is not a plain file name")
        parsed = _release_of(name, project)
        if parsed is None and want is None and canonicalize_name(name.split("-")[0]) == canonicalize_name(project):
            out[name] = IndexFile(name, "", "")  # the project's, but no version pip could compare
        if parsed is None or parsed[0] != (want or parsed[0]):
            continue
        sha = item["hashes"].get("sha256")
        if not isinstance(sha, str) or not _HEX64.match(sha):
            raise bad(f"{name}: no sha256 of 64 lowercase hex digits")
        if name in out and out[name].sha256 != sha:
            raise bad(f"{name} listed twice with different sha256")
        url = _file_url(item.get("url"), page_url, name, bad)
        yanked = item.get("yanked", False) is not False
        out[name] = IndexFile(name, sha, parsed[1], url, yanked, item.get("size"), str(parsed[0]))
    return sorted(out.values(), key=lambda f: f.filename)


def _file_url(raw: object, page_url: str, name: str, bad: Any) -> str:
    """The absolute URL of a listed file: http(s), or a local file only on a local index."""
    if not page_url:
        return raw if isinstance(raw, str) else ""
    if not isinstance(raw, str) or not raw:
        raise bad(f"{name}: no url")
    url = urllib.parse.urljoin(page_url, raw.strip()).partition("#")[0]
    scheme = urllib.parse.urlsplit(url).scheme
    allowed = ("http", "https", "file") if page_url.startswith("file:") else ("http", "https")
    if scheme not in allowed:
        raise bad(f"{name}: url {shown(url)[:120]!r} is not {' or '.join(allowed)}")
    if "@" in urllib.parse.urlsplit(url).netloc:  # credentials come from pip's configuration, never from a page
        raise bad(f"{name}: url {shown(url)[:120]!r} carries credentials; refusing")
    if bad_port(url) is not None:  # checked before the credentials' origin is compared or a socket opened
        raise bad(f"{name}: url {shown(url)[:120]!r}: its port is not a port number (1-65535)")
    return url


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


def listing(project: str, version: str | None, base: str, client: Client) -> list[IndexFile]:
    data, page, kind = fetch_project_page(project, base, client)
    return parse_project_page(data, project, version, where=shown(base), page_url=page, kind=kind)


def release_files(project: str, version: str, *, url: str | None = None) -> list[IndexFile]:
    """The sdist and the served wheels (Linux x86_64/aarch64 CPython, or pure) of a release, with sha256,
    as pip's index lists them (yanked files left out)."""
    settings = pip_settings()
    if settings.no_index and url is None:
        raise EnvironmentFailure("pip is configured with no-index: the releases of sglang cannot be listed", hint=_HINT)
    base = url or settings.index_url
    try:
        files = listing(project, version, base, settings.client())
    except NotFound as exc:
        raise EnvironmentFailure(exc.message, hint=exc.hint) from None
    return [f for f in files if not f.yanked and (f.kind == "sdist" or served(parse_wheel_filename(f.filename)[3]))]


def locate(project: str, version: str, artifact: Artifact) -> tuple[IndexFile, str, Client]:
    """The pinned ``artifact`` as an index of pip's lists it with the pinned sha256, the index, and the client
    to download it with (the index's credentials on the file's URL when it is on the index's own host).

    SourceError (exit 2) when an index lists the file with another sha256 and none with the pinned one;
    EnvironmentFailure (exit 3) when no index lists it.
    """
    settings = pip_settings()
    client = settings.client()
    local, other = find_pinned(artifact.filename, artifact.sha256, settings.find_links, limit=MAX_FILE)
    if local is not None:
        return (
            IndexFile(artifact.filename, artifact.sha256, artifact.kind, local.url, size=local.size),
            local.location,
            client,
        )
    for base in () if settings.no_index else settings.indexes:
        try:
            files = listing(project, version, base, client)
        except NotFound:
            continue
        found = next((f for f in files if f.filename == artifact.filename), None)
        if found is None:
            continue
        if found.sha256 != artifact.sha256:
            other.append(f"{shown(base)} lists sha256 {found.sha256}")
            continue
        return _with_credentials(found, base), base, client
    if other:
        raise SourceError(
            f"{artifact.filename}: sha256 mismatch: expected {artifact.sha256}; " + "; ".join(other),
            hint="the index serves a different file than the one pinned in VERSIONS.toml; nothing was downloaded",
        )
    raise EnvironmentFailure(not_found(settings.find_links, settings.indexes, no_index=settings.no_index), hint=_HINT)


def _with_credentials(found: IndexFile, base: str) -> IndexFile:
    """``found`` with the index URL's credentials on its URL when the file is on the index's own host."""
    clean, auth = split_credentials(base)
    if auth is None or origin(found.url) != origin(clean):
        return found
    parts = urllib.parse.urlsplit(found.url)
    userinfo = urllib.parse.urlsplit(base).netloc.rpartition("@")[0]
    return IndexFile(
        found.filename,
        found.sha256,
        found.kind,
        urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}@{parts.netloc}")),
        found.yanked,
        found.size,
    )


def as_artifacts(files: Iterable[IndexFile]) -> tuple[Artifact, ...]:
    return tuple(Artifact(f.kind, f.filename, f.sha256) for f in files)
