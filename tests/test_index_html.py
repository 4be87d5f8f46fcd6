"""An index that serves only PEP 503 HTML pages: read as the JSON document it stands for, checked the same.

Every index is a real HTTP server on 127.0.0.1 (tests/indexserver.py) answering
``text/html``; the HTML is written by tests/indexserver.py's ``as_html`` from the
PEPs, independently of sgpatch's reader, from the same page a JSON index serves,
so the two can be compared.  Each test runs the real CLI or the real client and
asserts the exit code, the line the user reads and what was (not) downloaded,
cached or sent.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sgpatch.config import Artifact, load_config
from sgpatch.source.index import ACCEPT, parse_project_page, release_files

from .helpers import REPO, copy_project, json_out, run_cli
from .indexserver import as_html, crafted_index
from .reliability import record
from .test_supply import SDIST_059, _one_line, _tree, real_artifacts, use_index

__all__ = ["real_artifacts", "use_index"]  # the fixtures, shared with test_supply.py

STACK = load_config(REPO / "VERSIONS.toml").stack("0.5.9-cu130")


# --------------------------------------------------------------------------- (a) fetch through an HTML index


def test_fetch_through_an_html_only_index(
    use_index: Callable[..., Path], tmp_path: Path, real_artifacts: dict[str, Path]
) -> None:
    """The real pinned 0.5.9 sdist listed on a PEP 503 page: downloaded by its pin, and the checkout's commit
    is the pinned ``pypi_commit``, as through a JSON index; the request asked for JSON first (PEP 691's form)."""
    assert SDIST_059 is not None
    data = real_artifacts[SDIST_059.filename].read_bytes()
    with crafted_index() as index:
        index.html(index.serve_files({SDIST_059.filename: data}))
        cache = use_index(index)
        into = tmp_path / "co"
        result = run_cli("fetch", "--into", str(into), "--json", "--config", str(REPO / "VERSIONS.toml"))
    assert result.exit_code == 0, result.stderr
    assert json_out(result)["commit"] == STACK.pypi_commit
    assert (cache / "sgpatch/artifacts" / SDIST_059.sha256 / SDIST_059.filename).read_bytes() == data
    assert [s.path for s in index.seen] == ["/simple/sglang/", f"/files/{SDIST_059.filename}"]
    assert index.seen[0].headers["Accept"] == ACCEPT
    assert ACCEPT.startswith("application/vnd.pypi.simple.v1+json, ") and ACCEPT.endswith("text/html;q=0.1")
    record("supply-html-fetch", exit=0, shown=f"commit {STACK.pypi_commit}", roots=(tmp_path,))


# --------------------------------------------------------------------------- (b) a wrong #sha256=


def test_an_html_page_with_another_sha256_is_refused_before_download(
    use_index: Callable[..., Path], tmp_path: Path
) -> None:
    assert SDIST_059 is not None
    with crafted_index() as index:
        index.html(index.serve_files({SDIST_059.filename: b"crafted"}))  # listed with its own sha256
        cache = use_index(index)
        into = tmp_path / "co"
        result = run_cli("fetch", "--into", str(into), "--config", str(REPO / "VERSIONS.toml"), catch=True)
    shown = _one_line("supply-html-wrong-sha256", result, (tmp_path,))
    assert hashlib.sha256(b"crafted").hexdigest() in result.stderr and "sha256 mismatch" in shown
    assert [s.path for s in index.seen] == ["/simple/sglang/"]  # the file is never asked for
    assert not into.exists() and not list((cache / "sgpatch/artifacts").rglob("*.tar.gz"))


# --------------------------------------------------------------------------- (c) data-yanked, (e) JSON == HTML


def _release_page(index_url: str) -> dict[str, Any]:
    """A release of four files and two of another version: yanked with and without a reason, metadata
    hashes, an absolute URL, a file of another version with an md5 only and one under another name."""
    files = {
        "sglang-0.5.22.tar.gz": {"requires-python": ">=3.10", "core-metadata": {"sha256": "c" * 64}},
        "sglang-0.5.22-py3-none-any.whl": {"yanked": "broken <metadata> & more", "core-metadata": True},
        "sglang-0.5.22-cp312-cp312-manylinux_2_28_x86_64.whl": {"yanked": True},
        "sglang-0.5.22-cp312-cp312-manylinux_2_28_aarch64.whl": {"url": f"{index_url}/elsewhere/a%2Bb.whl"},
        "sglang-0.5.21.tar.gz": {"hashes": {"md5": "0" * 32}},
        "sglang_router-0.5.22.tar.gz": {},
    }
    entries = []
    for i, (name, extra) in enumerate(files.items()):
        entry = {"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": f"{i:x}" * 64}}
        entries.append({**entry, **extra})
    return {"meta": {"api-version": "1.1"}, "name": "sglang", "files": entries}


