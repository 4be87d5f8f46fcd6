"""``sgpatch doctor``: the CUDA stack around sglang on an interpreter, here or over ssh."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sgpatch.cli import ConfigOpt, JsonOpt, StackArg, _config, app, handled


def render_doctor(report: Any) -> str:
    """The doctor table: expected against found, mismatches first in the summary."""
    from sgpatch.report import _table

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
    return "\n".join(lines)


@app.command()
@handled
def doctor(
    stack: StackArg = None,
    python: Annotated[
        str | None, typer.Option("--python", help="interpreter to check (default: this one; python3 with --ssh)")
    ] = None,
    ssh: Annotated[
        str | None, typer.Option("--ssh", metavar="[USER@]HOST", help="check a serving host, over ssh")
    ] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check torch (and its CUDA), sgl-kernel, FlashInfer and cuda-python against the stack's pins."""
    from sgpatch.doctor import doctor as run_doctor
    from sgpatch.report import dumps

    cfg = _config(config)
    report = run_doctor(cfg.stack(stack), python=python, host=ssh)
    typer.echo(dumps(report.as_dict()) if json_out else render_doctor(report))
    if not report.ok:
        raise typer.Exit(1)
