"""``sgpatch import``: adopt the series a team already keeps into a stack's series (SPEC §9).

Each input becomes one patch: a patch file (a git diff with or without a diffstat, a ``diff -ruN`` with
asymmetric paths, a ``-p2`` diff made in site-packages, a format-patch mail), each ``*.patch``/``*.diff`` of a
folder (in the order of its ``series`` file, if it has one, else by name), or each commit of a range of a local
git repository.  ``series.adopt`` reads it as a git-style diff on the pinned source and takes its header from
its own text; the patches must then apply strictly, in order, on top of the stack's series, or nothing is
written and the result says, hunk by hunk, what does not apply (``offsets``: a hunk whose lines stand exactly
once elsewhere in its file is first placed there, and said: ``series.offsets``).  Once they do, they are
committed on a fresh checkout of the pinned source and ``export`` writes them as it writes every patch:
``NNNN-slug.patch``, the ``series`` file, anchors and pins.
"""

from __future__ import annotations

import datetime
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.checkout.apply import apply_series, check_tree_paths, commit_series, read_files, read_modes
from sgpatch.checkout.chain import dep3_header, slug
from sgpatch.checkout.edit import edit_in_progress
from sgpatch.checkout.export import ExportResult, export_held
from sgpatch.checkout.fetch import fetch
from sgpatch.checkout.journal import lock_checkout, move_checkout, recover
from sgpatch.checkout.state import base_candidates, inspect, open_checkout
from sgpatch.config import Config, Stack
from sgpatch.config.projectfiles import read_project_file
from sgpatch.errors import CheckFailed, PatchError
from sgpatch.git.clone import clone_shared
from sgpatch.git.diff import diff_patch
from sgpatch.git.repo import Git
from sgpatch.results import SCHEMA_VERSION, Progress
from sgpatch.series.adopt import Resolution, SourceFiles, adopt, precheck
from sgpatch.series.classify import classify
from sgpatch.series.dep3 import describe
from sgpatch.series.engine import HunkFailure, apply_file, apply_patch
from sgpatch.series.hunks import only
from sgpatch.series.offsets import Moved, at_offsets
from sgpatch.series.patch import SERIES_FILE, Patch, Series, parse_patch

SUFFIXES = (".patch", ".diff")
FIELDS = ("Origin", "Author", "Bug", "Forwarded", "Upstream-Status", "Applied-Upstream", "Reviewed-by")


@dataclass(frozen=True, slots=True)
class ImportRequest:
    """What to import: files and folders, or a commit range of a local git repository."""

    inputs: tuple[Path, ...] = ()
    strip: int | None = None  # -p N; None: git's a/ b/, else found by suffix
    origin: str | None = None  # DEP-3 Origin for every patch
    git_repo: Path | None = None
    git_range: str | None = None  # A..B
    offsets: bool = False  # a hunk whose lines stand once elsewhere in its file is placed there (reported)


@dataclass(frozen=True, slots=True)
class _Unit:
    where: str
    data: bytes
    fallback: str  # the subject when the text says nothing
    author: str = ""
    date: str = ""
    origin: str = ""
    message: str = ""  # a commit's own message


@dataclass(frozen=True, slots=True)
class HunkRow:
    """One hunk of an imported patch, tried strictly where it says (each alone, on what the earlier left)."""

    patch: str
    source: str
    path: str
    hunk: str
    ok: bool
    detail: str
    found_at: int | None = None  # where its lines stand instead, exactly once (an offset: ``--offsets`` takes it)

    def as_dict(self) -> dict[str, Any]:
        return {
            "patch": self.patch,
            "source": self.source,
            "file": self.path,
            "hunk": self.hunk,
            "applies": self.ok,
            "detail": self.detail,
            "found_at": self.found_at,
        }


@dataclass(frozen=True, slots=True)
class ImportedPatch:
    name: str
    source: str
    files: tuple[str, ...]
    resolutions: tuple[Resolution, ...]
    skipped: int  # lines before its first section, skipped as git apply skips them
    state: str  # "applicable" or why not

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "files": list(self.files),
            "paths": [r.as_dict() for r in self.resolutions if r.how != "exact"],
            "skipped_lines": self.skipped,
            "state": self.state,
        }


