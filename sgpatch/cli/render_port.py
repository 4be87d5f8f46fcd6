"""The tables of ``port --resolve`` (render.py holds the port's own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sgpatch.cli.render import _table

if TYPE_CHECKING:
    from sgpatch.port.resolve import ResolveResult


def render_resolve(result: ResolveResult) -> str:
    rows = [
        (f.path, f.outcome, str(f.resolved), str(f.left), ",".join(map(str, f.dropped)) or "-") for f in result.files
    ]
    lines = [f"port --resolve {result.mode}: {result.patch} in {result.checkout}", ""]
    lines.extend(_table(rows, ("file", "outcome", "resolved", "left", "hunks dropped")))
    lines.append("")
    if result.left:
        lines.append(f"{len(result.left)} file(s) still need a person (markers or a reject file)")
    lines.append("review with 'git diff' in the checkout, then run 'sgpatch port --continue'")
    return "\n".join(lines)
