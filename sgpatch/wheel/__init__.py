"""The patched sglang wheel: build it (``build``), check any wheel against its stack (``check``).

Rooms: ``build`` (export, PEP 517 build, post-processing), ``repack`` (upstream's platform
wheels with the series, for releases without an sdist), ``check`` (every check on a
wheel's bytes), ``writer`` (deterministic zip and RECORD), ``cache`` (reuse on unchanged
inputs), ``recipe`` (the install recipe), ``names`` and ``results``.
"""

from __future__ import annotations

from sgpatch.wheel.build import build_wheel, build_wheels
from sgpatch.wheel.check import check_wheel, read_provenance
from sgpatch.wheel.results import BuildResult, WheelCheck, WheelReport
from sgpatch.wheel.upstream import matching_upstream, upstream_wheel_for

__all__ = [
    "BuildResult",
    "WheelCheck",
    "WheelReport",
    "build_wheel",
    "build_wheels",
    "check_wheel",
    "matching_upstream",
    "read_provenance",
    "upstream_wheel_for",
]
