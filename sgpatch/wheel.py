"""Build the patched sglang wheel and check any wheel against its stack (SPEC §8, §7).

``build_wheel``: refuse anything but a clean patched checkout; export HEAD as a
fresh git work tree (a local clone sharing the checkout's objects: never the
checkout itself, whose ``build/lib`` a second build would pack, and never
``git archive``, whose missing ``.git`` hides package data from setuptools-scm);
build it with PyPA ``build`` under a forced version and ``SOURCE_DATE_EPOCH``;
rewrite ``Requires-Dist``, add the provenance, re-zip deterministically; check
the result against upstream's published wheel and the checkout; write the
install recipe beside it.  The same inputs reuse the previous wheel.

``check_wheel``: everything that can be said about a wheel from its bytes.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from installer.records import InvalidRecordEntry, RecordEntry, parse_record_file
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from sgpatch import __version__
from sgpatch.anchors import check_anchors, load_anchors
from sgpatch.archive import Archive, open_archive, sha256_record
from sgpatch.artifacts import fetch_artifact, sha256_file
from sgpatch.atomic import write_atomic
from sgpatch.config import Config, Stack
from sgpatch.errors import BuildError, CheckoutError, SgpatchError
from sgpatch.git import Git, clone_shared
from sgpatch.patchset import Series
from sgpatch.provenance import (
    PROVENANCE_NAME,
    BuildInputs,
    dump_provenance,
    make_provenance,
    parse_metadata,
    parse_overrides,
    parse_provenance,
    provenance_problems,
    requires_dist,
    rewrite_requires,
    wheel_version,
)
from sgpatch.results import SCHEMA_VERSION, Progress
from sgpatch.state import check_base_files, inspect, open_checkout
from sgpatch.tree import PYTHON_PREFIX, ZipTree, git_blob_id
from sgpatch.verify import VerifyReport, verify_tree

WHEEL_FORMAT = 1  # bump whenever post-processing changes a wheel's bytes: invalidates cached wheels
DIST_NAME = "sglang"
VERSION_FILE = "sglang/_version.py"  # setuptools-scm writes it; the only unpatched file that differs
_ZIP_EPOCH_MIN = 315532800  # 1980-01-01, the earliest date a zip entry can carry
_FILE_MODE = 0o100644
_EXEC_MODE = 0o100755


def _noop(_: str) -> None:
    return None


def wheel_filename(version: str) -> str:
    return f"{DIST_NAME}-{version}-py3-none-any.whl"


def recipe_filename(stack: Stack) -> str:
    return f"requirements-{stack.name}.txt"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class WheelCheck:
    """One wheel-level check: its name, whether it passed, and what it found."""

    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class WheelReport:
    """Every check on one wheel, with verify's anchor/blob/patch report on its files."""

    wheel: Path
    stack: str
    version: str
    checks: tuple[WheelCheck, ...]
    verify: VerifyReport | None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks) and (self.verify is None or self.verify.ok)

    @property
    def failures(self) -> tuple[str, ...]:
        out = [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]
        if self.verify is not None:
            out.extend(f"verify: {f}" for f in self.verify.failures)
        return tuple(out)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "wheel": str(self.wheel),
            "stack": self.stack,
            "version": self.version,
            "ok": self.ok,
            "checks": [c.as_dict() for c in self.checks],
            "failures": list(self.failures),
            "verify": None if self.verify is None else self.verify.as_dict(),
        }


@dataclass(frozen=True, slots=True)
class BuildResult:
    """The built (or reused) wheel, its install recipe, and the checks run on it."""

    wheel: Path
    recipe: Path
    version: str
    cached: bool
    checks: WheelReport

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "wheel": str(self.wheel),
            "sha256": sha256_file(self.wheel),
            "recipe": str(self.recipe),
            "version": self.version,
            "cached": self.cached,
            "ok": self.checks.ok,
            "checks": self.checks.as_dict(),
        }


