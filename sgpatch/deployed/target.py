"""An interpreter sgpatch probes: on this machine, or on a host over ssh."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Target:
    """An interpreter to probe: ``python`` on this machine, or on ``host`` over ssh."""

    python: str
    host: str | None = None
    hostname: str | None = None  # an inventory's ansible_host: ``-o HostName=``
    user: str | None = None  # ansible_user: ``-l``
    port: int | None = None  # ansible_port: ``-p``
    identity: str | None = None  # ansible_ssh_private_key_file: ``-i``
    ssh_args: tuple[str, ...] = ()  # ansible_ssh_common_args, checked by sgpatch.deployed.inventory_vars

    @property
    def label(self) -> str:
        return f"{self.python} on {self.host}" if self.host else self.python


@dataclass(frozen=True, slots=True)
class HostOptions:
    """How the command line asked for hosts to be checked; None is the core's own default, decided where it
    is used: ``jobs`` hosts at a time (a fleet's ``DEFAULT_JOBS``), ``timeout`` seconds per host, connection
    included (one host: ``remote.ANSWER_TIMEOUT``; each host of a fleet: ``fleet.DEFAULT_TIMEOUT``)."""

    python: str | None = None
    jobs: int | None = None
    timeout: float | None = None