@dataclass(frozen=True, slots=True)
class ImportResult:
    stack: str
    series_dir: Path
    patches: tuple[ImportedPatch, ...]
    hunks: tuple[HunkRow, ...]  # filled when something does not apply
    export: ExportResult | None  # None: refused, nothing written
    moved: tuple[Moved, ...] = ()  # hunks placed where their lines stand (``--offsets``)

    @property
    def ok(self) -> bool:
        return self.export is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "stack": self.stack,
            "series": str(self.series_dir),
            "ok": self.ok,
            "patches": [p.as_dict() for p in self.patches],
            "hunks": [h.as_dict() for h in self.hunks],
            "moved": [m.as_dict() for m in self.moved],
            "written": [str(p) for p in self.export.changed] if self.export else [],
        }


# --------------------------------------------------------------------------- inputs


def _read(path: Path) -> bytes:
    try:
        return read_project_file(path)
    except FileNotFoundError:
        raise PatchError(f"{path}: no such file") from None
    except OSError as exc:
        raise PatchError(f"{path}: cannot read: {exc}") from None


def _folder(directory: Path) -> list[Path]:
    """A folder's patches: in the order of its ``series`` file (quilt's), else by name."""
    listing = directory / SERIES_FILE
    if listing.is_file():
        names = [ln.split("#", 1)[0].strip() for ln in _read(listing).decode("utf-8", "replace").splitlines()]
        names = [n.split()[0] for n in names if n]
        for lineno, name in enumerate(names, start=1):
            if "/" in name or name.startswith("."):
                raise PatchError(f"{listing}:{lineno}: {name!r} is not a file of this folder")
        return [directory / n for n in names]
    found = sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES and not p.name.startswith("."))
    if not found:
        raise PatchError(f"{directory}: no *.patch or *.diff file in it")
    return found


def _fallback(path: Path) -> str:
    stem = path.name.removesuffix(".patch").removesuffix(".diff")
    words = stem.lstrip("0123456789").lstrip("-_") or stem  # 0001-fix-x, 01_fix_x: the number is the order
    return words.replace("-", " ").replace("_", " ") or stem


def _file_units(inputs: Sequence[Path]) -> list[_Unit]:
    units: list[_Unit] = []
    for given in inputs:
        if given.is_symlink():
            raise PatchError(f"{given}: is a symbolic link; give the file it points to")
        paths = _folder(given) if given.is_dir() else [given]
        link = next((p for p in paths if p.is_symlink()), None)
        if link is not None:
            raise PatchError(f"{link}: is a symbolic link; give the file it points to")
        units.extend(_Unit(where=str(p), data=_read(p), fallback=_fallback(p)) for p in paths)
    return units


def _git_units(repo: Path, spec: str) -> list[_Unit]:
    """One unit per commit of ``spec`` in ``repo``, oldest first: its diff, message, author and date."""
    if ".." not in spec or spec.startswith("-"):
        raise PatchError(f"{spec!r}: not a commit range", hint="give A..B: the commits after A up to B, as git log")
    g = Git(repo)
    if not g.is_repo():
        raise PatchError(f"{repo}: not a git repository")
    units: list[_Unit] = []
    for commit, parents in g.range_commits(spec):
        if len(parents) != 1:
            what = "a merge commit" if parents else "a root commit"
            raise PatchError(f"{repo}: {commit[:12]} in {spec} is {what}", hint="import a straight line of commits")
        author, date, message = g.commit_info(commit)
        diff = diff_patch(g, parents[0], commit)
        if diff:
            units.append(
                _Unit(
                    where=f"{repo}@{commit[:12]}",
                    data=diff,
                    fallback="local change",
                    author=author,
                    date=date,
                    origin=f"commit:{commit}",
                    message=message,
                )
            )
    if not units:
        raise PatchError(f"{repo}: {spec} has no commit that changes a file")
    return units