# --------------------------------------------------------------------------- zip files


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    data: bytes
    executable: bool


def _read_zip(path: Path) -> list[_Entry]:
    """The regular files of a wheel, in archive order; ArchiveError (exit 2) if it is unreadable or unsafe."""
    with open_archive(path, "wheel") as archive:
        return [_Entry(e.name, data, e.executable) for e, data in archive.files()]


def _record_hash(data: bytes) -> str:
    return sha256_record(hashlib.sha256(data).digest())


def _record(entries: Sequence[_Entry], record_name: str) -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for e in entries:
        writer.writerow((e.name, _record_hash(e.data), len(e.data)))
    writer.writerow((record_name, "", ""))
    return buf.getvalue().encode()


def _write_wheel(dest: Path, entries: Sequence[_Entry], dist_info: str, epoch: int) -> None:
    """A deterministic wheel: sorted entries (``.dist-info`` last, RECORD at the very end),
    one fixed timestamp, fixed permissions, a fresh RECORD."""
    record_name = f"{dist_info}/RECORD"
    body = [e for e in entries if e.name != record_name]
    body.sort(key=lambda e: (e.name.startswith(f"{dist_info}/"), e.name))
    date_time = time.gmtime(max(epoch, _ZIP_EPOCH_MIN))[:6]
    with zipfile.ZipFile(dest, "w") as zf:
        for e in [*body, _Entry(record_name, _record(body, record_name), False)]:
            info = zipfile.ZipInfo(e.name, date_time=date_time)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix: external_attr carries the mode
            info.external_attr = (_EXEC_MODE if e.executable else _FILE_MODE) << 16
            zf.writestr(info, e.data, compresslevel=6)


# --------------------------------------------------------------------------- export and build


def export_commit(checkout: Path, commit: str, into: Path) -> None:
    """``commit`` as a fresh git work tree in ``into``: a local clone that shares the checkout's
    objects, without its tags (nothing for setuptools-scm to mistake for the version), and
    without the checkout's index, build output or untracked files.  The checkout is only read."""
    clone_shared(checkout, into, commit)


def build_environment(version: str, epoch: int) -> dict[str, str]:
    """The build's environment: the forced version and date; no inherited git or scm overrides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SETUPTOOLS_SCM_"))}
    normalized = canonicalize_name(DIST_NAME).replace("-", "_").upper()
    env.update(
        {
            f"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_{normalized}": version,
            "SOURCE_DATE_EPOCH": str(epoch),
            "PYTHONHASHSEED": "0",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    return env


def _last_line(stderr: bytes) -> str:
    """The backend's last word: the line before build's generic 'Backend subprocess exited',
    else build's own last ERROR line (with its indented details)."""
    lines = [ln.rstrip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("TIP ")]
    generic = [i for i, ln in enumerate(lines) if ln.startswith("ERROR Backend subprocess exited")]
    if generic and generic[-1] > 0:
        return lines[generic[-1] - 1].strip()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("ERROR ")]
    if not errors:
        return lines[-1].strip() if lines else "no output"
    first = errors[-1]
    detail = [ln.strip() for ln in lines[first + 1 :] if ln[:1] in (" ", "\t") and ":" not in ln.strip()[:7]]
    text = lines[first][len("ERROR ") :].strip()
    return f"{text} {', '.join(detail)}".strip() if detail else text


