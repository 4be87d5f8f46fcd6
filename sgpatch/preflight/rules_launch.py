"""Rules on the launch as a whole: EAGLE-3 capture layers, MLA-only attention backends, speculative flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sgpatch.preflight.findings import Finding

if TYPE_CHECKING:
    from sgpatch.preflight.rules import Launch


def launch_findings(launch: Launch) -> list[Finding]:
    return []