# --------------------------------------------------------------------------- patches


def _header(unit: _Unit, prose: str, origin: str | None) -> bytes:
    """The DEP-3 header of an imported patch: from its own text (or its commit), then ``--origin``."""
    if unit.message:
        subject, _, body = unit.message.strip().partition("\n")
        fields: dict[str, str] = {}
    else:
        subject, body, fields = describe(prose, unit.fallback)
    trailers = {k: v for k, v in fields.items() if k in FIELDS and v.strip()}
    if origin or unit.origin:
        trailers["Origin"] = origin or trailers.get("Origin") or unit.origin
    author = trailers.pop("Author", unit.author)
    date = fields.get("Last-Update") or unit.date or datetime.date.today().isoformat()
    message = "\n\n".join(p for p in (subject, body.strip("\n")) if p.strip())
    if trailers:
        message += "\n\n" + "\n".join(f"{k}: {v.replace(chr(10), ' ')}" for k, v in trailers.items())
    return dep3_header(message, author, date)


def _names(series: Series, count: int, subjects: Sequence[str]) -> list[str]:
    numbers = [int(p.name[:4]) for p in series.patches if p.name[:4].isdigit()]
    number = max(numbers, default=0) + 1
    taken = {p.name for p in series.directory.iterdir()} if series.directory.is_dir() else set()
    out = []
    for subject in subjects[:count]:
        name = f"{number:04d}-{slug(subject)}.patch"
        while name in taken:
            number += 1
            name = f"{number:04d}-{slug(subject)}.patch"
        taken.add(name)
        out.append(name)
        number += 1
    return out


def _hunk_rows(
    files: dict[str, bytes | None], patches: Sequence[Patch], sources: Sequence[str]
) -> tuple[list[HunkRow], list[str]]:
    """Every hunk tried alone where it says, on the files as the patches before it left them; each patch's state."""
    states, _ = classify(files, Series(Path("."), tuple(patches)))
    rows: list[HunkRow] = []
    current = dict(files)
    for patch, source in zip(patches, sources, strict=True):
        for fp in patch.files:
            if not fp.hunks:
                continue
            before = current.get(fp.path)
            for hunk in fp.hunks:
                alone = only(fp, [hunk]) if not (fp.new_file or fp.deleted) else fp
                got = apply_file(before, alone)
                detail = got.reason if isinstance(got, HunkFailure) else "applies"
                if isinstance(got, HunkFailure) and got.found_at is not None:
                    detail += f"; its lines are at line {got.found_at} (offset {got.found_at - hunk.old_start:+d})"
                ok = not isinstance(got, HunkFailure)
                at = got.found_at if isinstance(got, HunkFailure) else None
                rows.append(HunkRow(patch.name, source, fp.path, hunk.header, ok, detail, at))
                if fp.new_file or fp.deleted:
                    break
        result = apply_patch(current, patch)
        if not isinstance(result, HunkFailure):
            current.update(result)
    return rows, [s.state if s.state == "applicable" else f"{s.state}: {s.detail}" for s in states]


def _pinned_source(config: Config, stack: Stack, into: Path, progress: Progress | None) -> None:
    """A fresh checkout of the pinned source in ``into``: a clone sharing the objects of the stack's own
    checkout when it holds the pinned commit (only read), else made from the pinned artifact (``fetch``)."""
    existing = config.checkout_dir(stack)
    if (existing / ".git").is_dir() and not existing.is_symlink():
        g = Git(existing)
        base = next((b for b in base_candidates(stack) if g.rev_parse(f"{b}^{{commit}}") == b), None)
        if base is not None:
            clone_shared(existing, into, base)
            return
    fetch(stack, into, progress=progress)


