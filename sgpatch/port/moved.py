"""Follow moved code (issue 27): the hunks of a file the release lacks, carried to where their definitions went.

Each hunk that changes one function or class of the old file is followed by that definition's name: the release
file that defines the same qualified name (``Class.method``), else the one file among those defining the bare
name that shares most of the old file's definition names (a module renamed, or split into a package).  There
the hunk is carried by a three-way merge of the definition alone: the release's definition gains the change
from the old definition to the old definition with the hunk.  A hunk at module level, one whose definition is
found nowhere (or in several files alike), or one whose merge conflicts is named, not carried; the file's
hunks are carried only when every one of them is (else the reject file keeps them all and names the files).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sgpatch.port.words import files_naming, files_naming_each
from sgpatch.series.engine import HunkFailure, apply_file
from sgpatch.series.gone import names_word
from sgpatch.series.hunkproof import changed_span
from sgpatch.series.hunks import only
from sgpatch.series.patch import FilePatch, Hunk, split_lines
from sgpatch.series.upstream import Outline, innermost, outline

Merge = Callable[[bytes, bytes, bytes], tuple[bytes, int]]
Reader = Callable[[Sequence[str]], Mapping[str, bytes | None]]
MAX_FILES = 6000  # Python files of the release scanned for a definition's name


@dataclass(frozen=True, slots=True)
class Followed:
    """Where the hunks of a missing file went."""

    texts: dict[str, bytes] = field(default_factory=dict)  # release files with the hunks carried in (all, or none)
    where: dict[int, str] = field(default_factory=dict)  # hunk index -> the file its definition stands in now
    why: dict[int, str] = field(default_factory=dict)  # hunk index -> what happened to it, in words

    @property
    def carried(self) -> bool:
        return bool(self.texts)


class KeptFiles:
    """A release's files read once for the whole port (each missing file scans the same package)."""

    def __init__(self, names: Callable[[str], list[str]], read: Reader) -> None:
        self._names, self._read = names, read
        self._listed: dict[str, list[str]] = {}
        self._files: dict[str, bytes | None] = {}
        self._python: dict[str, list[str]] = {}
        self._at: dict[str, dict[str, int]] = {}  # package -> each Python file's place in ``python_files``
        self._joined: dict[str, tuple[bytes, list[int]]] = {}  # package -> its Python files' texts, one after another
        self._hits: dict[tuple[str, bytes], list[int]] = {}  # (package, word) -> its files (by index) that name it

    def names(self, top: str) -> list[str]:
        if top not in self._listed:
            self._listed[top] = self._names(top)
        return self._listed[top]

    def read(self, paths: Sequence[str]) -> dict[str, bytes | None]:
        missing = [p for p in paths if p not in self._files]
        if missing:
            self._files.update(self._read(missing))
        return {p: self._files[p] for p in paths}

    def python_files(self, path: str) -> list[str]:
        """The Python files of the release's package ``path`` stands in (the folder of its first two parts)."""
        top = package(path)
        if top not in self._python:
            listed = self.names(path.split("/", 1)[0])
            self._python[top] = [n for n in listed if n.endswith(".py") and n.startswith(f"{top}/" if top else "")]
        return self._python[top]

    def _places(self, path: str) -> dict[str, int]:
        """Where each of ``python_files(path)`` stands in it."""
        top = package(path)
        if top not in self._at:
            self._at[top] = {p: k for k, p in enumerate(self.python_files(path))}
        return self._at[top]

    def names_elsewhere(self, name: str, path: str, current: Mapping[str, bytes | None], *, first: bool = True) -> bool:
        """Whether a Python file of the release's package (``current``'s text where it has one), other than
        ``path``, names ``name`` (defines, imports or uses it); True when the package is too large to read."""
        return bool(self.naming(name, path, current, first=first) - {path})

    def naming(
        self, name: str, path: str, current: Mapping[str, bytes | None], *, first: bool = False
    ) -> frozenset[str]:
        """The Python files of the package ``path`` stands in that name ``name`` (``current``'s text where it has
        one; ``first``: the first found besides ``path`` only); the package itself (a stand-in) when it is too
        large to read."""
        py = self.python_files(path)
        if len(py) > MAX_FILES:
            return frozenset({package(path) or "."})
        needle = name.encode()
        # The files that name it, in the package's order: the release's (one scan of the package per word), or
        # ``current``'s text where it has one.
        hits = {k for k in self.release_hits(path, needle) if py[k] not in current}
        at = self._places(path)
        hits.update(at[p] for p in current if p in at and _names(current[p], needle))
        found = set()
        for k in sorted(hits):
            found.add(py[k])
            if first and py[k] != path:
                break
        return frozenset(found)

    def release_hits(self, path: str, needle: bytes) -> list[int]:
        """The indices, in ``python_files(path)``, of the release's files whose text names ``needle`` as a word
        (not next to a letter, digit or ``_``); kept for the port (the release's texts do not change)."""
        top = package(path)
        if (top, needle) not in self._hits:
            self._hits[top, needle] = self._scan_words(path, needle)
        return self._hits[top, needle]

    def _scan_words(self, path: str, needle: bytes) -> list[int]:
        if not needle or _SEPARATOR in needle:  # a hit could not be told from one across two files
            py = self.python_files(path)
            texts = self.read(py)
            return [k for k, p in enumerate(py) if _names(texts[p], needle)]
        return files_naming(*self.joined(path), needle)

    def ask_words(self, path: str, needles: Iterable[bytes]) -> None:
        """``release_hits`` of each of ``needles``, to be asked next, found ahead: those that begin alike in one
        pass (``words.files_naming_each``)."""
        top = package(path)
        wanted = [n for n in needles if (top, n) not in self._hits and n and _SEPARATOR not in n]
        if len(wanted) > 1 and len(self.python_files(path)) <= MAX_FILES:
            for needle, hits in files_naming_each(*self.joined(path), wanted).items():
                self._hits[top, needle] = hits

    def joined(self, path: str) -> tuple[bytes, list[int]]:
        """The release's texts of ``python_files(path)``, joined by a line break (an absent file: nothing), and
        where each begins: one text to search for a word, at the speed of a byte search."""
        top = package(path)
        if top not in self._joined:
            py = self.python_files(path)
            texts = self.read(py)
            starts, at = [], 0
            for p in py:
                starts.append(at)
                at += len(texts[p] or b"") + len(_SEPARATOR)
            self._joined[top] = (_SEPARATOR.join(texts[p] or b"" for p in py), starts)
        return self._joined[top]


