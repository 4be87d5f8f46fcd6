"""What build and the wheel checks return."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.results import SCHEMA_VERSION
from sgpatch.source.archive import sha256_file
from sgpatch.verify.engine import VerifyReport


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
    sha256: str | None = None  # the digest of the bytes the checks read (None: a report not made by check_wheel)

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
            "sha256": self.checks.sha256 or sha256_file(self.wheel),
            "recipe": str(self.recipe),
            "version": self.version,
            "cached": self.cached,
            "ok": self.checks.ok,
            "checks": self.checks.as_dict(),
        }
