"""``sgpatch doctor``: the CUDA stack around sglang on an interpreter, here or over ssh."""

from __future__ import annotations

from typing import Annotated

import typer

from sgpatch.cli.base import ConfigOpt, JsonOpt, StackArg, _config, app, echo, echo_json, handled
from sgpatch.cli.fleet import (
    HostsOpt,
    JobsOpt,
    LimitOpt,
    SshOpt,
    TimeoutOpt,
    doctor_fleet_cli,
    fleet_hosts,
    host_options,
    is_fleet,
)


@app.command()
@handled
def doctor(
    stack: StackArg = None,
    python: Annotated[
        str | None, typer.Option("--python", help="interpreter to check (default: this one; python3 with --ssh)")
    ] = None,
    ssh: SshOpt = None,
    hosts: HostsOpt = None,
    limit: LimitOpt = None,
    jobs: JobsOpt = None,
    timeout: TimeoutOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Check torch (and its CUDA), sgl-kernel, FlashInfer and cuda-python against the stack's pins."""
    from sgpatch.cli.render import dumps, render_doctor
    from sgpatch.deployed.doctor import doctor as run_doctor
    from sgpatch.errors import SgpatchError as Bad

    cfg = _config(config)
    if is_fleet(ssh, hosts):
        return doctor_fleet_cli(
            stack=cfg.stack(stack),
            hosts=fleet_hosts(ssh, hosts, limit),
            options=host_options(python=python, jobs=jobs, timeout=timeout),
            json_out=json_out,
        )
    if jobs is not None or limit is not None or timeout is not None:
        raise Bad("--jobs, --limit and --timeout go with --hosts or several --ssh")
    report = run_doctor(cfg.stack(stack), python=python, host=ssh[0] if ssh else None)
    echo_json(dumps(report.as_dict())) if json_out else echo(render_doctor(report))
    if not report.ok:
        raise typer.Exit(1)
