"""Series files, DEP-3 headers and unified diffs, parsed and checked (``engine.py`` applies them).

Pure: it reads patch files; git is never involved.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchedFile, PatchSet

from sgpatch.config.projectfiles import read_project_file
from sgpatch.errors import PatchError
from sgpatch.pyast import per_memo
from sgpatch.series.dep3 import parse_dep3_lines
from sgpatch.series.obsolete import Evidence, evidence_of
from sgpatch.series.paths import path_refusal

SERIES_FILE = "series"
TRAILER_PATCH = "Sgpatch-Patch"
TRAILER_SHA = "Sgpatch-Patch-Sha256"

_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
_ENTRY = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]*\.(patch|diff)$")


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their ``\\n`` kept; only LF splits (form feeds and CRs are content: a binary stream's
    ``readlines`` splits at LF alone).  A new list each call (the caller's to change); the lines of the texts split
    last are kept: a port splits a file's texts again for each of its hunks."""
    return list(_lines(data))


@per_memo(maxsize=32)
def _lines(data: bytes) -> tuple[bytes, ...]:
    return tuple(io.BytesIO(data).readlines())


@dataclass(frozen=True, slots=True)
class Hunk:
    """One ``@@`` hunk.  ``old``/``new`` are its source-side and target-side lines."""

    index: int  # 1-based within its file
    header: str  # the whole "@@ ... @@ section" line
    section: str  # git's funcname text after the second @@ (may be empty)
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    old: tuple[bytes, ...]
    new: tuple[bytes, ...]
    added: tuple[tuple[int, bytes], ...]  # (new-side line number, line) for each + line
    patch_line: int  # line of the @@ header in the patch file
    trailing_context: bool = True  # False: the hunk ends with a change, so it must end at the end of the file

    @property
    def label(self) -> str:
        return f"hunk #{self.index} ({self.header.split(' @@')[0]} @@)"


@dataclass(frozen=True, slots=True)
class FilePatch:
    """One ``diff --git`` section.  Modes are set only where the patch states them.

    ``old_mode`` is stated for a deletion or a mode change, ``new_mode`` for a
    new file or a mode change; a plain content change leaves both ``None``.
    """

    path: str  # checkout-relative target path
    new_file: bool
    deleted: bool
    hunks: tuple[Hunk, ...]
    old_mode: str | None = None
    new_mode: str | None = None
    patch_line: int = 0  # line of the 'diff --git' header in the patch file


@dataclass(frozen=True, slots=True)
class Patch:
    """A patch file of the series: DEP-3 fields and the parsed diff."""

    name: str
    path: Path
    sha256: str
    fields: tuple[tuple[str, str], ...]
    files: tuple[FilePatch, ...]
    # The patch file's bytes as they were read (``sha256`` is theirs), so no caller reads the file again;
    # empty for a patch sgpatch derives from another (one file or one hunk of it).
    data: bytes = dataclasses.field(default=b"", repr=False, compare=False)
    # Its ``Obsolete-If`` claims: the upstream evidence that makes it unnecessary (``port`` drops it on them).
    obsolete_if: tuple[Evidence, ...] = ()

    def field(self, key: str) -> str | None:
        return next((v for k, v in self.fields if k.lower() == key.lower()), None)

    @property
    def description(self) -> str:
        return self.field("Description") or self.field("Subject") or self.name

    def commit_message(self) -> str:
        """The message of the commit that carries this patch in a checkout."""
        lines = self.description.splitlines()
        subject = lines[0] if lines else self.name
        body = "\n".join("" if ln.strip() == "." else ln for ln in lines[1:]).strip()
        parts = [subject]
        if body:
            parts.append(body)
        parts.append(f"{TRAILER_PATCH}: {self.name}\n{TRAILER_SHA}: {self.sha256}")
        return "\n\n".join(parts) + "\n"


