"""The record of a port stopped at a conflict (``.git/sgpatch-port.json``), for ``port`` to continue."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sgpatch.checkout.journal import move_checkout
from sgpatch.config import Stack
from sgpatch.errors import CheckoutError
from sgpatch.git.repo import Git
from sgpatch.port.outputs import Plan
from sgpatch.port.rebase import (
    Files,
    PortedPatch,
    Rebase,
)
from sgpatch.results import SCHEMA_VERSION
from sgpatch.source.release import Release

RECORD = "sgpatch-port.json"


CONFLICT_MARKER = re.compile(rb"^(<{7}|\|{7}|={7}|>{7})( |$)", re.MULTILINE)


def record_path(g: Git) -> Path:
    return g.git_dir() / RECORD


def read_record(checkout: Path) -> dict[str, Any] | None:
    """The record a conflicted port left in ``checkout``, if any."""
    g = Git(checkout)
    if not (checkout / ".git").exists() or not g.is_repo():
        return None
    path = record_path(g)
    if not path.exists():
        return None
    try:
        record: dict[str, Any] = json.loads(path.read_text())
    except ValueError as exc:
        raise CheckoutError(f"{path}: unreadable port record: {exc}") from None
    return record


def leave_conflict(
    plan: Plan,
    stack: Stack,
    release: Release,
    run: Rebase,
    pypi_commit: str,
    conflict_at: int,
    conflict_files: Files,
    ported: Sequence[PortedPatch],
    into: Path,
) -> None:
    """Put the kept commits and the conflicted merge in the checkout, and record how to continue."""
    g = run.g
    head = g.head()
    assert head is not None
    if head != run.tip:
        move_checkout(g, old=head, new=run.tip, reason=f"sgpatch port {plan.new_name}: kept patches")
    patch = plan.old.series.patches[conflict_at]
    for fp in patch.files:
        data = conflict_files.get(fp.path)
        path = into / fp.path
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    record = {
        "schema_version": SCHEMA_VERSION,
        "from": plan.old.stack.name,
        "stack": plan.new_name,
        "version": plan.version,
        "source": plan.source,
        "commit": stack.commit,
        "base": run.base,
        "pypi_commit": pypi_commit,
        "artifacts": [{"kind": a.kind, "filename": a.filename, "sha256": a.sha256} for a in release.artifacts],
        "series": {p.name: p.sha256 for p in plan.old.series.patches},
        "kept": list(run.kept),
        "conflict": patch.name,
        "decided": [
            {"name": p.name, "state": p.state, "detail": p.detail, "proof": p.proof}
            for p in ported[: ported.index(next(q for q in ported if q.name == patch.name))]
        ],
        "strict": plan.strict,
    }
    record_path(g).write_text(json.dumps(record, indent=2) + "\n")
