"""What every preflight rule returns: one finding, with its verdict, the values compared, the upstream line it
predicts and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["crash", "silent", "unchecked", "warn", "ok"]
"""``crash``: SGLang would raise (exit 1); ``silent``: it would run, worse than the team expects (exit 1 only
with ``--strict``); ``unchecked``: the rule could not be checked for this exact launch, saying why
(``compared`` starts with ``not checked:``; exit 1 only with ``--strict``, and the report is never ``ok``);
``warn``: allowed by a flag or environment variable the launch sets, with a stated risk; ``ok``: checked,
nothing to say but the values."""

VERDICTS: tuple[Verdict, ...] = ("crash", "silent", "unchecked", "warn", "ok")


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule's answer for one model (or the launch as a whole)."""

    rule: str
    """A short stable id, e.g. ``context-length``, ``tp-divides-heads``, ``eagle3-aux-layers``."""
    verdict: Verdict
    subject: str
    """What it is about: ``target``, ``draft`` or ``launch``."""
    compared: str
    """The values compared, as a person reads them: ``draft 131072 < target 262144``."""
    predicts: str
    """The upstream ``file:line`` (in the stack's checkout, ``python/sglang/...``) that would raise or decide."""
    fix: str = ""
    """What to change: the flag, the environment variable and its risk, or a different draft ('' when ok)."""

    def as_dict(self) -> dict[str, str]:
        return {
            "rule": self.rule,
            "verdict": self.verdict,
            "subject": self.subject,
            "compared": self.compared,
            "predicts": self.predicts,
            "fix": self.fix,
        }