def test_json_and_html_pages_say_the_same(tmp_path: Path) -> None:
    """The same release as PEP 691 JSON and as PEP 503 HTML: the same parsed file list, fact by fact."""
    page = _release_page("http://127.0.0.1:9")
    url = "http://127.0.0.1:9/simple/sglang/"
    from_json = parse_project_page(json.dumps(page).encode(), "sglang", "0.5.22", page_url=url)
    from_html = parse_project_page(as_html(page), "sglang", "0.5.22", page_url=url, kind="html")
    assert from_html == from_json
    assert [(f.filename, f.yanked) for f in from_html] == [
        ("sglang-0.5.22-cp312-cp312-manylinux_2_28_aarch64.whl", False),
        ("sglang-0.5.22-cp312-cp312-manylinux_2_28_x86_64.whl", True),
        ("sglang-0.5.22-py3-none-any.whl", True),
        ("sglang-0.5.22.tar.gz", False),
    ]
    assert from_html[0].url == "http://127.0.0.1:9/elsewhere/a%2Bb.whl"
    assert from_html[3].url == "http://127.0.0.1:9/files/sglang-0.5.22.tar.gz"
    record("supply-html-differential", exit=0, shown=f"{len(from_html)} files, the same", roots=(tmp_path,))


def test_yanked_is_honoured_as_on_a_json_index(
    use_index: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HTTP, from a JSON index, an HTML index and a local (file://) HTML index: ``port`` sees the same
    release (yanked files left out), and a pinned file that is yanked is still fetched by its pin."""
    from sgpatch.source.artifacts import fetch_artifact

    wheel = "sglang-0.5.22-py3-none-any.whl"
    data = b"PK\x05\x06" + bytes(18)
    seen: dict[str, list[tuple[str, str, str, str, bool]]] = {}
    for form in ("json", "html", "file"):
        with crafted_index() as index:
            page = _release_page(index.url)
            index.serve_files({wheel: data}, extra={wheel: {"yanked": ""}})  # the file itself, served
            page["files"][1]["hashes"] = {"sha256": hashlib.sha256(data).hexdigest()}
            page["files"][1]["yanked"] = "" if form == "json" else True  # an empty reason is still yanked
            page["files"][1].pop("core-metadata")
            if form == "json":
                index.page(json.dumps(page).encode())
            else:
                index.html(page)
            cache = use_index(index)
            if form == "file":
                local = tmp_path / "local" / "simple" / "sglang"
                local.mkdir(parents=True, exist_ok=True)
                html = as_html(page).replace(b"../../files/", f"{index.url}/files/".encode())
                (local / "index.html").write_bytes(html)
                monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "local" / "simple").as_uri())
            port = str(index.port)
            seen[form] = [
                (f.filename, f.sha256, f.kind, f.url.replace(port, "P"), f.yanked)
                for f in release_files("sglang", "0.5.22")
            ]
            pin = Artifact("wheel", wheel, hashlib.sha256(data).hexdigest())
            got = fetch_artifact(pin, "0.5.22")
            assert got.read_bytes() == data
            (cache / "sgpatch/artifacts" / pin.sha256 / wheel).unlink()
    assert seen["json"] == seen["html"] == seen["file"]
    assert [f[0] for f in seen["html"]] == [
        "sglang-0.5.22-cp312-cp312-manylinux_2_28_aarch64.whl",
        "sglang-0.5.22.tar.gz",
    ]
    record("supply-html-yanked", exit=0, shown="yanked wheels left out; a yanked pin fetched", roots=(tmp_path,))


# --------------------------------------------------------------------------- (d) hostile pages


def _link(name: str, href: str) -> bytes:
    return f'<a href="{href}#sha256={"0" * 64}">{name}</a>\n'.encode()


_WHL = "sglang-0.5.22-py3-none-any.whl"
HOSTILE: dict[str, bytes] = {
    "supply-html-huge": b"<html><body>" + b"<p>padding</p>" * ((17 << 20) // 14) + b"</body></html>",
    "supply-html-many-links": b"<html><body>" + b"<a href=x>x</a>" * 100_000 + b"</body></html>",
    "supply-html-many-tags": b"<html><body>" + b"<b>" * 300_000 + b"</body></html>",
    "supply-html-long-tag": b'<html><body><a href="x" ' + b"data-x " * 20_000 + b">x</a></body></html>",
    "supply-html-javascript-url": _link(_WHL, "javascript:alert(1)//" + _WHL),
    "supply-html-file-url": _link(_WHL, "file:///etc/passwd"),
    "supply-html-credentials-url": _link(_WHL, "http://user:s3cret@localhost:{other}/files/" + _WHL),
    "supply-html-base-credentials": b'<base href="http://u:p@localhost:{other}/x/">' + _link(_WHL, _WHL),
    "supply-html-marked-section": b"<html><body><![x[ a ]]>" + _link(_WHL, _WHL),
    "supply-html-not-utf8": b"<html><body>\xff\xfe<a href=x>x</a></body></html>",
    "supply-html-bad-version": b'<meta name="pypi:repository-version" content="2.0">' + _link(_WHL, _WHL),
}


def test_a_hostile_html_page_is_one_line_and_exit_3(use_index: Callable[..., Path], tmp_path: Path) -> None:
    """Each page refused with exit 3 and one line naming the index, never exit 4; the project untouched; no
    other host asked, nothing downloaded."""
    proj = copy_project(tmp_path / "proj")
    before = _tree(proj)
    for case_id, body in HOSTILE.items():
        with crafted_index("localhost") as other, crafted_index() as index:
            index.page(body.replace(b"{other}", str(other.port).encode()), kind="text/html")
            use_index(index, port=True)
            result = run_cli("port", "--to", "0.5.22", "--config", str(proj / "VERSIONS.toml"), catch=True)
        shown = _one_line(case_id, result, (tmp_path,))
        assert f"127.0.0.1:{index.port}" in shown, (case_id, shown)
        assert "s3cret" not in result.stderr and "u:p@" not in result.stderr, result.stderr
        assert other.seen == [] and [s.path for s in index.seen] == ["/simple/sglang/"], case_id
        assert _tree(proj) == before


def test_random_html_is_read_or_refused_with_exit_3() -> None:
    """Seeded random pages from HTML's special characters (marked sections, declarations, charrefs, links):
    each is read or refused as malformed (exit 3), never another error.  Before the reader caught it, the
    stdlib parser's AssertionError on ``<![x[`` came out of here as an internal error."""
    from sgpatch.errors import EnvironmentFailure

    rng = random.Random(503)
    alphabet = [*b"<>!-[]/=\"' &#x;a", *b"\xc3\xa9"]
    tokens = [b"<a href=", b"sglang-0.5.22.tar.gz", b"#sha256=" + b"0" * 64, b"<![", b"<!--", b"<base href=", b"</a>"]
    read = refused = 0
    for _ in range(5000):
        parts = [rng.choice(tokens) if rng.random() < 0.2 else bytes([rng.choice(alphabet)]) for _ in range(40)]
        try:
            parse_project_page(b"".join(parts), "sglang", "0.5.22", page_url="http://h/simple/sglang/", kind="html")
            read += 1
        except EnvironmentFailure as exc:
            assert exc.exit_code == 3 and "malformed HTML page" in exc.message, exc.message
            refused += 1
    assert read and refused  # both ends reached
