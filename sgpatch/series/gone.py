"""``take-upstream`` where the code a conflicting hunk changes is gone from the release (issue 27).

The line and statement tests (``absorb``) prove that the release already does what a hunk does.  These two prove
instead that what the hunk changes no longer exists, read in the release's own code:

``gone upstream``     every line the hunk changes stands inside the body of one definition (function or class)
                      of the old file (an insertion: the lines it adds are indented into the body of the
                      definition ending before it, blank lines aside) that the release has nowhere: the file
                      neither defines that qualified name nor names its own name at all, no other file of the
                      release's package names it (``named_elsewhere``: defines, imports or uses it), no
                      definition of the file holds half of its lines under another name (a rename), and (with
                      the other files' texts, ``naming``) no definition in a file naming one of its five
                      longest names holds half of its lines (moved and renamed).
``removed upstream``  the hunk only edits lines in place (as many lines added as removed, each the edit of the
                      one it replaces: same indentation, same first word), the definition that held them still
                      stands in the release, and neither the lines it edits (whitespace and line breaks aside)
                      nor a name it replaces (a dotted name by its last part) is left anywhere in the release's
                      file.

A hunk that adds a statement of its own, adds lines outside the definition's body, or works at module level is
never dropped so: it may carry behaviour the release still needs.

A method (a definition inside a class) is named by another file only as a method can be: read as an attribute
(``x.get_load``), spelled as a string, imported by name, defined or assigned in a class body, or defined at
module level with half of the method's lines (the method moved there).  A module-level function that merely shares
its name (an HTTP endpoint ``get_load`` beside the gone ``Scheduler.get_load``) does not keep the method.  This
needs the other files' texts (``naming``); without them any word counts.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from sgpatch.pyast import parse_python
from sgpatch.series.conflicts import norm, says_something
from sgpatch.series.hunkproof import changed_span
from sgpatch.series.patch import Hunk, split_lines
from sgpatch.series.upstream import Definition, Outline, innermost, outline

MIN_SHARED = 0.5  # the share of a definition's (a file's) lines another must hold to be taken for its new name
NamedElsewhere = Callable[[str], bool]  # whether another file of the release names this name (defines, uses...)
TextsNaming = Callable[[str], Mapping[str, bytes] | None]  # the release's other files naming a word; None: unknown


@runtime_checkable
class NamingAhead(Protocol):
    """A ``TextsNaming`` that may be told the words it is about to be asked, to find them together (the port's:
    the words that begin alike in one pass over the release's package)."""

    def __call__(self, name: str) -> Mapping[str, bytes] | None: ...

    def ahead(self, names: Sequence[str]) -> None: ...


_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_LONGEST = 5  # names of a gone definition whose files are searched for it under another name
_TOKEN = re.compile(rb"[A-Za-z_][A-Za-z0-9_.]*|\"[^\"\n]*\"|'[^'\n]*'")
_FIRST = re.compile(rb"^([ \t]*)([A-Za-z_][A-Za-z0-9_]*|\S)")


def _lines(data: bytes) -> Counter[bytes]:
    return Counter(ln.strip() for ln in data.splitlines() if ln.strip())


def shared(old: bytes, new: bytes) -> float:
    """The share of ``old``'s non-blank lines (as a multiset, indentation ignored) that ``new`` has."""
    a, b = _lines(old), _lines(new)
    total = sum(a.values())
    return sum((a & b).values()) / total if total else 0.0


def gone(
    hunk: Hunk,
    before: bytes,
    new: bytes,
    named_elsewhere: NamedElsewhere | None,
    naming: TextsNaming | None = None,
) -> str | None:
    """The evidence that what ``hunk`` (made on ``before``) changes is gone from the release ``new``; None
    without proof.  ``named_elsewhere``: whether the release's other files name a name (None: unknown, so no
    definition counts as gone); ``naming``: those files with their texts, to tell how a method's name is named."""
    o_before, o_new = outline(before), outline(new)
    if o_before is None or o_new is None:
        return None
    first, last = changed_span(hunk)
    if not any(ln not in hunk.new for ln in hunk.old):  # an insertion: the last line before it that is not blank
        lines = split_lines(before)
        while first > 1 and first <= len(lines) and not lines[first - 1].strip():
            first -= 1
        last = first
    scope = innermost(o_before, first, last)
    if not scope:
        return None
    if named_elsewhere is not None:
        found = _gone_definition(hunk, scope, o_before, new, o_new, named_elsewhere, naming)
        if found is not None:
            return found
    return _edited_lines_gone(hunk, scope, new, o_new)


def _gone_definition(
    hunk: Hunk,
    scope: str,
    o_before: Outline,
    new: bytes,
    o_new: Outline,
    named_elsewhere: NamedElsewhere,
    naming: TextsNaming | None,
) -> str | None:
    """``gone upstream``: the outermost definition around the hunk's change that the release defines nowhere."""
    parts = scope.split(".")
    bare_new = {q.rpartition(".")[2] for q in o_new.definitions}  # (a definition by its name is also a word)
    for k in range(1, len(parts) + 1):
        qual = ".".join(parts[:k])
        olds = o_before.definitions.get(qual, ())
        if qual in o_new.definitions or len(olds) != 1:
            continue
        old, name = olds[0], parts[k - 1]
        if name in bare_new or names_word(new, name.encode()):
            return None  # defined or named in the file
        member = k > 1  # a method: the outline nests only what a class body defines
        if member and naming is not None:
            texts = naming(name)
            if texts is None or _member_named(name, old, texts):
                return None  # named in another file as a method is (or the files are not known)
        elif named_elsewhere(name):
            return None  # named in another file
        if not _inside_body(hunk, old):
            return None
        if any(_renamed(old, d) for defs in o_new.definitions.values() for d in defs):
            return None
        if naming is not None and _held_elsewhere(old, new, naming):
            return None
        named = f"uses {name} as a method" if member and naming is not None else f"names {name}"
        held = "of it holds half of its lines or names" if naming is not None else "here holds half of its lines"
        return (
            f"gone upstream: every line it changes is inside {qual}, which the release has nowhere (no file of it "
            f"{named}, no definition {held})"
        )
    return None


def _held_elsewhere(old: Definition, new: bytes, naming: TextsNaming) -> bool:
    """Whether a definition of another file of the release holds half of ``old``'s lines, or (a class) a class of
    the release defines half of the names ``old`` defines (it moved there under another name); or that cannot be
    told.  The files looked at: those naming one of its longest names (and, for the names, the file itself)."""
    # The longest, ties by their bytes: the same names in every process (a set's order follows the hash seed).
    names = sorted({m.group(0) for m in _NAME.finditer(old.text.encode()) if len(m.group(0)) >= 6}, key=_longer)
    longest = [name.decode() for name in names[-_LONGEST:]]
    if isinstance(naming, NamingAhead):
        naming.ahead(longest)  # each is asked below
    texts: dict[str, bytes] = {"": new}
    for name in longest:
        found = naming(name)
        if found is None:
            return True
        texts.update(found)
    fields = _binds_names(old.node) if isinstance(old.node, ast.ClassDef) else set()
    mine = [(line, n) for line, n in _lines(old.text.encode()).most_common()]
    for text in texts.values():
        if fields and _fields_kept(fields, text):
            return True
        if not _half_in(mine, text) or shared(old.text.encode(), text) < MIN_SHARED:
            continue  # the whole file holds less than half of them: no definition of it does
        o = outline(text)
        if o is None or any(_renamed(old, d) for defs in o.definitions.values() for d in defs):
            return True
    return False


def _longer(name: bytes) -> tuple[int, bytes]:
    return len(name), name


def _half_in(parts: Sequence[tuple[bytes, int]], text: bytes) -> bool:
    """Whether ``text`` holds at least half of ``parts`` (each with its weight): looked for until the answer is
    known (the heaviest first, when ``parts`` come so), not through every one of them."""
    total = sum(n for _, n in parts)
    found = missing = 0
    for part, n in parts:
        if part in text:
            found += n
            if 2 * found >= total:
                return True
        else:
            missing += n
            if 2 * missing > total:
                return False
    return 2 * found >= total


def _binds_names(cls: ast.ClassDef) -> set[str]:
    """The names a class body defines or assigns (its fields and methods)."""
    out: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        out.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return out


def _fields_kept(fields: set[str], text: bytes) -> bool:
    """Whether a class of ``text`` defines half of ``fields`` (the gone class renamed and rewritten), or ``text`` is
    not Python (and says half of them)."""
    if not _half_in([(f.encode(), 1) for f in fields], text):
        return False  # the text does not even say half of them: nothing to parse
    o = outline(text)
    if o is None:
        return True
    classes = [d.node for defs in o.definitions.values() for d in defs if isinstance(d.node, ast.ClassDef)]
    return len(fields) >= 2 and any(2 * len(fields & _binds_names(c)) >= len(fields) for c in classes)


def _member_named(name: str, old: Definition, texts: Mapping[str, bytes]) -> bool:
    """Whether a file of ``texts`` names ``name`` as a method may be named (see the module's text); a file that
    does not parse names it."""
    maybe = re.compile(
        rb"\.[ \t]*%s\b|[\"']%s[\"']|\bimport\b[^\n(]*\b%s\b|\bimport[ \t]*\([^)]*\b%s\b"
        rb"|^[ \t]*(?:async[ \t]+)?def[ \t]+%s\b|^[ \t]+%s[ \t]*[:=]" % ((re.escape(name.encode()),) * 6),
        re.MULTILINE,
    )
    for text in texts.values():
        if not maybe.search(text):
            continue  # none of the ways (an attribute, a string, an import, a def, a class body's name): no parse
        try:
            tree = parse_python(text)
        except (SyntaxError, ValueError, RecursionError):
            return True
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == name) or (
                isinstance(node, ast.Constant) and node.value == name
            ):
                return True
            if isinstance(node, ast.ImportFrom | ast.Import) and any(
                a.name.rpartition(".")[2] == name for a in node.names
            ):
                return True
            if isinstance(node, ast.ClassDef) and any(_binds(s, name) for s in node.body):
                return True
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                lines = text.splitlines(keepends=True)
                body = b"".join(
                    lines[min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1 : node.end_lineno]
                )
                if shared(old.text.encode(), body) >= MIN_SHARED:
                    return True  # the method moved here
    return False


