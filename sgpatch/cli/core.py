"""The commands on a stack and its checkout: ``stacks``, ``fetch``, ``apply``, ``verify``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sgpatch.cli.base import (
    CheckoutOpt,
    ConfigOpt,
    JsonOpt,
    NoCacheOpt,
    StackArg,
    _cache,
    _checkout,
    _config,
    _err,
    _progress,
    app,
    echo,
    echo_json,
    handled,
)
from sgpatch.cli.fleet import (
    HostsOpt,
    JobsOpt,
    LimitOpt,
    SshOpt,
    TimeoutOpt,
    fleet_hosts,
    host_options,
    is_fleet,
    verify_fleet_cli,
)


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


@app.command()
@handled
def verify(
    stack: StackArg = None,
    checkout: CheckoutOpt = None,
    wheel: Annotated[Path | None, typer.Option("--wheel", help="a built wheel to check")] = None,
    installed: Annotated[bool, typer.Option("--installed", help="the sglang installed for --python")] = False,
    ssh_hosts: SshOpt = None,
    hosts: HostsOpt = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            metavar="PATH[:TAG]",
            help="a docker save archive or OCI layout directory (PATH or PATH:TAG), read as data",
        ),
    ] = None,
    limit: LimitOpt = None,
    python: Annotated[str | None, typer.Option("--python", help="interpreter whose sglang to check")] = None,
    jobs: JobsOpt = None,
    timeout: TimeoutOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
    no_cache: NoCacheOpt = False,
) -> None:
    """Check anchors, file blobs, patch states and hunk landing on a checkout, wheel, install, image or fleet."""
    from sgpatch.cli.render import dumps, render_verify
    from sgpatch.errors import SgpatchError as Bad
    from sgpatch.project import load_project
    from sgpatch.verify.engine import verify_checkout

    remote = bool(ssh_hosts) or hosts is not None
    targets = [t for t in (checkout is not None, wheel is not None, installed, remote, image is not None) if t]
    if len(targets) > 1:
        raise Bad("give one target: --checkout, --wheel, --installed, --image, or --ssh/--hosts")
    if python is not None and not (installed or remote):
        raise Bad("--python goes with --installed, --ssh or --hosts")
    if is_fleet(ssh_hosts, hosts):
        return verify_fleet_cli(
            stack=stack,
            config=_config(config),
            hosts=fleet_hosts(ssh_hosts, hosts, limit),
            options=host_options(python=python, jobs=jobs, timeout=timeout),
            json_out=json_out,
            cache=_cache(no_cache),
        )
    if jobs is not None or limit is not None or (timeout is not None and not remote):
        raise Bad("--jobs and --limit go with --hosts or several --ssh; --timeout with --ssh or --hosts")
    ssh = ssh_hosts[0] if ssh_hosts else None
    cfg = _config(config)
    if wheel is not None and stack is None:
        from sgpatch.wheel import read_provenance

        stack = (read_provenance(wheel) or {}).get("stack")  # a wheel names its own stack
    project = load_project(cfg, stack)
    report: Any
    if wheel is not None:
        from sgpatch.wheel import check_wheel, upstream_wheel_for

        upstream = upstream_wheel_for(project.stack, wheel, _progress(json_out))  # same tags: compared file by file
        report = check_wheel(
            project.stack,
            project.series,
            wheel,
            upstream=upstream,
            cache=_cache(no_cache),
            anchors=project.anchors,  # read once, with the series
        )
    elif image is not None:
        from sgpatch.deployed.image_install import verify_image

        report = verify_image(project, image, cache=_cache(no_cache))
    elif installed:
        from sgpatch.deployed.installed import verify_installed

        report = verify_installed(project, python=python)
    elif ssh is not None:
        from sgpatch.deployed.installed import verify_ssh

        report = verify_ssh(project, ssh, host_options(python=python, timeout=timeout))
    else:
        report = verify_checkout(project, _checkout(cfg, project.stack, checkout), cache=_cache(no_cache))
    if json_out:
        echo_json(dumps(report.as_dict()))
    elif wheel is not None:
        from sgpatch.cli.render import render_wheelreport

        echo(render_wheelreport(report))
    else:
        echo(render_verify(report))
    if not report.ok:
        for failure in report.failures:
            _err(f"sgpatch: verify: check failed: {failure}")
        raise typer.Exit(1)