def import_series(
    config: Config, stack: Stack, series: Series, request: ImportRequest, *, progress: Progress | None = None
) -> ImportResult:
    """Adopt ``request``'s patches into ``series`` (see the module docstring).  PatchError (exit 2) for an
    input that is not a patch or names a path that is not in the pinned source; a result that is not ``ok``
    (nothing written) when they do not apply strictly.

    In the stack's own checkout when it is exactly patched and clean (it then carries the new series, as
    after an export); else in a temporary checkout of the pinned source."""
    if request.git_repo is not None:
        if request.inputs:
            raise PatchError("give files and folders, or --from-git REPO --range A..B, not both")
        units = _git_units(request.git_repo, request.git_range or "")
    else:
        if not request.inputs:
            raise PatchError("nothing to import: give patch files, folders, or --from-git REPO --range A..B")
        units = _file_units(request.inputs)
    for unit in units:
        precheck(unit.data, unit.where, strip=request.strip)
    own = config.checkout_dir(stack)
    if (own / ".git").is_dir() and not own.is_symlink() and edit_in_progress(own) is None:
        g = open_checkout(own)
        with lock_checkout(g, command="import"):
            recover(g)
            state = inspect(g, stack, series)
            if state.phase == "patched" and state.clean:
                return _import_on(config, stack, series, request, units, g, state.head)
    with tempfile.TemporaryDirectory(prefix="sgpatch-import-") as tmp:
        checkout = Path(tmp) / "checkout"
        _pinned_source(config, stack, checkout, progress)
        applied = apply_series(stack, series, checkout)
        if not applied.ok:
            bad = next(p for p in applied.patches if p.state not in ("applicable", "applied"))
            raise CheckFailed(f"{bad.name}: {bad.state} on the pinned source of {stack.name}: {bad.detail}")
        with lock_checkout(Git(checkout), command="import") as _held:
            return _import_on(config, stack, series, request, units, Git(checkout), applied.new_head)


def _import_on(
    config: Config, stack: Stack, series: Series, request: ImportRequest, units: Sequence[_Unit], g: Git, head: str
) -> ImportResult:
    """The import on ``g`` (locked, exactly patched with ``series`` at ``head``): refused with each hunk's
    reason, or committed and exported; the checkout moves back if the export refuses."""
    directory = series.directory
    source_files = SourceFiles(g.list_files(head, "."))
    adopted = [adopt(u.data, u.where, source_files, strip=request.strip) for u in units]
    headers = [_header(u, a.prose, request.origin) for u, a in zip(units, adopted, strict=True)]
    subjects = [h.decode().split("\n", 1)[0].removeprefix("Description: ") for h in headers]
    names = _names(series, len(units), subjects)
    patches = [parse_patch(h + a.diff, directory / n, name=n) for h, a, n in zip(headers, adopted, names, strict=True)]
    check_tree_paths(g, head, patches)
    touched = tuple(dict.fromkeys(f.path for p in patches for f in p.files))
    files = read_files(g, head, touched)
    moved: list[Moved] = []
    if request.offsets:
        patches, moved = at_offsets(files, patches)
    states, after = classify(files, Series(directory, tuple(patches)), read_modes(g, head, touched))
    ok = all(s.state == "applicable" for s in states)
    rows, described = _hunk_rows(files, patches, [u.where for u in units]) if not ok else ([], [])
    imported = tuple(
        ImportedPatch(
            name=p.name,
            source=u.where,
            files=tuple(f.path for f in p.files),
            resolutions=a.resolutions,
            skipped=a.skipped,
            state=described[i] if described else "applicable",
        )
        for i, (p, u, a) in enumerate(zip(patches, units, adopted, strict=True))
    )
    if not ok:
        return ImportResult(stack.name, directory, imported, tuple(rows), None, tuple(moved))
    new_head = commit_series(g, head, Series(directory, tuple(patches)), after)
    move_checkout(g, old=head, new=new_head, reason=f"sgpatch import {stack.name}")
    try:
        exported = export_held(config, stack, Series(directory, (*series.patches, *patches)), g)
    except BaseException:
        move_checkout(g, old=new_head, new=head, reason=f"sgpatch import {stack.name}: refused by export")
        raise
    return ImportResult(stack.name, directory, imported, (), exported, tuple(moved))
