"""``sgpatch import``: a patch in the form a team keeps it, read as a git-style diff on the pinned source.

Sections are found as ``git apply`` finds them: a ``diff --git`` header, or a ``--- ``/``+++ `` pair followed
by a hunk; every other line (prose, a diffstat, a ``diff -ruN`` command line, an mbox header) is skipped.
Each path is resolved against the files of the pinned checkout: git's ``a/``/``b/`` (or ``-p N``), then the
exact path, else a unique suffix match (at least two components: ``srt/x.py`` or
``../../my-sglang/python/sglang/srt/x.py`` → ``python/sglang/srt/x.py``); a new file follows the mapping its
input's other files showed, or the package's own directories. Ambiguity and paths that leave the checkout are
refused (PatchError, exit 2) naming the file and line.

Pure: no git, no writes.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from sgpatch.errors import PatchError
from sgpatch.series.paths import path_refusal

# A UTF-8 byte order mark, and the same three bytes read as cp1252/latin-1 and written back as UTF-8 ("ï»¿").
BOMS = (b"\xef\xbb\xbf", "\u00ef\u00bb\u00bf".encode())
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_EXTENDED = (
    b"old mode ",
    b"new mode ",
    b"deleted file mode ",
    b"new file mode ",
    b"index ",
    b"similarity index ",
    b"dissimilarity index ",
    b"rename from ",
    b"rename to ",
    b"copy from ",
    b"copy to ",
    b"Binary files ",
    b"GIT binary patch",
)
_EPOCH = re.compile(r"^(1970-01-01|1969-12-31)[ T]00?:00:00|^Thu Jan  1 00:00:00 1970")
PACKAGE_ROOT = "python/sglang/"
NULL = "/dev/null"


@dataclass(frozen=True, slots=True)
class Resolution:
    """How one path of the input was found in the pinned source."""

    raw: str  # as the input names it
    path: str  # checkout path
    how: str  # "exact", "suffix", "new file"
    line: int  # the input's line that names it

    def as_dict(self) -> dict[str, str | int]:
        return {"raw": self.raw, "path": self.path, "how": self.how, "line": self.line}


@dataclass(frozen=True, slots=True)
class Adopted:
    """One input as a git-style diff on the pinned source, and the text before its first section."""

    where: str
    prose: str
    diff: bytes
    resolutions: tuple[Resolution, ...]
    skipped: int  # lines before the first section (prose, diffstat) that git apply skips too


@dataclass(slots=True)
class _Section:
    line: int  # 1-based line of its first header line
    git: bool
    old: str
    new: str
    extended: list[bytes]
    hunks: list[bytes]
    old_line: int = 0
    new_line: int = 0


def strip_bom(data: bytes) -> bytes:
    """``data`` without the byte order marks (or their mojibake) an editor put before its first line."""
    changed = True
    while changed:
        changed = False
        for bom in BOMS:
            if data.startswith(bom):
                data, changed = data[len(bom) :], True
    return data


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PatchError(f"{where}: not UTF-8") from None


def _header_path(raw: bytes, where: str) -> tuple[str, bool]:
    """The path of a ``---``/``+++`` line (timestamp cut off), and whether the timestamp says "no file" (epoch)."""
    text = _text(raw[4:].rstrip(b"\r\n"), where)
    path, _, stamp = text.partition("\t")
    if path.startswith('"'):
        raise PatchError(f"{where}: quoted path {path[:80]!r} is not supported", hint="rename the file")
    return path.rstrip(" "), bool(_EPOCH.match(stamp.strip()))


def _git_names(line: bytes, where: str) -> tuple[str, str]:
    rest = _text(line[len(b"diff --git ") :].rstrip(b"\r\n"), where)
    if rest.startswith('"'):
        raise PatchError(f"{where}: quoted path in {rest[:80]!r} is not supported", hint="rename the file")
    half = (len(rest) - 1) // 2
    a, b = rest[:half], rest[half + 1 :]
    if len(rest) % 2 == 1 and rest[half] == " " and a.split("/", 1)[-1] == b.split("/", 1)[-1]:
        return a, b
    parts = rest.split(" ")
    if len(parts) != 2:
        raise PatchError(f"{where}: cannot read the paths of {rest[:120]!r}")
    return parts[0], parts[1]


def _hunk_end(lines: Sequence[bytes], i: int, where: str) -> int:
    """The index after the hunk whose header is ``lines[i]``; PatchError if its body is shorter than it says."""
    m = _HUNK.match(lines[i])
    assert m is not None
    old = int(m.group(2)) if m.group(2) is not None else 1
    new = int(m.group(4)) if m.group(4) is not None else 1
    j = i + 1
    while old > 0 or new > 0:
        tag = lines[j][:1] if j < len(lines) else b""
        if tag == b" ":
            old, new = old - 1, new - 1
        elif tag == b"-":
            old -= 1
        elif tag == b"+":
            new -= 1
        elif tag != b"\\":
            raise PatchError(
                f"{where}:{i + 1}: malformed hunk: its body ends at line {j + 1} before the counts of "
                f"{_text(lines[i].rstrip(), where)[:60]!r} are met",
                hint="the patch was cut or edited by hand; make it again with diff or git diff",
            )
        j += 1
    while j < len(lines) and lines[j].startswith(b"\\"):
        j += 1
    return j


def _sections(lines: Sequence[bytes], where: str) -> tuple[list[_Section], int]:
    """The file sections, as ``git apply`` finds them, and the index of the first one's first line."""
    out: list[_Section] = []
    first = len(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"diff --git "):
            old, new = _git_names(line, f"{where}:{i + 1}")
            sec = _Section(i + 1, True, old, new, [], [], i + 1, i + 1)
            i += 1
            while i < len(lines) and lines[i].startswith(_EXTENDED):
                sec.extended.append(lines[i])
                i += 1
            if i + 1 < len(lines) and lines[i].startswith(b"--- ") and lines[i + 1].startswith(b"+++ "):
                sec.old = _header_path(lines[i], f"{where}:{i + 1}")[0]
                sec.new = _header_path(lines[i + 1], f"{where}:{i + 2}")[0]
                sec.old_line, sec.new_line = i + 1, i + 2
                i += 2
        elif (
            line.startswith(b"--- ")
            and i + 2 < len(lines)
            and lines[i + 1].startswith(b"+++ ")
            and _HUNK.match(lines[i + 2])
        ):
            old, old_epoch = _header_path(line, f"{where}:{i + 1}")
            new, new_epoch = _header_path(lines[i + 1], f"{where}:{i + 2}")
            sec = _Section(i + 1, False, NULL if old_epoch else old, NULL if new_epoch else new, [], [], i + 1, i + 2)
            i += 2
        else:
            i += 1
            continue
        first = min(first, sec.line - 1)
        while i < len(lines) and (m := _HUNK.match(lines[i])):
            end = _hunk_end(lines, i, where)
            # The text after the second @@ is the producer's guess at the enclosing scope (git's default
            # funcname, diff -p's); git apply ignores it, and sgpatch would hold the patch to it: dropped,
            # export writes Python's own.
            sec.hunks.append(m.group(0) + b"\n")
            sec.hunks.extend(lines[i + 1 : end])
            i = end
        out.append(sec)
    return out, first


