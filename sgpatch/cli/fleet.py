"""``verify``/``doctor`` on a fleet (``--hosts FILE``, ``--ssh`` given more than once): the options, the
dispatch from those commands, and the table (one row per host, the odd ones, a summary line)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from sgpatch.cli.base import option
from sgpatch.cli.common import Exit, _err, _progress, echo, echo_json
from sgpatch.cli.params import HOSTS, JOBS, LIMIT, SSH, TIMEOUT

if TYPE_CHECKING:
    from sgpatch.config import Config, Stack
    from sgpatch.deployed.fleet import FleetReport
    from sgpatch.deployed.inventory import Host
    from sgpatch.deployed.target import HostOptions

SshOpt = Annotated[list[str] | None, option(SSH)]
HostsOpt = Annotated[Path | None, option(HOSTS)]
LimitOpt = Annotated[str | None, option(LIMIT)]
JobsOpt = Annotated[int | None, option(JOBS)]
TimeoutOpt = Annotated[float | None, option(TIMEOUT)]


def is_fleet(ssh: list[str] | None, hosts: Path | None) -> bool:
    """Whether the options name a fleet: ``--hosts``, or ``--ssh`` more than once (one keeps verify's report)."""
    return hosts is not None or len(ssh or []) > 1


def fleet_hosts(ssh: list[str] | None, hosts: Path | None, limit: str | None) -> tuple[Host, ...]:
    """The ``--ssh`` hosts, then the inventory's (``--limit`` applies to the inventory)."""
    from sgpatch.deployed.fleet import ssh_hosts
    from sgpatch.deployed.inventory import load_inventory
    from sgpatch.errors import SgpatchError

    found = list(ssh_hosts(ssh or []))
    if hosts is not None:
        found.extend(load_inventory(hosts).limit(limit))
    elif limit is not None:
        raise SgpatchError("--limit goes with --hosts FILE")
    return tuple(found)


def host_options(*, python: str | None, jobs: int | None = None, timeout: float | None = None) -> HostOptions:
    """``--python``, ``--jobs`` and ``--timeout`` as given (None: the core's default) for the core."""
    from sgpatch.deployed.target import HostOptions

    return HostOptions(python=python, jobs=jobs, timeout=timeout)


def verify_fleet_cli(
    *, stack: str | None, config: Config, hosts: tuple[Host, ...], options: HostOptions, json_out: bool, cache: Any
) -> None:
    from sgpatch.deployed.fleet import verify_fleet
    from sgpatch.project import load_project

    project = load_project(config, stack)
    report = verify_fleet(project, hosts, options, cache=cache, progress=_progress(json_out))
    _finish(report, json_out)


def doctor_fleet_cli(*, stack: Stack, hosts: tuple[Host, ...], options: HostOptions, json_out: bool) -> None:
    from sgpatch.deployed.fleet import doctor_fleet

    report = doctor_fleet(stack, hosts, options, progress=_progress(json_out))
    _finish(report, json_out)


def _finish(report: FleetReport, json_out: bool) -> None:
    from sgpatch.cli.render import dumps

    echo_json(dumps(report.as_dict())) if json_out else echo(render_fleet(report))
    if report.exit_code:
        if json_out:  # the table says it otherwise
            _err(f"sgpatch: {report.command}: {summary(report)}")
        raise Exit(report.exit_code)


def summary(report: FleetReport) -> str:
    """``4 hosts: 2 ok, 1 drift, 0 not installed, 1 unreachable, 0 error``."""
    counts = ", ".join(f"{n} {status}" for status, n in report.counts.items())
    return f"{len(report.hosts)} host(s): {counts}" + (f"; {len(report.odd)} on another build" if report.odd else "")


def render_fleet(report: FleetReport) -> str:
    """One row per host, the hosts on another build than the majority, the counts and the time."""
    from sgpatch.cli.render import _table, joined

    lines = [
        f"{report.command} {report.stack} on {len(report.hosts)} host(s), {report.jobs} at a time, "
        f"{report.timeout:g}s each",
        f"expect  {report.expected}",
        "",
    ]
    rows = []
    for h in report.hosts:
        detail = h.detail
        if h.status != "ok" and h.build is not None:
            detail += f" [runs {h.build.label}]"
        rows.append((h.host, h.status.upper() if h.status != "ok" else "ok", detail))
    lines.extend(_table(rows, ("host", "status", "build or reason")))
    lines.append("")
    if report.majority is not None and report.odd:
        lines.append(f"majority build: {report.majority.label}")
        lines.append(f"another build:  {', '.join(report.odd)}")
    slowest = report.slowest
    took = f"{report.seconds:.1f}s" + (f" (slowest {slowest.host}: {slowest.seconds:.1f}s)" if slowest else "")
    verdict = "ok" if report.ok else f"FAILED (exit {report.exit_code})"
    lines.append(f"{report.command}: {verdict}: {summary(report)}; {took}")
    return joined(lines)
