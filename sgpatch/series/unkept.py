"""``take-upstream`` where a hunk only keeps up to date attributes the release removed from their class (issue 27).

A patch that keeps fields of a class consistent (``self.lengths = self.lengths[:n]`` when a batch is filtered)
has nothing left to do once upstream removed those fields: carried, its lines would read attributes nothing sets.
The proof, read in the old base and in the release's own code:

- the hunk only adds lines (it removes none), inside a method of a class ``C``; its added lines parse alone, as
  whole statements;
- every statement it adds writes such an attribute (``x.A = ...``, ``x.A[i] = ...``), calls a method of one it
  also writes (``x.A.record(...)``), or sets a local name of its own that the function had nowhere before and no
  other hunk of the file names; an ``if`` around them only tests (no call but ``len``, ``isinstance``, ``hasattr``,
  ``getattr``), and nothing else stands there (no loop, ``return``, ``raise``, ``with`` or ``try``);
- each such attribute ``A`` is named in the old base's ``C``, and in no file of the release that names the word:
  is read or written as an attribute (``.A``), is spelled as a string (``getattr(x, "A")``; a dict's key or a
  subscript, ``{"A": v}`` or ``d["A"]``, is a dict entry and does not count), is passed as a keyword to
  ``C(...)``, or is declared in the body of ``C`` or of a class deriving from it.

Any doubt (a file that does not parse, a package too large to read, a statement of another kind) is no proof.
A carried hunk of the same patch that names such an attribute keeps the drop from settling it (``needed``: every
attribute here is one the hunk writes, which is what ``needed`` reads as the names a hunk defines).
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

from sgpatch.pyast import parse_python
from sgpatch.series.gone import TextsNaming, names_word
from sgpatch.series.hunkproof import changed_span
from sgpatch.series.patch import Hunk
from sgpatch.series.upstream import Definition, Outline, outline

PREFIX = "removed upstream: it only keeps"  # how the evidence starts (``needed`` reads it)
_TESTS = frozenset({"len", "isinstance", "hasattr", "getattr"})


def unkept(hunk: Hunk, before: bytes, new: bytes, others: bytes, naming: TextsNaming | None) -> str | None:
    """The evidence that ``hunk`` (made on ``before``) only keeps attributes up to date that the release ``new``
    (and its other files: ``naming``) no longer has; None without proof.  ``others``: the lines the file's other
    hunks add."""
    kept = Counter(hunk.new)
    for line in hunk.old:
        if kept[line]:
            kept[line] -= 1
        elif line.strip():
            return None  # it removes a line: it changes what stands, not only keeps fields
    o_before = outline(before)
    if naming is None or o_before is None:
        return None
    first, last = changed_span(hunk)
    parts = _scope(o_before, first, last)
    if parts is None:
        return None
    cls, function = parts
    statements = _statements(hunk)
    if not statements:
        return None
    found = _Found()
    if not all(found.statement(s) for s in statements) or not found.attributes or found.called - found.attributes:
        return None  # another statement, nothing written, or a method called on an attribute it does not write
    for name in found.locals:
        if names_word(function.text.encode(), name.encode()) or names_word(others, name.encode()):
            return None  # a local the function had, or another hunk uses
    bare = cls.rpartition(".")[2]
    old_class = o_before.definitions[cls][0].text.encode()
    for attr in sorted(found.attributes):
        if not names_word(old_class, attr.encode()):
            return None  # not a field the old class had: the patch's own
        if not _absent(attr, bare, {"": new}):
            return None  # the release's own file still has it (asked first: no other file read)
        texts = naming(attr)
        if texts is None or not _absent(attr, bare, texts):
            return None
    names = ", ".join(sorted(found.attributes))
    return (
        f"{PREFIX} {bare}'s {names} up to date, which the old base has and the release no longer has (no code of "
        f"it reads or writes {'it' if len(found.attributes) == 1 else 'them'})"
    )


def _scope(o: Outline, first: int, last: int) -> tuple[str, Definition] | None:
    """(the qualified name of the class, the method's definition) around lines ``first..last``."""
    best: Definition | None = None
    for defs in o.definitions.values():
        for d in defs:
            if d.kind == "def" and d.start < first and last <= d.end and (best is None or d.start >= best.start):
                best = d
    if best is None or "." not in best.qualname:
        return None
    cls = best.qualname.rpartition(".")[0]
    if len(o.definitions.get(cls, ())) != 1 or o.definitions[cls][0].kind != "class":
        return None
    return cls, best


def _statements(hunk: Hunk) -> list[ast.stmt] | None:
    """The statements of each run of added lines, each run parsed alone (dedented); None if one does not parse."""
    out: list[ast.stmt] = []
    for run in _runs(hunk):
        try:
            tree = parse_python(textwrap.dedent(b"".join(run).decode()).encode())
        except (SyntaxError, ValueError, RecursionError, UnicodeDecodeError):
            return None
        out.extend(tree.body)
    return out


def _runs(hunk: Hunk) -> Iterator[list[bytes]]:
    run: list[bytes] = []
    previous = None
    for number, text in hunk.added:
        if previous is not None and number != previous + 1 and run:
            yield run
            run = []
        run.append(text)
        previous = number
    if run:
        yield run


class _Found:
    """What the added statements write: attributes, and local names of their own."""

    def __init__(self) -> None:
        self.attributes: set[str] = set()
        self.locals: set[str] = set()
        self.called: set[str] = set()

    def statement(self, node: ast.stmt) -> bool:
        if isinstance(node, ast.Pass):
            return True
        if isinstance(node, ast.If):
            return self._test(node.test) and all(self.statement(s) for s in (*node.body, *node.orelse))
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return all(self._target(t) for t in targets)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Attribute):
                return False
            self.called.add(func.value.attr)  # ``x.A.method(...)``: a method of an attribute it also writes
            return True
        return False

    def _target(self, node: ast.expr) -> bool:
        while isinstance(node, ast.Subscript | ast.Starred):
            node = node.value
        if isinstance(node, ast.Tuple | ast.List):
            return all(self._target(e) for e in node.elts)
        if isinstance(node, ast.Attribute):
            self.attributes.add(node.attr)
            return True
        if isinstance(node, ast.Name) and node.id != "self":
            self.locals.add(node.id)
            return True
        return False

    @staticmethod
    def _test(node: ast.expr) -> bool:
        for part in ast.walk(node):
            if isinstance(part, ast.NamedExpr | ast.Await | ast.Yield | ast.YieldFrom | ast.Lambda):
                return False
            if isinstance(part, ast.Call) and not (isinstance(part.func, ast.Name) and part.func.id in _TESTS):
                return False
        return True


