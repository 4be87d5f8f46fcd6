"""The patched sglang wheel: build it (``build``), check any wheel against its stack (``check``).

Rooms: ``build`` (export, PEP 517 build, post-processing), ``check`` (every check on a
wheel's bytes), ``writer`` (deterministic zip and RECORD), ``cache`` (reuse on unchanged
inputs), ``recipe`` (the install recipe), ``names`` and ``results``.
"""

from __future__ import annotations

from sgpatch.wheel.build import build_wheel
from sgpatch.wheel.check import check_wheel, read_provenance
from sgpatch.wheel.results import BuildResult, WheelCheck, WheelReport

__all__ = ["BuildResult", "WheelCheck", "WheelReport", "build_wheel", "check_wheel", "read_provenance"]
