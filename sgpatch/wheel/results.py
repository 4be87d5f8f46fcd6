"""What build and the wheel checks return."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.checkout.verify import VerifyReport
from sgpatch.config import Stack
from sgpatch.results import SCHEMA_VERSION
from sgpatch.source.artifacts import sha256_file


@dataclass(frozen=True, slots=True)
class WheelCheck:
    """One wheel-level check: its name, whether it passed, and what it found."""

    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class WheelReport:
    """Every check on one wheel, with verify's anchor/blob/patch report on its files."""

    wheel: Path
    stack: str
    version: str
    checks: tuple[WheelCheck, ...]
    verify: VerifyReport | None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks) and (self.verify is None or self.verify.ok)

    @property
    def failures(self) -> tuple[str, ...]:
        out = [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]
        if self.verify is not None:
            out.extend(f"verify: {f}" for f in self.verify.failures)
        return tuple(out)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "wheel": str(self.wheel),
            "stack": self.stack,
            "version": self.version,
            "ok": self.ok,
            "checks": [c.as_dict() for c in self.checks],
            "failures": list(self.failures),
            "verify": None if self.verify is None else self.verify.as_dict(),
        }


@dataclass(frozen=True, slots=True)
class BuildResult:
    """The built (or reused) wheel, its install recipe, and the checks run on it."""

    wheel: Path
    recipe: Path
    version: str
    cached: bool
    checks: WheelReport

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "wheel": str(self.wheel),
            "sha256": sha256_file(self.wheel),
            "recipe": str(self.recipe),
            "version": self.version,
            "cached": self.cached,
            "ok": self.checks.ok,
            "checks": self.checks.as_dict(),
        }


def report_from_dict(doc: Any, stack: Stack, wheel: Path) -> WheelReport | None:
    """The report on ``wheel`` whose :meth:`WheelReport.as_dict` is ``doc`` (a stored one, its anchors read
    again from the stack's anchors.toml); None unless rebuilding it gives back exactly ``doc``."""
    from sgpatch.checkout.verify import report_from_dict as verify_from_dict
    from sgpatch.errors import SgpatchError
    from sgpatch.series.anchors import load_anchors

    try:
        checks = tuple(WheelCheck(str(c["name"]), bool(c["ok"]), str(c["detail"])) for c in doc["checks"])
        verify = None
        if doc["verify"] is not None:
            verify = verify_from_dict(doc["verify"], load_anchors(stack.series_dir / "anchors.toml"))
            if verify is None:
                return None
        report = WheelReport(wheel, str(doc["stack"]), str(doc["version"]), checks, verify)
    except (KeyError, TypeError, ValueError, SgpatchError):
        return None
    return report if json.loads(json.dumps(report.as_dict())) == doc else None
