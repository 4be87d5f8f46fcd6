"""verify --installed / --ssh: is the code the server will import the patched code? (SPEC §7)

One probe session (``sgpatch.deployed.remote``: one process, one ssh connection) finds
the target interpreter's sglang through its package metadata, without
importing it.  Its first answer brings the files the series touches, the
anchor files, the provenance ``build`` wrote into ``.dist-info/sgpatch.json``
and the RECORD rows whose files no longer have their recorded sha256; any other
file a check reads (the interface check follows imports) is fetched on demand
over the same session.  The anchors, blob, patch-state, hunk-landing and
interface checks then run on those bytes exactly as on a wheel, and an install
must carry the series.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sgpatch.deployed.answer import InstalledDist, ProbeResult, RecordCheck, imported_failure
from sgpatch.deployed.remote import ANSWER_TIMEOUT, ProbeSession, run_probe, target_for
from sgpatch.deployed.target import HostOptions, Target
from sgpatch.errors import SgpatchError
from sgpatch.git.objectid import blob_id
from sgpatch.project import Project
from sgpatch.series.anchors import AnchorResult, check_anchors
from sgpatch.series.fileset import file_set_problems, series_file_change
from sgpatch.source.tree import PYTHON_PREFIX, DirTree, site_packages_tree
from sgpatch.verify.engine import VerifyReport, verify_tree
from sgpatch.wheel.provenance import PROVENANCE_NAME, parse_provenance, provenance_problems, wheel_version

if TYPE_CHECKING:
    from sgpatch.cache import Cache

DIST_NAME = "sglang"
PACKAGE_PREFIX = f"{PYTHON_PREFIX}{DIST_NAME}/"
SHOWN = 10  # modified files listed one by one before "and N more"


class NotInstalled(SgpatchError):
    """The target interpreter has no sglang distribution: a wrong target (exit 2)."""


class InstallSource(Protocol):
    """What answers about an install: the probe in a running interpreter, or an image read as data."""

    @property
    def imported(self) -> tuple[str, ...]:
        """Watched modules loaded where the answers came from (must be empty)."""
        ...

    def inspect(self, dists: Mapping[str, Mapping[str, Any]]) -> ProbeResult:
        """The probe's ``inspect`` answer (see ``probe.inspect_dist``)."""
        ...

    def read(self, dist: str, files: Sequence[str]) -> dict[str, bytes | None]:
        """Files below an inspected distribution's import root (None: no such file)."""
        ...


class InstalledTree:
    """An installed sglang, read through a running probe, in upstream's layout.

    ``python/sglang/...`` maps to the package's import root on the target.  The
    first answer brings the names of all the package's files and the contents
    of the files verify reads first; any other file is fetched when first read
    (a directory's Python sources all at once, when it is listed), over the same
    session, and kept.  A name not in the package reads as missing without a
    round trip.  Paths outside ``python/sglang/`` read as missing, as in a
    wheel: the tree is sglang, not the whole site-packages.
    """

    def __init__(self, session: InstallSource, dist: InstalledDist, label: str) -> None:
        self.session = session
        self.dist = dist
        self._label = label
        self._files: dict[str, bytes | None] = dict(dist.files)
        self._names = frozenset(dist.tree or ())

    @property
    def label(self) -> str:
        return self._label

    def _fetch(self, rels: list[str]) -> None:
        wanted = [r for r in rels if r not in self._files]
        if wanted:
            self._files.update(self.session.read(DIST_NAME, wanted))

    def read(self, path: str) -> bytes | None:
        if not path.startswith(PACKAGE_PREFIX):
            return None
        rel = path[len(PYTHON_PREFIX) :]
        if rel not in self._names:
            return None
        self._fetch([rel])
        return self._files[rel]

    def list(self, prefix: str) -> list[str]:
        inner = prefix.rstrip("/") + "/"
        if not inner.startswith(PACKAGE_PREFIX):
            return []
        inner = inner[len(PYTHON_PREFIX) :]
        names = sorted(n for n in self._names if n.startswith(inner))
        self._fetch([n for n in names if n.endswith(".py")])  # listed to be read: one round trip
        return [PYTHON_PREFIX + n for n in names]