# --------------------------------------------------------------------------- paths


class SourceFiles:
    """The pinned checkout's files, looked up by path suffix (made once, shared by every input file)."""

    def __init__(self, files: Collection[str]) -> None:
        self.files = frozenset(files)
        self.dirs = frozenset(str(p) for f in files for p in PurePosixPath(f).parents if str(p) != ".")
        self.by_suffix: dict[str, set[str]] = defaultdict(set)
        for name in self.files | self.dirs:
            parts = name.split("/")
            for k in range(1, len(parts)):
                self.by_suffix["/".join(parts[k:])].add(name)

    def find(self, path: str, *, dirs: bool = False) -> tuple[str, str] | list[str] | None:
        """``(found, how)``, the candidates when ambiguous, or None: ``path`` itself, else the longest suffix
        of it (two components at least, or all of it) that names exactly one file (or directory)."""
        pool = self.dirs if dirs else self.files
        if path in pool:
            return path, "exact"
        parts = path.split("/")
        for k in range(len(parts)):
            if k and len(parts) - k < 2:
                break
            hits = sorted(h for h in self.by_suffix.get("/".join(parts[k:]), ()) if h in pool)
            if len(hits) == 1:
                return hits[0], "suffix"
            if hits:
                return hits
        return None


def _clean(raw: str, strip: int | None, *, git: bool, side: str, where: str) -> str:
    """``raw`` with its leading components stripped (``-p N``; git's ``a/``/``b/``; ``./`` and, for a plain diff,
    leading ``../``), refused if absolute or leaving the checkout."""
    path = raw
    if strip is not None:
        parts = [p for p in path.split("/") if p] if path.startswith("/") else path.split("/")
        if len(parts) <= strip:
            raise PatchError(f"{where}: -p {strip} leaves nothing of {raw!r}")
        path = "/".join(parts[strip:])
    elif git:
        if not path.startswith(f"{side}/"):
            raise PatchError(f"{where}: expected a path starting with {side}/, found {raw!r}", hint="give -p N")
        path = path[2:]
    elif path.startswith("/"):
        raise PatchError(
            f"{where}: path {raw!r} is absolute", hint="give -p N to strip its leading directories (as patch -p does)"
        )
    parts = path.split("/")
    while parts and parts[0] in (".", "..", "") and (parts[0] != ".." or (not git and strip is None)):
        parts.pop(0)
    path = "/".join(parts)
    problem = path_refusal(path)
    if problem is not None:
        raise PatchError(f"{where}: {problem}", hint="a patch may only touch files inside the checkout")
    return path


