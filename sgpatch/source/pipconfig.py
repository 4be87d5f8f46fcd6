"""pip's own settings, as its download reads them: the environment first (``PIP_INDEX_URL``, ...), then what
``pip config list`` shows of its configuration files (asked once per environment, never parsed by hand)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from sgpatch.errors import EnvironmentFailure
from sgpatch.source import pipearly
from sgpatch.source.credentials import KEYRING_PROVIDERS
from sgpatch.source.findlinks import truthy
from sgpatch.source.http import Client, deadline_seconds, deadline_text
from sgpatch.source.pipearly import KEYS as _KEYS
from sgpatch.source.pipearly import environment as _environment
from sgpatch.source.pipearly import from_environment as _from_environment
from sgpatch.source.pipearly import start as _start

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


_ASKED: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}


def ask_early() -> None:
    """``pipearly.ask_early``, unless this environment's settings were asked for already."""
    pipearly.ask_early(_ASKED)


def _pip_config_list() -> dict[str, str]:
    """``pip config list``, the values of the keys sgpatch uses (command sections as pip's download reads them).

    Asked once per process and environment (which decides the files pip reads): a port downloads several files.
    """
    key = _environment()
    if key not in _ASKED:
        _ASKED[key] = _answer(pipearly.take(key) or _start())
    return dict(_ASKED[key])


PIP_CONFIG_SECONDS = 30.0  # pip config list is local work: a deadline meant for an index never cuts it short


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
