"""What a port returns: each patch's verdict, the new stack, the files written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgpatch.config import Artifact
from sgpatch.results import SCHEMA_VERSION
from sgpatch.series.relocate import AnchorMove
from sgpatch.series.verdict import PortedPatch, counts


@dataclass(frozen=True, slots=True)
class PortResult:
    """What port found, and what it wrote (nothing on a dry run or a failure)."""

    old_stack: str
    new_stack: str
    version: str
    source: str
    artifacts: tuple[Artifact, ...]
    pypi_commit: str | None
    commit: str | None
    base: str
    checkout: Path | None  # the new stack's checkout (None on a dry run)
    patches: tuple[PortedPatch, ...]
    anchors: tuple[AnchorMove, ...]
    written: tuple[Path, ...]
    dry_run: bool
    strict: bool
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    stopped: str | None = None  # the patch the port stopped at, for a person (its checkout holds the conflict)
    rejects: tuple[str, ...] = ()  # reject files left for files the release lacks
    next_steps: tuple[str, ...] = ()  # what the person does next, at a stop
    replayed: tuple[str, ...] = ()  # files whose every conflict a kept resolution settled (``reuse``)

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "ok": self.ok,
            "from": self.old_stack,
            "stack": self.new_stack,
            "version": self.version,
            "source": self.source,
            "artifacts": [{"kind": a.kind, "filename": a.filename, "sha256": a.sha256} for a in self.artifacts],
            "pypi_commit": self.pypi_commit,
            "commit": self.commit,
            "base": self.base,
            "checkout": str(self.checkout) if self.checkout else None,
            "dry_run": self.dry_run,
            "strict": self.strict,
            "stopped": self.stopped,
            "rejects": list(self.rejects),
            "next": list(self.next_steps),
            "counts": counts(self.patches),
            "patches": [p.as_dict() for p in self.patches],
            "anchors": [m.as_dict() for m in self.anchors],
            "written": [str(p) for p in self.written],
            "failures": list(self.failures),
            "notes": list(self.notes),
            "replayed": list(self.replayed),
        }

    @property
    def settled(self) -> bool:
        """Stopped, but every conflict of the stopped patch settled by kept resolutions (no reject file either: a
        file the release lacks settled by kept decisions is among ``replayed``)."""
        if self.stopped is None or self.rejects:
            return False
        stopped = next((p for p in self.patches if p.name == self.stopped), None)
        if stopped is None:
            return False
        marked = {f.path for f in stopped.files if f.regions or f.gone}
        return bool(marked) and marked <= set(self.replayed)