def _mapped(path: str, mappings: dict[str, str], source: SourceFiles) -> str | None:
    """A new file's checkout path by the prefix mappings its input showed, or the package's own layout."""
    for raw_prefix, prefix in sorted(mappings.items(), key=lambda kv: -len(kv[0])):
        if path.startswith(raw_prefix) and (raw_prefix or "/" in path):
            return prefix + path[len(raw_prefix) :]
    top = path.split("/", 1)[0]
    if top == "sglang" and PACKAGE_ROOT.rstrip("/") in source.dirs:
        return "python/" + path
    if "/" in path and f"{PACKAGE_ROOT}{top}" in source.dirs:
        return PACKAGE_ROOT + path
    parent = str(PurePosixPath(path).parent)
    found = source.find(parent, dirs=True) if parent != "." else None
    if isinstance(found, tuple):
        return f"{found[0]}/{PurePosixPath(path).name}"
    return None


def _resolve(
    sec: _Section, strip: int | None, source: SourceFiles, mappings: dict[str, str], where: str
) -> tuple[str, str, list[Resolution]]:
    """The section's old and new checkout paths (``/dev/null`` kept) and how each was found."""
    out: dict[str, str] = {}
    shown: list[Resolution] = []
    sides = (("old", sec.old, sec.old_line, "a"), ("new", sec.new, sec.new_line, "b"))
    cleaned = {
        name: _clean(raw, strip, git=sec.git, side=letter, where=f"{where}:{line}")
        for name, raw, line, letter in sides
        if raw != NULL
    }
    creating = "old" not in cleaned
    for name, raw, line, _ in sides:
        if name not in cleaned:
            out[name] = NULL
            continue
        path = cleaned[name]
        found = source.find(path)
        if isinstance(found, list):
            shown_names = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
            raise PatchError(
                f"{where}:{line}: {raw!r} is ambiguous in the pinned source: {shown_names}",
                hint="give -p N, or make the patch with paths from the source root",
            )
        if found is None:
            mapped = _mapped(path, mappings, source) if creating else None
            if mapped is None or path_refusal(mapped) is not None:
                raise PatchError(
                    f"{where}:{line}: {raw!r}: no file of the pinned source is {path!r} or ends with it",
                    hint="give -p N, or check that the patch is made for this release",
                )
            out[name] = mapped
            shown.append(Resolution(raw=raw, path=mapped, how="new file", line=line))
            continue
        out[name] = found[0]
        shown.append(Resolution(raw=raw, path=found[0], how=found[1], line=line))
        _learn(path, found[0], mappings)
    if NULL not in out.values() and out["old"] != out["new"]:
        raise PatchError(
            f"{where}:{sec.line}: the old and new paths are different files ({out['old']} vs {out['new']})",
            hint="renames are not supported: express them as a delete and an add",
        )
    return out["old"], out["new"], shown


