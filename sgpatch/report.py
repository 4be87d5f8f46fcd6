"""Result dataclasses -> human text.  (JSON comes from each result's ``as_dict``.)"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sgpatch.apply import ApplyResult, PatchState
from sgpatch.config import Config
from sgpatch.verify import VerifyReport

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
            s.commit[:12],
            str(s.series_dir.relative_to(config.root)),
        )
        for s in config.stacks.values()
    ]
    return "\n".join(_table(rows, ("  stack", "sglang", "cuda", "commit", "series")))