def wanted_files(project: Project) -> list[str]:
    """The install-relative paths the checks read: touched files, anchor files, pinned files."""
    paths = set(project.series.touched) | {a.file for a in project.anchors} | {f.path for f in project.stack.files}
    return sorted(p[len(PYTHON_PREFIX) :] for p in paths if p.startswith(PYTHON_PREFIX))


def probe_request(project: Project) -> dict[str, Any]:
    """The first request: sglang's metadata, RECORD check, provenance and the files verify reads first."""
    return {
        DIST_NAME: {
            "package": DIST_NAME,
            "files": wanted_files(project),
            "meta": [PROVENANCE_NAME],
            "record": True,
            "tree": True,
        }
    }


def _sglang(result: ProbeResult, where: str | None = None) -> InstalledDist:
    dist = result.dists.get(DIST_NAME)
    if dist is None and where is not None:
        raise NotInstalled(
            f"{where}: no sglang installed (no sglang-*.dist-info in any site-packages or dist-packages directory)",
            hint="give the image the servers run, after the layer that installs sglang",
        )
    if dist is None:
        raise NotInstalled(
            f"{result.target.label}: no sglang installed (Python {result.python_version} at {result.executable} "
            "has no sglang distribution)",
            hint="pass --python with the interpreter of the serving environment (its venv's bin/python)",
        )
    return dist


def _where(target: Target) -> str:
    return f"{target.host}: installed" if target.host else "installed"


# --------------------------------------------------------------------------- the checks beyond verify_tree


def _record_findings(project: Project, dist: InstalledDist) -> tuple[list[str], list[str]]:
    """Failures and notes from the RECORD check: any file changed or deleted after install."""
    record = dist.record
    if record is None or not record.present:
        return [], ["RECORD: none: whether files changed after install cannot be told"]
    failures: list[str] = []
    notes: list[str] = []
    touched = {p[len(PYTHON_PREFIX) :] for p in project.series.touched if p.startswith(PYTHON_PREFIX)}
    changed = sorted(record.modified, key=lambda p: (p not in touched, p))
    failures.extend(f"{p}: modified after install (its sha256 differs from RECORD)" for p in changed[:SHOWN])
    gone = sorted(record.missing, key=lambda p: (p not in touched, p))
    failures.extend(f"{p}: deleted after install (listed in RECORD)" for p in gone[: max(0, SHOWN - len(changed))])
    hidden = len(changed) + len(gone) - SHOWN
    if hidden > 0:
        failures.append(f"... and {hidden} more file(s) changed or deleted after install")
    hashed = len(record.paths) - record.unhashed
    if not changed and not gone:
        notes.append(f"RECORD: all {hashed} hashed files match")
    listed = set(record.paths)
    unlisted = sorted(touched - listed)
    if unlisted:
        notes.append(f"RECORD does not list {', '.join(unlisted)}: whether it changed after install cannot be told")
    return failures, notes


def file_set_findings(
    project: Project, names: Collection[str] | None, record: RecordCheck | None, *, source_tree: bool
) -> tuple[list[str], list[str]]:
    """Failures and notes on the package's file set (``names``: ``sglang/...``, ``__pycache__`` left out): the
    files the install's RECORD lists (the wheel it came from) with the series' new files and without its deleted
    ones, and nothing else (``file_set_problems``).  A file RECORD lists that is gone is the RECORD check's
    finding; a source tree (an editable or path install) and an install without RECORD have no wheel's list,
    so there only the series' own files are compared.  Nothing here depends on what a cache holds."""
    if names is None:
        return [], ["file set: the package's files were not listed"]
    change = series_file_change(project.series).inside(PYTHON_PREFIX)
    found = frozenset(n for n in names if n.startswith(f"{DIST_NAME}/"))
    if source_tree or record is None or not record.present:
        problems = file_set_problems(found & (change.added | change.deleted), change.deleted, change)
        why = "an editable or path install" if source_tree else "no RECORD"
        note = f"file set: {why}: only the files the series adds or deletes compared"
    else:
        listed = frozenset(n for n in record.paths if n.startswith(f"{DIST_NAME}/") and "/__pycache__/" not in n)
        problems = file_set_problems(found, listed - frozenset(record.missing), change)
        added, deleted = len(change.added), len(change.deleted)
        note = f"file set: {len(found)} files, RECORD's plus {added} added, minus {deleted} deleted"
    shown = [f"file set: {p}" for p in problems[:SHOWN]]
    if len(problems) > SHOWN:
        shown.append(f"file set: ... and {len(problems) - SHOWN} more")
    return shown, [] if problems else [note]


