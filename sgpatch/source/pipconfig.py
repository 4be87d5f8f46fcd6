"""pip's own settings, as its download reads them: the environment first (``PIP_INDEX_URL``, ...), then what
``pip config list`` shows of its configuration files (asked once per environment, never parsed by hand)."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from dataclasses import dataclass

from sgpatch.errors import EnvironmentFailure
from sgpatch.source.credentials import KEYRING_PROVIDERS
from sgpatch.source.findlinks import truthy
from sgpatch.source.http import Client, deadline_seconds, deadline_text

DEFAULT_INDEX = "https://pypi.org/simple"


@dataclass(frozen=True, slots=True)
class PipSettings:
    """What pip downloads from: its index, extra indexes, certificate bundle and proxy."""

    index_url: str = DEFAULT_INDEX
    extra_index_urls: tuple[str, ...] = ()
    cert: str | None = None
    proxy: str | None = None
    keyring_provider: str | None = None  # pip's keyring-provider (sgpatch asks keyring for subprocess/import)
    find_links: tuple[str, ...] = ()  # directories (paths or file:// URLs) of pinned files
    no_index: bool = False

    @property
    def indexes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.index_url, *self.extra_index_urls]))

    def client(self) -> Client:
        return Client(cert=self.cert, proxy=self.proxy, keyring=self.keyring_provider in KEYRING_PROVIDERS)


_KEYS = ("index-url", "extra-index-url", "cert", "proxy", "keyring-provider", "find-links", "no-index")
_ASKED: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
_EARLY: dict[tuple[tuple[str, str], ...], tuple[int, subprocess.Popen[bytes] | None]] = {}  # key: (pid, started)


def _environment() -> tuple[tuple[str, str], ...]:
    """What decides the files pip reads: its variables, XDG's, the virtual environment and the home."""
    return tuple(
        sorted((k, v) for k, v in os.environ.items() if k.startswith(("PIP_", "XDG_", "VIRTUAL_ENV")) or k == "HOME")
    )


def _from_environment() -> dict[str, str]:
    return {key: os.environ.get(f"PIP_{key.upper().replace('-', '_')}", "").strip() for key in _KEYS}


def ask_early() -> None:
    """Start ``pip config list`` now, beside what the command does first (a port reads its series meanwhile;
    pip's start-up is half a second); ``pip_settings`` takes its answer when it first asks, in this process
    and this environment.  The same command, started sooner: its answer is not kept past the process."""
    key = _environment()
    if key in _ASKED or key in _EARLY or all(_from_environment().values()):
        return
    if not _EARLY:
        atexit.register(_reap, os.getpid())
    _EARLY[key] = (os.getpid(), _start())


def _reap(owner: int) -> None:
    """An early ``pip config list`` no one asked for is stopped at exit, not left behind (by the process that
    started it: a forked child's copy of the table is not its own)."""
    if os.getpid() != owner:
        return
    for pid, proc in _EARLY.values():
        if pid == owner and proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    _EARLY.clear()


def _pip_config_list() -> dict[str, str]:
    """``pip config list``, the values of the keys sgpatch uses (command sections as pip's download reads them).

    Asked once per process and environment (which decides the files pip reads): a port downloads several files.
    """
    key = _environment()
    if key not in _ASKED:
        pid, early = _EARLY.pop(key, (0, None))
        _ASKED[key] = _answer(early if pid == os.getpid() else _start())
    return dict(_ASKED[key])


PIP_CONFIG_SECONDS = 30.0  # pip config list is local work: a deadline meant for an index never cuts it short


def _start() -> subprocess.Popen[bytes] | None:
    """``pip config list`` of this interpreter's pip, started; None if it cannot be run."""
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "pip", "config", "list"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError:
        return None


def _answer(proc: subprocess.Popen[bytes] | None) -> dict[str, str]:
    """The keys sgpatch uses, from what ``proc`` (``pip config list``) prints; {} if pip could not be run."""
    if proc is None:
        return {}
    seconds = max(deadline_seconds(), PIP_CONFIG_SECONDS)
    try:
        stdout, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise EnvironmentFailure(f"'pip config list' did not finish within {deadline_text(seconds)}") from None
    found: dict[str, dict[str, str]] = {}
    for line in stdout.decode("utf-8", "replace").splitlines():
        name, sep, value = line.partition("=")
        section, _, option = name.rpartition(".")
        if sep and option in _KEYS:
            found.setdefault(option, {})[section] = value.strip().strip("'\"")
    out: dict[str, str] = {}
    for key, by_section in found.items():
        for section in (":env:", "site", "user", "global", "install", "download"):
            if by_section.get(section):
                out[key] = by_section[section]
                break
    return out


def pip_settings() -> PipSettings:
    """pip's settings, the environment first (``PIP_INDEX_URL``, ...), then its configuration files."""
    env = _from_environment()
    config = _pip_config_list() if not all(env.values()) else {}
    value = {key: env[key] or config.get(key, "") for key in _KEYS}
    index = value["index-url"].split()[0] if value["index-url"].split() else DEFAULT_INDEX
    return PipSettings(
        index_url=index.rstrip("/"),
        extra_index_urls=tuple(u.rstrip("/") for u in value["extra-index-url"].split()),
        cert=value["cert"] or None,
        proxy=value["proxy"] or None,
        keyring_provider=value["keyring-provider"].strip().lower() or None,
        find_links=tuple(value["find-links"].split()),
        no_index=truthy(value["no-index"]),
    )
