"""What a patched wheel says about itself: its version, Requires-Dist and provenance.

Pure functions on bytes and dataclasses.  The provenance document goes into the
wheel's ``.dist-info/sgpatch.json``; it names the stack, the upstream commit,
the source artifact, the series and each touched file's blob before and after,
and nothing that depends on the machine or the directory it was built in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.metadata import RawMetadata, parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sgpatch import __version__
from sgpatch.config import Artifact, Stack
from sgpatch.config.requirements import parse_requirement
from sgpatch.errors import BuildError
from sgpatch.series.patch import Series

PROVENANCE_NAME = "sgpatch.json"
SCHEMA_VERSION = 1
_REQUIRES = "Requires-Dist:"


def wheel_version(stack: Stack, series: Series) -> str:
    """The forced version of the patched wheel: ``0.5.9+cu130.<series-id>`` (PEP 440 normal form)."""
    raw = f"{stack.sglang_version}+{stack.local_label}.{series.id}"
    try:
        return str(Version(raw))
    except InvalidVersion as exc:
        raise BuildError(f"{stack.name}: {raw!r} is not a valid version: {exc}") from exc


# --------------------------------------------------------------------------- Requires-Dist


@dataclass(frozen=True, slots=True)
class RequirementChange:
    """One ``Requires-Dist`` line the stack's overrides rewrote."""

    name: str
    old: str
    new: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "from": self.old, "to": self.new}


def _override(original: Requirement, override: Requirement) -> Requirement:
    """``override``'s specifier and URL with ``original``'s name, extras and marker (override's win if given)."""
    merged = Requirement(str(override))
    merged.name = original.name
    merged.extras = set(override.extras) or set(original.extras)
    if original.marker is not None and override.marker is not None:
        merged.marker = Requirement(f"x; ({original.marker}) and ({override.marker})").marker
    else:
        merged.marker = override.marker or original.marker
    return merged


def _header_end(lines: Sequence[bytes]) -> int:
    """Index of the blank line that ends the METADATA headers (or len(lines))."""
    return next((i for i, line in enumerate(lines) if line in (b"\n", b"\r\n")), len(lines))


def parse_metadata(metadata: bytes) -> RawMetadata:
    """A METADATA file's headers as ``packaging.metadata`` reads them; ValueError if Name, Version
    or Requires-Dist cannot be read (not UTF-8, or a single-use header given twice)."""
    raw, unparsed = parse_email(metadata)
    for header in ("name", "version", "requires-dist", "requires_dist"):
        if header in unparsed:
            raise ValueError(f"its {header.replace('_', '-').title()} header cannot be read (not UTF-8, or repeated)")
    return raw


def requires_dist(metadata: bytes) -> list[str]:
    """The ``Requires-Dist`` values of a METADATA file, in order; ValueError if unreadable."""
    return list(parse_metadata(metadata).get("requires_dist", []))


def parse_overrides(stack: Stack) -> dict[str, Requirement]:
    """The stack's overrides keyed by canonical project name (parsed where the config was read)."""
    return {o.key: o.requirement for o in stack.requires}


def rewrite_requires(metadata: bytes, stack: Stack) -> tuple[bytes, tuple[RequirementChange, ...]]:
    """METADATA with the stack's ``Requires-Dist`` overrides applied; every other byte kept.

    Each overridden line keeps its extras and environment marker (so an
    ``extra == "x"`` requirement stays optional).  An override that matches no
    line is an error: in a pinned stack it is a typo, not a new dependency.
    """
    overrides = parse_overrides(stack)
    lines = metadata.splitlines(keepends=True)
    end = _header_end(lines)
    changes: list[RequirementChange] = []
    used: set[str] = set()
    for i, line in enumerate(lines[:end]):
        text = line.decode("utf-8")
        if not text.startswith(_REQUIRES):
            continue
        value = text[len(_REQUIRES) :].strip()
        try:
            original = parse_requirement(value)
        except InvalidRequirement as exc:
            raise BuildError(f"METADATA: Requires-Dist {value!r} does not parse: {exc}") from exc
        key = canonicalize_name(original.name)
        if key not in overrides:
            continue
        used.add(key)
        new = str(_override(original, overrides[key]))
        if new != value:
            ending = text[len(text.rstrip("\r\n")) :]
            lines[i] = f"{_REQUIRES} {new}{ending}".encode()
            changes.append(RequirementChange(original.name, value, new))
    unused = sorted(set(overrides) - used)
    if unused:
        raise BuildError(
            f"{stack.name}: Requires-Dist override for {', '.join(unused)} matches no requirement of sglang "
            f"{stack.sglang_version}",
            hint="check the name in VERSIONS.toml [stacks.<name>.requires]",
        )
    return b"".join(lines), tuple(changes)


