"""What ``sgpatch import`` tells a person: the paths it found, the patches it wrote, or each hunk that does
not apply."""

from __future__ import annotations

from pathlib import Path

from sgpatch.checkout.importing import ImportResult
from sgpatch.cli.render import _rel, _table, joined


def render_import(result: ImportResult, root: Path) -> str:
    lines: list[str] = []
    found = [(r.raw, r.path, r.how) for p in result.patches for r in p.resolutions if r.how != "exact"]
    if found:
        lines.append("paths found in the pinned source:")
        lines.extend(_table(found, ("as the patch names it", "file", "how")))
        lines.append("")
    skipped = [p for p in result.patches if p.skipped]
    for p in skipped:
        lines.append(f"{p.source}: {p.skipped} line(s) before the first diff skipped (read as its description)")
    if result.export is None:
        bad = [h for h in result.hunks if not h.ok]
        lines.extend(
            _table(
                [(h.patch, h.path, h.hunk.split(" @@")[0] + " @@", h.detail) for h in result.hunks],
                ("patch", "file", "hunk", "result"),
            )
        )
        lines.append("")
        lines.extend(f"{p.name} ({p.source}): {p.state}" for p in result.patches if p.state != "applicable")
        refused = [p for p in result.patches if p.state != "applicable"]
        lines.append(
            f"import: refused: {len(refused)} patch(es) ({len(bad)} hunk(s)) do not apply strictly on the series "
            f"of {result.stack}; nothing was written"
        )
        off = [h for h in bad if h.found_at is not None]
        if off and not result.moved:
            lines.append(
                f"hint: {len(off)} of them stand exactly once elsewhere in their file (an offset, which git apply "
                "takes): --offsets imports them at those lines and says so"
            )
        return joined(lines)
    lines.extend(_table([(p.name, p.source, str(len(p.files))) for p in result.patches], ("patch", "from", "files")))
    lines.append("")
    if result.moved:
        lines.append("hunks placed where their lines stand, not where the patch said (--offsets):")
        rows = [
            (m.patch, m.path, m.hunk.split(" @@")[0] + " @@", f"line {m.line} (offset {m.line - m.said:+d})")
            for m in result.moved
        ]
        lines.extend(_table(rows, ("patch", "file", "hunk", "placed at")))
        lines.append("")
    changed = ", ".join(_rel(p, root) for p in result.export.changed)
    lines.append(f"import: {len(result.patches)} patch(es) added to the series of {result.stack}; wrote {changed}")
    return joined(lines)