def _provenance_findings(project: Project, dist: InstalledDist, tree: InstalledTree) -> tuple[list[str], list[str]]:
    """Failures and notes from the provenance ``build`` wrote: which stack and series is installed."""
    data = dist.meta.get(PROVENANCE_NAME)
    if data is None:
        return [], [
            f"provenance: none: sglang {dist.version} was not installed from a wheel sgpatch built "
            "(unpatched or foreign)"
        ]
    try:
        doc = parse_provenance(data.encode("utf-8"))
    except ValueError as exc:
        return [f"provenance: {PROVENANCE_NAME} is unreadable: {exc}"], []
    stack, series = project.stack, project.series
    found: dict[str, str | None] = {}
    for path in series.touched:
        content = tree.read(path)
        found[path] = blob_id(content) if content is not None else None
    problems = provenance_problems(doc, stack, series, wheel_version(stack, series), found)
    if doc.get("version") != dist.version:
        problems.append(f"version is {doc.get('version')!r}, but the installed distribution is {dist.version!r}")
    series_doc = doc.get("series") or {}
    built = doc.get("tool") or {}
    summary = (
        f"provenance: stack {doc.get('stack')}, series {series_doc.get('id')} "
        f"({len(series_doc.get('patches') or [])} patch(es)), built by sgpatch {built.get('version')} "
        f"from the {(doc.get('source') or {}).get('kind')} source"
    )
    failures = [f"provenance: {p}" for p in problems]
    notes = [summary]
    if doc.get("stack") != stack.name and isinstance(doc.get("stack"), str):
        notes.append(f"provenance: this install was built for stack {doc['stack']}, not {stack.name}")
    return failures, notes


def _patched_anchor_findings(project: Project, tree: InstalledTree) -> tuple[list[AnchorResult], list[str]]:
    """The patched-only anchors on an install that is not patched: they name what is missing."""
    results = [r for r in check_anchors(project.anchors, tree, "patched") if r.anchor.phase == "patched"]
    failures = [
        f"anchor {r.anchor.id}: {r.status} ({r.detail}); the series adds it: {r.anchor.why}"
        for r in results
        if not r.ok
    ]
    return results, failures


def check_install(project: Project, session: ProbeSession) -> VerifyReport:
    """Every check on the sglang of ``session``'s interpreter: verify's report plus RECORD and provenance."""
    return examine_install(project, session)[0]