# --------------------------------------------------------------------------- provenance


@dataclass(frozen=True, slots=True)
class BuildInputs:
    """Everything the wheel is made from; the cache key and the provenance both derive from it."""

    stack: Stack
    series: Series
    version: str
    phase: str  # "patched", or "pristine" for a deliberately unpatched build
    base: str
    head: str
    tree: str
    source_date_epoch: int
    isolated: bool
    before: tuple[tuple[str, str | None], ...]  # touched path -> blob id at the base
    after: tuple[tuple[str, str | None], ...]  # touched path -> blob id at HEAD
    python: str = ""  # the interpreter that runs PyPA build (its environment matters without isolation)
    repacked: Artifact | None = None  # the upstream wheel repacked (a release without an sdist)

    @property
    def source_kind(self) -> str:
        return "pypi" if self.base == self.stack.pypi_commit and self.base != self.stack.commit else "git"


def make_provenance(inputs: BuildInputs, changes: Sequence[RequirementChange]) -> dict[str, Any]:
    """The provenance document: no paths, no clocks, nothing machine-specific."""
    stack, series = inputs.stack, inputs.series
    artifact = inputs.repacked or (stack.source_artifact if inputs.source_kind == "pypi" else None)
    before = dict(inputs.before)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "sgpatch", "version": __version__},
        "stack": stack.name,
        "version": inputs.version,
        "sglang_version": stack.sglang_version,
        "cuda": stack.cuda,
        "upstream": {"tag": stack.tag, "commit": stack.commit},
        "source": {
            "kind": inputs.source_kind,
            "base_commit": inputs.base,
            "artifact": None if artifact is None else {"filename": artifact.filename, "sha256": artifact.sha256},
        },
        "checkout": {"head": inputs.head, "tree": inputs.tree, "phase": inputs.phase},
        "series": {
            "id": series.id,
            "patches": [{"name": p.name, "sha256": p.sha256} for p in series.patches],
        },
        "files": [{"path": path, "before": before.get(path), "after": after} for path, after in inputs.after],
        "requires": [c.as_dict() for c in changes],
        "build": {
            "source_date_epoch": inputs.source_date_epoch,
            "isolated": inputs.isolated,
            "requires": list(stack.build_requires) if inputs.isolated and inputs.repacked is None else None,
            **({} if inputs.repacked is None else {"repacked": inputs.repacked.filename}),
        },
    }


def dump_provenance(doc: Mapping[str, Any]) -> bytes:
    """Canonical bytes: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


@dataclass(frozen=True, slots=True)
class _Maybe:
    """A field that may be null."""

    shape: Any


_STR = (str,)
_TEXT = _Maybe(_STR)
# The type of every field the checks read; a field of another type makes the document unreadable.
_SHAPE: dict[str, Any] = {
    "stack": _STR,
    "version": _STR,
    "sglang_version": _STR,
    "cuda": _TEXT,
    "tool": {"name": _STR, "version": _STR},
    "upstream": {"tag": _TEXT, "commit": _TEXT},
    "source": {"kind": _STR, "base_commit": _TEXT, "artifact": _Maybe({"filename": _STR, "sha256": _STR})},
    "checkout": {"head": _TEXT, "tree": _TEXT, "phase": _TEXT},
    "series": {"id": _STR, "patches": [{"name": _STR, "sha256": _STR}]},
    "files": [{"path": _STR, "before": _TEXT, "after": _TEXT}],
    "requires": [{"name": _STR, "from": _STR, "to": _STR}],
    "build": {"source_date_epoch": (int,), "isolated": (bool,), "requires": _Maybe([_STR]), "repacked": _TEXT},
}


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _check_shape(value: Any, shape: Any, label: str) -> None:
    if isinstance(shape, _Maybe):
        if value is not None:
            _check_shape(value, shape.shape, label)
    elif isinstance(shape, dict):
        if not isinstance(value, dict):
            raise ValueError(f"{label} is {_kind(value)}, expected an object")
        for key, sub in shape.items():
            if key in value:
                _check_shape(value[key], sub, f"{label}.{key}" if label else key)
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise ValueError(f"{label} is {_kind(value)}, expected a list")
        for i, item in enumerate(value):
            _check_shape(item, shape[0], f"{label}[{i}]")
    elif not isinstance(value, shape) or (isinstance(value, bool) and bool not in shape):
        raise ValueError(f"{label} is {_kind(value)}, expected {' or '.join(_kind(t()) for t in shape)}")


def parse_provenance(data: bytes) -> dict[str, Any]:
    """The document, or ValueError saying why it is not one (not JSON, another schema, a field of the wrong type)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"schema_version {doc.get('schema_version')!r}, this sgpatch reads {SCHEMA_VERSION}")
    _check_shape(doc, _SHAPE, "")
    return doc


