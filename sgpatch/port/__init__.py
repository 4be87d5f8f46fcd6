"""Upgrade day: carry a stack's series to a new SGLang release (SPEC §9).

Rooms: ``run`` (classify, regenerate, verify, write; continue after a conflict),
``outputs`` (what a port writes, checked first), ``record`` (a port stopped at a
conflict), ``result``.
"""

from __future__ import annotations

from sgpatch.port.record import read_record
from sgpatch.port.result import PortResult
from sgpatch.port.run import continue_port, port_stack

__all__ = ["PortResult", "continue_port", "port_stack", "read_record"]
