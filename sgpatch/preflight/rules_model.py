"""Rules on one model's shape against the launch's parallelism: attention heads vs TP, MoE experts vs EP,
the MoE intermediate size vs MoE-TP and the FP8 weight block."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sgpatch.preflight.findings import Finding

if TYPE_CHECKING:
    from sgpatch.preflight.rules import Launch


def model_findings(launch: Launch) -> list[Finding]:
    return []
