"""The engine that applies a patch like ``git apply``, on bytes: exact position, no fuzz, final-newline markers,
new and deleted files, modes; and sgpatch's stricter rules (the duplicate-definition check).

Pure: it transforms file contents; git is never involved (see ``sgpatch.checkout.apply``)."""

from __future__ import annotations

import ast
import re
from codecs import BOM_UTF8
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sgpatch.pyast import parse_python, per_memo
from sgpatch.pyast.splice import unplaced_body
from sgpatch.series.patch import FilePatch, Hunk, Patch, split_lines
from sgpatch.series.paths import INVISIBLE

# --------------------------------------------------------------------------- applying


@dataclass(frozen=True, slots=True)
class HunkFailure:
    """Why a file section (``hunk`` None: its header) does not apply where it says."""

    path: str
    hunk: Hunk | None
    reason: str
    found_at: int | None  # where the hunk's lines occur instead, if exactly once

    @property
    def label(self) -> str:
        return self.hunk.label if self.hunk is not None else "file header"

    def describe(self) -> str:
        text = f"{self.path}: {self.label}: {self.reason}"
        if self.found_at is not None and self.hunk is not None:
            text += f"; its lines match at line {self.found_at} (offset {self.found_at - self.hunk.old_start:+d})"
        return text


def _find_unique(lines: Sequence[bytes], block: Sequence[bytes]) -> int | None:
    if not block:
        return None
    first, want, last = block[0], tuple(block), len(lines) - len(block)
    hits: list[int] = []
    i = -1
    while len(hits) < 2:
        try:
            i = lines.index(first, i + 1, last + 1)  # the next line equal to the block's first (a C scan)
        except ValueError:
            break
        if tuple(lines[i : i + len(want)]) == want:
            hits.append(i + 1)
    return hits[0] if len(hits) == 1 else None


def _block_at(lines: Sequence[bytes], start: int, count: int) -> tuple[bytes, ...]:
    # Unified diffs write an empty side as "start,0" meaning "after line start".
    begin = start - 1 if count else start
    return tuple(lines[begin : begin + count])


_SHOWN = 24  # characters of context shown either side of the first difference


def visible(text: bytes, start: int = 0, end: int | None = None) -> str:
    """Characters ``start:end`` of the line ``text``, quoted, with what a terminal hides made visible.

    A tab shows as ``→``, trailing blanks as ``·``, a CR as ``\\r``, other
    control and invisible characters as ``<U+XXXX>``, a missing final newline
    as ``⟨no newline⟩``.  An ellipsis marks a cut.
    """
    body = text.removesuffix(b"\n").decode("utf-8", "replace")
    stop = len(body) if end is None else min(end, len(body))
    trailing = len(body.rstrip(" "))
    out = ["\u2026" if start > 0 else ""]
    for i in range(start, stop):
        ch = body[i]
        if ch == "\t":
            out.append("\u2192")
        elif ch == " " and i >= trailing:
            out.append("\u00b7")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 32 or ord(ch) == 127 or ch in INVISIBLE:
            out.append(f"<U+{ord(ch):04X}>")
        else:
            out.append(ch)
    if stop < len(body):
        out.append("\u2026")
    elif not text.endswith(b"\n"):
        out.append("\u27e8no newline\u27e9")
    return "'" + "".join(out) + "'"


def describe_difference(got: bytes, want: bytes) -> str:
    """Where two lines first differ (1-based column) and both texts around it, invisibles shown."""
    a = got.removesuffix(b"\n").decode("utf-8", "replace")
    b = want.removesuffix(b"\n").decode("utf-8", "replace")
    col = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    lo, hi = max(0, col - _SHOWN), col + _SHOWN
    if got.endswith(b"\n") != want.endswith(b"\n"):
        side = "file's" if want.endswith(b"\n") else "patch's"
        note = f" (the {side} line has no final newline)"
    elif got.rstrip(b" \t\r\n") == want.rstrip(b" \t\r\n"):
        note = " (only trailing whitespace or CR differs)"
    elif got.replace(b"\t", b" ") == want.replace(b"\t", b" "):
        note = " (tabs and spaces differ)"
    else:
        note = ""
    return (
        f"differs at column {col + 1}: the file has {visible(got, lo, hi)}, "
        f"the patch expects {visible(want, lo, hi)}{note}"
    )


def _mismatch(lines: Sequence[bytes], start: int, block: Sequence[bytes]) -> str:
    begin = start - 1 if block else start
    for k, want in enumerate(block):
        got = lines[begin + k] if begin + k < len(lines) else None
        if got != want:
            if got is None:
                return f"line {begin + k + 1} is past the end of the file, the patch expects {visible(want, 0, 60)}"
            return f"line {begin + k + 1} {describe_difference(got, want)}"
    return "lines differ"


