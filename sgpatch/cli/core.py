"""The commands on a stack and its checkout: ``stacks``, ``fetch``, ``apply``, ``verify``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sgpatch.cli.base import (
    CheckoutOpt,
    ConfigOpt,
    JsonOpt,
    StackArg,
    _checkout,
    _config,
    _err,
    _progress,
    app,
    echo,
    echo_json,
    handled,
)
from sgpatch.cli.params import VERIFY

COMMANDS = (VERIFY,)  # verify runs without typer too: sgpatch/cli/verify.py


@app.command()
@handled
def stacks(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """List the pinned stacks."""
    from sgpatch.cli.render import dumps, render_stacks, stacks_doc

    cfg = _config(config)
    echo_json(dumps(stacks_doc(cfg))) if json_out else echo(render_stacks(cfg))


@app.command()
@handled
def fetch(
    stack: StackArg = None,
    source: Annotated[str | None, typer.Option("--source", help="pypi (default) or git")] = None,
    url: Annotated[str | None, typer.Option("--url", help="git URL or path (git source)")] = None,
    into: Annotated[Path | None, typer.Option("--into", help="where to create the checkout")] = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Create a git checkout of the pinned SGLang source."""
    from sgpatch.checkout.fetch import fetch as do_fetch
    from sgpatch.cli.render import dumps, fetch_doc, render_fetch

    cfg = _config(config)
    st = cfg.stack(stack)
    target = _checkout(cfg, st, into)
    progress = _progress(json_out)
    result = do_fetch(st, target, source=source, url=url, progress=progress)
    echo_json(dumps(fetch_doc(result))) if json_out else echo(render_fetch(result))


@app.command()
@handled
def apply(
    stack: StackArg = None, checkout: CheckoutOpt = None, config: ConfigOpt = None, json_out: JsonOpt = False
) -> None:
    """Apply the stack's series to a checkout: strict, atomic, idempotent."""
    from sgpatch.checkout.apply import apply_series
    from sgpatch.cli.render import apply_doc, dumps, render_apply
    from sgpatch.project import load_project

    cfg = _config(config)
    project = load_project(cfg, stack)
    target = _checkout(cfg, project.stack, checkout)
    progress = _progress(json_out)
    if progress is not None:
        progress(f"applying {len(project.series.patches)} patch(es) of {project.stack.name} to {target}")
    result = apply_series(
        project.stack,
        project.series,
        target,
        notify=lambda message: _err(f"sgpatch: {message}"),  # waits and recoveries: always worth a line
    )
    echo_json(dumps(apply_doc(result, project.series.id))) if json_out else echo(render_apply(result))
    if not result.ok:
        raise typer.Exit(1)
