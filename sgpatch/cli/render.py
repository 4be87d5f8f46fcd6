"""Every table and line the CLI prints: result dataclasses -> human text.

JSON comes from each result's ``as_dict`` through ``dumps``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sgpatch.results import SCHEMA_VERSION

if TYPE_CHECKING:  # annotations only: rendering one result imports no other command's modules
    from sgpatch.checkout.apply import ApplyResult
    from sgpatch.checkout.export import ExportResult
    from sgpatch.checkout.fetch import FetchResult
    from sgpatch.config import Config, Stack
    from sgpatch.deployed.doctor import DoctorReport
    from sgpatch.interface import InterfaceReport
    from sgpatch.series.classify import PatchState
    from sgpatch.verify.engine import VerifyReport
    from sgpatch.wheel import BuildResult, WheelReport


# What a terminal would act on or hide, shown escaped in every line meant for people: C0 controls but tab
# and newline (ESC starts a sequence, CR rewrites the line), DEL, C1 controls (U+009B is a CSI to some
# terminals), bidi overrides and zero-width characters (series/paths.py's INVISIBLE), and the lone
# surrogates that stand for bytes that are not UTF-8 (shown as those bytes).
_SHOWN: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if chr(c) not in "\n\t"}
_SHOWN.update(
    {c: f"\\u{c:04x}" for lo, hi in ((0x200B, 0x200F), (0x202A, 0x202E), (0x2066, 0x2069)) for c in range(lo, hi + 1)}
)
_SHOWN.update({c: f"\\x{c - 0xDC00:02x}" for c in range(0xDC80, 0xDD00)})


_ONE_LINE = {**_SHOWN, ord("\n"): "\\x0a"}


class Lines(str):
    """Lines for people joined by the renderer (:func:`joined`): the only text whose line feeds are kept."""

    __slots__ = ()


def joined(items: Iterable[str]) -> Lines:
    """``items`` as lines: a line feed inside one (a host's file name, a config's value) is shown escaped, so
    outside text can never start a line of its own; a nested :class:`Lines` keeps its own."""
    return Lines("\n".join(i if isinstance(i, Lines) else i.replace("\n", "\\x0a") for i in items))


def visible(text: str) -> str:
    """``text`` safe to send to a terminal: what it would act on or hide made visible (``\\x1b``, ``\\x0d``),
    and a line feed too unless the renderer joined the lines (:class:`Lines`).

    Every human line goes through it (``cli.base.echo``), whatever it holds: names and text from files,
    archives, git and remote hosts.  JSON needs none: ``json.dumps`` escapes every control character."""
    return text.translate(_SHOWN if isinstance(text, Lines) else _ONE_LINE)


def dumps(doc: dict[str, Any]) -> str:
    """One JSON document with a schema_version."""
    doc.setdefault("schema_version", SCHEMA_VERSION)
    return json.dumps(doc, indent=2, sort_keys=False)


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths))]
    out.extend(fmt.format(*map(str, r)).rstrip() for r in rows)
    return out


def patch_rows(states: Sequence[PatchState]) -> list[str]:
    return _table([(s.name, s.state, s.detail) for s in states], ("patch", "state", "detail"))


def render_verify(report: VerifyReport) -> str:
    lines = [f"stack   {report.stack}", f"target  {report.target}", f"phase   {report.phase}"]
    lines.extend(f"note    {n}" for n in report.notes)
    lines.append("")
    lines.extend(patch_rows(report.patches))
    lines.append("")
    anchor_rows = []
    for r in report.anchors:
        where = f"{r.anchor.start}-{r.anchor.end}"
        found = f"{r.found[0]}-{r.found[1]}" if r.status == "moved" and r.found else ""
        anchor_rows.append((r.anchor.id, r.anchor.file.rsplit("/", 1)[-1], where, r.status, found or r.detail))
    lines.extend(_table(anchor_rows, ("anchor", "file", "lines", "status", "found / detail")))
    lines.append("")
    lines.extend(
        _table(
            [
                (f.path.rsplit("/", 1)[-1], str(f.expected)[:12], str(f.found)[:12], "ok" if f.ok else "DIFFERS")
                for f in report.files
            ],
            ("file", "pinned blob", "found blob", "status"),
        )
    )
    if report.landing:
        lines.append("")
        lines.extend(
            _table(
                [
                    (r.patch[:4], r.path.rsplit("/", 1)[-1], r.hunk, "ok" if r.ok else "WRONG PLACE", r.detail)
                    for r in report.landing
                ],
                ("patch", "file", "hunk", "landing", "detail"),
            )
        )
    lines.append("")
    if report.ok:
        lines.append(f"verify: ok ({report.phase})")
    else:
        lines.append(f"verify: FAILED ({len(report.failures)} problem(s))")
        lines.extend(f"  - {f}" for f in report.failures)
    return joined(lines)


def render_apply(result: ApplyResult) -> str:
    lines = patch_rows(result.patches)
    lines.append("")
    if not result.ok:
        lines.append("apply: nothing was changed: a patch does not apply cleanly")
    elif result.changed:
        lines.append(
            f"apply: {len(result.patches)} patch(es) applied; HEAD {result.old_head[:12]} -> {result.new_head[:12]}"
        )
    else:
        lines.append(f"apply: already patched at {result.new_head[:12]}; nothing to do")
    lines.append(f"checkout: {result.checkout}")
    return joined(lines)


def fetch_doc(result: FetchResult) -> dict[str, Any]:
    return {
        "stack": result.stack,
        "source": result.source,
        "checkout": str(result.checkout),
        "commit": result.commit,
        "created": result.created,
        "artifact": str(result.artifact) if result.artifact else None,
    }


def render_fetch(result: FetchResult) -> str:
    verb = "created" if result.created else "already present"
    return f"fetch: {result.stack} {verb} at {result.checkout} (commit {result.commit[:12]}, {result.source})"


def apply_doc(result: ApplyResult, series_id: str) -> dict[str, Any]:
    return {
        "stack": result.stack,
        "checkout": str(result.checkout),
        "ok": result.ok,
        "changed": result.changed,
        "old_head": result.old_head,
        "new_head": result.new_head,
        "series_id": series_id,
        "patches": [p.as_dict() for p in result.patches],
    }


def render_lines(lines: Iterable[tuple[int, str]]) -> Iterator[str]:
    """``show``: numbered lines as ``cat -n`` prints them, one at a time (a long range streams)."""
    for number, text in lines:
        yield f"{number:6d}\t{text}"


def build_tags(stack: Stack) -> list[str]:
    """The tags ``build`` makes wheels for: each pinned upstream wheel's (repacked), or the one pure wheel
    built from the sdist."""
    from sgpatch.wheel.names import wheel_tag

    return [wheel_tag(w.filename) for w in stack.wheels] if stack.repacks else ["py3-none-any"]


def stacks_doc(config: Config) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "config": str(config.path),
        "default_stack": config.default_stack,
        # One CI job per stack and wheel tag: ``platform`` is what ``build --platform`` takes ("" = the sdist build).
        "matrix": [
            {"stack": s.name, "tag": tag, "platform": tag if s.repacks else ""}
            for s in config.stacks.values()
            for tag in build_tags(s)
        ],
        "stacks": [
            {
                "name": s.name,
                "default": s.name == config.default_stack,
                "sglang_version": s.sglang_version,
                "tag": s.tag,
                "commit": s.commit,
                "cuda": s.cuda,
                "local_label": s.local_label,
                "series": str(s.series_dir.relative_to(config.root)),
                "source": s.default_source,
                "artifacts": [{"kind": a.kind, "filename": a.filename, "sha256": a.sha256} for a in s.artifacts],
                "build": "repack" if s.repacks else "sdist",
                "wheel_tags": build_tags(s),
            }
            for s in config.stacks.values()
        ],
    }


def render_stacks(config: Config) -> str:
    rows = [
        (
            ("* " if s.name == config.default_stack else "  ") + s.name,
            s.sglang_version,
            s.cuda,
            (s.commit or "-")[:12],
            str(s.series_dir.relative_to(config.root)),
        )
        for s in config.stacks.values()
    ]
    return joined(_table(rows, ("  stack", "sglang", "cuda", "commit", "series")))


def render_interface(report: InterfaceReport) -> str:
    """Gaps first (what the user needs), then what was derived from where."""
    lines = [f"interface  {report.algorithm} on {report.tree}"]
    chain = " -> ".join(c.name for c in report.target.chain)
    lines.append(f"target     {chain}" + "".join(f" (external base {b})" for b in report.target.external_bases))
    for d in report.target.delegates:
        lines.append(
            f"delegate   self.{d.attr} = {d.written} ({d.resolved.name if d.resolved else 'outside the tree'})"
        )
    if report.draft is not None:
        lines.append(f"draft      {' -> '.join(c.name for c in report.draft.chain)}")
    lines.append("")
    rows = []
    for req in report.requirements:
        sites = ", ".join(f"{s.path.rsplit('/', 1)[-1]}:{s.line}" for s in req.call_sites[:3])
        more = f" +{len(req.call_sites) - 3}" if len(req.call_sites) > 3 else ""
        provided = req.provided_by.class_name if req.provided_by else "MISSING"
        rows.append((req.role, req.name, "optional" if req.optional else "required", provided, sites + more))
    lines.extend(_table(rows, ("role", "name", "need", "provided by", "called at")))
    lines.extend(f"note: {n}" for n in report.notes)
    for s in report.stale:
        lines.append(f"stale: declared {s.role} name {s.name} has no {report.algorithm} call site")
    lines.append("")
    if report.ok:
        lines.append(f"check-interface: ok ({len(report.requirements)} names, no gaps)")
        return joined(lines)
    total = len(report.gaps) + len(report.delegation_gaps)
    lines.append(f"check-interface: {total} gap(s) - each would be one AttributeError at model load")
    for gap in report.gaps:
        sites = ", ".join(f"{s.path}:{s.line}" for s in gap.call_sites)
        lines.append(f"  - {gap.role} {gap.class_name} lacks {gap.name}: called at {sites}")
        lines.append(f"    fix: {gap.fix}")
    for dg in report.delegation_gaps:
        lines.append(
            f"  - {dg.role} {dg.name} forwards to self.{dg.attr}.{dg.missing} ({dg.forward_at}),"
            f" but {dg.delegate} has no {dg.missing}"
        )
    return joined(lines)


def render_wheelreport(report: WheelReport) -> str:
    """``verify --wheel``: the wheel's own checks, then verify's report on its files."""
    lines = [f"stack   {report.stack}", f"wheel   {report.wheel}", f"version {report.version}", ""]
    rows = [(c.name, "ok" if c.ok else "FAILED", c.detail) for c in report.checks]
    lines.extend(_table(rows, ("check", "status", "detail")))
    if report.verify is not None:
        lines += ["", render_verify(report.verify)]
    # The last line speaks for every check above, the wheel's own ones included.
    lines.append("")
    if report.ok:
        phase = report.verify.phase if report.verify is not None else "checked"
        lines.append(f"verify --wheel: ok ({phase}, {len(report.checks)} wheel checks passed)")
    else:
        lines.append(f"verify --wheel: FAILED ({len(report.failures)} problem(s))")
        lines.extend(f"  - {f}" for f in report.failures)
    return joined(lines)


def render_build(result: BuildResult) -> str:
    verb = "reused (inputs unchanged)" if result.cached else "built"
    head = [f"build   {verb}: {result.wheel}", f"recipe  {result.recipe}"]
    return joined([*head, render_wheelreport(result.checks)])


def render_doctor(report: DoctorReport) -> str:
    """The doctor table: expected against found, mismatches first in the summary."""
    lines = [
        f"stack   {report.stack} (CUDA {report.cuda})",
        f"target  {report.target}",
        f"python  {report.python}",
    ]
    lines.extend(f"note    {n}" for n in report.notes)
    lines.append("")
    rows = [
        (r.name, r.expected, r.found or "-", "ok" if r.ok else ("MISSING" if r.found is None else "MISMATCH"), r.detail)
        for r in report.rows
    ]
    lines.extend(_table(rows, ("package", "expected", "found", "status", "detail")))
    lines.append("")
    if report.ok:
        lines.append(f"doctor: ok ({len(report.rows)} checks match {report.stack})")
    else:
        bad = [r for r in report.rows if not r.ok]
        lines.append(f"doctor: FAILED ({len(bad)} of {len(report.rows)} do not match {report.stack})")
    return joined(lines)


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def render_export(result: ExportResult, root: Path) -> str:
    lines = _table([(p.name, p.status, p.commit[:12]) for p in result.patches], ("patch", "status", "commit"))
    moved = [m for m in result.anchors if m.status != "kept"]
    if moved:
        lines.append("")
        lines.extend(_table([(m.old.id, m.status, m.detail) for m in moved], ("anchor", "status", "detail")))
    lines.append("")
    lines.extend(f"note: {n}" for n in result.notes)
    changed = ", ".join(_rel(p, root) for p in result.changed)
    if result.check:
        if result.stale:
            # without a working checkout (a fresh clone, CI) export itself needs --fresh to find the commits
            how = f"sgpatch export {result.stack}" + (" --fresh" if result.fresh else "")
            lines.append(f"export --check: STALE: {changed} would change; run '{how}'")
        else:
            lines.append("export --check: up to date")
    elif result.changed:
        lines.append(f"export: wrote {changed}")
        if result.new_head != result.old_head:
            lines.append(f"export: series commits re-recorded, HEAD {result.old_head[:12]} -> {result.new_head[:12]}")
    else:
        lines.append("export: nothing to do; the files match the commits")
    return joined(lines)