def _absent(attr: str, cls: str, texts: Mapping[str, bytes]) -> bool:
    """Whether no file of ``texts`` reads or writes ``attr`` as an attribute, spells it as a string (but as a key of
    a dict or a subscript: a dict's entry, not an attribute), passes it to ``cls(...)`` or declares it in ``cls`` or
    a class deriving from it."""
    spelled = re.escape(attr.encode())
    if any(re.search(rb"\.[ \t]*%s\b" % spelled, text) for text in texts.values()):
        return False  # ``x.A``: read or written as an attribute (no parse needed to tell)
    # A keyword to ``cls(...)`` or a declaration in it (or a subclass) needs the class named; a string, to stand
    # other than as a dict's key (``"A":``) or a subscript (``["A"]``).  A file with neither is not parsed.
    named = re.compile(rb"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(cls.encode()))
    string = re.compile(rb"(?<!\[)[\"']%s[\"'](?![ \t]*[:\]])" % spelled)
    for text in texts.values():
        if not named.search(text) and not string.search(text):
            continue
        try:
            tree = parse_python(text)
        except (SyntaxError, ValueError, RecursionError):
            return False
        nodes = list(ast.walk(tree))
        keys = {id(k) for n in nodes if isinstance(n, ast.Dict) for k in n.keys if k is not None}
        keys |= {id(n.slice) for n in nodes if isinstance(n, ast.Subscript)}
        if any(_uses(node, attr, cls) and id(node) not in keys for node in nodes):
            return False
    return True


def _uses(node: ast.AST, attr: str, cls: str) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == attr
    if isinstance(node, ast.Constant):
        return node.value == attr
    if isinstance(node, ast.Call):
        return _last(node.func) == cls and any(k.arg == attr for k in node.keywords)
    if isinstance(node, ast.ClassDef) and (node.name == cls or cls in map(_last, node.bases)):
        return any(_declares(s, attr) for s in node.body)
    return False


def _declares(node: ast.stmt, attr: str) -> bool:
    targets: Sequence[ast.expr] = ()
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name == attr
    return any(isinstance(n, ast.Name) and n.id == attr for t in targets for n in ast.walk(t))


def _last(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""
