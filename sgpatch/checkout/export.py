"""export: turn the commits on a checkout back into the series (SPEC §9).

The user edits files in a patched checkout and commits: amending a series
commit, or adding commits on top.  ``export`` regenerates each patch file from
its commit with ``git diff`` (the shipped style exactly), keeping the patch's
DEP-3 header byte for byte; a commit without an ``Sgpatch-Patch`` trailer
becomes a new numbered patch whose header starts from its message.  It then
carries the anchors of the changed files to where their text now stands,
updates the ``patched`` blob pins of the stacks that use the series, and
re-records the series commits with the new patch hashes (same trees), so the
checkout is exactly what ``apply`` makes from the new files.

Output is stable: exporting an unchanged checkout rewrites nothing, so
``--check`` can fail CI when the committed patches are stale.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgpatch.atomic import write_atomic
from sgpatch.checkout.apply import check_tree_paths
from sgpatch.checkout.journal import lock_checkout, move_checkout, recover
from sgpatch.checkout.state import base_candidates, check_base_files, open_checkout, trailers
from sgpatch.config import Config, Stack, parse_config
from sgpatch.errors import CheckFailed, CheckoutError, PatchError
from sgpatch.git.diff import diff_patch, write_info_attributes
from sgpatch.git.repo import CommitSpec, Git, object_sizes
from sgpatch.pins import FilePin, set_file_pins
from sgpatch.results import SCHEMA_VERSION
from sgpatch.series.anchors import ANCHORS_FILE, load_anchors
from sgpatch.series.dep3 import one_line
from sgpatch.series.engine import apply_in_order, apply_modes
from sgpatch.series.patch import SERIES_FILE, TRAILER_PATCH, Patch, Series, parse_patch
from sgpatch.series.paths import path_refusal
from sgpatch.series.relocate import AnchorMove, relocate_all, render_anchors

MAX_COMMITS = 200  # how far below HEAD the base may be
MAX_FILE_BYTES = 8 << 20  # a file a patch touches, either side (SGLang's largest source file is 0.25 MB)
DEP3_TRAILERS = ("Origin", "Author", "Bug", "Forwarded", "Upstream-Status", "Applied-Upstream", "Reviewed-by")
_NUMBER = re.compile(r"^(\d{4})-")
_DIFF_START = re.compile(rb"^diff --git ", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ChainCommit:
    """One commit between the base and HEAD, and the patch its trailer names (None: a new commit)."""

    commit: str
    parent: str
    patch: str | None


def find_chain(g: Git, bases: Sequence[str], *, limit: int = MAX_COMMITS) -> tuple[str, list[ChainCommit]]:
    """The base under HEAD and the commits above it, oldest first; CheckoutError if there is none."""
    head = g.head()
    if head is None:
        raise CheckoutError(f"{g.root}: has no commits", hint="run 'sgpatch fetch' to create the checkout")
    chain: list[ChainCommit] = []
    commit = head
    for _ in range(limit + 1):
        if commit in bases:
            chain.reverse()
            return commit, chain
        parents = g.parents(commit)
        if len(parents) != 1:
            what = "a merge commit" if parents else "a root commit that is not the pinned base"
            raise CheckoutError(
                f"{g.root}: commit {commit[:12]} is {what}",
                hint="export needs the pinned base plus a straight line of commits (rebase instead of merging)",
            )
        chain.append(ChainCommit(commit, parents[0], trailers(g.message(commit)).get(TRAILER_PATCH)))
        commit = parents[0]
    pins = " or ".join(b[:12] for b in bases)
    raise CheckoutError(f"{g.root}: the pinned base ({pins}) is not within {limit} commits below HEAD")


def match_series(chain: Sequence[ChainCommit], names: Sequence[str], where: Path) -> None:
    """The trailer commits must carry the series' patches in order, before any new commit."""
    named = [c for c in chain if c.patch is not None]
    for i, c in enumerate(chain):
        if c.patch is None and any(later.patch is not None for later in chain[i + 1 :]):
            raise CheckoutError(
                f"{where}: commit {c.commit[:12]} has no {TRAILER_PATCH} trailer but series commits follow it",
                hint="new commits go on top of the series commits (git rebase -i to reorder)",
            )
    for c in named:
        if c.patch not in names:
            raise CheckoutError(f"{where}: commit {c.commit[:12]} carries {c.patch}, which the series does not list")
    carried = [c.patch for c in named]
    if carried != list(names):
        missing = [n for n in names if n not in carried]
        if missing:
            raise CheckoutError(
                f"{where}: no commit carries {missing[0]}",
                hint="export needs every patch of the series committed on the checkout ('sgpatch apply' first)",
            )
        raise CheckoutError(f"{where}: the commits carry the patches in another order than the series lists them")


