"""Result dataclasses -> human text.  (JSON comes from each result's ``as_dict``.)"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sgpatch.apply import ApplyResult, PatchState
from sgpatch.config import Config
from sgpatch.interface import InterfaceReport
from sgpatch.verify import VerifyReport

if TYPE_CHECKING:
    from sgpatch.wheel import BuildResult, WheelReport

SCHEMA_VERSION = 1


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
    return "\n".join(lines)


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
    return "\n".join(lines)


def stacks_doc(config: Config) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "config": str(config.path),
        "default_stack": config.default_stack,
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
    return "\n".join(_table(rows, ("  stack", "sglang", "cuda", "commit", "series")))


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
        return "\n".join(lines)
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
    return "\n".join(lines)


def render_wheelreport(report: WheelReport) -> str:
    """``verify --wheel``: the wheel's own checks, then verify's report on its files."""
    lines = [f"stack   {report.stack}", f"wheel   {report.wheel}", f"version {report.version}", ""]
    rows = [(c.name, "ok" if c.ok else "FAILED", c.detail) for c in report.checks]
    lines.extend(_table(rows, ("check", "status", "detail")))
    if report.verify is not None:
        lines += ["", render_verify(report.verify)]
    return "\n".join(lines)


def render_build(result: BuildResult) -> str:
    verb = "reused (inputs unchanged)" if result.cached else "built"
    head = [f"build   {verb}: {result.wheel}", f"recipe  {result.recipe}"]
    return "\n".join([*head, render_wheelreport(result.checks)])
