"""Did upstream already make a patch's change?  Pure functions over file contents (SPEC §9).

A patch is judged file by file against the new release with three tests, the
strongest first: its hunks reverse-apply exactly (offsets allowed: the base
moved); every definition it changes is equal, as a Python AST, to the new
release's definition of the same name in the same scope (comments and
formatting ignored); every run of lines it adds stands verbatim in the new
file, inside the definition it was added to.  A patch whose added definitions
all exist upstream with other bodies is ``superseded``: applying it would put
a second ``def`` of the same name in the scope.
"""

from __future__ import annotations

import ast
import functools
from codecs import BOM_UTF8
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from sgpatch.pyast import dump_of, parse_python, per_memo
from sgpatch.pyast.reparse import declares_encoding
from sgpatch.series.engine import HunkFailure, apply_patch
from sgpatch.series.patch import FilePatch, Patch, split_lines

Files = Mapping[str, bytes | None]

# The tests, in the order they are tried.
REVERSE_APPLY = "reverse-apply"
AST_EQUAL = "ast-equal"
VERBATIM = "verbatim"


@dataclass(frozen=True)
class Definition:
    """A function or class and where it stands in one file."""

    qualname: str  # e.g. "KimiK25ForConditionalGeneration.get_embed_and_head"
    kind: str  # "def" or "class"
    start: int  # first line (decorators included), 1-based
    end: int  # last line, inclusive
    text: str  # the exact source lines
    node: ast.AST = field(compare=False, repr=False)
    source: bytes | None = field(default=None, compare=False, repr=False)  # its lines' bytes (``pyast.dump_of``)

    @functools.cached_property
    def dump(self) -> str:
        """``ast.dump``: what the code does, without comments, formatting or line numbers (made when asked)."""
        return dump_of(self.node, self.source)

    @property
    def scope(self) -> str:
        outer, _, _ = self.qualname.rpartition(".")
        return f"class {outer}" if outer else "module"

    @property
    def name(self) -> str:
        return self.qualname.rpartition(".")[2]


class Statements(Mapping[str, tuple[str, ...]]):
    """Per scope qualname ("" = module): the sorted ``ast.dump`` of its non-def statements, made when asked."""

    def __init__(self, nodes: dict[str, list[tuple[str, ast.stmt]]], lines: Sequence[bytes] | None = None) -> None:
        self._nodes = nodes
        self._lines = lines  # the file's, where its bytes alone say its text (``pyast.dump_of``)
        self._dumps: dict[str, tuple[str, ...]] = {}
        self.texts = {scope: tuple(sorted(t for t, _ in found)) for scope, found in nodes.items()}

    def __getitem__(self, scope: str) -> tuple[str, ...]:
        if scope not in self._dumps:
            self._dumps[scope] = tuple(sorted(dump_of(n, self._source(n)) for _, n in self._nodes[scope]))
        return self._dumps[scope]

    def _source(self, node: ast.stmt) -> bytes | None:
        return node_bytes(self._lines, node) if self._lines is not None else None

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


def node_bytes(lines: Sequence[bytes], node: ast.stmt, first: int = 1) -> bytes | None:
    """The exact bytes of ``node``, from its first token to its last (``a; b``: each its own), out of ``lines``: the
    text's lines from line ``first`` on.  None where the node's positions are not all known, or not in ``lines``."""
    if node.end_lineno is None or node.end_col_offset is None:
        return None
    top, bottom = node.lineno - first, node.end_lineno - first
    if top < 0 or bottom >= len(lines):
        return None
    head, tail = lines[top], lines[bottom]
    if top == bottom:
        return head[node.col_offset : node.end_col_offset]
    return b"".join([head[node.col_offset :], *lines[top + 1 : bottom], tail[: node.end_col_offset]])


@dataclass(frozen=True, slots=True)
class Outline:
    """A parsed Python file: its definitions and, per scope, its other statements."""

    definitions: dict[str, tuple[Definition, ...]]
    statements: Statements


def outline(source: bytes | None) -> Outline | None:
    """The definitions and other statements of ``source``; None if it is absent or not Python."""
    if source is None:
        return None
    return _outline(source)


@per_memo(maxsize=16)
def _outline(source: bytes) -> Outline | None:
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    lines = split_lines(source)
    # Its bytes alone say its text, and its columns count them: dumps may be kept by the bytes of what they dump.
    plain = not declares_encoding(source) and not source.startswith(BOM_UTF8)
    defs: dict[str, list[Definition]] = {}
    stmts: dict[str, list[tuple[str, ast.stmt]]] = {}
    pending: list[tuple[str, Sequence[ast.stmt]]] = [("", tree.body)]
    while pending:
        scope, body = pending.pop()
        stmts.setdefault(scope, [])
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qual = f"{scope}.{node.name}" if scope else node.name
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                end = node.end_lineno or node.lineno
                kind = "class" if isinstance(node, ast.ClassDef) else "def"
                chunk = b"".join(lines[start - 1 : end])
                text = chunk.decode("utf-8", "replace")
                definition = Definition(qual, kind, start, end, text, node, chunk if plain else None)
                defs.setdefault(qual, []).append(definition)
                if isinstance(node, ast.ClassDef):
                    pending.append((qual, node.body))
            else:
                text = b"".join(lines[node.lineno - 1 : node.end_lineno or node.lineno]).decode("utf-8", "replace")
                stmts[scope].append((text, node))
    statements = Statements(stmts, lines if plain else None)
    return Outline(definitions={k: tuple(v) for k, v in defs.items()}, statements=statements)


