"""VERSIONS.toml -> frozen dataclasses, validated with ``file:line`` errors.

The file pins each SGLang/CUDA stack exactly (SPEC §3).  Unknown keys are
errors: a typo must never silently turn a pin off.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sgpatch.config.projectfiles import read_project_file
from sgpatch.config.requirements import canonical_name, parse_requirement, plain_requirement_name
from sgpatch.config.tomlpos import TableReader
from sgpatch.errors import ConfigError

if TYPE_CHECKING:
    from packaging.requirements import Requirement
    from packaging.tags import Tag

CONFIG_NAME = "VERSIONS.toml"
SCHEMA_VERSION = 1
SOURCE_KINDS = ("pypi", "git")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_STACK_NAME = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_-]*$")
_LABEL = re.compile(r"^[0-9A-Za-z]+(\.[0-9A-Za-z]+)*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A wheel file name of the plain form (name-1.2.3-cp311-cp311-manylinux_2_28_x86_64.whl; no build tag, a
# release version) is one packaging parses: recognised without importing it (tests/test_config_names.py).
_PLAIN_WHEEL = re.compile(
    r"[A-Za-z0-9]+(?:[._][A-Za-z0-9]+)*-[0-9]+(?:\.[0-9]+)*"
    r"-[a-z][a-z0-9]*(?:\.[a-z][a-z0-9]*)*-[a-z0-9_]+(?:\.[a-z0-9_]+)*-[a-z0-9_]+(?:\.[a-z0-9_]+)*\.whl"
)


@dataclass(frozen=True, slots=True)
class Artifact:
    """A PyPI file that can serve as the source, pinned by sha256."""

    kind: str  # "sdist" or "wheel"
    filename: str
    sha256: str


@dataclass(frozen=True, slots=True)
class PinnedFile:
    """A file the series touches, with its git blob id before and after."""

    path: str
    pristine: str
    patched: str | None


@dataclass(frozen=True, slots=True)
class Override:
    """A ``Requires-Dist`` override for the wheel: the name VERSIONS.toml keys it by and the requirement as
    written, checked where the config is read (:func:`parse_override`)."""

    dist: str
    text: str

    @property
    def requirement(self) -> Requirement:
        """The requirement parsed (packaging's; it parses: :func:`parse_override` checked it)."""
        return parse_requirement(self.text)

    @property
    def key(self) -> str:
        """The canonical project name (``cuda_python`` and ``cuda-python`` are one project)."""
        return canonical_name(self.dist)


def parse_override(dist: str, text: str) -> Override:
    """``text`` as the override for ``dist``; ValueError saying why when it is no requirement a person could
    type (:func:`sgpatch.config.requirements.parse_requirement`) or names another project.  A requirement of
    the plain form is recognised without packaging's parser (the cost of a command's start)."""
    name = plain_requirement_name(text)
    if name is None:
        from packaging.requirements import InvalidRequirement

        try:
            name = parse_requirement(text).name
        except InvalidRequirement as exc:
            raise ValueError(f"{text!r} is not a requirement: {exc}") from None
    if canonical_name(name) != canonical_name(dist):
        raise ValueError(f"{text!r} names {name}, not {dist}")
    return Override(dist=dist, text=text)


@dataclass(frozen=True, slots=True)
class InstallRecipe:
    """What a serving host needs around the wheel for this CUDA stack."""

    extra_index_urls: tuple[str, ...]
    pins: tuple[str, ...]
    note: str


@dataclass(frozen=True, slots=True)
class InterfaceSpec:
    """The model interface a speculative algorithm needs (SPEC §10)."""

    algorithm: str
    target: str
    draft: str | None
    declared_target: tuple[str, ...]
    declared_draft: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Stack:
    """One pinned SGLang release on one CUDA stack."""

    name: str
    sglang_version: str
    tag: str
    commit: str | None  # upstream's commit of the tag; None when only PyPI was reachable (port)
    series_dir: Path
    cuda: str
    local_label: str
    default_source: str
    git_url: str | None
    pypi_commit: str | None
    artifacts: tuple[Artifact, ...]
    files: tuple[PinnedFile, ...]
    requires: tuple[Override, ...]
    install: InstallRecipe
    interface: InterfaceSpec | None
    build_requires: tuple[str, ...] = ()

    def artifact(self, kind: str) -> Artifact | None:
        return next((a for a in self.artifacts if a.kind == kind), None)

    @property
    def wheels(self) -> tuple[Artifact, ...]:
        """Every pinned wheel: one per CPython version and platform for releases PyPI ships as platform wheels."""
        return tuple(a for a in self.artifacts if a.kind == "wheel")

    def host_wheel(self, tags: Sequence[Tag] | None = None) -> Artifact | None:
        """The pinned wheel pip would install here (best-ranked of ``tags``, default this interpreter's)."""
        return host_wheel(self.wheels, tags)

    @property
    def source_artifact(self) -> Artifact | None:
        """The artifact the ``pypi`` source uses: the sdist if PyPI has one, else the wheel for this
        host's tags, else any pinned wheel (their files other than compiled extensions agree)."""
        return self.artifact("sdist") or self.host_wheel() or self.artifact("wheel")

    @property
    def repacks(self) -> bool:
        """Whether ``build`` repacks upstream's wheels (no sdist pinned) instead of building from source."""
        return self.artifact("sdist") is None

    def pinned_file(self, path: str) -> PinnedFile | None:
        return next((f for f in self.files if f.path == path), None)


@dataclass(frozen=True, slots=True)
class Config:
    """The whole of VERSIONS.toml."""

    path: Path
    schema_version: int
    default_stack: str
    stacks: Mapping[str, Stack] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        """The project directory: the one holding VERSIONS.toml."""
        return self.path.parent

    def stack(self, name: str | None) -> Stack:
        """The named stack, or the default one; ConfigError listing known stacks otherwise."""
        key = name or self.default_stack
        try:
            return self.stacks[key]
        except KeyError:
            known = ", ".join(sorted(self.stacks)) or "none"
            raise ConfigError(
                f"{self.path}: unknown stack {key!r}",
                hint=f"known stacks: {known}",
            ) from None

    def checkout_dir(self, stack: Stack) -> Path:
        """The default checkout of a stack, beside VERSIONS.toml (git-ignored)."""
        return self.root / ".sgpatch" / "checkouts" / stack.name


def find_config(start: Path) -> Path:
    """VERSIONS.toml in ``start`` or the nearest parent directory."""
    for directory in (start, *start.parents):
        candidate = directory / CONFIG_NAME
        if os.path.lexists(candidate):  # whatever it is: a FIFO or a directory is refused when read, not skipped
            return candidate
    raise ConfigError(
        f"no {CONFIG_NAME} in {start} or any parent directory",
        hint="run inside a project, or pass --config FILE",
    )


# --------------------------------------------------------------------------- validation


def _project_path(r: TableReader, key: str, root: Path) -> Path:
    raw = r.req_string(key)
    if _CONTROL.search(raw):
        raise r.error(key, f"{raw!r} has a control character")
    if Path(raw).is_absolute() or ".." in Path(raw).parts:
        raise r.error(key, f"{raw!r} points outside the project", hint="use a path relative to VERSIONS.toml")
    resolved = (root / raw).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise r.error(key, f"{raw!r} resolves outside the project")
    return root / raw


def host_wheel(wheels: Sequence[Artifact], tags: Sequence[Tag] | None = None) -> Artifact | None:
    """The wheel of ``wheels`` pip would install here (best-ranked of ``tags``, default this interpreter's)."""
    from packaging.tags import sys_tags

    ranks = {tag: i for i, tag in enumerate(tags if tags is not None else sys_tags())}
    best: tuple[int, Artifact] | None = None
    for wheel in wheels:
        rank = min((ranks[t] for t in wheel_tags(wheel.filename) if t in ranks), default=None)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, wheel)
    return best[1] if best else None