def _binds(node: ast.stmt, name: str) -> bool:
    """Whether a statement of a class body defines or assigns ``name``."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    return any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t))


def _inside_body(hunk: Hunk, d: Definition) -> bool:
    """Whether every line the hunk adds is indented deeper than ``d``'s own line (inside its body)."""
    lines = d.text.encode().splitlines()
    head = next((ln for ln in lines if ln.lstrip().startswith((b"def ", b"async ", b"class "))), lines[0])
    depth = len(head) - len(head.lstrip())
    return all(not text.strip() or len(text) - len(text.lstrip()) > depth for _, text in hunk.added)


def _renamed(old: Definition, d: Definition) -> bool:
    return d.kind == old.kind and shared(old.text.encode(), d.text.encode()) >= MIN_SHARED


def _edited_lines_gone(hunk: Hunk, scope: str, new: bytes, o_new: Outline) -> str | None:
    """``removed upstream``: the hunk edits lines in place, and what it edits is gone from the release's file."""
    if len(o_new.definitions.get(scope, ())) != 1:
        return None  # the definition itself is gone or doubled: not this proof
    kept = Counter(hunk.new)
    removed = []
    for line in hunk.old:
        if kept[line]:
            kept[line] -= 1
        elif line.strip():
            removed.append(line)
    added = [text for _, text in hunk.added if text.strip()]
    if not removed or len(removed) != len(added):
        return None
    said = [n for n in (norm(ln) for ln in split_lines(new)) if n]
    flat = b"".join(said)
    replaced: set[bytes] = set()
    for old_line, new_line in zip(removed, added, strict=True):
        a, b = _FIRST.match(old_line), _FIRST.match(new_line)
        if a is None or b is None or a.groups() != b.groups() or norm(old_line) == norm(new_line):
            return None  # not the same line edited: a statement replaced, or one added
        if not says_something(norm(old_line)) or norm(old_line) in flat or norm(new_line) in flat:
            return None
        gone_tokens = {m.group(0) for m in _TOKEN.finditer(old_line)} - {m.group(0) for m in _TOKEN.finditer(new_line)}
        if not gone_tokens or any(names_word(new, _last(t)) for t in gone_tokens):
            return None  # it edits nothing but spelling, or what it replaces is still named in the file
        replaced |= gone_tokens
    names = ", ".join(sorted({_last(t).decode(errors="replace") for t in replaced}))
    return (
        f"removed upstream: the {len(removed)} line(s) it edits in {scope} are gone from the release's file, "
        f"which names {names} nowhere"
    )


def _last(token: bytes) -> bytes:
    """A dotted name's last part (``tl.core.MAX`` -> ``MAX``: the release may import it another way); a string
    literal as it is."""
    return token if token[:1] in (b'"', b"'") else token.rpartition(b".")[2]


WORD_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def names_word(data: bytes, needle: bytes) -> bool:
    """Whether ``data`` has ``needle`` as a word (not next to a letter, digit or ``_``), found by a byte search and a
    look at the byte on either side of each hit: a regular expression tries every position (on a 230 kB file
    2.6-4 ms, against 0.03-0.09 ms; ``tests/test_words.py`` compares the two)."""
    at = data.find(needle)
    while at >= 0:
        if stands_alone(data, at, at + len(needle)):
            return True
        at = data.find(needle, at + 1)
    return False


def stands_alone(data: bytes, at: int, end: int) -> bool:
    """Whether ``data[at:end]`` stands as a word: no letter, digit or ``_`` just before or just after it."""
    return (at == 0 or data[at - 1] not in WORD_BYTES) and (end >= len(data) or data[end] not in WORD_BYTES)