def group_names(qualnames: Sequence[str]) -> str:
    """``A.x, A.y, f`` written as ``A.{x, y}, f``."""
    groups: dict[str, list[str]] = {}
    for q in qualnames:
        outer, _, name = q.rpartition(".")
        groups.setdefault(outer, []).append(name)
    parts = []
    for outer, members in groups.items():
        inner = members[0] if len(members) == 1 else "{" + ", ".join(members) + "}"
        parts.append(f"{outer}.{inner}" if outer else inner)
    return ", ".join(parts)


def _dumps(defs: tuple[Definition, ...] | None) -> tuple[str, ...]:
    return tuple(d.dump for d in defs or ())


def _same(a: tuple[Definition, ...] | None, b: tuple[Definition, ...] | None) -> bool:
    """Whether two lists of definitions are equal as ASTs (the same source text is, without parsing a dump)."""
    if [d.text for d in a or ()] == [d.text for d in b or ()]:
        return True
    return _dumps(a) == _dumps(b)


def _functions_changed(before: Outline, after: Outline) -> list[str]:
    """Qualified names of the functions (and whole classes) the change adds, removes or alters.

    A class present on both sides is a scope, not a unit: its methods and
    statements are compared one by one.
    """
    changed = []
    for qual in sorted(set(before.definitions) | set(after.definitions)):
        b, a = before.definitions.get(qual), after.definitions.get(qual)
        both_classes = b and a and all(d.kind == "class" for d in (*b, *a))
        if both_classes:
            continue
        if not _same(b, a) and not _inside_new_class(qual, before, after):
            changed.append(qual)
    return changed


def _inside_new_class(qual: str, before: Outline, after: Outline) -> bool:
    """Whether ``qual`` sits in a class that only one side has (the class is then the unit)."""
    parts = qual.split(".")
    for i in range(1, len(parts)):
        outer = ".".join(parts[:i])
        if (outer in before.definitions) != (outer in after.definitions):
            return True
    return False


def _statements_changed(before: Outline, after: Outline) -> dict[str, tuple[list[str], list[str]]]:
    """Per scope present on both sides: the non-def statements added and removed."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for scope in set(before.statements) & set(after.statements):
        if before.statements.texts[scope] == after.statements.texts[scope]:
            continue  # the same source text: the same statements
        b, a = list(before.statements[scope]), list(after.statements[scope])
        added = [s for s in a if s not in b]
        removed = [s for s in b if s not in a]
        if added or removed:
            out[scope] = (added, removed)
    return out


@dataclass(frozen=True, slots=True)
class SideBySide:
    """A definition the patch adds, and the one upstream has in the same scope."""

    path: str
    qualname: str
    ours: Definition
    theirs: Definition

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.path,
            "name": self.qualname,
            "ours": {"lines": [self.ours.start, self.ours.end], "text": self.ours.text},
            "upstream": {"lines": [self.theirs.start, self.theirs.end], "text": self.theirs.text},
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the tests found for one patch against the new release."""

    state: str  # "upstream", "superseded" or "" (neither: apply or merge decides)
    proof: str  # which test proved "upstream" (per file when they differ), or why superseded
    side_by_side: tuple[SideBySide, ...] = ()
    duplicates: tuple[str, ...] = ()  # names the patch would define twice: never apply it


def _ast_equal(path: str, before: Outline, after: Outline, new: Outline) -> str | None:
    """Why every change from ``before`` to ``after`` is already in ``new`` as an AST; None if not."""
    units = _functions_changed(before, after)
    stmt_changes = _statements_changed(before, after)
    if not units and not stmt_changes:
        return None  # nothing the AST can see (comments only): no proof either way
    for qual in units:
        if not _same(after.definitions.get(qual), new.definitions.get(qual)):
            return None
    for scope, (added, removed) in stmt_changes.items():
        have = new.statements.get(scope)
        if have is None or any(s not in have for s in added) or any(s in have for s in removed):
            return None
    what = f"{group_names(units)} equal as Python ASTs" if units else "its statements present as Python ASTs"
    return f"{what} ({path.rsplit('/', 1)[-1]})"


def _enclosing(outline_: Outline, line: int) -> str:
    """The innermost function or class holding ``line`` ("" at module level)."""
    best, size = "", 1 << 30
    for defs in outline_.definitions.values():
        for d in defs:
            if d.start <= line <= d.end and d.end - d.start < size:
                best, size = d.qualname, d.end - d.start
    return best