def _names(data: bytes | None, needle: bytes) -> bool:
    return data is not None and names_word(data, needle)


_SEPARATOR = b"\n"  # between two files' texts in ``KeptFiles.joined``: no word goes across it


def package(path: str) -> str:
    """The folder of a release file's package: its first two parts (``python/sglang``), "" at the top."""
    return "/".join(path.split("/")[:-1][:2])


def _definition_names(o: Outline) -> set[str]:
    return {q.rpartition(".")[2] for q in o.definitions}


# What ``_defined`` reads: a ``def`` or ``class`` statement's name, the keyword first on its line after blanks
# (spaces, tabs) and an optional ``async`` and blanks, then blanks and the name.  A regular expression anchored at
# each line's start (the test's reference) tries every position of the package's 30 MB; each keyword alone is a
# literal the engine finds by its prefix, and its hits are checked for what stands before them: 4x faster.
_KEYWORDS = tuple(re.compile(kw + rb"[ \t]++([A-Za-z_][A-Za-z0-9_]*+)") for kw in (b"def", b"class"))


@functools.lru_cache(maxsize=8192)
def _defined(data: bytes) -> frozenset[str]:
    """The names ``data`` defines with ``def`` or ``class`` (at any depth), read as text."""
    found = set()
    for keyword in _KEYWORDS:
        for m in keyword.finditer(data):
            head = data[data.rfind(b"\n", 0, m.start()) + 1 : m.start()].lstrip(b" \t")
            if not head or (head[:5] == b"async" and len(head) > 5 and not head[5:].strip(b" \t")):
                found.add(m.group(1).decode())
    return frozenset(found)


def read_package(release: KeptFiles, path: str, current: Mapping[str, bytes | None]) -> None:
    """Read the Python files of ``path``'s package and the names each defines, once: before workers fork, so that
    each shares them instead of reading and scanning the package again (the answers are the same)."""
    for data in release.read([p for p in release.python_files(path) if p not in current]).values():
        if data is not None:
            _defined(data)
    if len(release.python_files(path)) <= MAX_FILES:  # what ``naming`` searches (a larger package it does not)
        release.joined(path)


def _scan(names: set[str], paths: Sequence[str], read: Reader) -> dict[str, tuple[bytes, set[str]]]:
    """The files among ``paths`` that define one of ``names``: their text and which names they define."""
    if not names:
        return {}
    found: dict[str, tuple[bytes, set[str]]] = {}
    for path, data in read(paths).items():
        if data is None:
            continue
        hits = set(_defined(data) & names)
        if hits:
            found[path] = (data, hits)
    return found


def _indent(line: bytes) -> bytes:
    return line[: len(line) - len(line.lstrip(b" \t"))]