def apply_file(
    data: bytes | None, fp: FilePatch, *, reverse: bool = False, allow_offset: bool = False
) -> bytes | HunkFailure:
    """Apply (or reverse) one file's hunks strictly: exact lines at exact positions, no fuzz.

    Git's rules hold on top: a file is created only where none exists, a
    deletion must consume the whole file, and a hunk that ends with a change
    (no trailing context) must end at the end of the file.  With
    ``allow_offset`` a hunk whose lines occur exactly once elsewhere is
    applied there (used when porting to a new base, never for a pinned stack).
    """
    creating = fp.deleted if reverse else fp.new_file
    removing = fp.new_file if reverse else fp.deleted
    first = fp.hunks[0] if fp.hunks else None
    if creating and data is not None:
        return HunkFailure(fp.path, None, "the patch creates the file, but it already exists", None)
    if data is None and not creating:
        return HunkFailure(fp.path, first, "the file does not exist", None)
    lines = split_lines(data or b"")
    out: list[bytes] = []
    pos = 0  # index into lines already consumed
    for hunk in fp.hunks:
        want, put = (hunk.new, hunk.old) if reverse else (hunk.old, hunk.new)
        start = hunk.new_start if reverse else hunk.old_start
        count = len(want)
        if _block_at(lines, start, count) != want:
            found = _find_unique(lines, want)
            if not (allow_offset and found is not None and found - 1 >= pos):
                return HunkFailure(fp.path, hunk, _mismatch(lines, start, want), found)
            start = found
        begin = start - 1 if count else start
        if begin < pos:
            return HunkFailure(fp.path, hunk, "overlaps the previous hunk", None)
        if begin > len(lines):
            return HunkFailure(fp.path, hunk, f"line {start} is past the end of the file ({len(lines)} lines)", None)
        if not hunk.trailing_context and not removing and begin + count != len(lines):
            return HunkFailure(
                fp.path, hunk, f"ends with a change, so it must end at the end of the file (line {len(lines)})", None
            )
        out.extend(lines[pos:begin])
        out.extend(put)
        pos = begin + count
    out.extend(lines[pos:])
    if removing and out:
        return HunkFailure(
            fp.path, None, f"the patch deletes the file, but {len(out)} line(s) of it are not in the patch", None
        )
    return b"".join(out)


def duplicate_definitions(before: bytes | None, after: bytes) -> list[str]:
    """Names a change newly defines twice in one scope (Python keeps only the later one).  Where ``after`` names no
    definition twice in its text at all (``defines_each_once``), none, and nothing is parsed."""
    if defines_each_once(after):
        return []
    return new_duplicates(before, after) or []


# Where a definition's name stands: ``def`` or ``class`` begins a physical line (after its indentation: no compound
# statement follows ``;``, ``:`` or a decorator on its line), an optional ``async`` before, blanks between.
_DEFINED = re.compile(rb"^[ \t\f]*+(?:async[ \t\f]++)?(?:def|class)[ \t\f]++([A-Za-z0-9_\x80-\xff]++)", re.MULTILINE)
_GOES_ON = re.compile(rb"\b(?:async|def|class)[ \t\f]*+\\")  # ``def \`` and the name on the next line


def defines_each_once(text: bytes) -> bool:
    """Whether no name follows ``def`` or ``class`` twice in ``text``: then no scope of it defines a name twice
    (every definition's name is such a word; one in a string counts too, which only says no).  Not shown (False)
    for a text where a definition's name may stand otherwise: a carriage return (a line break to the tokenizer, not
    to this search), a byte-order mark, a keyword going on into the next line, or a name not in ASCII (the parser
    normalises it: two spellings, one name)."""
    if b"\r" in text or text.startswith(BOM_UTF8) or (b"\\\n" in text and _GOES_ON.search(text)):
        return False  # (no line goes on into the next without a backslash ending it)
    seen: set[bytes] = set()
    for m in _DEFINED.finditer(text):
        name = m.group(1)
        if name in seen or not name.isascii():
            return False
        seen.add(name)
    return True


def new_duplicates(before: bytes | None, after: bytes) -> list[str] | None:
    """``duplicate_definitions``, or None where ``after`` is not Python that parses.  ``after`` is read as
    ``before``'s statements and the lines it changes (``pyast.splice``) where that can be shown, else parsed whole."""
    had = _duplicates(before) if before is not None else frozenset()
    try:
        body = unplaced_body(after, before) if before is not None else None
    except SyntaxError:  # shown not to parse
        return None
    if body is not None:
        found = _twice(body)
    else:
        try:
            parse_python(after)
        except (SyntaxError, ValueError, RecursionError):
            return None
        found = _duplicates(after)
    return sorted(f"{name} in {scope}" for scope, name in found - had)


