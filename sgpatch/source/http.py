"""The one HTTP client of sgpatch: a package index's pages and files, read as hostile input.

Every request has an overall deadline (connect, headers and body together:
``SGPATCH_DEADLINE`` seconds, default 600), enforced by a watchdog that shuts the
connection down when it passes, so a server trickling one byte at a time ends
like any other failure; one read may also wait at most ``IDLE_TIMEOUT``.  Bodies
are read in chunks up to a byte cap given by the caller, streamed to it (hashed,
written to disk), never held whole unless it asks.  Credentials in a URL
(``https://user:token@host/simple``, as pip accepts them) are sent as HTTP basic
auth to that scheme, host and port only: a redirect elsewhere drops them, a
redirect to a URL carrying its own credentials, from https to http, or to
anything but http(s) is refused.  Every failure (refused, reset, TLS, a malformed
status line or header, a broken chunk, the deadline) is an EnvironmentFailure
(exit 3) naming the URL without its credentials; ``NotFound`` (404, 410, a missing
file) lets a caller ask the next index.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import os
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

from sgpatch.errors import ConfigError, EnvironmentFailure
from sgpatch.source.credentials import credentials_for
from sgpatch.source.failures import MAX_REDIRECTS, POINT_PIP, NotFound, Unreachable, request_failure

DEADLINE_ENV = "SGPATCH_DEADLINE"
DEFAULT_DEADLINE = 600.0  # seconds for one request (a page, or a file of up to MAX_DOWNLOAD), and for one pip run
IDLE_TIMEOUT = 60.0  # seconds one read may wait for a byte
CHUNK = 1 << 20

Sink = Callable[[bytes], None]


def deadline_seconds() -> float:
    """``SGPATCH_DEADLINE`` (seconds), else the default; ConfigError (exit 2) when it is not a number."""
    raw = os.environ.get(DEADLINE_ENV, "").strip()
    if not raw:
        return DEFAULT_DEADLINE
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 7 * 86400:
        raise ConfigError(f"{DEADLINE_ENV}={raw[:40]!r} is not a number of seconds (0 to a week)")
    return value


def deadline_text(seconds: float) -> str:
    """How messages name the deadline: ``the deadline of 600 s (SGPATCH_DEADLINE)``."""
    return f"the deadline of {seconds:g} s ({DEADLINE_ENV})"


def shown(url: str) -> str:
    """``url`` as messages show it: without a ``user:password@`` part."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def bad_port(url: str) -> str | None:
    """The port text of ``url`` when it is not 1-65535 in ASCII digits (``:83617``, ``:²``, ``:0``), else None.

    Checked before any decision uses the port: a socket would connect to 83617 mod 65536."""
    netloc = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]
    host_port = netloc.rpartition("]")[2] if netloc.startswith("[") else netloc
    _, sep, port = host_port.rpartition(":")
    if not sep or not port:
        return None
    if port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536:
        return None
    return port


def origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port of ``url``: where credentials given with it may go (a bad port: an origin of its
    own, equal to no other)."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if bad_port(url) is not None:
        port = -1
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port or default


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:password@`` part, and the basic-auth header value they make (or None)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    token = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), "Basic " + base64.b64encode(token).decode()


@dataclass(frozen=True, slots=True)
class Answer:
    """What a request got: the final URL (after redirects, without credentials), its type and size, and the
    sha256 of the body."""

    url: str
    content_type: str
    size: int
    sha256: str


# --------------------------------------------------------------------------- the deadline


class _Watchdog:
    """Shuts down every socket of one request when its deadline passes (a blocked read then returns)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._watched: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def remaining(self) -> float:
        return max(self.end - time.monotonic(), 0.001)

    def passed(self) -> bool:
        return self.expired or time.monotonic() >= self.end

    def watch(self, sock: socket.socket) -> None:
        """Keep a duplicate of ``sock``'s descriptor: shutting it down ends the connection, TLS or not."""
        with self._lock:
            dup = socket.socket(fileno=os.dup(sock.fileno()))
            self._watched.append(dup)
            if self.expired:
                self._shut(dup)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # already closed: nothing left to end
            sock.shutdown(socket.SHUT_RDWR)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._watched:
                self._shut(sock)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._watched:
                sock.close()
            self._watched.clear()


def _watched_connection(base: type[http.client.HTTPConnection], dog: _Watchdog) -> Callable[..., Any]:
    """A connection class of ``base`` whose socket the watchdog can shut down from its first byte."""

    def create(address: tuple[str, int], timeout: Any = None, source_address: Any = None) -> socket.socket:
        limit = min(IDLE_TIMEOUT, dog.remaining())
        sock = socket.create_connection(address, limit, source_address)
        dog.watch(sock)
        return sock

    def make(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
        conn = base(*args, **kwargs)
        conn._create_connection = create  # type: ignore[attr-defined]
        return conn

    return make


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, dog: _Watchdog) -> None:
        super().__init__()
        self._dog = dog

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_watched_connection(http.client.HTTPConnection, self._dog), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, dog: _Watchdog, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self._dog = dog
        self._ctx = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        make = _watched_connection(http.client.HTTPSConnection, self._dog)
        return self.do_open(make, req, context=self._ctx)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows up to MAX_REDIRECTS redirects to http(s); the credentials only to where they were given for."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, auth: str | None, auth_origin: tuple[str, str, int | None]) -> None:
        super().__init__()
        self._auth = auth
        self._origin = auth_origin

    def http_error_302(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Any
    ) -> Any:  # every redirect code comes here: the target is checked before urllib looks at it
        location = headers.get("location") or headers.get("uri")
        if location:
            where = shown(req.full_url)
            target = urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, location))
            if target.scheme not in ("http", "https"):
                raise EnvironmentFailure(f"{where}: redirects to a {target.scheme} URL; refusing")
            if urllib.parse.urlsplit(req.full_url).scheme == "https" and target.scheme == "http":
                raise EnvironmentFailure(f"{where}: redirects from https to plain http; refusing")
            if "@" in target.netloc:
                raise EnvironmentFailure(f"{where}: redirects to a URL with credentials in it; refusing")
            if bad_port(target.geturl()) is not None:
                raise EnvironmentFailure(f"{where}: redirects to a URL whose port is not 1-65535; refusing")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and self._auth is not None and origin(new.full_url) == self._origin:
            new.add_unredirected_header("Authorization", self._auth)
        return new