def examine_install(
    project: Project, session: InstallSource, *, cache: Cache | None = None, where: str | None = None
) -> tuple[VerifyReport, InstalledDist]:
    """:func:`check_install`'s report and the distribution it checked (its version and provenance name
    the build); ``cache`` keeps parsed facts by the bytes they come from, as for a wheel.  ``where``
    names a source that is not an interpreter (an image)."""
    result = session.inspect(probe_request(project))
    dist = _sglang(result, where)
    label = f"{where or _where(result.target)} sglang {dist.version} in {dist.location}"
    tree = InstalledTree(session, dist, label)
    notes = [f"python: {result.executable} (Python {result.python_version})"]
    notes.append(f"distribution: sglang {dist.version} at {dist.dist_info or dist.location}")
    broken = dist.package_root is None  # nothing the server imports could be checked: a failure, never an ok
    if dist.package_root is None:
        notes.append("import: sglang's package cannot be found by the import system (a broken install)")
    elif Path(dist.package_root) != Path(dist.location):
        notes.append(f"import: sglang imports from {dist.package_root} (an editable or path install)")
    notes.extend(f"shadowed: another sglang at {s} is not imported" for s in dist.shadowed)

    report = verify_tree(project.stack, project.series, project.anchors, tree, require_patched=True, cache=cache)
    anchors: list[AnchorResult] = list(report.anchors)
    failures: list[str] = list(report.failures)
    if not any(r.anchor.phase == "patched" for r in report.anchors):
        extra, extra_failures = _patched_anchor_findings(project, tree)
        anchors.extend(extra)
        failures.extend(extra_failures)
    record_failures, record_notes = _record_findings(project, dist)
    provenance_failures, provenance_notes = _provenance_findings(project, dist, tree)
    path_install = dist.package_root is not None and Path(dist.package_root) != Path(dist.location)
    file_set_failures, file_set_notes = file_set_findings(project, dist.tree, dist.record, source_tree=path_install)
    failures.extend(record_failures)
    failures.extend(provenance_failures)
    failures.extend(file_set_failures)
    cause = next((f for f in failures if f.startswith("provenance: built from another series")), None)
    if cause is not None:  # the cause the other failures follow from: said first
        failures = [cause, *(f for f in failures if f != cause)]
    notes.extend(record_notes)
    notes.extend(provenance_notes)
    notes.extend(file_set_notes)
    notes.extend(report.notes)
    if (imported := imported_failure(session.imported)) is not None:  # every answer's, the reads' too
        failures.append(imported)
    if broken:
        failures.insert(0, "import: sglang's package cannot be found by the import system (a broken install)")
    report = dataclasses.replace(report, anchors=tuple(anchors), notes=tuple(notes), failures=tuple(failures))
    return report, dist


# --------------------------------------------------------------------------- entry points


def verify_target(project: Project, target: Target, *, timeout: float = ANSWER_TIMEOUT) -> VerifyReport:
    """Verify the sglang installed for ``target``'s interpreter, over one probe session."""
    with ProbeSession(target, timeout=timeout) as session:
        return check_install(project, session)


def verify_installed(project: Project, *, python: str | None = None) -> VerifyReport:
    """Verify the sglang installed for ``python`` (default: this interpreter)."""
    return verify_target(project, target_for(python=python, host=None))


def verify_ssh(
    project: Project,
    host: str,
    options: HostOptions = HostOptions(),  # noqa: B008 (frozen: one shared default is safe)
) -> VerifyReport:
    """Verify the sglang installed for ``options.python`` (default ``python3``) on ``host``, over one ssh
    connection, in ``options.timeout`` seconds (default ANSWER_TIMEOUT)."""
    timeout = options.timeout if options.timeout is not None else ANSWER_TIMEOUT
    return verify_target(project, target_for(python=options.python, host=host), timeout=timeout)


class PackageTree:
    """A local tree restricted to ``python/sglang/``: an install seen the way a wheel is seen."""

    def __init__(self, inner: DirTree) -> None:
        self.inner = inner

    @property
    def root(self) -> Path:
        return self.inner.root

    @property
    def label(self) -> str:
        return self.inner.label

    def read(self, path: str) -> bytes | None:
        return self.inner.read(path) if path.startswith(PACKAGE_PREFIX) else None

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix) if (prefix.rstrip("/") + "/").startswith(PACKAGE_PREFIX) else []


def installed_tree(*, python: str | None = None) -> PackageTree:
    """The installed sglang of a local interpreter as a tree read in place (for checks that read many files)."""
    target = target_for(python=python, host=None)
    result = run_probe(target, {DIST_NAME: {"package": DIST_NAME}})
    dist = _sglang(result)
    if dist.package_root is None:
        raise NotInstalled(f"{target.label}: sglang {dist.version} is installed but its package cannot be found")
    label = f"installed sglang {dist.version} in {dist.package_root}"
    return PackageTree(site_packages_tree(Path(dist.package_root), label=label))