def follow(
    fp: FilePatch,
    before: bytes,
    names: Sequence[str],
    read: Reader,
    current: Mapping[str, bytes | None],
    merge: Merge,
    *,
    busy: frozenset[str] = frozenset(),
) -> Followed:
    """Carry ``fp`` (a file the release lacks; ``before``: its old text) to the files of the release (``names``,
    read by ``read``; ``current``: the files as the series so far left them).  ``busy``: files the patch itself
    changes (never carried into: its own section decides them)."""
    o_before = outline(before)
    if o_before is None or not fp.path.endswith(".py"):
        return Followed()
    quals: dict[int, str] = {}
    why: dict[int, str] = {}
    imports: dict[int, list[bytes]] = {}
    for hunk in fp.hunks:
        first, last = changed_span(hunk)
        qual = innermost(o_before, first, last)
        if qual and len(o_before.definitions.get(qual, ())) == 1:
            quals[hunk.index] = qual
        elif (lines := _imports_only(hunk)) is not None:
            imports[hunk.index] = lines
        else:
            why[hunk.index] = "at module level: no definition to follow"
    found, share = _candidates(fp.path, quals, o_before, names, read, current)
    where: dict[int, str] = {}
    for index, qual in quals.items():
        target, note = _target(qual, found, share)
        if target is None:
            why[index] = note
        else:
            where[index] = target
    texts: dict[str, bytes] = {}
    carried = 0
    for hunk in fp.hunks:
        if hunk.index not in where:
            continue
        target = where[hunk.index]
        if target in busy:
            why[hunk.index] = f"{quals[hunk.index]} is in {target}, which the patch also changes"
            continue
        text = texts.get(target, found[target][0])
        merged = _carry_one(fp, hunk.index, quals[hunk.index], o_before, before, text, merge)
        if merged is None:
            why[hunk.index] = f"{quals[hunk.index]} is in {target}, but the three-way merge there conflicts"
            continue
        texts[target] = merged
        carried += 1
        why[hunk.index] = f"carried to {target}: {quals[hunk.index]} merged three-way against its old definition"
    targets = set(where.values())
    for index, lines in imports.items():
        if len(targets) != 1 or carried != len(quals):
            why[index] = "imports only: carried with the file's other hunks, which are not all carried"
            continue
        (target,) = targets
        text = texts.get(target, found[target][0] if target in found else b"")
        with_them = _add_imports(text, lines)
        if with_them is None:
            why[index] = f"imports only, but {target} has no import block to put them in"
            continue
        texts[target] = with_them
        carried += 1
        where[index] = target
        why[index] = f"carried to {target}: the imports it adds, beside the file's own"
    if carried != len(fp.hunks):
        return Followed({}, where, why)
    return Followed(texts, where, why)


def _candidates(
    path: str,
    quals: Mapping[int, str],
    o_before: Outline,
    names: Sequence[str],
    read: Reader,
    current: Mapping[str, bytes | None],
) -> tuple[dict[str, tuple[bytes, set[str]]], dict[str, int]]:
    """The files of the package ``path`` stood in (two levels at most) that define one of the names of ``quals``
    or of the old file (``o_before``): their text and the names they define; and how many of the old file's
    definition names each shares."""
    wanted = {q.rpartition(".")[2] for q in quals.values()} | _definition_names(o_before)
    top = "/".join(path.split("/")[:-1][:2])
    py = [n for n in names if n.endswith(".py") and n.startswith(f"{top}/" if top else "") and n != path]
    py = py[:MAX_FILES]
    found = _scan(wanted, [p for p in py if p in current], lambda paths: {p: current[p] for p in paths})
    found.update(_scan(wanted, [p for p in py if p not in current], read))
    mine = _definition_names(o_before)
    return found, {p: len(hits & mine) for p, (_, hits) in found.items()}


def moved_out(
    fp: FilePatch,
    indexes: Sequence[int],
    before: bytes,
    new: bytes,
    names: Sequence[str],
    read: Reader,
    current: Mapping[str, bytes | None],
) -> dict[int, str]:
    """For the hunks ``indexes`` of ``fp`` (a file the release still has; ``before``: its old text, ``new``: the
    release's), whose definition the release's file no longer has: where it stands now, in words (hunk index ->
    note).  Named, not carried: the file's own conflicts are the person's."""
    o_before, o_new = outline(before), outline(new)
    if o_before is None or o_new is None or not fp.path.endswith(".py"):
        return {}
    quals: dict[int, str] = {}
    for hunk in fp.hunks:
        if hunk.index not in indexes:
            continue
        qual = innermost(o_before, *changed_span(hunk))
        if qual and len(o_before.definitions.get(qual, ())) == 1 and qual not in o_new.definitions:
            quals[hunk.index] = qual
    if not quals:
        return {}
    found, share = _candidates(fp.path, quals, o_before, names, read, current)
    notes: dict[int, str] = {}
    for index, qual in quals.items():
        target, note = _target(qual, found, share)
        notes[index] = f"{qual} is no longer in this file: " + (f"it is in {target}" if target else note)
    return notes


