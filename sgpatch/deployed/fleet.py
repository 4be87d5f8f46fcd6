"""The fleet: every serving host checked at once, one row per host (SPEC §15).

Each host is one probe session (``sgpatch.deployed.remote``: the user's own ssh, one
connection, the probe run by the host's Python), run on a bounded pool of threads that
each drive an ssh process; each session has a deadline.  A host ends in one of
:data:`STATUSES`: ``ok`` (with its build), ``drift`` (what), ``not installed``,
``unreachable`` (ssh's own reason, or no answer in time) or ``error`` (the host answered
but could not be checked).  The build of each host that has sglang (its version and the
provenance ``build`` wrote: stack, series, the provenance's digest) is compared with the
others', and the hosts whose build differs from the majority's are named.

Exit codes combine like Ansible's, keeping *unreachable* apart from *failed*:
``0`` every host ok and on one build; ``1`` some host drifted, has no sglang, or runs
another build than the majority; ``3`` some host was unreachable or could not be checked
(and none failed); ``5`` both (:data:`EXIT_FAILED_AND_UNREACHABLE`), so that a down host
never hides drift on the others from a script that reads only the exit code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sgpatch.deployed.doctor import check as doctor_check
from sgpatch.deployed.doctor import request as doctor_request
from sgpatch.deployed.installed import NotInstalled, examine_install
from sgpatch.deployed.inventory import Host
from sgpatch.deployed.remote import ProbeSession, Unreachable, checked_timeout, run_probe, target_for
from sgpatch.deployed.target import HostOptions, Target
from sgpatch.errors import EXIT_CHECK_FAILED, EXIT_ENVIRONMENT, EXIT_OK, SgpatchError
from sgpatch.pyast import ParseMemo, parses_shared
from sgpatch.results import SCHEMA_VERSION, Progress
from sgpatch.wheel.provenance import PROVENANCE_NAME, parse_provenance, wheel_version

if TYPE_CHECKING:
    from sgpatch.cache import Cache
    from sgpatch.config import Stack
    from sgpatch.deployed.answer import InstalledDist
    from sgpatch.project import Project
    from sgpatch.verify.engine import VerifyReport

STATUSES = ("ok", "drift", "not installed", "unreachable", "error")
FAILED = ("drift", "not installed")  # the host was checked and is not what the stack says
BROKEN = ("unreachable", "error")  # the host was not checked
DEFAULT_JOBS = 16
DEFAULT_TIMEOUT = 120.0  # seconds per host, connection included (ssh's own connect timeout is 5 s)
EXIT_FAILED_AND_UNREACHABLE = 5
FDS_PER_HOST = 8  # a session's pipes (both ends while it starts) and a margin


@dataclass(frozen=True, slots=True)
class Build:
    """What a host runs, as the hosts are compared: ``fields`` decide equality, ``label`` shows it."""

    label: str
    fields: tuple[tuple[str, str | None], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, **dict(self.fields)}


@dataclass(frozen=True, slots=True)
class HostResult:
    """One host's row."""

    host: str
    where: str  # the inventory's FILE:LINE, or --ssh
    target: str  # the interpreter and host probed
    status: str  # one of STATUSES
    detail: str  # one line: the build, what drifted, ssh's reason, the error
    build: Build | None = None
    failures: tuple[str, ...] = ()
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "where": self.where,
            "target": self.target,
            "status": self.status,
            "detail": self.detail,
            "build": self.build.as_dict() if self.build is not None else None,
            "failures": list(self.failures),
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class FleetReport:
    """Every host's row, the counts, the majority build and the hosts that run another."""

    command: str  # verify or doctor
    stack: str
    expected: str  # what an ok host runs (verify: the stack's wheel version)
    hosts: tuple[HostResult, ...]
    majority: Build | None
    odd: tuple[str, ...]  # hosts whose build differs from the majority's
    seconds: float
    jobs: int
    timeout: float

    @property
    def counts(self) -> dict[str, int]:
        found = Counter(h.status for h in self.hosts)
        return {s: found[s] for s in STATUSES}

    @property
    def slowest(self) -> HostResult | None:
        return max(self.hosts, key=lambda h: h.seconds, default=None)

    @property
    def exit_code(self) -> int:
        failed = bool(self.odd) or any(h.status in FAILED for h in self.hosts)
        broken = any(h.status in BROKEN for h in self.hosts)
        if failed and broken:
            return EXIT_FAILED_AND_UNREACHABLE
        return EXIT_ENVIRONMENT if broken else EXIT_CHECK_FAILED if failed else EXIT_OK

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        slowest = self.slowest
        return {
            "schema_version": SCHEMA_VERSION,
            "command": self.command,
            "stack": self.stack,
            "expected": self.expected,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "hosts": [h.as_dict() for h in self.hosts],
            "summary": {
                "total": len(self.hosts),
                **{s.replace(" ", "_"): n for s, n in self.counts.items()},
                "seconds": round(self.seconds, 3),
                "slowest": {"host": slowest.host, "seconds": round(slowest.seconds, 3)} if slowest else None,
                "jobs": self.jobs,
                "timeout": self.timeout,
            },
            "majority": self.majority.as_dict() if self.majority is not None else None,
            "odd": list(self.odd),
        }


