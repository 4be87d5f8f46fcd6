"""The tables of ``port``: its report per patch, file and hunk, ``--abort`` and ``--resolve``."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from sgpatch.cli.render import _table, joined

if TYPE_CHECKING:
    from sgpatch.port import AbortResult, PortResult
    from sgpatch.port.resolve import ResolveResult
    from sgpatch.series.hunks import HunkVerdict
    from sgpatch.series.obsolete import Finding
    from sgpatch.series.upstream import SideBySide
    from sgpatch.series.verdict import PortedPatch


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
    return joined(lines)


def _side_by_side(item: SideBySide) -> list[str]:
    ours, theirs = item.ours, item.theirs
    diff = difflib.unified_diff(
        ours.text.splitlines(),
        theirs.text.splitlines(),
        f"ours {item.path}:{ours.start}-{ours.end}",
        f"upstream {item.path}:{theirs.start}-{theirs.end}",
        lineterm="",
        n=max(len(ours.text.splitlines()), len(theirs.text.splitlines())),
    )
    return [f"    {line}" for line in diff]


def _hunk_cell(h: HunkVerdict) -> str:
    extra = h.proof if h.state == "upstream" else (f"{h.offset:+d}" if h.offset and h.state == "applies" else "")
    return f"#{h.index} {h.state}" + (f" ({extra})" if extra else "")


def _finding(e: Finding) -> str:
    return f"holds   {e.where}: {e.claim}" if e.holds else f"not met {e.path}: {e.claim}: {e.detail}"


def _count_line(what: str, counts: dict[str, int]) -> str:
    total = sum(counts.values())
    return f"{what}: {total} = " + ", ".join(f"{n} {s}" for s, n in counts.items())


def _files_table(p: PortedPatch) -> list[str]:
    """Each file of a patch and its hunks, one row per file."""
    rows = []
    for f in p.files:
        cells = ", ".join(_hunk_cell(h) for h in f.hunks) or f.detail
        if f.gone:
            cells += f" (not in the release{'; moved to ' + f.renamed + '?' if f.renamed else ''})"
        rows.append((f.path, f.state, cells, f.suggestion or "-"))
    lines = [f"  {ln}" for ln in _table(rows, ("file", "state", "hunks", "suggestion"))]
    suggested = [(f.path, h) for f in p.files for h in f.hunks if h.suggestion or h.held]
    if suggested:
        lines.append("")
        lines.append(
            f"{p.name}: suggestions for the conflicting hunks ('sgpatch port --resolve suggested' writes them):"
        )
        lines.extend(f"  {path} #{h.index}: {h.suggestion or 'none'}: {h.evidence}" for path, h in suggested)
    return lines


def render_port(result: PortResult) -> str:
    from sgpatch.series.verdict import counts

    lines = [
        f"port    {result.old_stack} -> {result.new_stack} (sglang {result.version}, {result.source})",
        "source  " + ", ".join(f"{a.filename} sha256:{a.sha256[:16]}…" for a in result.artifacts),
    ]
    if result.pypi_commit:
        lines.append(f"base    {result.base[:12]} (pypi_commit {result.pypi_commit[:12]})")
    lines.append("")
    lines.extend(_table([(p.name, p.state, p.detail) for p in result.patches], ("patch", "state", "detail")))
    for p in result.patches:
        if p.files and (p.state == "conflict" or len(p.files) > 1 or any(len(f.hunks) > 1 for f in p.files)):
            lines.append("")
            lines.append(f"{p.name}: {len(p.files)} file(s), file by file and hunk by hunk:")
            lines.extend(_files_table(p))
        if p.hunks and p.state in ("applies", "merged", "resolved"):
            lines.append("")
            lines.append(f"{p.name}: regenerated against {result.version}:")
            lines.extend(f"    {h}" for h in p.hunks)
        if p.evidence:
            lines.append("")
            lines.append(f"{p.name}: Obsolete-If, read in sglang {result.version}:")
            lines.extend(f"    {_finding(e)}" for e in p.evidence)
        if p.side_by_side:
            lines.append("")
            lines.append(f"{p.name}: {p.state}: ours and upstream's, for review:")
            for item in p.side_by_side:
                lines.append(f"  {item.qualname}")
                lines.extend(_side_by_side(item))
        for c in p.conflicts:
            lines.append("")
            lines.append(f"{p.name}: CONFLICT: {c.failure}")
            if c.regions:
                regions = ", ".join(f"{a}-{b}" for a, b in c.regions)
                lines.append(f"    conflict markers at lines {regions} of the merged file")
    totals = counts(result.patches)
    if any(totals["hunks"].values()):
        lines.append("")
        lines.append(_count_line("hunks", totals["hunks"]))
        lines.append(_count_line("files", totals["files"]))
    moved = [m for m in result.anchors if m.status != "kept"]
    if moved:
        lines.append("")
        lines.extend(_table([(m.old.id, m.status, m.detail) for m in moved], ("anchor", "status", "detail")))
    lines.append("")
    lines.extend(f"note: {n}" for n in result.notes)
    if result.replayed:
        lines.append(
            f"replayed: the resolutions kept in .sgpatch-resolutions/ settle every conflict of {len(result.replayed)} "
            "file(s): " + ", ".join(result.replayed)
        )
    if result.stopped is not None:
        lines.append(f"port: STOPPED at {result.stopped} for a person; VERSIONS.toml and patches/ are unchanged")
        lines.extend(f"  {i}. {step}" for i, step in enumerate(result.next_steps, start=1))
        lines.append(f"checkout: {result.checkout}")
    elif result.failures:
        lines.append(f"port: FAILED ({len(result.failures)} problem(s)); VERSIONS.toml and patches/ are unchanged")
        lines.extend(f"  - {f}" for f in result.failures)
        lines.extend(f"  {i}. {step}" for i, step in enumerate(result.next_steps, start=1))
        if result.checkout is not None:
            lines.append(f"checkout: {result.checkout}")
    elif result.dry_run:
        lines.append("port: dry run; nothing was written")
    else:
        lines.append(f"port: wrote stack {result.new_stack}: " + ", ".join(str(p) for p in result.written))
        lines.append(f"checkout: {result.checkout} (patched; 'sgpatch verify {result.new_stack}' checks it)")
    return joined(lines)


def render_abort(result: AbortResult) -> str:
    lines = [f"port --abort: {note}" for note in result.notes]
    if result.removed:
        lines.insert(0, f"port --abort: gave up the port to {result.stack}; removed its checkout {result.checkout}")
    if result.restored is not None:
        lines.append(f"port --abort: put back the checkout it was replacing at {result.restored}")
    lines.append("VERSIONS.toml and patches/ were never written by the port")
    return joined(lines)