def _verbatim(fp: FilePatch, after: bytes, new: bytes) -> str | None:
    """Why every run of added lines stands in ``new``, in the same definition; None if not.  The texts are parsed
    only once a run stands in ``new`` (where none does, whether they parse does not matter)."""
    outlines: tuple[Outline | None, Outline | None] | None = None
    new_lines = split_lines(new)
    runs = 0
    for hunk in fp.hunks:
        groups: list[list[tuple[int, bytes]]] = []
        for number, text in hunk.added:
            if groups and groups[-1][-1][0] == number - 1:
                groups[-1].append((number, text))
            else:
                groups.append([(number, text)])
        for group in groups:
            block = [text for _, text in group]
            if not any(t.strip() for t in block):
                continue  # blank lines prove nothing
            hits = [
                i + 1
                for i in range(len(new_lines) - len(block) + 1)
                if new_lines[i] == block[0] and new_lines[i : i + len(block)] == block
            ]
            if hits and outlines is None:
                outlines = outline(after), outline(new)
            after_outline, new_outline = outlines if outlines is not None else (None, None)
            if after_outline is not None and new_outline is not None:
                scope = _enclosing(after_outline, group[0][0])
                hits = [h for h in hits if _enclosing(new_outline, h) == scope]
            if not hits:
                return None
            runs += 1
    if not runs:
        return None
    return f"its {runs} added block(s) stand verbatim in the same definitions ({fp.path.rsplit('/', 1)[-1]})"


def judge(patch: Patch, old_before: Files, old_after: Files, new: Files) -> Verdict:
    """Is ``patch`` (``old_before`` -> ``old_after`` on the old release) already in ``new``?"""
    back = apply_patch(new, patch, reverse=True, allow_offset=True)
    if not isinstance(back, HunkFailure):
        return Verdict("upstream", f"{REVERSE_APPLY}: its hunks reverse-apply with exact context")
    proofs: list[str] = []
    for fp in patch.files:
        before, after, now = old_before.get(fp.path), old_after.get(fp.path), new.get(fp.path)
        if after is None or now is None:
            if after is None and now is None and fp.deleted:
                proofs.append(f"{AST_EQUAL}: deleted upstream too ({fp.path.rsplit('/', 1)[-1]})")
                continue
            break
        o_before, o_after, o_new = outline(before or b""), outline(after), outline(now)
        proof = None
        if o_before is not None and o_after is not None and o_new is not None:
            proof = _ast_equal(fp.path, o_before, o_after, o_new)
            if proof is not None:
                proof = f"{AST_EQUAL}: {proof}"
        if proof is None:
            found = _verbatim(fp, after, now)
            proof = f"{VERBATIM}: {found}" if found else None
        if proof is None:
            break
        proofs.append(proof)
    else:
        return Verdict("upstream", "; ".join(proofs))
    return _superseded(patch, old_before, old_after, new)


def _superseded(patch: Patch, old_before: Files, old_after: Files, new: Files) -> Verdict:
    """``superseded`` when every definition the patch adds exists upstream, in its scope, with another body."""
    pairs: list[SideBySide] = []
    rest: list[str] = []
    for fp in patch.files:
        o_before = outline(old_before.get(fp.path) or b"")
        o_after, o_new = outline(old_after.get(fp.path)), outline(new.get(fp.path))
        if o_before is None or o_after is None or o_new is None:
            return Verdict("", "")
        added = [
            q
            for q in o_after.definitions
            if q not in o_before.definitions and not _inside_new_class(q, o_before, o_after)
        ]
        if not added:
            return Verdict("", "")
        for qual in added:
            theirs = o_new.definitions.get(qual)
            if theirs is None:
                return Verdict("", "")
            pairs.append(SideBySide(fp.path, qual, o_after.definitions[qual][-1], theirs[-1]))
        # Whatever else the patch changes must already be upstream, or dropping it would lose it.
        for qual in _functions_changed(o_before, o_after):
            if qual not in added and not _same(o_after.definitions.get(qual), o_new.definitions.get(qual)):
                rest.append(qual)
        for scope, (stmt_added, _) in _statements_changed(o_before, o_after).items():
            have = o_new.statements.get(scope, ())
            if any(s not in have for s in stmt_added):
                rest.append(f"statements of {scope or 'the module'}")
    names = tuple(f"{p.qualname} in {p.path}" for p in pairs)
    if rest:
        return Verdict(
            "",
            f"upstream now defines {group_names([p.qualname for p in pairs])}, "
            f"but the patch also changes {', '.join(rest)}",
            tuple(pairs),
            names,
        )
    return Verdict(
        "superseded",
        f"upstream defines {group_names([p.qualname for p in pairs])} with another body",
        tuple(pairs),
        names,
    )


def innermost(o: Outline, first: int, last: int) -> str:
    """The innermost definition holding lines ``first..last`` ("" at module level)."""
    best, size = "", 1 << 30
    for defs in o.definitions.values():
        for d in defs:
            if d.start <= first and last <= d.end and d.end - d.start < size:
                best, size = d.qualname, d.end - d.start
    return best
