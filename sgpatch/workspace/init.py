"""``sgpatch init``: a patch repository of a team's own, for one SGLang release on one CUDA stack.

It writes ``VERSIONS.toml`` with one complete pinned stack (every source file of the release by the sha256
the index lists, the install pins from the release's own ``Requires-Dist`` carried from the CUDA label's
reference pins as ``port`` carries them, the build backend, the commit sgpatch makes from the release),
an empty series (``patches/<version>/series`` and ``anchors.toml``), the pre-commit config and a
``.gitignore`` for ``.sgpatch/``.  The release is laid out once, as the stack's checkout, which ``fetch``
then accepts as it is.  A directory outside any git repository becomes one (``git init``, nothing
committed): pre-commit and ``.gitignore`` need a repository, and patches are meant to be reviewed in one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from packaging.version import InvalidVersion, Version
from tomlkit.items import Table

from sgpatch.atomic import write_atomic
from sgpatch.checkout.fetch import create_pypi_checkout
from sgpatch.config import CONFIG_NAME, SCHEMA_VERSION, Artifact, InstallRecipe, Stack, parse_config
from sgpatch.config.pins import RENAMES, check_build_requires, port_pins
from sgpatch.errors import ConfigError
from sgpatch.git.repo import Git
from sgpatch.results import SCHEMA_VERSION as JSON_SCHEMA
from sgpatch.results import Progress
from sgpatch.series.anchors import ANCHORS_FILE
from sgpatch.series.patch import SERIES_FILE
from sgpatch.source.release import Release, find_release
from sgpatch.workspace.hooks import PRE_COMMIT_CONFIG, pre_commit_config
from sgpatch.workspace.labels import BUILD_REQUIRES, LABELS, CudaLabel

GITIGNORE_LINE = ".sgpatch/"


@dataclass(frozen=True, slots=True)
class InitResult:
    """What ``init`` wrote (``written``), left as it found (``kept``) and made."""

    directory: Path
    stack: str
    version: str
    label: str
    artifacts: tuple[Artifact, ...]
    pypi_commit: str
    install_pins: tuple[str, ...]
    written: tuple[Path, ...]
    kept: tuple[Path, ...]
    git_init: bool
    checkout: Path | None
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": JSON_SCHEMA,
            "directory": str(self.directory),
            "stack": self.stack,
            "version": self.version,
            "label": self.label,
            "artifacts": [{"kind": a.kind, "filename": a.filename, "sha256": a.sha256} for a in self.artifacts],
            "pypi_commit": self.pypi_commit,
            "install_pins": list(self.install_pins),
            "written": [str(p) for p in self.written],
            "kept": [str(p) for p in self.kept],
            "git_init": self.git_init,
            "checkout": None if self.checkout is None else str(self.checkout),
            "notes": list(self.notes),
        }


def _label(label: str) -> CudaLabel:
    found = LABELS.get(label)
    if found is None:
        raise ConfigError(f"unknown CUDA label {label!r}", hint=f"known labels: {', '.join(sorted(LABELS))}")
    return found


def _version(version: str) -> str:
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise ConfigError(f"--release {version!r} is not a version (e.g. 0.5.9)") from None
    if parsed.local is not None:
        raise ConfigError(f"--release {version!r}: an SGLang release has no local label (+...)")
    return str(parsed)


def new_stack(label: CudaLabel, version: str, release: Release) -> tuple[Stack, tuple[str, ...]]:
    """The stack of ``release`` on ``label`` (pypi_commit still unknown) and notes on how its pins were chosen."""
    reference = label.reference_stack()
    source, metadata = release.metadata_file()
    try:
        carried = port_pins(reference, version, metadata, source=source)
    except ConfigError as exc:
        raise ConfigError(
            f"sglang {version} on {label.label}: {exc.message}",
            hint=f"init from the nearest release that works, then edit {CONFIG_NAME} by hand",
        ) from None
    # A reference pin of a package the release does not require (nor a package of its family) is not its pin.
    stale = {c.partition(" kept: ")[0] for c in carried.changes if " kept: " in c}
    pins = tuple(p for p in carried.pins if p not in stale)
    changes = [c for c in carried.changes if " kept: " not in c]
    changes.extend(f"{p} left out: sglang {version} does not require it" for p in sorted(stale))
    note = label.note
    for before, after in RENAMES.items():  # as port says it: sgl-kernel is sglang-kernel from 0.5.10 on
        if any(c.startswith(f"{before} renamed") for c in changes):
            note = note.replace(before, after)
    declared = release.build_system_requires()
    if declared is not None:  # a source build: the pinned backend must be one the release accepts
        check_build_requires(BUILD_REQUIRES, declared, where=f"{release.source[0].filename}: pyproject.toml")
    stack = dataclasses.replace(
        reference,
        name=f"{version}-{label.label}",
        sglang_version=version,
        tag=f"v{version}",
        series_dir=Path("patches") / version,
        artifacts=release.artifacts,
        requires=carried.requires,
        install=InstallRecipe(label.extra_index_urls, pins, note),
        build_requires=BUILD_REQUIRES if declared is not None else (),
    )
    return stack, tuple(changes)


def init_project(
    directory: Path, version: str, label: str, *, force: bool = False, progress: Progress | None = None
) -> InitResult:
    """Start a patch repository in ``directory`` for SGLang ``version`` on CUDA ``label`` (module docstring).

    ConfigError (exit 2) for an unknown label, a version that is none, or a ``directory`` that holds a
    VERSIONS.toml already (unless ``force``: then VERSIONS.toml is replaced; a series, anchors, pre-commit
    config or checkout already there is kept).  The index's answer for an unknown release, exit 3 when
    it cannot be reached."""
    cuda = _label(label)
    version = _version(version)
    directory = directory.absolute()
    config_path = directory / CONFIG_NAME
    _check_places(directory, version, force=force)  # every odd place refused before the index is asked
    release = find_release(version, progress=progress)
    stack, changes = new_stack(cuda, version, release)
    made = _Made()
    try:
        return _write_project(directory, config_path, cuda, version, release, stack, changes, made, progress)
    except BaseException:
        made.undo()  # all or nothing: what this init created is removed, what was there is untouched
        raise


def _check_places(directory: Path, version: str, *, force: bool) -> None:
    """Refuse, before anything is asked or written, every path ``init`` would write that is not what it must
    be: a link (dangling or not) where a directory or file goes, a file where a directory goes, a directory
    where a file goes.  ConfigError (exit 2) naming the path and what it is."""
    config_path = directory / CONFIG_NAME
    for path in (*reversed(directory.parents), directory):
        if path.is_symlink() and not path.exists():
            raise ConfigError(f"{path}: a symbolic link to nothing ({os.readlink(path)})", hint="remove it")
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{path}: exists and is not a directory")
    if config_path.is_symlink():
        raise ConfigError(
            f"{config_path}: a symbolic link (to {os.readlink(config_path)}); sgpatch writes no file through a link",
            hint="remove the link (--force replaces a file, never a link)",
        )
    if config_path.exists() and not config_path.is_file():
        raise ConfigError(f"{config_path}: exists and is not a file")
    if config_path.exists() and not force:
        raise ConfigError(
            f"{config_path}: exists already",
            hint="pass --force to replace it (the series and other files there are kept)",
        )
    dirs = [directory / "patches", directory / "patches" / version, directory / ".sgpatch"]
    dirs.append(directory / ".sgpatch" / "checkouts")
    for path in dirs:
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            what = "a symbolic link" if path.is_symlink() else "not a directory"
            raise ConfigError(f"{path}: {what}; init puts a directory there", hint="move it away, then init again")
    for path in (directory / ".gitignore", directory / PRE_COMMIT_CONFIG):
        if path.exists() and not path.is_symlink() and not path.is_file():
            raise ConfigError(f"{path}: exists and is not a file", hint="move it away, then init again")


class _Made:
    """What one ``init`` created, removed again (newest first) when it fails part way."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def dirs(self, path: Path) -> None:
        """``path`` and its missing parents made, each one noted."""
        missing = [p for p in (path, *path.parents) if not p.exists() and not p.is_symlink()]
        for p in reversed(missing):
            p.mkdir()
            self.paths.append(p)

    def undo(self) -> None:
        for path in reversed(self.paths):
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()