def other_series(doc: Mapping[str, Any], series: Series) -> str | None:
    """In words, when the document was built from another series than ``series``: its id and how its patches
    differ (added, dropped, changed); None when it is the same series."""
    series_doc = doc.get("series") or {}
    recorded = [p for p in series_doc.get("patches") or [] if isinstance(p, dict)]
    ours = [{"name": p.name, "sha256": p.sha256} for p in series.patches]
    if series_doc.get("id") == series.id and recorded == ours:
        return None
    theirs = {str(p.get("name")): p.get("sha256") for p in recorded}
    mine = {p.name: p.sha256 for p in series.patches}
    differences = [f"{n} is not in the stack's series" for n in theirs if n not in mine]
    differences += [f"{n} is missing" for n in mine if n not in theirs]
    differences += [f"{n} has other content" for n in mine if n in theirs and theirs[n] != mine[n]]
    if not differences:
        differences = ["the patches are in another order"]
    return (
        f"built from another series: the build recorded series {series_doc.get('id')} ({len(recorded)} patch(es)), "
        f"the stack's series is {series.id} ({len(ours)} patch(es)): " + "; ".join(differences)
    )


def provenance_problems(
    doc: Mapping[str, Any], stack: Stack, series: Series, version: str, found: Mapping[str, str | None]
) -> list[str]:
    """How the document disagrees with the stack, the series and the blobs ``found`` in the wheel; another
    series first (the cause the rest follows from)."""
    problems: list[str] = []

    def expect(label: str, recorded: Any, want: Any, whose: str = "the stack pins") -> None:
        if recorded != want:
            problems.append(f"{label}: the build recorded {recorded!r}, {whose} {want!r}")

    cause = other_series(doc, series)
    if cause is not None:
        problems.append(cause)
    expect("stack", doc.get("stack"), stack.name, "this is stack")
    expect("version", doc.get("version"), version, "the stack and series make")
    upstream = doc.get("upstream") or {}
    expect("upstream.tag", upstream.get("tag"), stack.tag)
    expect("upstream.commit", upstream.get("commit"), stack.commit)
    source = doc.get("source") or {}
    if source.get("base_commit") not in {c for c in (stack.commit, stack.pypi_commit) if c}:
        problems.append(f"source.base_commit {source.get('base_commit')!r} is not a pinned base of {stack.name}")
    artifact = source.get("artifact")
    if artifact is not None and artifact.get("sha256") not in {a.sha256 for a in stack.artifacts}:
        problems.append(f"source.artifact.sha256 {artifact.get('sha256')!r} is no artifact {stack.name} pins")
    files = {f.get("path"): f for f in doc.get("files") or [] if isinstance(f, dict)}
    for path in series.touched:
        entry = files.get(path)
        if entry is None:
            problems.append(f"files: {path} is not listed")
            continue
        expect(f"files[{path}].after", entry.get("after"), found.get(path), "the files hold")
        pinned = stack.pinned_file(path)
        if pinned is not None:
            expect(f"files[{path}].before", entry.get("before"), pinned.pristine)
    return problems
