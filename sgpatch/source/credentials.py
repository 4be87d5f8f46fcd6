"""Credentials for a private index, found where pip finds them, for one URL's own host only.

pip's order (its "Authentication" page): the URL's own ``user:password@``, then
keyring, then ``.netrc``.  Here:

- ``https://user:password@host/simple``: those (the caller splits them off);
- ``https://user@host/simple`` (a user, no password) with pip configured to use
  keyring (``keyring-provider = subprocess`` or ``import`` in pip's configuration,
  or ``PIP_KEYRING_PROVIDER``): ``keyring get HOST USER``, the ``keyring`` command
  run as pip's subprocess provider runs it, its stdin closed, within the
  deadline; without an answer the user alone (a token as the user name);
- no user at all: the ``.netrc`` entry of the URL's host (``$NETRC`` or
  ``~/.netrc``, read by the standard library as requests reads it for pip; a file
  that does not parse is passed over, as pip passes over it).

The answer is a basic-auth header value for that URL's scheme, host and port;
sgpatch.source.http sends it there only and drops it on a redirect elsewhere.
"""

from __future__ import annotations

import base64
import netrc
import os
import shutil
import subprocess
import urllib.parse
from pathlib import Path

from sgpatch.errors import EnvironmentFailure

KEYRING_PROVIDERS = ("subprocess", "import")  # the values of keyring-provider that make sgpatch ask keyring
MAX_SECRET = 64 << 10  # bytes of a keyring answer
_ASKED: dict[tuple[str, str], str | None] = {}


def basic(user: str, password: str) -> str:
    """The ``Authorization`` value of HTTP basic auth."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def netrc_file() -> Path | None:
    """The ``.netrc`` requests would read for pip: ``$NETRC``, else ``~/.netrc``, else ``~/_netrc``."""
    named = os.environ.get("NETRC")
    candidates = [Path(named).expanduser()] if named else [Path("~/.netrc").expanduser(), Path("~/_netrc").expanduser()]
    return next((p for p in candidates if p.is_file()), None)


def from_netrc(host: str) -> str | None:
    """The basic-auth value of ``host``'s ``.netrc`` entry (or its ``default`` entry), or None."""
    path = netrc_file()
    if path is None or not host:
        return None
    try:
        found = netrc.netrc(str(path)).authenticators(host)
    except (netrc.NetrcParseError, OSError, UnicodeDecodeError):
        return None  # pip (through requests) passes over a .netrc it cannot read
    if found is None:
        return None
    login, _account, password = found
    return basic(login, password or "") if login else None


def from_keyring(service: str, user: str, *, timeout: float) -> str | None:
    """``keyring get SERVICE USER`` (as pip's subprocess provider asks it), or None when it has no password."""
    key = (service, user)
    if key in _ASKED:
        return _ASKED[key]
    cli = shutil.which("keyring")
    password: str | None = None
    if cli is not None:
        env = dict(os.environ, PYTHONIOENCODING="utf-8")
        try:
            proc = subprocess.run(
                [cli, "get", service, user],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=env,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise EnvironmentFailure(f"'keyring get {service} {user}' did not answer within {timeout:g} s") from None
        except OSError:
            proc = None
        if proc is not None and proc.returncode == 0 and len(proc.stdout) <= MAX_SECRET:
            password = proc.stdout.decode("utf-8", "replace").strip("\r\n") or None
    _ASKED[key] = password
    return password


def credentials_for(url: str, *, keyring: bool, timeout: float) -> str | None:
    """The basic-auth value for ``url`` (which may carry ``user[:password]@``), or None: see the module."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return None
    if "@" in parts.netloc:
        userinfo, _, hostport = parts.netloc.rpartition("@")
        user, sep, password = userinfo.partition(":")
        user, password = urllib.parse.unquote(user), urllib.parse.unquote(password)
        if not sep and keyring:
            password = from_keyring(hostport, user, timeout=timeout) or ""
        return basic(user, password)
    return from_netrc(parts.hostname or "")