def _write_project(
    directory: Path,
    config_path: Path,
    cuda: CudaLabel,
    version: str,
    release: Release,
    stack: Stack,
    changes: tuple[str, ...],
    made: _Made,
    progress: Progress | None,
) -> InitResult:
    made.dirs(directory)
    notes = [f"pins: {c}" for c in changes]

    artifact, archive = release.source
    checkout: Path | None = directory / ".sgpatch" / "checkouts" / stack.name
    assert checkout is not None
    if progress:
        progress(f"laying out {artifact.filename} as a git checkout")
    if checkout.exists():
        with tempfile.TemporaryDirectory(prefix="sgpatch-init-") as tmp:
            pypi_commit = create_pypi_checkout(stack, archive, Path(tmp) / "checkout", artifact)
        notes.append(f"{checkout}: exists; left as it is ('sgpatch fetch' checks it)")
        checkout = None
    else:
        made.dirs(checkout.parent)
        pypi_commit = create_pypi_checkout(stack, archive, checkout, artifact)
        made.paths.append(checkout)
    stack = dataclasses.replace(stack, pypi_commit=pypi_commit)

    text = versions_toml(stack)
    parse_config(text, config_path)  # never write a VERSIONS.toml that does not load

    written: list[Path] = []
    kept: list[Path] = []
    g = Git(directory)
    where = g.locate()
    git_init = where is None
    if git_init:
        g.init_repository(branch="main")
        made.paths.append(directory / ".git")
        where = g.locate()
    top = where is not None and where[0].resolve() == directory.resolve()

    series_dir = directory / stack.series_dir
    outputs: list[tuple[Path, bytes]] = [
        (series_dir / SERIES_FILE, series_text(stack).encode()),
        (series_dir / ANCHORS_FILE, anchors_text(stack).encode()),
    ]
    if top:
        outputs.append((directory / PRE_COMMIT_CONFIG, pre_commit_config(stack.name).encode()))
    else:
        notes.append(f"{directory} is below the top of its git repository: no {PRE_COMMIT_CONFIG} written")
    for path, data in outputs:
        if path.exists() or path.is_symlink():
            kept.append(path)
            continue
        made.dirs(path.parent)
        write_atomic(path, data)
        made.paths.append(path)
        written.append(path)
    ignore = directory / ".gitignore"
    old = ignore.read_text(encoding="utf-8") if ignore.is_file() and not ignore.is_symlink() else None
    if old is None and ignore.is_symlink():
        kept.append(ignore)
    elif old is None or GITIGNORE_LINE not in [line.strip() for line in old.splitlines()]:
        sep = "" if not old or old.endswith("\n") else "\n"
        comment = "# sgpatch's checkouts, builds and downloads\n"
        write_atomic(ignore, f"{old or ''}{sep}{comment}{GITIGNORE_LINE}\n".encode())
        if old is None:
            made.paths.append(ignore)
        written.append(ignore)
    write_atomic(config_path, text.encode())
    written.append(config_path)
    return InitResult(
        directory=directory,
        stack=stack.name,
        version=version,
        label=cuda.label,
        artifacts=stack.artifacts,
        pypi_commit=pypi_commit,
        install_pins=stack.install.pins,
        written=tuple(written),
        kept=tuple(kept),
        git_init=git_init,
        checkout=checkout,
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------- the files


# What each key pins, said above it in the file.
COMMENTS = {
    "schema_version": "The format of this file.",
    "default_stack": "The stack commands use when none is given.",
    "sglang_version": "The SGLang release (PyPI's version).",
    "tag": "Upstream's git tag of that release.",
    "series": "The patch series: its 'series' file lists the patches in order.",
    "cuda": "The CUDA version the stack serves on.",
    "local_label": "The wheel's local version label: sglang-VERSION+LABEL.SERIES.",
    "default": "Where 'sgpatch fetch' takes the source from: the pinned PyPI files.",
    "git_url": "Upstream's repository ('sgpatch fetch --source git' once the upstream 'commit' is pinned).",
    "pypi_commit": "The commit sgpatch makes from the pinned file (fixed identity and date): the same everywhere.",
    "sdist": "The source distribution, by the sha256 the index lists: checked before any byte is used.",
    "wheel": "The release's wheel (the built wheel is compared with it file by file).",
    "wheels": "Every wheel a serving host may install (one per CPython version and platform).",
    "build.requires": "The build backend, pinned so that a wheel built next year is byte-identical.",
    "note": "What a serving host needs around the wheel (written beside it as requirements-STACK.txt).",
    "extra_index_urls": "Indexes pip needs besides PyPI for this CUDA stack.",
    "pins": "The CUDA stack's packages: the release's own Requires-Dist, with the label's local tags.",
}
HEADER = (
    "sgpatch: the SGLang/CUDA stacks this repository pins, one table per stack.",
    "Every value is a pin: a changed upstream file, artifact or commit is an error, never drift.",
    "Written by 'sgpatch init'; 'sgpatch port STACK --to VERSION' adds the next release's stack.",
)
FOOTER = (
    "'sgpatch export' adds [stacks.\"STACK\".files]: the blob ids of the files the series touches;",
    "[stacks.\"STACK\".interface] (algorithm, target, draft) turns on 'sgpatch check-interface'.",
)


def _add(table: Any, key: str, value: Any, comment: str | None = None) -> None:
    table.add(tomlkit.comment(comment or COMMENTS[key]))
    table.add(key, value)


def _inline(artifact: Artifact) -> Any:
    item = tomlkit.inline_table()
    item.update({"filename": artifact.filename, "sha256": artifact.sha256})
    return item


def _array(values: Sequence[Any]) -> Any:
    array = tomlkit.array()
    array.extend(values)
    return array.multiline(len(values) > 1)


def _section(parent: Table, key: str, table: Table) -> None:
    parent.add(tomlkit.nl())
    parent.add(key, table)


def versions_toml(stack: Stack) -> str:
    """VERSIONS.toml holding ``stack`` alone, every key with a comment saying what it pins."""
    doc = tomlkit.document()
    for line in HEADER:
        doc.add(tomlkit.comment(line))
    _add(doc, "schema_version", SCHEMA_VERSION)
    _add(doc, "default_stack", stack.name)
    doc.add(tomlkit.nl())

    table = tomlkit.table()
    for key, value in (
        ("sglang_version", stack.sglang_version),
        ("tag", stack.tag),
        ("series", stack.series_dir.as_posix()),
        ("cuda", stack.cuda),
        ("local_label", stack.local_label),
    ):
        _add(table, key, value)
    source = tomlkit.table()
    _add(source, "default", stack.default_source)
    _add(source, "git_url", stack.git_url or "")
    _add(source, "pypi_commit", stack.pypi_commit or "")
    sdist = stack.artifact("sdist")
    if sdist is not None:
        _add(source, "sdist", _inline(sdist))
    if len(stack.wheels) == 1:
        _add(source, "wheel", _inline(stack.wheels[0]))
    elif stack.wheels:
        _add(source, "wheels", _array([_inline(w) for w in stack.wheels]))
    _section(table, "source", source)
    if stack.requires:
        requires = tomlkit.table()
        for o in stack.requires:
            _add(requires, o.dist, o.text, f"The wheel's Requires-Dist on {o.dist}, rewritten for this CUDA stack.")
        _section(table, "requires", requires)
    if stack.build_requires:
        build = tomlkit.table()
        _add(build, "requires", _array(stack.build_requires), COMMENTS["build.requires"])
        _section(table, "build", build)
    install = tomlkit.table()
    _add(install, "note", stack.install.note)
    _add(install, "extra_index_urls", _array(stack.install.extra_index_urls))
    _add(install, "pins", _array(stack.install.pins))
    _section(table, "install", install)
    table.add(tomlkit.nl())
    for line in FOOTER:
        table.add(tomlkit.comment(line))
    stacks = tomlkit.table(is_super_table=True)
    stacks.add(stack.name, table)
    doc.add("stacks", stacks)
    return tomlkit.dumps(doc)


def series_text(stack: Stack) -> str:
    return (
        f"# sgpatch patch series for SGLang {stack.sglang_version}: one NNNN-slug.patch a line, in order.\n"
        "# 'sgpatch export' adds the commits made on the checkout.\n"
    )


def anchors_text(stack: Stack) -> str:
    return (
        f"# Line anchors for SGLang {stack.sglang_version}: the `sed -n A,Bp FILE` reads made executable.\n"
        "# [[anchor]] id, file, lines = [A, B] (1-based, inclusive), phase = pristine|patched|both, and text,\n"
        "# sha256 or first_line; 'sgpatch export' moves them with the code.\n"
        "schema_version = 1\n"
    )
