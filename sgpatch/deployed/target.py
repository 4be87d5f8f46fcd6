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

    @property
    def label(self) -> str:
        return f"{self.python} on {self.host}" if self.host else self.python
