"""``sgpatch port`` and ``sgpatch export``: upgrade day as commands (SPEC §9)."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any

import typer

from sgpatch.cli import ConfigOpt, JsonOpt, StackArg, _config, _progress, app, handled

PortCheckoutOpt = Annotated[
    Path | None, typer.Option("--checkout", help="checkout of the new stack (default: .sgpatch/checkouts/NEW-STACK)")
]


@app.command()
@handled
def port(
    stack: StackArg = None,
    to: Annotated[str, typer.Option("--to", metavar="VERSION", help="the SGLang release to port to, e.g. 0.5.10")] = "",
    source: Annotated[str, typer.Option("--source", help="where the new release comes from: pypi or git")] = "pypi",
    commit: Annotated[
        str | None, typer.Option("--commit", metavar="SHA", help="upstream's commit of the new tag, if you know it")
    ] = None,
    checkout: PortCheckoutOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="classify only; write nothing")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="a superseded patch is a failure")] = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Port the series to a new SGLang release: detect what upstream merged, regenerate the rest."""
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.port import port_stack
    from sgpatch.report import dumps

    if not to:
        raise Bad("give the release to port to: --to VERSION (e.g. --to 0.5.10)")
    cfg = _config(config)
    result = port_stack(
        cfg,
        stack,
        to,
        source=source,
        commit=commit,
        checkout=checkout,
        dry_run=dry_run,
        strict=strict,
        progress=_progress(json_out),
    )
    typer.echo(dumps(result.as_dict()) if json_out else render_port(result))
    if not result.ok:
        raise typer.Exit(1)


@app.command()
@handled
def export(
    stack: StackArg = None,
    checkout: Annotated[
        Path | None, typer.Option("--checkout", help="the edited checkout (default: .sgpatch/checkouts/STACK)")
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="write nothing; exit 1 if the files would change")] = False,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="use a fresh checkout of the pinned source with the series applied")
    ] = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Regenerate the patch files, series, anchors and pins from the commits on a checkout.

    With --check nothing is written and the exit code is 1 when the files would
    change; without a checkout to read, --check uses a fresh one (--fresh).
    """
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.export import export_fresh, export_series
    from sgpatch.port import continue_port, read_record
    from sgpatch.report import dumps
    from sgpatch.verify import load_project

    if fresh and checkout is not None:
        raise Bad("give --checkout or --fresh, not both")
    cfg = _config(config)
    if checkout is not None and read_record(checkout) is not None:
        if check:
            raise Bad(f"{checkout}: a port is in progress here; finish it first (export without --check)")
        ported = continue_port(cfg, checkout, progress=_progress(json_out))
        typer.echo(dumps(ported.as_dict()) if json_out else render_port(ported))
        if not ported.ok:
            raise typer.Exit(1)
        return
    project = load_project(cfg, stack)
    target = checkout if checkout is not None else cfg.checkout_dir(project.stack)
    if check and checkout is None and not target.exists():
        fresh = True  # no working checkout (CI, a fresh clone): check the series against its pinned source
    if fresh:
        result = export_fresh(cfg, project.stack, project.series, check=check)
    else:
        result = export_series(cfg, project.stack, project.series, target, check=check)
    typer.echo(dumps(result.as_dict()) if json_out else render_export(result, cfg.root))
    if check and result.stale:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- rendering


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> list[str]:
    from sgpatch.report import _table as table

    return table(rows, header)


def render_export(result: Any, root: Path) -> str:
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
            lines.append(f"export --check: STALE: {changed} would change; run 'sgpatch export'")
        else:
            lines.append("export --check: up to date")
    elif result.changed:
        lines.append(f"export: wrote {changed}")
        if result.new_head != result.old_head:
            lines.append(f"export: series commits re-recorded, HEAD {result.old_head[:12]} -> {result.new_head[:12]}")
    else:
        lines.append("export: nothing to do; the files match the commits")
    return "\n".join(lines)


def _side_by_side(item: Any) -> list[str]:
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


def render_port(result: Any) -> str:
    lines = [
        f"port    {result.old_stack} -> {result.new_stack} (sglang {result.version}, {result.source})",
        "source  " + ", ".join(f"{a.filename} sha256:{a.sha256[:16]}…" for a in result.artifacts),
    ]
    if result.pypi_commit:
        lines.append(f"base    {result.base[:12]} (pypi_commit {result.pypi_commit[:12]})")
    lines.append("")
    lines.extend(_table([(p.name, p.state, p.detail) for p in result.patches], ("patch", "state", "detail")))
    for p in result.patches:
        if p.hunks and p.state in ("applies", "merged", "resolved"):
            lines.append("")
            lines.append(f"{p.name}: regenerated against {result.version}:")
            lines.extend(f"    {h}" for h in p.hunks)
        if p.side_by_side:
            lines.append("")
            lines.append(f"{p.name}: {p.state}: ours and upstream's, for review:")
            for item in p.side_by_side:
                lines.append(f"  {item.qualname}")
                lines.extend(_side_by_side(item))
        for c in p.conflicts:
            lines.append("")
            lines.append(f"{p.name}: CONFLICT: {c.failure}")
            regions = ", ".join(f"{a}-{b}" for a, b in c.regions)
            lines.append(f"    conflict markers at lines {regions} of the merged file")
    moved = [m for m in result.anchors if m.status != "kept"]
    if moved:
        lines.append("")
        lines.extend(_table([(m.old.id, m.status, m.detail) for m in moved], ("anchor", "status", "detail")))
    lines.append("")
    lines.extend(f"note: {n}" for n in result.notes)
    if result.failures:
        lines.append(f"port: FAILED ({len(result.failures)} problem(s)); VERSIONS.toml and patches/ are unchanged")
        lines.extend(f"  - {f}" for f in result.failures)
        if result.checkout is not None:
            lines.append(f"checkout: {result.checkout}")
    elif result.dry_run:
        lines.append("port: dry run; nothing was written")
    else:
        lines.append(f"port: wrote stack {result.new_stack}: " + ", ".join(str(p) for p in result.written))
        lines.append(f"checkout: {result.checkout} (patched; 'sgpatch verify {result.new_stack}' checks it)")
    return "\n".join(lines)