@per_memo(maxsize=64)
def _duplicates(source: bytes) -> frozenset[tuple[str, str]]:
    """(scope, name) of every name ``source`` defines twice in one scope (a port asks of each file often)."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError, RecursionError):
        return frozenset()
    return _twice(tree.body)


def _twice(body: Sequence[ast.stmt]) -> frozenset[tuple[str, str]]:
    """(scope, name) of every name ``body`` (a module's statements) defines twice in one scope."""
    found: set[tuple[str, str]] = set()
    scopes: list[tuple[str, Sequence[ast.stmt]]] = [("module", body)]
    while scopes:
        scope, stmts = scopes.pop()
        names: dict[str, int] = {}
        for node in stmts:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if _is_accessor_or_overload(node):
                    continue
                if node.name in names:
                    found.add((scope, node.name))
                names[node.name] = node.lineno
            if isinstance(node, ast.ClassDef):
                scopes.append((f"class {node.name}", node.body))
    return frozenset(found)


def _is_accessor_or_overload(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        if isinstance(dec, ast.Attribute) and dec.attr in ("setter", "getter", "deleter", "register"):
            return True
        if isinstance(dec, ast.Name | ast.Attribute) and getattr(dec, "id", getattr(dec, "attr", "")) == "overload":
            return True
    return False


def _mode_failure(fp: FilePatch, modes: Mapping[str, str], data: bytes | None, reverse: bool) -> HunkFailure | None:
    """A stated old mode that differs from the file's (git only warns; sgpatch refuses)."""
    expected = fp.new_mode if reverse else fp.old_mode
    if expected is None or data is None or (fp.new_file and not reverse):
        return None
    actual = modes.get(fp.path, "100644")
    if actual == expected:
        return None
    return HunkFailure(fp.path, None, f"the file has mode {actual}, the patch expects mode {expected}", None)


def apply_patch(
    files: Mapping[str, bytes | None],
    patch: Patch,
    *,
    reverse: bool = False,
    allow_offset: bool = False,
    modes: Mapping[str, str] | None = None,
) -> dict[str, bytes | None] | HunkFailure:
    """The new contents of every file ``patch`` touches, or the first failure.

    With ``modes`` (path -> git mode; absent means 100644) the modes a patch
    states as old are checked too; see ``apply_modes`` for the modes after it.
    """
    result: dict[str, bytes | None] = {}
    current_modes = dict(modes) if modes is not None else None
    for fp in patch.files:
        current = result.get(fp.path, files.get(fp.path))
        removing = (fp.deleted and not reverse) or (fp.new_file and reverse)
        if current_modes is not None:
            wrong = _mode_failure(fp, current_modes, current, reverse)
            if wrong is not None:
                return wrong
            current_modes = apply_modes(current_modes, _single(patch, fp), reverse=reverse)
        new = apply_file(current, fp, reverse=reverse, allow_offset=allow_offset)
        if isinstance(new, HunkFailure):
            return new
        result[fp.path] = None if removing else new
    return result


def apply_in_order(
    files: Mapping[str, bytes | None], patches: Sequence[Patch]
) -> list[dict[str, bytes | None]] | tuple[Patch, HunkFailure]:
    """The series applied cumulatively: ``files`` after each patch in turn, or the first patch that fails and why."""
    stages: list[dict[str, bytes | None]] = []
    current = dict(files)
    for patch in patches:
        result = apply_patch(current, patch)
        if isinstance(result, HunkFailure):
            return patch, result
        current = {**current, **result}
        stages.append(current)
    return stages


def _single(patch: Patch, fp: FilePatch) -> Patch:
    return Patch(patch.name, patch.path, patch.sha256, patch.fields, (fp,))


def apply_modes(modes: Mapping[str, str], patch: Patch, *, reverse: bool = False) -> dict[str, str]:
    """``modes`` (path -> git mode) after ``patch``: new files, deletions and stated mode changes."""
    out = dict(modes)
    for fp in patch.files:
        creating = fp.deleted if reverse else fp.new_file
        removing = fp.new_file if reverse else fp.deleted
        if removing:
            out.pop(fp.path, None)
            continue
        mode = fp.old_mode if reverse else fp.new_mode
        if mode is not None:
            out[fp.path] = mode
        elif creating:
            out[fp.path] = "100644"
    return out