def _run_build(src: Path, dist: Path, log: Path, env: Mapping[str, str], *, isolated: bool, python: str) -> None:
    # -P and a neutral cwd: a ``build`` module in the source tree can never shadow PyPA build.
    cmd = [python, "-P", "-m", "build", "--wheel", "--outdir", str(dist)]
    if not isolated:
        cmd.append("--no-isolation")
    cmd.append(str(src))
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        try:
            proc = subprocess.run(
                cmd,
                cwd=dist.parent,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                check=False,
            )
        except OSError as exc:
            raise BuildError(f"cannot run {python} -m build: {exc}") from exc
        out.write(b"\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        needs = "" if isolated else "; without isolation the current environment needs sglang's build requirements"
        raise BuildError(
            f"building the wheel failed (python -m build exited {proc.returncode}): {_last_line(proc.stderr)}",
            hint=f"the full build log is {log}{needs}",
        )


def _postprocess(built: Path, dest: Path, inputs: BuildInputs) -> None:
    """Rewrite METADATA, add the provenance, re-zip deterministically with a fresh RECORD."""
    entries = _read_zip(built)
    dist_info = f"{DIST_NAME}-{inputs.version}.dist-info"
    metadata_name = f"{dist_info}/METADATA"
    by_name = {e.name: e for e in entries}
    if metadata_name not in by_name:
        raise BuildError(f"{built.name}: has no {metadata_name}")
    metadata, changes = rewrite_requires(by_name[metadata_name].data, inputs.stack)
    provenance = dump_provenance(make_provenance(inputs, changes))
    out = [e for e in entries if e.name not in (metadata_name, f"{dist_info}/{PROVENANCE_NAME}")]
    out += [_Entry(metadata_name, metadata, False), _Entry(f"{dist_info}/{PROVENANCE_NAME}", provenance, False)]
    _write_wheel(dest, out, dist_info, inputs.source_date_epoch)


# --------------------------------------------------------------------------- cache


def cache_key(inputs: BuildInputs) -> str:
    """The identity of a build: any change to what goes into the wheel changes it."""
    stack = inputs.stack
    doc = {
        "format": WHEEL_FORMAT,
        "sgpatch": __version__,
        "stack": stack.name,
        "version": inputs.version,
        "upstream": [stack.tag, stack.commit],
        "source": stack.source_artifact.sha256 if stack.source_artifact else None,
        "base": inputs.base,
        "head": inputs.head,
        "tree": inputs.tree,
        "phase": inputs.phase,
        "series": [inputs.series.id, [[p.name, p.sha256] for p in inputs.series.patches]],
        "requires": [list(r) for r in stack.requires],
        "source_date_epoch": inputs.source_date_epoch,
        "isolated": inputs.isolated,
        "build_requires": list(stack.build_requires) if inputs.isolated else None,
        "python": inputs.python if not inputs.isolated else None,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _cached_wheel(entry: Path, name: str) -> Path | None:
    wheel, stamp = entry / name, entry / "sha256"
    if not (wheel.is_file() and stamp.is_file()):
        return None
    if sha256_file(wheel) != stamp.read_text().strip():
        shutil.rmtree(entry, ignore_errors=True)  # a damaged entry is never trusted
        return None
    return wheel


def _store(entry: Path, wheel: Path) -> None:
    write_atomic(entry / wheel.name, wheel)
    (entry / "sha256").write_text(sha256_file(wheel) + "\n")


# --------------------------------------------------------------------------- recipe


def install_recipe(stack: Stack, version: str) -> str:
    """The requirements file that sets up a serving host with one ``pip install -r``."""
    install = stack.install
    lines = [
        f"# sgpatch install recipe for {stack.name}: sglang {stack.sglang_version}, patched, on CUDA {stack.cuda}.",
        f"# Install the wheel beside this file and the stack's pins: pip install -r {recipe_filename(stack)}",
    ]
    if install.note:
        lines.append(f"# {install.note}")
    if stack.requires:
        baked = "; ".join(text for _, text in stack.requires)
        lines.append(f"# Requires-Dist overrides baked into the wheel: {baked}")
    else:
        lines.append(f"# No Requires-Dist overrides: sglang {stack.sglang_version}'s own pins fit CUDA {stack.cuda}.")
    if not install.extra_index_urls:
        lines.append("# No extra index: every pin is on the default index.")
    lines.append("")
    lines.extend(f"--extra-index-url {url}" for url in install.extra_index_urls)
    lines.append("# pip resolves a relative --find-links against this file's directory: the wheel beside it.")
    lines.append("--find-links .")
    lines.extend(install.pins)
    lines.append(f"{DIST_NAME}=={version}")
    return "\n".join(lines) + "\n"


def _recipe_conflicts(stack: Stack, requirements: Sequence[Requirement]) -> list[str]:
    """Exact pins of the recipe that the wheel's unconditional Requires-Dist rules out."""
    required: dict[str, list[Requirement]] = {}
    for req in requirements:
        if req.marker is None:
            required.setdefault(canonicalize_name(req.name), []).append(req)
    conflicts = []
    for pin in stack.install.pins:
        try:
            p = Requirement(pin)
        except InvalidRequirement:
            conflicts.append(f"{pin!r} is not a requirement")
            continue
        exact = [s.version for s in p.specifier if s.operator in ("==", "===") and "*" not in s.version]
        for req in required.get(canonicalize_name(p.name), []):
            for v in exact:
                if not req.specifier.contains(v, prereleases=True):
                    conflicts.append(f"pin {pin} contradicts the wheel's Requires-Dist {req}")
    return conflicts


# --------------------------------------------------------------------------- build


def _refuse(checkout: Path, stack: Stack, series: Series, *, allow_unpatched: bool) -> tuple[Git, str, str, str]:
    """The checkout's git, base, head and phase; CheckoutError unless clean and patched."""
    g = open_checkout(checkout)
    state = inspect(g, stack, series)
    if state.dirty:
        shown = ", ".join(e[3:] for e in state.dirty[:3]) + (" …" if len(state.dirty) > 3 else "")
        raise CheckoutError(
            f"{checkout}: the work tree has uncommitted changes ({len(state.dirty)}: {shown})",
            hint="build exports the committed tree only; commit, stash or remove the changes first",
        )
    if state.phase == "other" or state.base is None:
        raise CheckoutError(f"{checkout}: {state.problem}", hint="build needs the pinned base plus exactly the series")
    if state.phase == "pristine" and series.patches and not allow_unpatched:
        raise CheckoutError(
            f"{checkout}: is pristine: the series of {stack.name} is not applied",
            hint=f"run 'sgpatch apply {stack.name}' first",
        )
    check_base_files(g, stack, state.base)
    return g, state.base, state.head, state.phase


def _upstream_wheel(stack: Stack, progress: Progress) -> Path | None:
    artifact = stack.artifact("wheel")
    if artifact is None:
        return None
    return fetch_artifact(artifact, stack.sglang_version, progress=progress)


def build_wheel(
    config: Config,
    stack: Stack,
    series: Series,
    checkout: Path,
    out_dir: Path,
    *,
    isolated: bool = True,
    progress: Progress | None = None,
    allow_unpatched: bool = False,
    cache_dir: Path | None = None,
    python: str | None = None,
) -> BuildResult:
    """Build (or reuse) the patched wheel of ``checkout`` into ``out_dir`` and check it.

    ``isolated=False`` builds with the current environment's setuptools and
    setuptools-scm (offline); ``python`` is the interpreter whose environment that is
    (default: this one).  ``cache_dir`` defaults to ``.sgpatch/builds``
    beside VERSIONS.toml.  The result's ``checks`` say whether the wheel passed.
    """
    say = progress or _noop
    checkout = checkout.resolve()
    out_dir = out_dir.resolve()
    if out_dir == checkout or out_dir.is_relative_to(checkout):
        raise BuildError(
            f"{out_dir}: is inside the checkout {checkout}", hint="pass an --out directory outside the checkout"
        )
    g, base, head, phase = _refuse(checkout, stack, series, allow_unpatched=allow_unpatched)
    version = wheel_version(stack, series)
    paths = series.touched
    inputs = BuildInputs(
        stack=stack,
        series=series,
        version=version,
        phase=phase,
        base=base,
        head=head,
        tree=g.tree_of(head),
        source_date_epoch=int(g.commit_date(base).split()[0]),
        isolated=isolated,
        python=python or sys.executable,
        before=tuple((p, g.blob_id(base, p)) for p in paths),
        after=tuple((p, g.blob_id(head, p)) for p in paths),
    )
    parse_overrides(stack)  # a malformed override fails before the build, not after it
    key = cache_key(inputs)
    cache = (cache_dir or config.root / ".sgpatch" / "builds").resolve()
    entry = cache / key[:24]
    name = wheel_filename(version)
    upstream = _upstream_wheel(stack, say)

    cached = _cached_wheel(entry, name)
    if cached is not None:
        say(f"reusing the cached {name} (inputs unchanged)")
    else:
        with tempfile.TemporaryDirectory(prefix="sgpatch-build-") as tmp:
            work = Path(tmp)
            say(f"exporting {head[:12]} to a clean work tree")
            export_commit(checkout, head, work / "src")
            log = cache / "logs" / f"{stack.name}-{key[:12]}.log"
            say(f"building {name} ({'isolated' if isolated else 'current environment'}); log: {log}")
            env = build_environment(version, inputs.source_date_epoch)
            if isolated and stack.build_requires:
                # The isolated environment gets exactly the pinned backend, so a later
                # setuptools cannot change the wheel (WHEEL's Generator line included).
                constraints = work / "build-constraints.txt"
                constraints.write_text("".join(f"{r}\n" for r in stack.build_requires))
                env["PIP_CONSTRAINT"] = str(constraints)
            _run_build(work / "src" / "python", work / "dist", log, env, isolated=isolated, python=inputs.python)
            built = sorted((work / "dist").glob("*.whl"))
            if [b.name for b in built] != [name]:
                found = ", ".join(b.name for b in built) or "nothing"
                raise BuildError(
                    f"the build produced {found}, expected {name}",
                    hint=f"the version was not forced as expected; see {log}",
                )
            say("rewriting Requires-Dist, adding provenance, re-zipping deterministically")
            final = work / "final" / name
            final.parent.mkdir()
            _postprocess(built[0], final, inputs)
            write_atomic(out_dir / name, final)
    wheel = out_dir / name
    if cached is not None and (not wheel.is_file() or sha256_file(wheel) != sha256_file(cached)):
        write_atomic(wheel, cached)

    recipe = out_dir / recipe_filename(stack)
    recipe.write_text(install_recipe(stack, version))
    say(f"checking {name}")
    report = check_wheel(stack, series, wheel, upstream_wheel=upstream, checkout=checkout)
    if report.ok and cached is None:
        _store(entry, wheel)
    return BuildResult(wheel=wheel, recipe=recipe, version=version, cached=cached is not None, checks=report)


# --------------------------------------------------------------------------- checks


def _check(name: str, problems: Sequence[str], ok_detail: str, *, shown: int = 3) -> WheelCheck:
    if problems:
        more = f" (and {len(problems) - shown} more)" if len(problems) > shown else ""
        return WheelCheck(name, False, "; ".join(problems[:shown]) + more)
    return WheelCheck(name, True, ok_detail)


@dataclass(frozen=True, slots=True)
class _Contents:
    """A wheel as the checks see it: each member's sha256 and size (read in chunks), small files on demand."""

    archive: Archive
    digests: Mapping[str, tuple[bytes, int]]

    def read(self, name: str | None) -> bytes | None:
        return self.archive.read(name) if name is not None and name in self.archive else None


def _contents(archive: Archive) -> _Contents:
    return _Contents(archive, {e.name: (archive.digest(e.name), e.size) for e in archive.entries})


def _check_name(wheel: Path, version: str, contents: _Contents, dist_info: str) -> WheelCheck:
    problems = []
    expected = wheel_filename(version)
    if wheel.name != expected:
        problems.append(f"file name is {wheel.name}, expected {expected}")
    try:
        name, ver, _, tags = parse_wheel_filename(wheel.name)
        if name != DIST_NAME or str(ver) != version or {str(t) for t in tags} != {"py3-none-any"}:
            problems.append(f"file name says {name} {ver} {sorted(map(str, tags))}")
    except InvalidWheelFilename as exc:
        problems.append(str(exc))
    metadata = contents.read(f"{dist_info}/METADATA")
    if metadata is None:
        problems.append(f"no {dist_info}/METADATA")
    else:
        try:
            raw = parse_metadata(metadata)
            if raw.get("name") != DIST_NAME or raw.get("version") != version:
                problems.append(f"METADATA says {raw.get('name')} {raw.get('version')}")
        except ValueError as exc:
            problems.append(f"METADATA is unreadable: {exc}")
    version_py = contents.read(VERSION_FILE)
    if version_py is None:
        problems.append(f"no {VERSION_FILE}")
    elif f"version = '{version}'".encode() not in version_py and f'version = "{version}"'.encode() not in version_py:
        problems.append(f"{VERSION_FILE} does not carry version {version}")
    return _check("name", problems, f"{expected}; METADATA and {VERSION_FILE} agree")


def _record_entries(data: bytes, record_name: str) -> tuple[dict[str, RecordEntry], list[str]]:
    """RECORD's rows (read by ``installer.records``) by path, and what is wrong with it."""
    problems: list[str] = []
    listed: dict[str, RecordEntry] = {}
    try:
        rows = list(parse_record_file(data.decode("utf-8").splitlines()))
    except UnicodeDecodeError as exc:
        return {}, [f"{record_name} is not UTF-8: {exc.reason} at byte {exc.start}"]
    except InvalidRecordEntry as exc:
        return {}, [f"{record_name}: malformed row: {'; '.join(exc.issues)}"]
    except csv.Error as exc:
        return {}, [f"{record_name} is not a readable CSV file: {exc}"]
    for path, hash_, size in rows:
        try:
            entry = RecordEntry.from_elements(path, hash_, size)
        except InvalidRecordEntry as exc:
            problems.append(f"malformed row {path[:200]!r}: {'; '.join(exc.issues)}")
            continue
        if entry.path in listed:
            problems.append(f"{entry.path} listed twice")
        listed[entry.path] = entry
    return listed, problems


def _check_record(contents: _Contents, dist_info: str) -> WheelCheck:
    record_name = f"{dist_info}/RECORD"
    data = contents.read(record_name)
    if data is None:
        return WheelCheck("record", False, f"no {record_name}")
    listed, problems = _record_entries(data, record_name)
    for name, (digest, size) in contents.digests.items():
        if name == record_name:
            continue
        entry = listed.get(name)
        if entry is None:
            problems.append(f"{name} is not listed")
            continue
        if entry.hash_ is None or entry.hash_.name != "sha256" or entry.hash_.value != sha256_record(digest)[7:]:
            problems.append(f"{name}: sha256 differs from RECORD")
        elif entry.size != size:
            problems.append(f"{name}: size {size}, RECORD says {entry.size}")
    problems.extend(f"{name} is listed but not in the wheel" for name in listed if name not in contents.digests)
    return _check("record", problems, f"{len(contents.digests) - 1} files match their RECORD sha256 and size")


def _parsed_requires(metadata: bytes) -> list[tuple[str, Requirement]]:
    """Each ``Requires-Dist`` with its parsed requirement; ValueError naming the one that does not parse."""
    out = []
    for line in requires_dist(metadata):
        try:
            out.append((line, Requirement(line)))
        except InvalidRequirement as exc:
            raise ValueError(f"Requires-Dist {line[:200]!r} does not parse: {exc}") from None
    return out


def _check_requires(stack: Stack, metadata: bytes | None, upstream_metadata: bytes | None) -> WheelCheck:
    if metadata is None:
        return WheelCheck("requires", False, "no METADATA")
    try:
        parsed = _parsed_requires(metadata)
    except ValueError as exc:
        return WheelCheck("requires", False, f"METADATA: {exc}")
    found = [line for line, _ in parsed]
    problems: list[str] = []
    try:
        overrides = parse_overrides(stack)
    except SgpatchError as exc:
        return WheelCheck("requires", False, exc.message)
    for line, req in parsed:
        want = overrides.get(canonicalize_name(req.name))
        if want is not None and req.specifier != want.specifier:
            problems.append(f"Requires-Dist {line} is not the stack's {want}")
    for dist, _ in stack.requires:
        if not any(canonicalize_name(req.name) == canonicalize_name(dist) for _, req in parsed):
            problems.append(f"no Requires-Dist for {dist}")
    conflicts = _recipe_conflicts(stack, [req for _, req in parsed])
    problems.extend(f"install recipe: {c}" for c in conflicts)
    kept = ""
    if upstream_metadata is not None:
        expected = requires_dist(rewrite_requires(upstream_metadata, stack)[0])
        if found != expected:
            diff = [f"{a!r} vs upstream {b!r}" for a, b in zip(found, expected, strict=False) if a != b]
            problems.append(
                f"Requires-Dist differs from upstream's beyond the overrides: "
                f"{diff[0] if diff else f'{len(found)} vs {len(expected)} entries'}"
            )
        kept = f"; all {len(found)} Requires-Dist equal upstream's after the overrides"
    done = ", ".join(text for _, text in stack.requires) or "none (upstream's pins kept)"
    return _check("requires", problems, f"overrides: {done}{kept}")


def _check_provenance(stack: Stack, series: Series, version: str, contents: _Contents, dist_info: str) -> WheelCheck:
    data = contents.read(f"{dist_info}/{PROVENANCE_NAME}")
    if data is None:
        return WheelCheck("provenance", False, f"no {dist_info}/{PROVENANCE_NAME}")
    try:
        doc = parse_provenance(data)
    except ValueError as exc:
        return WheelCheck("provenance", False, f"{PROVENANCE_NAME} is unreadable: {exc}")
    found = {}
    for path in series.touched:
        content = contents.read(path[len(PYTHON_PREFIX) :]) if path.startswith(PYTHON_PREFIX) else None
        found[path] = git_blob_id(content) if content is not None else None
    problems = provenance_problems(doc, stack, series, version, found)
    phase = (doc.get("checkout") or {}).get("phase")
    if phase != "patched" and series.patches:
        problems.append(f"built from a {phase} checkout, not a patched one")
    return _check("provenance", problems, f"stack {stack.name}, series {series.id}, {len(found)} file blobs match")


def _check_upstream(
    ours_digests: Mapping[str, tuple[bytes, int]],
    upstream: Mapping[str, tuple[bytes, int]],
    dist_info: str,
    series: Series,
) -> list[WheelCheck]:
    def split(names: Mapping[str, object]) -> tuple[set[str], set[str]]:
        inside = {n for n in names if n.split("/", 1)[0].endswith(".dist-info")}
        return set(names) - inside, {n.split("/", 1)[1] for n in inside}

    ours, our_meta = split(ours_digests)
    theirs, their_meta = split(upstream)
    problems = [f"stray {n}" for n in sorted(ours - theirs)] + [f"missing {n}" for n in sorted(theirs - ours)]
    meta_extra = our_meta - their_meta - {PROVENANCE_NAME}
    meta_missing = their_meta - our_meta
    problems += [f"stray {dist_info}/{n}" for n in sorted(meta_extra)]
    problems += [f"missing {dist_info}/{n}" for n in sorted(meta_missing)]
    file_set = _check("file-set", problems, f"{len(ours)} files outside .dist-info, the same as upstream's wheel")

    patched = {p[len(PYTHON_PREFIX) :] for p in series.touched if p.startswith(PYTHON_PREFIX)}
    compared = sorted((ours & theirs) - patched - {VERSION_FILE})
    differ = [f"{n} differs from upstream's" for n in compared if ours_digests[n] != upstream[n]]
    same = _check(
        "upstream-bytes",
        differ,
        f"{len(compared)} files byte-equal to upstream's (excepted: {len(patched)} patched, {VERSION_FILE})",
    )
    return [file_set, same]


def _check_checkout(contents: _Contents, checkout: Path, series: Series) -> WheelCheck:
    g = Git(checkout)
    head = g.head()
    problems = []
    for path in series.touched:
        inner = path[len(PYTHON_PREFIX) :] if path.startswith(PYTHON_PREFIX) else None
        ours = contents.read(inner)
        theirs = g.read_blob("HEAD", path) if head else None
        if ours != theirs:
            problems.append(f"{path} is not byte-equal to the checkout's HEAD")
    return _check("checkout-bytes", problems, f"{len(series.touched)} patched files byte-equal to {checkout} HEAD")


def check_wheel(
    stack: Stack,
    series: Series,
    wheel: Path,
    *,
    upstream_wheel: Path | None = None,
    checkout: Path | None = None,
) -> WheelReport:
    """Every check on ``wheel``: name and version, RECORD, Requires-Dist, provenance, the
    patched anchors, verify's report on its files; with ``upstream_wheel`` the file set and
    the unpatched bytes; with ``checkout`` the patched files' bytes.

    The wheel is read through sgpatch.archive: a member that is unsafe, over a limit,
    encrypted, compressed with another method than deflate, or corrupt is an
    ArchiveError (exit 2) naming it.  Members are hashed in chunks; only the few
    files the checks read whole (METADATA, RECORD, provenance, patched files) are."""
    if not wheel.is_file():
        raise BuildError(f"{wheel}: no such wheel file")
    version = wheel_version(stack, series)
    dist_info = f"{DIST_NAME}-{version}.dist-info"
    upstream: dict[str, tuple[bytes, int]] | None = None
    upstream_metadata = None
    if upstream_wheel is not None:
        with open_archive(upstream_wheel, "wheel") as up:
            upstream = dict(_contents(up).digests)
            metadata_name = next((e.name for e in up.entries if e.name.endswith(".dist-info/METADATA")), None)
            upstream_metadata = up.read(metadata_name) if metadata_name else None
    with ZipTree(wheel) as tree:
        contents = _contents(tree.archive)  # every member's CRC checked before any check reads it
        checks = [
            _check_name(wheel, version, contents, dist_info),
            _check_record(contents, dist_info),
            _check_requires(stack, contents.read(f"{dist_info}/METADATA"), upstream_metadata),
            _check_provenance(stack, series, version, contents, dist_info),
        ]
        anchors = load_anchors(stack.series_dir / "anchors.toml")
        patched = check_anchors(anchors, tree, "patched")
        checks.append(
            _check(
                "anchors",
                [
                    f"{r.anchor.id} {r.status} ({r.anchor.file}:{r.anchor.start}-{r.anchor.end})"
                    for r in patched
                    if not r.ok
                ],
                f"{len(patched)} patched-phase anchors hold",
                shown=len(patched),
            )
        )
        if upstream is not None:
            checks.extend(_check_upstream(contents.digests, upstream, dist_info, series))
        if checkout is not None:
            checks.append(_check_checkout(contents, checkout, series))
        report = verify_tree(stack, series, anchors, tree, require_patched=True)
    return WheelReport(wheel, stack.name, version, tuple(checks), report)


def read_provenance(wheel: Path) -> dict[str, Any] | None:
    """The provenance document inside ``wheel`` (e.g. to pick its stack), or None if it has no
    readable one (check_wheel then says why)."""
    try:
        with open_archive(wheel, "wheel") as archive:
            suffix = f".dist-info/{PROVENANCE_NAME}"
            name = next((e.name for e in archive.entries if e.name.endswith(suffix)), None)
            return parse_provenance(archive.read(name)) if name else None
    except (SgpatchError, ValueError):
        return None