# --------------------------------------------------------------------------- hosts and targets


def ssh_hosts(names: Sequence[str]) -> tuple[Host, ...]:
    """``--ssh`` arguments as hosts, each given to ssh as it is."""
    return tuple(Host(name=name, where="--ssh") for name in names)


def target_of(host: Host, python: str | None) -> Target:
    """The probe's target for ``host``: its inventory interpreter over ``--python`` (as Ansible's
    inventory variables win over its command line), and its address, user and port."""
    chosen = host.python if host.python is not None else python
    if host.local:
        return target_for(python=chosen, host=None)
    base = target_for(python=chosen, host=host.name)
    return dataclasses.replace(
        base, hostname=host.hostname, user=host.user, port=host.port, identity=host.identity, ssh_args=host.ssh_args
    )


def unique(hosts: Sequence[Host]) -> tuple[Host, ...]:
    """Each host once (the first time it is named)."""
    seen: dict[str, Host] = {}
    for host in hosts:
        seen.setdefault(host.name, host)
    return tuple(seen.values())


# --------------------------------------------------------------------------- one host


Work = Callable[[Target], tuple[str, str, "Build | None", tuple[str, ...]]]


def _one(host: Host, target: Target, work: Work) -> HostResult:
    started = time.monotonic()
    build: Build | None = None
    failures: tuple[str, ...] = ()
    try:
        status, detail, build, failures = work(target)
    except Unreachable as exc:
        status, detail = "unreachable", exc.reason
    except NotInstalled as exc:
        status, detail = "not installed", _unprefixed(exc.message, target)
    except SgpatchError as exc:
        status, detail = "error", _unprefixed(exc.message, target)
    seconds = time.monotonic() - started
    return HostResult(host.name, host.where, target.label, status, detail, build, failures, seconds)


def _unprefixed(message: str, target: Target) -> str:
    """An error's message without the host it starts with: the row names it."""
    for prefix in (f"{target.label}: ", f"{target.host}: "):
        message = message.removeprefix(prefix)
    return message


def install_build(dist: InstalledDist) -> Build:
    """An install's build: its version and, when sgpatch built it, the stack, series and provenance digest."""
    data = dist.meta.get(PROVENANCE_NAME)
    if data is None:
        return Build(f"{dist.version} (not built by sgpatch)", (("version", dist.version),))
    digest = hashlib.sha256(data.encode("utf-8")).hexdigest()[:12]
    try:
        doc = parse_provenance(data.encode("utf-8"))
    except ValueError:
        return Build(f"{dist.version} (unreadable provenance {digest})", (("version", dist.version),))
    stack = doc.get("stack") if isinstance(doc.get("stack"), str) else None
    series = (doc.get("series") or {}).get("id")
    series = series if isinstance(series, str) else None
    label = f"{dist.version} (stack {stack}, series {series}, provenance {digest})"
    return Build(label, (("version", dist.version), ("stack", stack), ("series", series), ("provenance", digest)))


def drift_of(report: VerifyReport) -> str:
    """What drifted, in one line."""
    if report.phase == "pristine":
        what = "unpatched: the series is not applied"
    elif report.phase == "mixed":
        what = "partly patched: some patches are applied, some not"
    else:
        what = report.failures[0] if report.failures else "failed"
    more = len(report.failures) - (0 if report.phase in ("pristine", "mixed") else 1)
    return what + (f" (+{more} more)" if more > 0 else "")


# --------------------------------------------------------------------------- the fleet


def _majority(results: Sequence[HostResult], expected: Build | None) -> tuple[Build | None, tuple[str, ...]]:
    """The most common build (a tie: the stack's own, else the first host's) and the hosts on another."""
    builds = [r.build for r in results if r.build is not None]
    if not builds:
        return None, ()
    counted = Counter(b.fields for b in builds)
    top = max(counted.values())
    firsts: dict[tuple[tuple[str, str | None], ...], Build] = {}
    for b in builds:
        firsts.setdefault(b.fields, b)
    tied = [b for fields, b in firsts.items() if counted[fields] == top]
    chosen = next((b for b in tied if expected is not None and _same(b, expected)), tied[0])
    odd = tuple(r.host for r in results if r.build is not None and r.build.fields != chosen.fields)
    return chosen, odd


def _same(build: Build, expected: Build) -> bool:
    mine = dict(build.fields)
    return all(mine.get(k) == v for k, v in expected.fields)


