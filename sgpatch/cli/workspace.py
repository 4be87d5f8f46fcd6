"""``sgpatch init`` (a patch repository of a team's own) and ``sgpatch status`` (where each stack stands)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sgpatch.cli.base import ConfigOpt, JsonOpt, _config, _progress, app, echo, echo_json, handled

if TYPE_CHECKING:
    from sgpatch.workspace.init import InitResult
    from sgpatch.workspace.status import StackStatus, StatusReport


@app.command()
@handled
def init(
    directory: Annotated[
        Path, typer.Argument(help="the new repository's directory (default: the working directory)")
    ] = Path("."),
    release: Annotated[str, typer.Option("--release", help="the SGLang release to pin, e.g. 0.5.9")] = "",
    cuda: Annotated[str, typer.Option("--cuda", help="the CUDA label: cu130 or cu128")] = "",
    force: Annotated[
        bool, typer.Option("--force", help="replace a VERSIONS.toml there (the series and other files are kept)")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Start a patch repository of your own: VERSIONS.toml pinning one stack, an empty series, pre-commit."""
    from sgpatch.cli.render import dumps
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.workspace.init import init_project

    if not release or not cuda:
        raise Bad(
            "init needs --release VERSION and --cuda LABEL", hint="e.g. sgpatch init --release 0.5.9 --cuda cu130"
        )
    result = init_project(directory, release, cuda, force=force, progress=_progress(json_out))
    echo_json(dumps(result.as_dict())) if json_out else echo(render_init(result))


@app.command()
@handled
def status(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Where each stack stands: its checkout, uncommitted and unexported work, the last built wheel."""
    from sgpatch.cli.render import dumps
    from sgpatch.workspace.status import project_status

    report = project_status(_config(config))
    echo_json(dumps(report.as_dict())) if json_out else echo(render_status(report))


def render_init(result: InitResult) -> str:
    from sgpatch.cli.render import _rel, joined

    root = result.directory
    lines = [f"init: stack {result.stack} (sglang {result.version}, {result.label}) in {root}"]
    lines.extend(f"  pinned {a.kind}: {a.filename} sha256 {a.sha256[:16]}..." for a in result.artifacts)
    lines.append(f"  install pins: {', '.join(result.install_pins)}")
    lines.extend(f"  wrote {_rel(p, root)}" for p in result.written)
    lines.extend(f"  kept {_rel(p, root)} (exists)" for p in result.kept)
    if result.git_init:
        lines.append("  git init: a new repository (nothing committed)")
    if result.checkout is not None:
        lines.append(f"  checkout: {_rel(result.checkout, root)} (the pinned source, ready for 'sgpatch apply')")
    lines.extend(f"note: {n}" for n in result.notes)
    lines.append("next: sgpatch apply; edit and commit in the checkout; sgpatch export; sgpatch build")
    return joined(lines)


def _build_cell(row: StackStatus) -> str:
    last = row.last_build
    if last is None:
        return "-"
    names = ", ".join(w.path.name if w.path.is_file() else f"{w.path.name} (gone)" for w in last.wheels)
    checks = "ok" if all(w.ok for w in last.wheels) else "checks FAILED"
    series = "current series" if row.build_current else "an older series"
    return f"{names} ({checks}, {series}, {last.recorded})"


def render_status(report: StatusReport) -> str:
    from sgpatch.cli.render import _table, joined

    rows = []
    for r in report.stacks:
        applied = f"{r.applied}/{r.series}" if r.series >= 0 else "-"
        rows.append(
            (
                ("* " if r.default else "  ") + r.stack,
                r.state,
                applied,
                str(len(r.uncommitted)) if r.uncommitted else "-",
                str(len(r.unexported)) if r.unexported else "-",
                _build_cell(r),
            )
        )
    lines = _table(rows, ("stack", "checkout", "series", "uncommitted", "unexported", "last wheel"))
    details = []
    for r in report.stacks:
        if r.state in ("drifted", "other", "error", "stopped"):
            details.append(f"{r.stack}: {r.state}: {r.detail}")
        details.extend(f"{r.stack}: unexported: {c}" for c in r.unexported)
        if r.unexported:
            details.append(f"{r.stack}: hint: 'sgpatch export {r.stack}' writes them into the series")
    if details:
        lines.append("")
        lines.extend(details)
    return joined(lines)
