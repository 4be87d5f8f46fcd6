"""A package index on 127.0.0.1 that answers what a test crafts (issue 18).

``CraftedIndex`` is a real HTTP server in a thread: each path answers with a
``Reply`` (a status, headers and body), raw bytes written to the socket as they
are (a bad status line, a header of 70 KiB, a broken chunk), or a trickle of
one byte at a time.  It records every request it received (path and headers),
so a test can prove what a client sent where.  Everything it does is bounded in
time: a trickle stops after ``TRICKLE_BOUND`` seconds, and leaving the ``with``
block stops the server.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import html
import http.server
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
TRICKLE_BOUND = 30.0  # seconds: how long a trickle lasts at most, so that a client without a deadline ends too


@dataclass(frozen=True)
class Reply:
    """What one path answers."""

    body: bytes = b""
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    raw: bytes | None = None  # written to the socket as is, instead of a response
    trickle: bool = False  # the bytes (raw or the body after the headers) sent one at a time
    trickle_headers: bool = False  # the headers too
    interval: float = 0.25


@dataclass
class Seen:
    path: str
    headers: dict[str, str]


@dataclass
class CraftedIndex:
    host: str = "127.0.0.1"
    tls: tuple[Path, Path] | None = None  # certificate and key: serve https
    auth: str | None = None  # the Authorization value every request must carry (else 401), as a private index
    replies: dict[str, Reply] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                index.seen.append(Seen(self.path, {k: v for k, v in self.headers.items()}))
                reply = index.replies.get(self.path.split("?")[0]) or Reply(b"not here", 404)
                if index.auth is not None and self.headers.get("Authorization") != index.auth:
                    reply = Reply(b"who are you?", 401, (("WWW-Authenticate", 'Basic realm="private"'),))
                with contextlib.suppress(OSError):  # the client may stop reading at its bound
                    index._answer(self, reply)
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def _answer(self, handler: http.server.BaseHTTPRequestHandler, reply: Reply) -> None:
        out = handler.wfile
        if reply.raw is not None:
            head, body = b"", reply.raw
        else:
            lines = [f"HTTP/1.1 {reply.status} X\r\n"]
            names = {k.lower() for k, _ in reply.headers}
            if "content-length" not in names and "transfer-encoding" not in names:
                lines.append(f"Content-Length: {len(reply.body)}\r\n")
            lines += [f"{k}: {v}\r\n" for k, v in reply.headers]
            lines.append("Connection: close\r\n\r\n")
            head, body = "".join(lines).encode("latin-1"), reply.body
        if reply.trickle_headers:
            body, head = head + body, b""
        out.write(head)
        out.flush()
        if not reply.trickle:
            out.write(body)
            out.flush()
            return
        end = time.monotonic() + TRICKLE_BOUND
        for i in range(len(body)):
            if self._stop.is_set() or time.monotonic() > end:
                return
            out.write(body[i : i + 1])
            out.flush()
            self._stop.wait(reply.interval)

    def __enter__(self) -> CraftedIndex:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    # ---------------------------------------------------------------- a project page and its files

    def serve_files(
        self,
        files: dict[str, bytes],
        *,
        listed: dict[str, str] | None = None,
        extra: dict[str, dict[str, Any]] | None = None,
        project: str = "sglang",
    ) -> dict[str, Any]:
        """List ``files`` on the project's JSON page (sha256 as ``listed`` says, else their own) and serve
        each at ``/files/<name>``; ``extra`` adds or replaces fields of an entry.  Returns the page."""
        entries = []
        for name, data in files.items():
            entry: dict[str, Any] = {
                "filename": name,
                "url": f"../../files/{name}",
                "hashes": {"sha256": (listed or {}).get(name) or hashlib.sha256(data).hexdigest()},
                "requires-python": ">=3.10",
                "size": len(data),
                "yanked": False,
            }
            entry.update((extra or {}).get(name, {}))
            entries.append(entry)
            self.replies[f"/files/{name}"] = Reply(data, headers=(("Content-Type", "application/octet-stream"),))
        page = {"meta": {"api-version": "1.1"}, "name": project, "files": entries}
        self.page(json.dumps(page).encode(), project=project)
        return page

    def page(self, body: bytes, *, project: str = "sglang", kind: str = JSON_TYPE, **reply: Any) -> None:
        self.replies[f"/simple/{project}/"] = Reply(body, headers=(("Content-Type", kind),), **reply)

    def html(self, page: dict[str, Any], *, project: str = "sglang", kind: str = "text/html") -> bytes:
        """Serve the JSON ``page`` (as ``serve_files`` makes it) as the PEP 503 HTML page saying the same."""
        body = as_html(page)
        self.page(body, project=project, kind=kind)
        return body


def as_html(page: dict[str, Any]) -> bytes:
    """The PEP 503 page (with PEP 592, 629 and 658/714 attributes) that says what the PEP 691 ``page`` says.

    Written here by hand from the PEPs, independently of sgpatch's reader: the differential tests compare
    what sgpatch reads from the two."""
    q = functools.partial(html.escape, quote=True)
    lines = [
        "<!DOCTYPE html>",
        "<html><head>",
        f'<meta name="pypi:repository-version" content="{q(page["meta"]["api-version"])}">',
        f"<title>Links for {q(page.get('name', ''))}</title></head><body>",
        f"<h1>Links for {q(page.get('name', ''))}</h1>",
    ]
    for f in page["files"]:
        hashes = f.get("hashes", {})
        name = "sha256" if "sha256" in hashes else next(iter(hashes), None)
        href = f["url"] + (f"#{name}={hashes[name]}" if name else "")
        attrs = [f'href="{q(href)}"']
        if f.get("requires-python") is not None:
            attrs.append(f'data-requires-python="{q(f["requires-python"])}"')
        if f.get("yanked", False) is not False:
            attrs.append(f'data-yanked="{q(f["yanked"]) if isinstance(f["yanked"], str) else ""}"')
        meta = f.get("core-metadata")
        if isinstance(meta, dict):
            value = "=".join(next(iter(meta.items())))
            attrs += [f'data-core-metadata="{value}"', f'data-dist-info-metadata="{value}"']
        elif meta is True:
            attrs += ['data-core-metadata="true"', 'data-dist-info-metadata="true"']
        lines.append(f"<a {' '.join(attrs)}>{q(f['filename'])}</a><br />")
    lines.append("</body></html>")
    return "\n".join(lines).encode()


@contextlib.contextmanager
def crafted_index(host: str = "127.0.0.1", tls: tuple[Path, Path] | None = None) -> Iterator[CraftedIndex]:
    with CraftedIndex(host, tls) as index:
        yield index


def self_signed(where: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (and its key), made by openssl: pip's ``cert`` for a test's https index."""
    cert, key = where / "cert.pem", where / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"]
    subprocess.run(
        ["openssl", *request, "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key
