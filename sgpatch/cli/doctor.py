"""``sgpatch doctor``: the CUDA stack around sglang on an interpreter, here or over ssh."""

from __future__ import annotations

from typing import Annotated

import typer

from sgpatch.cli.base import ConfigOpt, JsonOpt, StackArg, _config, app, echo, echo_json, handled


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
    from sgpatch.cli.render import dumps, render_doctor
    from sgpatch.deployed.doctor import doctor as run_doctor

    cfg = _config(config)
    report = run_doctor(cfg.stack(stack), python=python, host=ssh)
    echo_json(dumps(report.as_dict())) if json_out else echo(render_doctor(report))
    if not report.ok:
        raise typer.Exit(1)
