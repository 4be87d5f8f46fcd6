"""What the release watch found: one record per new release, and the exit code they make together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.port.result import PortResult
from sgpatch.results import SCHEMA_VERSION

EXIT_NOTHING_NEW = 0  # no release newer than the newest stack
EXIT_NEEDS_PERSON = 1  # some release stopped on a conflict, failed a check, or could not be ported
EXIT_PORTED = 10  # every new release ported cleanly, its stack written (--dry-run: new releases found)

PORTED, NEEDS_PERSON, ERROR, NEW = "ported", "needs-person", "error", "new"


@dataclass(frozen=True, slots=True)
class InterfaceResult:
    """What ``check-interface`` said on the new stack's patched checkout."""

    ok: bool
    gaps: tuple[str, ...]  # one line each: "target: get_embed_and_head (KimiK25...) called at file:line"
    error: str = ""  # the check could not run (its class or file is gone): why

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "gaps": list(self.gaps), "error": self.error}


@dataclass(frozen=True, slots=True)
class WatchedRelease:
    """One new release: what its port did, and where the report is."""

    version: str
    stack: str  # the new stack's name
    state: str  # ported, needs-person, error, new (dry run)
    port: PortResult | None = None
    interface: InterfaceResult | None = None
    pins: tuple[str, ...] = ()  # the new stack's install pins (written stacks only)
    problems: tuple[str, ...] = ()  # what needs a person, and where (patch, file, hunk)
    report: Path | None = None
    carried: Path | None = None  # the stopped port's carried part, as a diff against the release

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "stack": self.stack,
            "state": self.state,
            "problems": list(self.problems),
            "pins": list(self.pins),
            "interface": self.interface.as_dict() if self.interface else None,
            "report": str(self.report) if self.report else None,
            "carried": str(self.carried) if self.carried else None,
            "port": _port_dict(self.port),
        }


def _port_dict(port: PortResult | None) -> dict[str, Any] | None:
    if port is None:
        return None
    doc = port.as_dict()
    doc.pop("schema_version")
    return doc


@dataclass(frozen=True, slots=True)
class WatchResult:
    base: str  # the stack ported from
    newest: str  # the newest SGLang version on its line: releases above it are new
    index: str
    releases: tuple[WatchedRelease, ...]
    skipped: tuple[str, ...]
    dry_run: bool

    @property
    def exit_code(self) -> int:
        if not self.releases:
            return EXIT_NOTHING_NEW
        if any(r.state in (NEEDS_PERSON, ERROR) for r in self.releases):
            return EXIT_NEEDS_PERSON
        return EXIT_PORTED

    def as_dict(self) -> dict[str, Any]:
        states = [r.state for r in self.releases]
        return {
            "schema_version": SCHEMA_VERSION,
            "base": self.base,
            "newest": self.newest,
            "index": self.index,
            "dry_run": self.dry_run,
            "exit_code": self.exit_code,
            "total": {
                "attempted": sum(s != NEW for s in states),
                "succeeded": states.count(PORTED),
                "needs_person": states.count(NEEDS_PERSON),
                "failed": states.count(ERROR),
                "new": states.count(NEW),
            },
            "releases": [r.as_dict() for r in self.releases],
            "skipped": list(self.skipped),
        }
