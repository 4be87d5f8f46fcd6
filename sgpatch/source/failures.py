"""What a failed request to an index says: one line naming the URL (without credentials) and what failed
(refused, DNS, timeout, TLS, an HTTP status), with the hint that helps; a missing page is ``NotFound``."""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.error
import urllib.parse

from sgpatch.errors import EnvironmentFailure

MAX_REDIRECTS = 5


class NotFound(EnvironmentFailure):
    """The server has no such page or file (HTTP 404 or 410, a missing local file)."""


POINT_PIP = (
    "point pip at a reachable index: PIP_INDEX_URL=URL, or pip config set global.index-url URL "
    "(pip config list shows what is set)"
)


def request_failure(url: str, exc: BaseException) -> EnvironmentFailure:
    """One line for what went wrong with a request."""
    hint = "check the package index configured for pip (pip config list)"
    if isinstance(exc, urllib.error.HTTPError):
        exc.close()
        if 300 <= exc.code < 400:
            return EnvironmentFailure(f"{url}: redirects in a loop or more than {MAX_REDIRECTS} times", hint=hint)
        kind = NotFound if exc.code in (404, 410) else EnvironmentFailure
        if exc.code in (401, 403):
            hint = "give the index's credentials as pip takes them: in its URL, in ~/.netrc, or in keyring"
        return kind(f"{url}: the index answered HTTP {exc.code}", hint=hint)
    if isinstance(exc, http.client.IncompleteRead) and exc.expected is not None:
        return EnvironmentFailure(
            f"{url}: the connection ended early ({len(exc.partial)} bytes read, {exc.expected} more expected)",
            hint=hint,
        )
    if isinstance(exc, http.client.RemoteDisconnected):
        return EnvironmentFailure(f"{url}: the server closed the connection without an answer", hint=hint)
    if isinstance(exc, http.client.HTTPException):
        detail = str(exc)[:80] or type(exc).__name__
        return EnvironmentFailure(f"{url}: malformed HTTP answer: {type(exc).__name__}: {detail!r}", hint=hint)
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, http.client.HTTPException):
        return request_failure(url, reason)
    what, why_hint = unreachable(url, reason)
    return Unreachable(f"cannot reach the index {url}: {what}", hint=why_hint)


class Unreachable(EnvironmentFailure):
    """The index could not be reached at all: refused, a name that does not resolve, a timeout, TLS."""


def unreachable(url: str, reason: object) -> tuple[str, str]:
    """What failed, in words (connection refused, DNS, timeout, TLS certificate), and the hint for it."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = None
    if isinstance(reason, ssl.SSLCertVerificationError):
        detail = reason.verify_message or str(reason)
        return (
            f"TLS: the server's certificate is not trusted ({str(detail)[:120]})",
            "give pip the CA bundle that signed it: PIP_CERT=FILE or pip config set global.cert FILE; or " + POINT_PIP,
        )
    if isinstance(reason, ssl.SSLError):
        return f"TLS handshake failed ({str(reason)[:120]})", POINT_PIP
    if isinstance(reason, ConnectionRefusedError):
        return f"connection refused (nothing listens on {host}:{port})", POINT_PIP
    if isinstance(reason, socket.gaierror):
        return f"DNS: the host name {host!r} does not resolve ({reason.strerror or reason})", POINT_PIP
    if isinstance(reason, TimeoutError | socket.timeout):
        return f"timed out connecting to {host}:{port}", POINT_PIP
    if isinstance(reason, ConnectionResetError):
        return "the connection was reset", POINT_PIP
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror, POINT_PIP
    return str(reason)[:200] or type(reason).__name__, POINT_PIP
