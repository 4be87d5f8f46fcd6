"""The Markdown report ``watch`` writes for each release (and the workflow makes a pull request's body).

It says, for people reviewing the change: what the release is and where its files
come from; each patch's classification with its evidence, file by file and hunk
by hunk; the new install pins; the interface check; what needs a person and where
(patch, file, hunk); and how to go on.  Every piece of text from outside (patch
names, details, hunk headers, paths) is put in a code span with its control
characters, backticks and line breaks made harmless, so a crafted name cannot
turn into a link, a mention or HTML.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from sgpatch.port.result import PortResult
from sgpatch.port.watched import ERROR, NEEDS_PERSON, PORTED, WatchedRelease
from sgpatch.series.hunks import FileVerdict
from sgpatch.series.verdict import PortedPatch, counts

MAX_REPORT = 60_000  # characters: under a pull request body's 65,536
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_HEADLINE = {
    PORTED: "ported cleanly",
    NEEDS_PERSON: "needs a person",
    ERROR: "could not be ported",
}


def code(text: str) -> str:
    """``text`` as an inline code span: control characters escaped, no backtick or line break left."""
    shown = _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text).replace("`", "'")
    return f"`{shown}`" if shown else "—"


def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def render_report(r: WatchedRelease, *, base: str) -> str:
    """The report of one release (at most MAX_REPORT characters)."""
    lines = [f"# sglang {r.version}: {_HEADLINE.get(r.state, r.state)}", ""]
    lines.append(f"- from stack {code(base)} to stack {code(r.stack)}")
    port = r.port
    if port is not None:
        for a in port.artifacts:
            lines.append(f"- source {code(a.filename)} sha256 {code(a.sha256)}")
    lines.append("")
    if r.problems:
        lines += ["## What needs a person", ""]
        lines += [f"- {code(p)}" for p in r.problems]
        lines.append("")
    if port is not None:
        lines += _patches(r)
    lines += _pins(r)
    lines += _interface(r)
    lines += _next(r, base)
    text = "\n".join(lines).rstrip() + "\n"
    if len(text) > MAX_REPORT:
        cut = text[:MAX_REPORT].rsplit("\n", 1)[0]
        text = cut + "\n\n(the report is cut here: `sgpatch watch --json` has all of it)\n"
    return text


# What a file became, in the words of a bump pull request (``fate``).
CARRIED, MERGED, DROPPED, MOVED, PERSON, RESOLVED = (
    "carried",
    "merged",
    "dropped as upstream",
    "moved",
    "needs a person",
    "resolved by a person",
)
FATES = (CARRIED, MERGED, DROPPED, MOVED, PERSON, RESOLVED)


def fate(p: PortedPatch, f: FileVerdict) -> tuple[str, str]:
    """(what the file became, the evidence) for the bump report."""
    if f.state in ("upstream", "superseded"):
        proofs = sorted({h.proof or h.detail for h in f.hunks if h.proof or h.detail}) or [f.detail]
        return DROPPED, "; ".join(proofs)
    if p.state == "resolved":
        return RESOLVED, f.detail
    if f.renamed and not f.gone:
        return MOVED, f"{f.path} -> {f.renamed}: {f.detail}"
    if f.gone:
        where = f"moved to {f.renamed}? " if f.renamed else ""
        return PERSON, f"{where}the release has no {f.path} ({f.detail}): its hunks wait in a reject file"
    if f.state == "conflict":
        suggested = [f"#{h.index} {h.suggestion or 'none'}: {h.evidence}" for h in f.hunks if h.suggestion or h.held]
        held = sum(1 for h in f.hunks if h.state == "conflict")
        why = f"{held} hunk(s) conflict" + (f"; suggested: {'; '.join(suggested)}" if suggested else "")
        return PERSON, why
    dropped = [h for h in f.hunks if h.state in ("upstream", "superseded")]
    tail = f"; {len(dropped)} hunk(s) dropped as upstream" if dropped else ""
    return (MERGED if f.state == "merged" else CARRIED), f"{f.detail}{tail}"


def bump_lines(patches: Sequence[PortedPatch]) -> list[str]:
    """Per patch and file: carried, merged, dropped as upstream (with the evidence), moved, needs a person;
    then the totals (Markdown, for a bump pull request)."""
    lines = [_row("patch", "file", "became", "evidence"), _row("---", "---", "---", "---")]
    tally: Counter[str] = Counter()
    for p in patches:
        for f in p.files:
            became, why = fate(p, f)
            tally[became] += 1
            lines.append(_row(code(p.name), code(f.path), f"**{became}**", code(why)))
    lines += ["", "files: " + ", ".join(f"{tally[s]} {s}" for s in FATES if tally[s])]
    return lines


def render_bump(result: PortResult) -> str:
    """A port as a pull request body: the release, then ``bump_lines`` and what is left to do."""
    lines = [f"# sglang {result.version}: {result.old_stack} -> {result.new_stack}", ""]
    lines += [f"- source {code(a.filename)} sha256 {code(a.sha256)}" for a in result.artifacts]
    lines += ["", "## Files", "", *bump_lines(result.patches), ""]
    if result.stopped is not None:
        lines += [f"The port stopped at {code(result.stopped)} for a person: VERSIONS.toml and patches/ are unchanged."]
    elif result.failures:
        lines += ["## Failures", "", *(f"- {code(x)}" for x in result.failures)]
    elif not result.dry_run:
        lines += [f"Written: {', '.join(code(str(w)) for w in result.written)}"]
    text = "\n".join(lines).rstrip() + "\n"
    if len(text) > MAX_REPORT:
        text = text[:MAX_REPORT].rsplit("\n", 1)[0] + "\n\n(cut here: `sgpatch port --json` has all of it)\n"
    return text


def _patches(r: WatchedRelease) -> list[str]:
    assert r.port is not None
    lines = ["## Patches", "", _row("patch", "classification", "evidence"), _row("---", "---", "---")]
    for p in r.port.patches:
        evidence = p.detail + (f" (proof: {p.proof})" if p.proof else "")
        unmet = [f"{e.path}: {e.claim}: {e.detail}" for e in p.evidence if not e.holds]
        if unmet:
            evidence += "; Obsolete-If not met: " + "; ".join(unmet)
        lines.append(_row(code(p.name), f"**{p.state}**", code(evidence)))
    if any(p.files for p in r.port.patches):
        lines += ["", "### File by file", "", *bump_lines(r.port.patches)]
    hunks = [(p, f, h) for p in r.port.patches for f in p.files for h in f.hunks]
    if hunks:
        lines += ["", "### File by file, hunk by hunk", ""]
        lines += [_row("patch", "file", "hunk", "state", "evidence"), _row("---", "---", "---", "---", "---")]
        for p, f, h in hunks:
            why = h.detail or h.proof
            if h.offset and f"offset {h.offset:+d}" not in why:
                why = f"{why} (offset {h.offset:+d})".strip()
            lines.append(_row(code(p.name), code(f.path), f"{h.index} {code(h.header)}", h.state, code(why)))
        total = counts(r.port.patches)["hunks"]
        lines += ["", "hunks: " + ", ".join(f"{n} {s}" for s, n in total.items() if n)]
    for p in r.port.patches:
        for c in p.conflicts:
            regions = ", ".join(f"{a}-{b}" for a, b in c.regions)
            lines.append(f"- conflict in {code(p.name)} {code(c.path)}: {code(c.failure)}")
            if regions:
                lines.append(f"  markers at lines {regions} of the merged file")
    moved = [m for m in r.port.anchors if m.status != "kept"]
    if moved:
        lines += ["", "### Anchors", ""]
        lines += [f"- {code(m.old.id)}: {m.status}: {code(m.detail)}" for m in moved]
    return [*lines, ""]


def _pins(r: WatchedRelease) -> list[str]:
    notes = [n for n in (r.port.notes if r.port else ()) if n.startswith("pins: ")]
    if not r.pins and not notes:
        return []
    lines = ["## Install pins", ""]
    if r.pins:
        lines += ["```", *(_CONTROL.sub("?", p) for p in r.pins), "```", ""]
    else:
        lines += ["Written when the port is finished; how they move:", ""]
    lines += [f"- {code(n.removeprefix('pins: '))}" for n in notes]
    return [*lines, ""] if notes else lines


def _interface(r: WatchedRelease) -> list[str]:
    lines = ["## Interface check", ""]
    i = r.interface
    if i is None:
        why = "the port did not finish" if r.state != PORTED else "the stack declares no [interface] table"
        return [*lines, f"not run: {why}", ""]
    if i.error:
        return [*lines, f"**could not run**: {code(i.error)}", ""]
    if i.ok:
        return [*lines, "**ok**: the target (and draft) provide every method the algorithm calls", ""]
    return [*lines, f"**{len(i.gaps)} gap(s)**:", "", *(f"- {code(g)}" for g in i.gaps), ""]


def _next(r: WatchedRelease, base: str) -> list[str]:
    lines = ["## Next", ""]
    port = r.port
    if port is not None and port.stopped is not None:
        lines += [
            f"The port stopped at {code(port.stopped)}: VERSIONS.toml and patches/ are unchanged. "
            "The carried part (kept patches, clean hunks, conflict markers) is in "
            f"{code(f'watch/{r.version}.carried.diff')}. To resume:",
            "",
            "```",
            f"sgpatch port {base} --to {r.version}   # stops at the same conflict, in .sgpatch/checkouts/{r.stack}",
            "# resolve the conflict markers there (diff3 style), then:",
            "sgpatch port --continue",
            "```",
        ]
    elif r.state == PORTED:
        lines.append(f"Review and merge: the new stack {code(r.stack)} is in VERSIONS.toml and patches/.")
    elif r.state == NEEDS_PERSON and port is not None and port.ok:
        lines.append(
            f"The stack {code(r.stack)} is written, but the interface check fails: add the missing methods as a "
            "patch (edit the checkout, commit, 'sgpatch export')."
        )
    else:
        lines.append("Nothing was written for this release; fix what is listed above and run 'sgpatch watch' again.")
    return [*lines, ""]