# --------------------------------------------------------------------------- the client


class Client:
    """Requests with pip's certificate bundle (``cert``) and proxy (``proxy``, else the environment's)."""

    def __init__(self, *, cert: str | None = None, proxy: str | None = None, keyring: bool = False) -> None:
        self.cert = cert
        self.proxy = proxy
        self.keyring = keyring  # pip is configured to ask keyring (sgpatch.source.credentials)
        self._context: ssl.SSLContext | None = None

    def context(self) -> ssl.SSLContext:
        if self._context is None:
            try:
                self._context = ssl.create_default_context(cafile=self.cert or None)
            except (OSError, ssl.SSLError) as exc:
                raise EnvironmentFailure(
                    f"pip's certificate bundle {self.cert}: cannot be read: {exc}", hint="check pip config list"
                ) from None
        return self._context

    def get(self, url: str, *, accept: str, max_bytes: int, sink: Sink, what: str = "the answer") -> Answer:
        """GET ``url`` and hand its body to ``sink`` in chunks; at most ``max_bytes``, within the deadline.

        ``what`` names the body in the message when it is over the cap.  NotFound for a 404, 410 or a
        missing local file; EnvironmentFailure (exit 3) for anything else that goes wrong.
        """
        clean, _auth = split_credentials(url)
        scheme = urllib.parse.urlsplit(clean).scheme
        if scheme == "file":
            return _get_file(clean, max_bytes, sink, what)
        if scheme not in ("http", "https"):
            raise EnvironmentFailure(f"{shown(url)}: not an http(s) or file URL")
        if (port := bad_port(clean)) is not None:
            raise EnvironmentFailure(f"{shown(url)}: port {port[:20]!r} is not a port number (1-65535); refusing")
        seconds = deadline_seconds()
        auth = credentials_for(url, keyring=self.keyring, timeout=seconds)  # the URL's own, keyring or .netrc
        with _Watchdog(seconds) as dog:
            try:
                return self._get(clean, auth, dog, accept=accept, max_bytes=max_bytes, sink=sink, what=what)
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError, EOFError) as exc:
                if dog.passed():
                    raise Unreachable(
                        f"{clean}: timed out: no complete answer within {deadline_text(seconds)}",
                        hint=f"the index is too slow or stalled; set {DEADLINE_ENV} to wait longer, or {POINT_PIP}",
                    ) from None
                raise request_failure(clean, exc) from None

    def _get(
        self, url: str, auth: str | None, dog: _Watchdog, *, accept: str, max_bytes: int, sink: Sink, what: str
    ) -> Answer:
        opener = urllib.request.OpenerDirector()
        proxies = {"http": self.proxy, "https": self.proxy} if self.proxy else None
        for handler in (
            urllib.request.ProxyHandler(proxies),
            urllib.request.UnknownHandler(),
            _HTTP(dog),
            _HTTPS(dog, self.context()),
            urllib.request.HTTPDefaultErrorHandler(),
            _Redirects(auth, origin(url)),
            urllib.request.HTTPErrorProcessor(),
        ):
            opener.add_handler(handler)
        request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "sgpatch"})
        if auth is not None:
            request.add_unredirected_header("Authorization", auth)
        with opener.open(request, timeout=min(IDLE_TIMEOUT, dog.remaining())) as answer:
            final = shown(answer.geturl())
            length = (answer.headers.get("Content-Length") or "").strip()
            expected = int(length) if length.isascii() and length.isdigit() and len(length) < 20 else None
            if expected is not None and expected > max_bytes:
                raise _too_big(final, what, max_bytes)
            kind = (answer.headers.get("Content-Type") or "").split(";")[0].strip()
            h = hashlib.sha256()
            size = 0
            while True:
                chunk = answer.read(CHUNK)
                if dog.expired:
                    raise OSError("the deadline passed")
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise _too_big(final, what, max_bytes)
                h.update(chunk)
                sink(chunk)
            if expected is not None and size < expected:  # read(n) takes an early end for the end
                raise EnvironmentFailure(
                    f"{final}: the connection ended early ({size} of {expected} bytes)",
                    hint="check the package index configured for pip (pip config list)",
                )
        return Answer(final, kind, size, h.hexdigest())


def _too_big(url: str, what: str, max_bytes: int) -> EnvironmentFailure:
    return EnvironmentFailure(f"{url}: {what} is over {_size(max_bytes)}: refused")


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 and not n % (1 << 30) else f"{n >> 20} MiB"


def _get_file(url: str, max_bytes: int, sink: Sink, what: str) -> Answer:
    """A local index (``file://``): the file read in chunks, capped like an answer."""
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    h = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise _too_big(url, what, max_bytes)
                h.update(chunk)
                sink(chunk)
    except FileNotFoundError:
        raise NotFound(f"{url}: no such file") from None
    except OSError as exc:
        raise EnvironmentFailure(f"{url}: cannot read: {exc.strerror or exc}") from None
    return Answer(url, "", size, h.hexdigest())