def _target(qual: str, found: Mapping[str, tuple[bytes, set[str]]], share: Mapping[str, int]) -> tuple[str | None, str]:
    """The one release file where ``qual`` now stands, or None and why.  Parsed only: the files defining its
    outermost name too (the same qualified name), else those sharing most of the old file's names."""
    outer, bare = qual.partition(".")[0], qual.rpartition(".")[2]
    exact = [p for p, (data, hits) in found.items() if {outer, bare} <= hits and _defines(data, qual, exact=True)]
    if len(exact) == 1:
        return exact[0], ""
    if not exact and "." in qual and bare.startswith("__") and bare.endswith("__"):
        # A special method is every class's: its name alone says nothing of where its class went.
        if not any(outer in hits for _, hits in found.values()):
            return None, f"{outer} is defined nowhere in the release"
        return None, f"{qual} is defined nowhere in the release"
    pool = exact or [p for p, (_, hits) in found.items() if bare in hits]
    if not pool:
        return None, f"{qual} is defined nowhere in the release"
    best = max(share.get(p, 0) for p in pool)
    top = [p for p in pool if share.get(p, 0) == best]
    if not exact:
        top = [p for p in top if _defines(found[p][0], qual, exact=False)]
    if len(top) == 1 and best >= 2:
        return top[0], ""
    if not top:
        return None, f"{qual} is defined nowhere in the release"
    return None, f"{qual} may be in {', '.join(sorted(top)[:4])}"


_IMPORT = re.compile(rb"^(?:import|from)[ \t]+[A-Za-z_][\w.]*(?:[ \t]+import[ \t]+[\w, \t]+)?[ \t]*(?:#.*)?\r?\n?$")


def _imports_only(hunk: Hunk) -> list[bytes] | None:
    """The import lines a module-level hunk adds, when it changes only whole one-line imports; else None."""
    added = [ln for _, ln in hunk.added if ln.strip()]
    kept = set(hunk.new)
    removed = [ln for ln in hunk.old if ln not in kept and ln.strip()]
    if not added or not all(_IMPORT.match(ln) for ln in [*added, *removed]):
        return None
    return added


def _add_imports(text: bytes, lines: Sequence[bytes]) -> bytes | None:
    """``text`` with the import ``lines`` it lacks after its last module-level import; None if it has none."""
    tree = outline(text)
    lines_of = split_lines(text)
    if tree is None:
        return None
    present = {ln.strip() for ln in lines_of}
    wanted = [ln if ln.endswith(b"\n") else ln + b"\n" for ln in lines if ln.strip() not in present]
    if not wanted:
        return text
    last = max((n for n, ln in enumerate(lines_of, start=1) if _IMPORT.match(ln)), default=None)
    if last is None:
        return None
    return b"".join([*lines_of[:last], *wanted, *lines_of[last:]])


def _defines(data: bytes, qual: str, *, exact: bool) -> bool:
    """Whether ``data`` defines ``qual`` once (``exact``), or its bare name once in any scope."""
    o = outline(data)
    if o is None:
        return False
    if exact:
        return len(o.definitions.get(qual, ())) == 1
    bare = qual.rpartition(".")[2]
    return sum(len(defs) for q, defs in o.definitions.items() if q.rpartition(".")[2] == bare) == 1


def _carry_one(
    fp: FilePatch, index: int, qual: str, o_before: Outline, before: bytes, text: bytes, merge: Merge
) -> bytes | None:
    """``text`` with hunk ``index`` (inside ``qual``) merged into its definition there; None if it conflicts."""
    hunk = fp.hunks[index - 1]
    after = apply_file(before, only(fp, (hunk,)))
    o_text = outline(text)
    if isinstance(after, HunkFailure) or o_text is None:
        return None
    old = o_before.definitions[qual][0]
    bare = qual.rpartition(".")[2]
    theirs = o_text.definitions.get(qual) or tuple(
        d for q, defs in o_text.definitions.items() if q.rpartition(".")[2] == bare for d in defs
    )
    if len(theirs) != 1:
        return None
    new = theirs[0]
    b_lines, a_lines, t_lines = split_lines(before), split_lines(after), split_lines(text)
    delta = len(a_lines) - len(b_lines)
    old_def = b"".join(b_lines[old.start - 1 : old.end])
    patched = b"".join(a_lines[old.start - 1 : old.end + delta])
    new_def = b"".join(t_lines[new.start - 1 : new.end])
    if _indent(b_lines[old.start - 1]) != _indent(t_lines[new.start - 1]):
        return None
    merged, conflicts = merge(new_def, old_def, patched)
    if conflicts:
        return None
    return b"".join([*t_lines[: new.start - 1], merged, *t_lines[new.end :]])