def wheel_tags(filename: str) -> frozenset[Tag]:
    """The tags a wheel's file name declares (empty if the name does not parse)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        return parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return frozenset()


def _artifact_entry(t: TableReader, kind: str) -> Artifact:
    filename = t.req_string("filename")
    if "/" in filename or "\\" in filename or filename.startswith(".") or _CONTROL.search(filename):
        raise t.error("filename", f"{filename!r} is not a plain file name")
    if kind == "wheel" and not (_PLAIN_WHEEL.fullmatch(filename) or wheel_tags(filename)):
        raise t.error("filename", f"{filename!r} is not a wheel file name (name-version-python-abi-platform.whl)")
    sha = t.req_string("sha256", pattern=_HEX64, what="a sha256 (64 lowercase hex digits)")
    t.finish()
    return Artifact(kind=kind, filename=filename, sha256=sha)


def _artifact(r: TableReader, kind: str) -> Artifact | None:
    t = r.table(kind)
    return None if t is None else _artifact_entry(t, kind)


def _wheels(r: TableReader) -> tuple[Artifact, ...]:
    """The ``wheels`` array of tables (one per CPython version and platform), or the single ``wheel`` table."""
    raw = r._get("wheels", list, "an array of tables", required=False)
    single = _artifact(r, "wheel")
    if raw is None:
        return (single,) if single else ()
    if single is not None:
        raise r.error("wheel", "give either 'wheel' or 'wheels', not both")
    out: list[Artifact] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise r.error("wheels", f"entry {i + 1} is not a table (filename, sha256)")
        out.append(_artifact_entry(TableReader(r.config_path, r.text, item, (*r.path, "wheels")), "wheel"))
    names = [a.filename for a in out]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise r.error("wheels", f"{dup} is pinned twice")
    return tuple(out)


def _stack(name: str, r: TableReader, root: Path) -> Stack:
    if not _STACK_NAME.match(name):
        raise r.error(None, f"stack name {name!r} must be letters, digits and . + _ -")
    version = r.req_string("sglang_version")
    tag = r.req_string("tag")
    commit = r.string("commit", required=False, pattern=_HEX40, what="a full 40-hex commit SHA")
    series_dir = _project_path(r, "series", root)
    cuda = r.req_string("cuda")
    label = r.req_string("local_label", pattern=_LABEL, what="a PEP 440 local label (e.g. cu130)")

    src = r.table("source", required=True)
    assert src is not None
    default_source = src.req_string("default")
    if default_source not in SOURCE_KINDS:
        raise src.error("default", f"{default_source!r} is not one of {', '.join(SOURCE_KINDS)}")
    git_url = src.string("git_url", required=False)
    pypi_commit = src.string("pypi_commit", required=False, pattern=_HEX40, what="a full 40-hex commit SHA")
    sdist = _artifact(src, "sdist")
    artifacts = ((sdist,) if sdist else ()) + _wheels(src)
    if not artifacts:
        raise src.error(None, "needs an sdist or a wheel table (filename, sha256)")
    if commit is None and pypi_commit is None:
        raise r.error(None, "needs the upstream 'commit' or source.pypi_commit (or both)")
    if commit is None and default_source == "git":
        raise src.error("default", "the git source needs the stack's upstream 'commit'")
    src.finish()

    files: list[PinnedFile] = []
    ft = r.table("files")
    if ft is not None:
        for path in ft.keys():  # noqa: SIM118
            if path.startswith("/") or ".." in path.split("/") or _CONTROL.search(path):
                raise ft.error(path, "file paths are relative to the checkout root, without control characters")
            entry = ft.table(path, required=True)
            assert entry is not None
            pristine = entry.req_string("pristine", pattern=_HEX40, what="a git blob id")
            patched = entry.string("patched", required=False, pattern=_HEX40, what="a git blob id")
            entry.finish()
            files.append(PinnedFile(path=path, pristine=pristine, patched=patched))

    requires: list[Override] = []
    rt = r.table("requires")
    if rt is not None:
        for dist in rt.keys():  # noqa: SIM118
            try:
                requires.append(parse_override(dist, rt.req_string(dist)))
            except ValueError as exc:
                raise rt.error(dist, str(exc)) from None

    it = r.table("install")
    install = InstallRecipe((), (), "")
    if it is not None:
        install = InstallRecipe(
            extra_index_urls=it.strings("extra_index_urls"),
            pins=it.strings("pins"),
            note=it.string("note", required=False) or "",
        )
        it.finish()

    build_requires: tuple[str, ...] = ()
    bt = r.table("build")
    if bt is not None:
        build_requires = bt.strings("requires")
        bt.finish()

    interface = None
    itf = r.table("interface")
    if itf is not None:
        interface = InterfaceSpec(
            algorithm=itf.string("algorithm", required=False) or "eagle3",
            target=itf.req_string("target"),
            draft=itf.string("draft", required=False),
            declared_target=itf.strings("declared_target"),
            declared_draft=itf.strings("declared_draft"),
        )
        itf.finish()
    r.finish()
    return Stack(
        name=name,
        sglang_version=version,
        tag=tag,
        commit=commit,
        series_dir=series_dir,
        cuda=cuda,
        local_label=label,
        default_source=default_source,
        git_url=git_url,
        pypi_commit=pypi_commit,
        artifacts=artifacts,
        files=tuple(files),
        requires=tuple(requires),
        install=install,
        interface=interface,
        build_requires=build_requires,
    )


def parse_config(text: str, path: Path) -> Config:
    """Validate the text of a VERSIONS.toml found at ``path``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        if line is None:
            m = re.search(r"line (\d+)", str(exc))
            line = int(m.group(1)) if m else 1
        msg = getattr(exc, "msg", str(exc))
        raise ConfigError(f"{path}:{line}: malformed TOML: {msg}") from None
    top = TableReader(path, text, data, ())
    schema = top.integer("schema_version")
    if schema != SCHEMA_VERSION:
        raise top.error("schema_version", f"unsupported schema version {schema} (this sgpatch reads {SCHEMA_VERSION})")
    default = top.req_string("default_stack")
    st = top.table("stacks", required=True)
    assert st is not None
    stacks: dict[str, Stack] = {}
    for name in st.keys():  # noqa: SIM118
        sub = st.table(name, required=True)
        assert sub is not None
        stacks[name] = _stack(name, sub, path.parent)
    top.finish()
    if default not in stacks:
        raise top.error("default_stack", f"names no stack: {default!r}", hint=f"known: {', '.join(sorted(stacks))}")
    return Config(path=path, schema_version=schema, default_stack=default, stacks=stacks)


def load_config(path: Path) -> Config:
    """Read and validate VERSIONS.toml."""
    try:
        text = read_project_file(path).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return parse_config(text, path)