def _one_sharing(memo: ParseMemo, host: Host, target: Target, work: Work) -> HostResult:
    """``_one`` in a worker thread, parsing into the memo of the thread that started the pool."""
    with parses_shared(memo):
        return _one(host, target, work)


def run_fleet(
    command: str,
    stack: str,
    expected: str,
    hosts: Sequence[Host],
    work: Work,
    *,
    python: str | None,
    jobs: int,
    timeout: float,
    expected_build: Build | None = None,
    progress: Progress | None = None,
) -> FleetReport:
    """``work`` on every host, ``jobs`` at a time; the rows in the order the hosts were given."""
    if jobs < 1:
        raise SgpatchError(f"--jobs {jobs}: give 1 or more hosts at a time")
    timeout = checked_timeout(timeout)  # finite and bounded: a timer never gets 1e10 or inf
    hosts = unique(hosts)
    if not hosts:
        raise SgpatchError("no hosts to check", hint="give --hosts FILE or --ssh HOST (repeatable)")
    targets = [target_of(h, python) for h in hosts]  # every bad value refused before any ssh starts
    jobs = min(jobs, len(hosts), _descriptor_budget())
    started = time.monotonic()
    rows: list[HostResult | None] = [None] * len(hosts)
    with parses_shared() as memo, ThreadPoolExecutor(max_workers=jobs) as pool:
        # every worker joins this memo: identical files on many hosts are parsed once
        futures = {
            pool.submit(_one_sharing, memo, h, t, work): i for i, (h, t) in enumerate(zip(hosts, targets, strict=True))
        }
        try:
            for done, future in enumerate(as_completed(futures), 1):
                row = rows[futures[future]] = future.result()
                if progress is not None:
                    progress(f"[{done}/{len(hosts)}] {row.host}: {row.status} ({row.seconds:.1f}s)")
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    results = tuple(r for r in rows if r is not None)
    majority, odd = _majority(results, expected_build)
    return FleetReport(command, stack, expected, results, majority, odd, time.monotonic() - started, jobs, timeout)


def _timeout(options: HostOptions) -> float:
    return options.timeout if options.timeout is not None else DEFAULT_TIMEOUT


def _descriptor_budget() -> int:
    """How many probe sessions the open-file limit allows at once (each holds three pipes and their ends)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 16
    return max(1, (soft - 64) // FDS_PER_HOST)


def verify_fleet(
    project: Project,
    hosts: Sequence[Host],
    options: HostOptions = HostOptions(),  # noqa: B008 (frozen: one shared default is safe)
    *,
    cache: Cache | None = None,
    progress: Progress | None = None,
) -> FleetReport:
    """``verify`` on every host: is the code each one will import the stack's patched code?"""
    timeout = _timeout(options)

    def work(target: Target) -> tuple[str, str, Build | None, tuple[str, ...]]:
        with ProbeSession(target, timeout=timeout) as session:
            report, dist = examine_install(project, session, cache=cache)
        build = install_build(dist)
        if report.ok:
            return "ok", build.label, build, ()
        return "drift", drift_of(report), build, report.failures

    version = wheel_version(project.stack, project.series)
    expected = Build(version, (("version", version), ("stack", project.stack.name), ("series", project.series.id)))
    label = f"{version} (stack {project.stack.name}, series {project.series.id})"
    return run_fleet(
        "verify",
        project.stack.name,
        label,
        hosts,
        work,
        python=options.python,
        jobs=options.jobs if options.jobs is not None else DEFAULT_JOBS,
        timeout=timeout,
        expected_build=expected,
        progress=progress,
    )


def doctor_fleet(
    stack: Stack,
    hosts: Sequence[Host],
    options: HostOptions = HostOptions(),  # noqa: B008 (frozen: one shared default is safe)
    *,
    progress: Progress | None = None,
) -> FleetReport:
    """``doctor`` on every host: the packages around sglang against the stack's pins."""
    timeout = _timeout(options)
    request = doctor_request(stack)  # a malformed pin is refused once, before any host

    def work(target: Target) -> tuple[str, str, Build | None, tuple[str, ...]]:
        report = doctor_check(stack, run_probe(target, request, timeout=timeout))
        build = Build(
            ", ".join(f"{r.name} {r.found or '-'}" for r in report.rows),
            tuple((r.name, r.found) for r in report.rows),
        )
        if report.ok:
            return "ok", build.label, build, ()
        if report.rows and report.rows[0].found is None:  # the first row is sglang's
            return "not installed", f"{target.label}: no sglang installed", build, report.failures
        more = len(report.failures) - 1
        return "drift", report.failures[0] + (f" (+{more} more)" if more > 0 else ""), build, report.failures

    return run_fleet(
        "doctor",
        stack.name,
        f"the pins of {stack.name}",
        hosts,
        work,
        python=options.python,
        jobs=options.jobs if options.jobs is not None else DEFAULT_JOBS,
        timeout=timeout,
        progress=progress,
    )
