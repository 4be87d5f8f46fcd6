"""``sgpatch verify``: anchors, file blobs, patch states and hunk landing, on any target.

No typer here: the fast command line (:mod:`sgpatch.cli.fast`) runs it as typer does (its parameters:
``params.VERIFY``); typer's command is registered with ``core``'s (``sgpatch.cli.core.COMMANDS``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sgpatch.cli.common import _cache, _checkout, _config, _err, _progress, echo, echo_json


def verify(
    *,
    stack: str | None,
    checkout: Path | None,
    wheel: Path | None,
    installed: bool,
    ssh_hosts: list[str] | None,
    hosts: Path | None,
    image: str | None,
    limit: str | None,
    python: str | None,
    jobs: int | None,
    timeout: float | None,
    config: Path | None,
    json_out: bool,
    no_cache: bool,
) -> int:
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
    if remote:
        from sgpatch.cli.fleet import fleet_hosts, host_options, is_fleet, verify_fleet_cli

        if is_fleet(ssh_hosts, hosts):
            verify_fleet_cli(
                stack=stack,
                config=_config(config),
                hosts=fleet_hosts(ssh_hosts, hosts, limit),
                options=host_options(python=python, jobs=jobs, timeout=timeout),
                json_out=json_out,
                cache=_cache(no_cache),
            )
            return 0  # a fleet that failed ended with its code (cli.common.Exit)
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
        from sgpatch.cli.fleet import host_options
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
        return 1
    return 0
