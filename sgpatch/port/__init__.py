"""Upgrade day: carry a stack's series to a new SGLang release (SPEC §9).

Rooms: ``run`` (carry, regenerate, verify, write), ``carry`` (each patch, file and hunk judged),
``rebase`` (the old series and the new checkout), ``stop`` (stopping for a person, taking the
resolution), ``resume`` (``--continue``), ``abort`` (``--abort``), ``record`` (a port in progress:
its fields checked), ``outputs`` (what a port writes, checked first), ``stack`` (the new stack's table
and checkout), ``renames``, ``verdict``, ``result``.
"""

from __future__ import annotations

from sgpatch.port.abort import AbortResult, abort_port
from sgpatch.port.record import read_record
from sgpatch.port.result import PortResult
from sgpatch.port.resume import continue_port, find_port
from sgpatch.port.run import port_stack

__all__ = ["AbortResult", "PortResult", "abort_port", "continue_port", "find_port", "port_stack", "read_record"]