def _learn(path: str, found: str, mappings: dict[str, str]) -> None:
    """Keep how the input's paths map to the checkout's (``srt/`` → ``python/sglang/srt/``) for its new files."""
    p, f = path.split("/"), found.split("/")
    n = 0
    while n < min(len(p), len(f)) and p[-1 - n] == f[-1 - n]:
        n += 1
    raw, real = "/".join(p[: len(p) - n]), "/".join(f[: len(f) - n])
    mappings.setdefault(raw + "/" if raw else "", real + "/" if real else "")


# --------------------------------------------------------------------------- the whole input


def _check_extended(sec: _Section, where: str) -> None:
    for ext in sec.extended:
        if ext.startswith((b"new file mode 12", b"new mode 12", b"new file mode 16", b"new mode 16")):
            raise PatchError(
                f"{where}:{sec.line}: a symlink or submodule mode ({_text(ext.strip(), where)})",
                hint="only regular files may be patched",
            )
        if ext.startswith((b"rename ", b"copy ", b"Binary files", b"GIT binary patch")):
            raise PatchError(f"{where}:{sec.line}: renames, copies and binary patches are not supported")


def precheck(data: bytes, where: str, *, strip: int | None = None) -> int:
    """What :func:`adopt` refuses without the pinned source's files (no section, a malformed hunk, a path that
    is absolute or leaves the checkout, a link mode), refused before any checkout is made; the section count."""
    sections, _ = _sections(strip_bom(data).splitlines(keepends=True), where)
    if not sections:
        raise PatchError(f"{where}: no diff in it (no 'diff --git' and no '---'/'+++' pair before a hunk)")
    for sec in sections:
        for raw, line, letter in ((sec.old, sec.old_line, "a"), (sec.new, sec.new_line, "b")):
            if raw != NULL:
                _clean(raw, strip, git=sec.git, side=letter, where=f"{where}:{line}")
        _check_extended(sec, where)
    return len(sections)


def adopt(data: bytes, where: str, files: SourceFiles | Collection[str], *, strip: int | None = None) -> Adopted:
    """``data`` (one input file's bytes) as git-style sections on the checkout whose paths are ``files``."""
    lines = strip_bom(data).splitlines(keepends=True)
    sections, first = _sections(lines, where)
    if not sections:
        raise PatchError(f"{where}: no diff in it (no 'diff --git' and no '---'/'+++' pair before a hunk)")
    source = files if isinstance(files, SourceFiles) else SourceFiles(files)
    mappings: dict[str, str] = {}
    out: list[bytes] = []
    shown: list[Resolution] = []
    for sec in sections:
        old, new, found = _resolve(sec, strip, source, mappings, where)
        shown.extend(found)
        path = new if new != NULL else old
        _check_extended(sec, where)
        modes = [e for e in sec.extended if e.startswith((b"old mode ", b"new mode ", b"new file mode ", b"deleted"))]
        if old == NULL and not any(e.startswith(b"new file mode ") for e in modes):
            modes.append(b"new file mode 100644\n")
        if new == NULL and not any(e.startswith(b"deleted file mode ") for e in modes):
            modes.append(b"deleted file mode 100644\n")
        out.append(f"diff --git a/{path} b/{path}\n".encode())
        out.extend(m if m.endswith(b"\n") else m + b"\n" for m in modes)
        if sec.hunks:
            out.append(f"--- {'a/' + old if old != NULL else NULL}\n".encode())
            out.append(f"+++ {'b/' + new if new != NULL else NULL}\n".encode())
            out.extend(sec.hunks)
            if not sec.hunks[-1].endswith(b"\n"):
                out.append(b"\n")
    prose = b"".join(lines[:first])
    return Adopted(where=where, prose=_text(prose, where), diff=b"".join(out), resolutions=tuple(shown), skipped=first)