# --------------------------------------------------------------------------- patch text


def header_of(data: bytes) -> bytes:
    """The bytes of a patch file before its first ``diff --git`` line (DEP-3 header and ``---``)."""
    m = _DIFF_START.search(data)
    return data[: m.start()] if m else data


def slug(subject: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    if len(words) > 48:
        words = words[:48].rsplit("-", 1)[0]
    return words or "local-change"


def dep3_header(message: str, author: str, date: str) -> bytes:
    """A DEP-3 header for a new patch from its commit message, author and date.

    Lines end at LF only (a CR LF pair counts as one); every value is written on its own line with any
    other line break or control character escaped (``one_line``), so ``parse_dep3`` reads back exactly
    the fields written here and no text of a commit can add one.
    """
    text = message.replace("\r\n", "\n").strip()
    paragraphs = [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
    fields: dict[str, str] = {}
    if paragraphs:
        last = paragraphs[-1].split("\n")
        parsed = [ln.split(":", 1) for ln in last]
        if all(len(p) == 2 and re.match(r"^[A-Za-z][A-Za-z0-9-]*$", p[0]) for p in parsed):
            paragraphs.pop()
            for key, value in parsed:
                canonical = next((k for k in DEP3_TRAILERS if k.lower() == key.lower()), None)
                if canonical and value.strip():
                    fields[canonical] = one_line(value.strip())
    subject = one_line(paragraphs[0].split("\n")[0].strip()) if paragraphs else "local change"
    body_lines: list[str] = []
    for i, para in enumerate(paragraphs):
        lines = para.split("\n")[1:] if i == 0 else para.split("\n")
        if i > 1 or (i == 1 and body_lines):
            body_lines.append(".")
        body_lines.extend(one_line(ln.rstrip()) or "." for ln in lines)
    out = [f"Description: {subject or 'local change'}"]
    out.extend(f" {ln}" for ln in body_lines)
    out.append(f"Origin: {fields.pop('Origin', 'vendor')}")
    out.append(f"Author: {fields.pop('Author', one_line(author.strip()))}")
    status = fields.pop("Upstream-Status", "Pending")
    out.extend(f"{k}: {v}" for k, v in fields.items() if k != "Applied-Upstream")
    out.append(f"Upstream-Status: {status}")
    if "Applied-Upstream" in fields:
        out.append(f"Applied-Upstream: {fields['Applied-Upstream']}")
    out.append(f"Last-Update: {one_line(date.strip())}")
    out.append("---")
    return ("\n".join(out) + "\n").encode()


def check_commit_files(g: Git, commit: ChainCommit) -> None:
    """Refuse a commit a patch cannot carry, before ``git diff`` runs: a path no patch may touch (the rule
    ``apply`` holds every patch to: git metadata, control characters), or a file over MAX_FILE_BYTES on
    either side (a patch is text a person reviews; a huge one would be built whole in memory)."""
    paths = sorted(g.changed_paths(commit.parent, commit.commit))
    where = f"{g.root}: commit {commit.commit[:12]}"
    for path in paths:
        problem = path_refusal(path)
        if problem is not None:
            hint = "sgpatch apply refuses such a patch: leave that file out of the commit"
            raise PatchError(f"{where}: {problem}", hint=hint)
    specs = [f"{rev}:{p}" for p in paths for rev in (commit.parent, commit.commit)]
    for spec, size in zip(specs, object_sizes(g, specs), strict=True):
        if size is not None and size > MAX_FILE_BYTES:
            raise PatchError(
                f"{where}: {spec.split(':', 1)[1]} is {size} bytes, over the limit of {MAX_FILE_BYTES >> 20} MiB "
                "for a file a patch touches",
                hint="a patch carries source code a person reviews; keep large files out of the series",
            )


@dataclass(frozen=True, slots=True)
class Rendered:
    """A patch file as the commits say it should be."""

    name: str
    commit: str
    data: bytes
    status: str  # "unchanged", "updated" or "new"


def render_chain(
    g: Git,
    chain: Sequence[ChainCommit],
    headers: Mapping[str, bytes],
    current: Mapping[str, bytes],
    used: Sequence[str],
) -> list[Rendered]:
    """Each commit's patch file: its header (kept, or made from the message) plus ``git diff``."""
    write_info_attributes(g)
    numbers = [int(m.group(1)) for n in used if (m := _NUMBER.match(n))]
    next_number = max(numbers, default=0) + 1
    taken = set(used)
    out: list[Rendered] = []
    for c in chain:
        check_commit_files(g, c)
        diff = diff_patch(g, c.parent, c.commit)
        if c.patch is not None:
            if not diff:
                raise PatchError(
                    f"{g.root}: commit {c.commit[:12]} ({c.patch}) changes nothing",
                    hint="drop the commit and remove the patch from the series by hand",
                )
            data = headers[c.patch] + diff
            status = "unchanged" if current.get(c.patch) == data else "updated"
            out.append(Rendered(c.patch, c.commit, data, status))
            continue
        if not diff:
            continue  # an empty commit carries nothing to export
        author, date, message = g.commit_info(c.commit)
        subject = message.strip().split("\n")[0] if message.strip() else ""
        name = f"{next_number:04d}-{slug(subject)}.patch"
        while name in taken:
            next_number += 1
            name = f"{next_number:04d}-{slug(subject)}.patch"
        taken.add(name)
        next_number += 1
        data = dep3_header(message, author, date) + diff
        out.append(Rendered(name, c.commit, data, "unchanged" if current.get(name) == data else "new"))
    return out


def series_text(original: str, names: Sequence[str], *, dropped: Mapping[str, str] | None = None) -> str:
    """The series file listing ``names``: known lines and comments kept, new names appended.

    A listed patch not in ``names`` is removed; with ``dropped`` it becomes a
    comment saying why.
    """
    out: list[str] = []
    listed: set[str] = set()
    for line in original.splitlines():
        entry = line.split("#", 1)[0].strip()
        if not entry:
            out.append(line)
        elif entry in names:
            out.append(line)
            listed.add(entry)
        elif dropped and entry in dropped:
            out.append(f"# {entry}: {dropped[entry]}")
    out.extend(n for n in names if n not in listed)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- writing


def changed_files(outputs: Mapping[Path, bytes]) -> list[Path]:
    """The paths whose bytes on disk differ from ``outputs`` (missing files included)."""
    return [p for p, data in outputs.items() if not p.is_file() or p.read_bytes() != data]


def rerecord(g: Git, base: str, chain: Sequence[ChainCommit], patches: Sequence[Patch]) -> str:
    """The series commits again, same trees, with trailers naming the new patch files (as ``apply`` writes them)."""
    date = g.commit_date(base)
    parent = base
    for c, patch in zip(chain, patches, strict=True):
        parent = g.commit_tree(CommitSpec(g.tree_of(c.commit), (parent,), patch.commit_message(), date))
    return parent


# --------------------------------------------------------------------------- export


@dataclass(frozen=True, slots=True)
class ExportedPatch:
    name: str
    commit: str
    status: str  # "unchanged", "updated", "new"

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "commit": self.commit, "status": self.status}


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What export wrote (or, with ``check``, would write)."""

    stack: str
    checkout: Path
    series_dir: Path
    patches: tuple[ExportedPatch, ...]
    anchors: tuple[AnchorMove, ...]
    changed: tuple[Path, ...]  # files whose bytes differ from what the commits say
    check: bool
    old_head: str
    new_head: str
    notes: tuple[str, ...] = field(default=())

    @property
    def stale(self) -> bool:
        return bool(self.changed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "stack": self.stack,
            "checkout": str(self.checkout),
            "series": str(self.series_dir),
            "check": self.check,
            "stale": self.stale,
            "changed": [str(p) for p in self.changed],
            "patches": [p.as_dict() for p in self.patches],
            "anchors": [m.as_dict() for m in self.anchors if m.status != "kept"],
            "old_head": self.old_head,
            "new_head": self.new_head,
            "notes": list(self.notes),
        }


def _series_touched(patches: Sequence[Patch]) -> list[str]:
    seen: dict[str, None] = {}
    for p in patches:
        for f in p.files:
            seen.setdefault(f.path)
    return list(seen)


def _old_patched(base_files: Mapping[str, bytes | None], series: Series) -> dict[str, bytes | None] | None:
    """The files after the old series, from the patch files on disk (None if it no longer applies)."""
    stages = apply_in_order(base_files, series.patches)
    if isinstance(stages, tuple):
        return None
    return stages[-1] if stages else dict(base_files)


def check_applies(g: Git, base: str, head: str, patches: Sequence[Patch], directory: Path) -> None:
    """The exported series, applied by sgpatch's engine to ``base``, must make ``head``'s files and modes.

    So export never writes (and ``export --check`` never passes) a series that ``apply`` would refuse.
    """
    from sgpatch.checkout.apply import read_modes
    from sgpatch.series.classify import classify

    paths = tuple(_series_touched(patches))
    files = {p: g.read_blob(base, p) for p in paths}
    modes = read_modes(g, base, paths)
    states, after = classify(files, Series(directory, tuple(patches)), modes)
    for state in states:
        if state.state != "applicable":
            raise CheckFailed(
                f"{directory / state.name}: sgpatch apply would find it {state.state}: {state.detail}",
                hint="fix the commit it comes from (or the series) and export again",
            )
    for patch in patches:
        modes = apply_modes(modes, patch)
    final = after[-1] if after else files
    for path in paths:
        if final[path] != g.read_blob(head, path) or (
            final[path] is not None and modes.get(path) != g.file_mode(head, path)
        ):
            raise CheckFailed(f"{directory}: applying the exported series does not reproduce {path} of {head[:12]}")


def export_series(config: Config, stack: Stack, series: Series, checkout: Path, *, check: bool) -> ExportResult:
    """Regenerate the series of ``stack`` from the commits on ``checkout`` (see the module docstring)."""
    g = open_checkout(checkout)
    with lock_checkout(g, command="export"):
        recover(g)
        return _export(config, stack, series, g, check=check)


def _export(config: Config, stack: Stack, series: Series, g: Git, *, check: bool) -> ExportResult:
    checkout = g.root
    base, chain = find_chain(g, base_candidates(stack))
    check_base_files(g, stack, base)
    names = [p.name for p in series.patches]
    match_series(chain, names, checkout)
    head = chain[-1].commit if chain else base

    directory = series.directory
    current = {p.name: p.path.read_bytes() for p in series.patches}
    headers = {name: header_of(data) for name, data in current.items()}
    rendered = render_chain(g, chain, headers, current, names)
    for r in rendered:
        if r.status == "new" and (directory / r.name).exists():
            raise PatchError(f"{directory / r.name}: exists but is not in the series", hint="remove or list it")
    outputs: dict[Path, bytes] = {directory / r.name: r.data for r in rendered}
    series_path = directory / SERIES_FILE
    new_names = [r.name for r in rendered]
    outputs[series_path] = series_text(series_path.read_text(encoding="utf-8"), new_names).encode()
    new_patches = [parse_patch(r.data, directory / r.name, name=r.name) for r in rendered]
    check_tree_paths(g, base, new_patches)
    check_applies(g, base, head, new_patches, directory)

    # Anchors and pins follow the files the series touches, before and after the edit.
    touched = _series_touched(new_patches)
    old_touched = list(series.touched)
    all_paths = list(dict.fromkeys([*old_touched, *touched]))
    base_files = {p: g.read_blob(base, p) for p in all_paths}
    head_files = {p: g.read_blob(head, p) for p in all_paths}
    old_patched = _old_patched(base_files, series)
    old_view = {p: {"pristine": base_files[p], "patched": (old_patched or {}).get(p)} for p in all_paths}
    new_view = {p: {"pristine": base_files[p], "patched": head_files[p]} for p in all_paths}
    anchors_path = directory / ANCHORS_FILE
    anchors = load_anchors(anchors_path)
    moves = relocate_all(anchors, old_view, new_view, keep_files=touched)
    if anchors_path.exists() or anchors:
        original = anchors_path.read_text(encoding="utf-8") if anchors_path.exists() else ""
        outputs[anchors_path] = render_anchors(original, moves, where=anchors_path).encode()

    pins = []
    for path in touched:
        pristine, patched = g.blob_id(base, path), g.blob_id(head, path)
        if pristine is not None and patched is not None:  # a file the series creates or deletes has no pin
            pins.append(FilePin(path, pristine, patched))
    users = [s.name for s in config.stacks.values() if s.series_dir.resolve() == directory.resolve()]
    text = config.path.read_text(encoding="utf-8")
    new_text = set_file_pins(text, users, pins, where=config.path)
    parse_config(new_text, config.path)  # never write a VERSIONS.toml that does not load
    outputs[config.path] = new_text.encode()

    changed = changed_files(outputs)
    notes: list[str] = []
    dirty = g.status()
    if dirty:
        notes.append(f"{len(dirty)} uncommitted change(s) in the checkout are not exported (commit them first)")
    status = {r.name: r.status for r in rendered}
    exported = tuple(ExportedPatch(r.name, r.commit, status[r.name]) for r in rendered)
    if check:
        return ExportResult(
            stack.name, checkout, directory, exported, tuple(moves), tuple(changed), True, head, head, tuple(notes)
        )
    for target in changed:
        write_atomic(target, outputs[target])
    series_chain = [ChainCommit(r.commit, "", r.name) for r in rendered]
    new_head = rerecord(g, base, series_chain, new_patches) if rendered else base
    if new_head != head:
        move_checkout(g, old=head, new=new_head, reason=f"sgpatch export {stack.name}")
    return ExportResult(
        stack.name, checkout, directory, exported, tuple(moves), tuple(changed), False, head, new_head, tuple(notes)
    )


def export_fresh(config: Config, stack: Stack, series: Series, *, check: bool) -> ExportResult:
    """Export from a fresh checkout of the pinned source with the series applied (in a temporary directory).

    This is the gate for a repository that keeps its patches: the series must
    apply strictly to its pinned source (CheckFailed otherwise) and the files
    must be exactly what export makes of the result.
    """
    from sgpatch.checkout.apply import apply_series
    from sgpatch.checkout.fetch import fetch
    from sgpatch.errors import CheckFailed

    with tempfile.TemporaryDirectory(prefix="sgpatch-export-") as tmp:
        checkout = Path(tmp) / "checkout"
        fetch(stack, checkout)
        applied = apply_series(stack, series, checkout)
        if not applied.ok:
            bad = next(p for p in applied.patches if p.state not in ("applicable", "applied"))
            raise CheckFailed(
                f"{bad.name}: {bad.state} on the pinned source of {stack.name}: {bad.detail}",
                hint="fix the patch (edit it in a checkout and run 'sgpatch export')",
            )
        result = export_series(config, stack, series, checkout, check=check)
        return dataclasses.replace(result, notes=(*result.notes, "exported from a fresh checkout of the pinned source"))