@dataclass(frozen=True, slots=True)
class Series:
    """A stack's patches, in the order its series file gives them."""

    directory: Path
    patches: tuple[Patch, ...]

    @property
    def id(self) -> str:
        """A short id of the exact series: names and bytes of every patch, in order."""
        h = hashlib.sha256()
        for p in self.patches:
            h.update(f"{p.name}\0{p.sha256}\n".encode())
        return h.hexdigest()[:10]

    @property
    def touched(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for p in self.patches:
            for f in p.files:
                seen.setdefault(f.path)
        return tuple(seen)


# --------------------------------------------------------------------------- parsing


def _safe_path(raw: str, where: str) -> str:
    problem = path_refusal(raw)
    if problem is not None:
        hint = (
            "a path must read as what it is; rename the file"
            if "character" in problem
            else "patches may only touch files inside the checkout, never git metadata"
        )
        raise PatchError(f"{where}: {problem}", hint=hint)
    return str(PurePosixPath(raw))


def _strip_prefix(raw: str, prefix: str, where: str) -> str:
    raw = raw.split("\t", 1)[0]
    if raw == "/dev/null":
        return raw
    if not raw.startswith(prefix):
        raise PatchError(
            f"{where}: expected a path starting with {prefix!r}, found {raw!r}", hint="use git diff style a/ b/ paths"
        )
    return _safe_path(raw[len(prefix) :], where)


def parse_patch(data: bytes, path: Path, *, name: str | None = None) -> Patch:
    """Parse and validate one patch file (header, paths, hunks).  PatchError on any defect."""
    where = str(path)
    lines = data.split(b"\n")
    body = _hunk_body_lines(lines)
    for i, line in enumerate(lines, start=1):
        if line.endswith(b"\r") and i - 1 not in body:
            raise PatchError(f"{where}:{i}: CRLF line ending", hint="patches must use LF line endings")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = data[: exc.start].count(b"\n") + 1
        raise PatchError(f"{where}:{bad_line}: not UTF-8") from None
    start = next((i for i, ln in enumerate(lines) if ln.startswith(b"diff --git ")), None)
    if start is None:
        raise PatchError(f"{where}: no 'diff --git' section", hint="patches are git-style unified diffs")
    header_lines = lines[:start]
    if header_lines and header_lines[-1].strip() == b"---":
        header_lines = header_lines[:-1]
    located = parse_dep3_lines(b"\n".join(header_lines).decode(), where)
    fields = tuple((k, v) for k, v, _line in located)
    obsolete_if = evidence_of(located, where)

    offset = start  # unidiff numbers lines from the first 'diff --git'
    diff_text = b"\n".join(lines[start:]).decode()
    try:
        parsed = PatchSet(diff_text)
    except UnidiffParseError as exc:
        raise PatchError(f"{where}:{_bad_hunk_line(lines, start)}: malformed diff: {str(exc).strip()}") from None
    files = [_file_patch(pf, where, offset) for pf in parsed]
    if not files:
        raise PatchError(f"{where}: the diff has no file sections")
    return Patch(
        name=name or path.name,
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        fields=fields,
        files=tuple(files),
        data=data,
        obsolete_if=obsolete_if,
    )


def _hunk_body(lines: Sequence[bytes], header: int) -> tuple[range, bool]:
    """The body of the hunk whose ``@@`` header is ``lines[header]``, by the header's counts: the indexes of
    its lines, and whether the counts were met (False: the body ends early, at a foreign line or the end)."""
    m = _HUNK_HEADER.match(lines[header])
    assert m is not None
    want_old = int(m.group(2)) if m.group(2) is not None else 1
    want_new = int(m.group(4)) if m.group(4) is not None else 1
    i = header + 1
    while want_old > 0 or want_new > 0:
        if i >= len(lines):
            return range(header + 1, i), False
        tag = lines[i][:1]
        if tag == b" ":
            want_old, want_new = want_old - 1, want_new - 1
        elif tag == b"-":
            want_old -= 1
        elif tag == b"+":
            want_new -= 1
        elif tag != b"\\":
            return range(header + 1, i), False
        i += 1
    return range(header + 1, i), True


def _hunk_body_lines(lines: Sequence[bytes]) -> set[int]:
    """Indexes of the lines inside hunks (by their headers' counts): a CR ending one of them is file content."""
    body: set[int] = set()
    i = 0
    while i < len(lines):
        if not _HUNK_HEADER.match(lines[i]):
            i += 1
            continue
        found, _ = _hunk_body(lines, i)
        body.update(found)
        i = found.stop
    return body


def _bad_hunk_line(lines: Sequence[bytes], start: int) -> int:
    """The patch line of the first hunk whose body is shorter or longer than its header says."""
    last_header = start + 1
    i = start
    while i < len(lines):
        if not _HUNK_HEADER.match(lines[i]):
            i += 1
            continue
        last_header = i + 1
        found, complete = _hunk_body(lines, i)
        if not complete:
            return last_header
        i = found.stop
    return last_header


_NO_NEWLINE = "'\\ No newline at end of file'"


def _mode_of(mode: str | None, loc: str) -> str | None:
    if mode is None or mode in ("100644", "100755"):
        return mode
    what = {"120000": "a symlink", "160000": "a submodule (gitlink)"}.get(mode, "not a regular file")
    raise PatchError(f"{loc}: file mode {mode} is {what}; only regular files (100644, 100755) may be patched")


def _file_patch(pf: PatchedFile, where: str, offset: int) -> FilePatch:
    diff_line = getattr(pf, "diff_line_no", None)
    loc = f"{where}:{offset + diff_line}" if diff_line else where
    info = [str(line) for line in (pf.patch_info or ())]
    if pf.is_binary_file or any(ln.startswith(("GIT binary patch", "Binary files ")) for ln in info):
        raise PatchError(f"{loc}: binary patches are not supported", hint="sgpatch patches text files only")
    old_path = _strip_prefix(pf.source_file, "a/", loc)
    new_path = _strip_prefix(pf.target_file, "b/", loc)
    if any(ln.startswith(("copy from ", "copy to ")) for ln in info):
        raise PatchError(f"{loc}: copies are not supported", hint="express them as a new file")
    if pf.is_rename or any(ln.startswith(("rename from ", "rename to ")) for ln in info):
        raise PatchError(f"{loc}: renames are not supported", hint="express them as delete + add")
    source_mode, target_mode = _mode_of(pf.source_mode, loc), _mode_of(pf.target_mode, loc)
    target = old_path if new_path == "/dev/null" else new_path
    if target == "/dev/null":
        raise PatchError(f"{loc}: both sides are /dev/null")
    if "/dev/null" not in (old_path, new_path) and old_path != new_path:
        raise PatchError(f"{loc}: old and new paths differ ({old_path} vs {new_path})")
    # git's header lines decide (unidiff alone takes a hunk emptying a file for a deletion)
    new_file = old_path == "/dev/null" or any(ln.startswith("new file mode ") for ln in info)
    deleted = new_path == "/dev/null" or any(ln.startswith("deleted file mode ") for ln in info)
    if new_file and deleted:
        raise PatchError(f"{loc}: the section both creates and deletes {target}")
    old_mode = new_mode = None
    if new_file:
        new_mode = target_mode or "100644"
    elif deleted:
        old_mode = source_mode or "100644"
    elif source_mode != target_mode and source_mode and target_mode:
        old_mode, new_mode = source_mode, target_mode
    if not len(pf) and not (new_file or deleted or new_mode):
        raise PatchError(f"{loc}: file section {target} has no hunks and changes no mode")
    hunks = []
    ended_old = ended_new = False  # a side has met its "\ No newline at end of file"
    for index, h in enumerate(pf, start=1):
        first = next(iter(h), None)
        header_line = offset + ((first.diff_line_no or 1) - 1 if first is not None else 0)
        old: list[bytes] = []
        new: list[bytes] = []
        added: list[tuple[int, bytes]] = []
        last: str | None = None
        for line in h:
            line_loc = f"{where}:{offset + (line.diff_line_no or 1)}"
            if line.line_type == "\\":
                if last is None:
                    raise PatchError(f"{line_loc}: {_NO_NEWLINE} without a line before it")
                if last in " -":
                    old[-1] = old[-1].removesuffix(b"\n")
                    ended_old = True
                if last in " +":
                    new[-1] = new[-1].removesuffix(b"\n")
                    ended_new = True
                    if last == "+":
                        added[-1] = (added[-1][0], new[-1])
                last = None
                continue
            if (ended_old and line.line_type in " -") or (ended_new and line.line_type in " +"):
                raise PatchError(
                    f"{line_loc}: a line follows {_NO_NEWLINE} on the same side",
                    hint="the marker belongs after the last line of a file",
                )
            body = line.value.encode()
            if line.is_context:
                old.append(body)
                new.append(body)
            elif line.is_removed:
                old.append(body)
            elif line.is_added:
                new.append(body)
                added.append((line.target_line_no or h.target_start, body))
            last = line.line_type
        if (h.source_start == 0 and h.source_length) or (h.target_start == 0 and h.target_length):
            raise PatchError(
                f"{where}:{header_line}: hunk header starts a non-empty side at line 0",
                hint="line numbers start at 1; only an empty side is written as 0,0",
            )
        lines_of_hunk = [ln for ln in h if ln.line_type != "\\"]
        header = f"@@ -{h.source_start},{h.source_length} +{h.target_start},{h.target_length} @@" + (
            f" {h.section_header}" if h.section_header else ""
        )
        hunks.append(
            Hunk(
                index=index,
                header=header,
                section=h.section_header.strip(),
                old_start=h.source_start,
                old_count=h.source_length,
                new_start=h.target_start,
                new_count=h.target_length,
                old=tuple(old),
                new=tuple(new),
                added=tuple(added),
                patch_line=header_line,
                trailing_context=bool(lines_of_hunk) and lines_of_hunk[-1].is_context,
            )
        )
    return FilePatch(
        target, new_file, deleted, tuple(hunks), old_mode, new_mode, offset + diff_line if diff_line else 0
    )


def read_series(directory: Path) -> Series:
    """The series of ``directory``: every entry parsed, every patch file listed."""
    series_path = directory / SERIES_FILE
    try:
        text = read_project_file(series_path).decode("utf-8")
    except FileNotFoundError:
        raise PatchError(f"{series_path}: no such file", hint="a series directory needs a 'series' file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PatchError(f"{series_path}: cannot read: {exc}") from None
    patches: list[Patch] = []
    seen: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        where = f"{series_path}:{lineno}"
        if not _ENTRY.match(entry) or "/" in entry:
            raise PatchError(
                f"{where}: {entry!r} is not a patch file name in this directory", hint="entries are NNNN-slug.patch"
            )
        if entry in seen:
            raise PatchError(f"{where}: {entry} is listed twice")
        seen.add(entry)
        path = directory / entry
        if path.is_symlink() or not path.is_file():
            raise PatchError(f"{where}: {entry}: no such patch file (or not a regular file)")
        try:
            data = read_project_file(path)
        except OSError as exc:  # replaced since the check above
            raise PatchError(f"{where}: {entry}: cannot read: {exc}") from None
        patches.append(parse_patch(data, path))
    unlisted = sorted(p.name for p in directory.glob("*.patch") if p.name not in seen)
    if unlisted:
        raise PatchError(
            f"{directory / unlisted[0]}: patch file is not listed in {series_path}",
            hint="add it to the series, or remove it",
        )
    return Series(directory=directory, patches=tuple(patches))
