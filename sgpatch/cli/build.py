"""``sgpatch build``: the patched wheel of a stack, checked, with its install recipe (SPEC §8)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sgpatch.cli.app import CheckoutOpt, ConfigOpt, JsonOpt, StackArg, _checkout, _config, _err, _progress, app, handled


@app.command()
@handled
def build(
    stack: StackArg = None,
    checkout: CheckoutOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="directory for the wheel and its install recipe (default: dist/)")
    ] = None,
    no_isolation: Annotated[
        bool, typer.Option("--no-isolation", help="build with this environment's setuptools (offline)")
    ] = False,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Build the patched sglang wheel from a clean export of the checkout, then check it."""
    from sgpatch.cli.render import dumps, render_build
    from sgpatch.project import load_project
    from sgpatch.wheel import build_wheel

    cfg = _config(config)
    project = load_project(cfg, stack)
    result = build_wheel(
        cfg,
        project.stack,
        project.series,
        _checkout(cfg, project.stack, checkout),
        out if out is not None else cfg.root / "dist",
        isolated=not no_isolation,
        progress=_progress(json_out),
    )
    typer.echo(dumps(result.as_dict()) if json_out else render_build(result))
    if not result.checks.ok:
        for failure in result.checks.failures:  # on stderr too: --json output is often redirected (make wheel)
            _err(f"sgpatch: build: check failed: {failure}")
        raise typer.Exit(1)
