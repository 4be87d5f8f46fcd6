"""Line anchors: the ``sed -n A,Bp FILE`` reads made executable (SPEC §5).

Pure functions over bytes: load ``anchors.toml``, check each anchor against a
tree (``ok`` / ``moved`` with the new range / ``missing``), and check where a
patch's hunks landed (added lines at the new-side numbers, in the scope the
hunk header names).
"""

from __future__ import annotations

import ast
import hashlib
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgpatch.config.projectfiles import read_project_file
from sgpatch.config.tomlpos import locate
from sgpatch.errors import ConfigError
from sgpatch.pyast import parse_python
from sgpatch.series.patch import FilePatch, Patch, split_lines
from sgpatch.source.tree import SourceTree

ANCHORS_FILE = "anchors.toml"
PHASES = ("pristine", "patched", "both")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_KEYS = {"id", "file", "lines", "phase", "why", "first_line", "sha256", "text"}


@dataclass(frozen=True, slots=True)
class Anchor:
    """A range of lines that must hold known text in a phase."""

    id: str
    file: str
    start: int
    end: int
    phase: str
    why: str
    first_line: str | None
    sha256: str | None
    text: str | None

    def holds_in(self, phase: str) -> bool:
        return self.phase in (phase, "both")

    def matches(self, block: Sequence[bytes]) -> bool:
        """Whether ``block`` (lines with their endings) is what the anchor expects."""
        if len(block) != self.end - self.start + 1:
            return False
        joined = b"".join(block)
        if self.sha256 is not None and hashlib.sha256(joined).hexdigest() != self.sha256:
            return False
        if self.text is not None and joined != self.text.encode():
            return False
        return self.first_line is None or block[0].rstrip(b"\n").decode("utf-8", "replace") == self.first_line


@dataclass(frozen=True, slots=True)
class AnchorResult:
    """An anchor checked on a tree: ok, moved (and where to) or missing."""

    anchor: Anchor
    status: str  # "ok", "moved", "missing"
    found: tuple[int, int] | None  # the range where it was found, for "moved"
    detail: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def load_anchors(path: Path) -> tuple[Anchor, ...]:
    """Parse and validate anchors.toml; ConfigError with file:line on any defect.  No file: no anchors."""
    try:
        text = read_project_file(path).decode("utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        return ()
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}:{getattr(exc, 'lineno', 1)}: malformed TOML: {getattr(exc, 'msg', exc)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None

    def fail(where: tuple[Any, ...], message: str) -> ConfigError:
        line = locate(text, ("anchor", *where)) if where else 1
        return ConfigError(f"{path}:{line}: {message}")

    for key in data:
        if key not in ("schema_version", "anchor"):
            raise ConfigError(f"{path}:{locate(text, (key,))}: unknown key {key!r}")
    if data.get("schema_version") != 1:
        raise fail((), "schema_version must be 1")
    raw = data.get("anchor", [])
    if not isinstance(raw, list):
        raise fail((), "'anchor' must be an array of tables ([[anchor]])")
    anchors: list[Anchor] = []
    seen: set[str] = set()
    for n, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise fail((n,), "each [[anchor]] must be a table")
        unknown = sorted(set(entry) - _KEYS)
        if unknown:
            raise fail((n, unknown[0]), f"unknown key {unknown[0]!r} in [[anchor]]")
        aid = entry.get("id")
        if not isinstance(aid, str) or not _ID.match(aid):
            raise fail((n, "id"), "anchor id must be a kebab-case string")
        if aid in seen:
            raise fail((n, "id"), f"anchor id {aid!r} is used twice")
        seen.add(aid)
        file = entry.get("file")
        if not isinstance(file, str) or file.startswith("/") or ".." in file.split("/") or "\0" in file:
            raise fail((n, "file"), f"anchor {aid}: file must be a path relative to the checkout")
        lines = entry.get("lines")
        if (
            not isinstance(lines, list)
            or len(lines) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in lines)
            or not 1 <= lines[0] <= lines[1]
        ):
            raise fail((n, "lines"), f"anchor {aid}: lines must be [start, end] with 1 <= start <= end")
        phase = entry.get("phase")
        if phase not in PHASES:
            raise fail((n, "phase"), f"anchor {aid}: phase must be one of {', '.join(PHASES)}")
        values: dict[str, str | None] = {}
        for key in ("why", "first_line", "sha256", "text"):
            v = entry.get(key)
            if v is not None and not isinstance(v, str):
                raise fail((n, key), f"anchor {aid}: {key} must be a string")
            values[key] = v
        sha = values["sha256"]
        if sha is not None and not _HEX64.match(sha):
            raise fail((n, "sha256"), f"anchor {aid}: sha256 must be 64 lowercase hex digits")
        if not any(values[k] is not None for k in ("first_line", "sha256", "text")):
            raise fail((n,), f"anchor {aid}: needs at least one of first_line, sha256, text")
        body = values["text"]
        if body is not None and len(split_lines(body.encode())) != lines[1] - lines[0] + 1:
            raise fail((n, "text"), f"anchor {aid}: text has a different number of lines than the range")
        anchors.append(
            Anchor(
                id=aid,
                file=file,
                start=lines[0],
                end=lines[1],
                phase=phase,
                why=values["why"] or "",
                first_line=values["first_line"],
                sha256=sha,
                text=body,
            )
        )
    return tuple(anchors)


def check_anchor(anchor: Anchor, data: bytes | None) -> AnchorResult:
    """``ok`` if the range holds the expected lines, ``moved`` if they stand uniquely elsewhere."""
    if data is None:
        return AnchorResult(anchor, "missing", None, f"{anchor.file} does not exist")
    lines = split_lines(data)
    size = anchor.end - anchor.start + 1
    if anchor.matches(lines[anchor.start - 1 : anchor.end]):
        return AnchorResult(anchor, "ok", (anchor.start, anchor.end), "")
    hits = [i + 1 for i in range(len(lines) - size + 1) if anchor.matches(lines[i : i + size])]
    if len(hits) == 1:
        start = hits[0]
        return AnchorResult(
            anchor,
            "moved",
            (start, start + size - 1),
            f"found at {start}-{start + size - 1} ({start - anchor.start:+d})",
        )
    if len(hits) > 1:
        return AnchorResult(anchor, "missing", None, f"not at {anchor.start}-{anchor.end}; found {len(hits)} times")
    return AnchorResult(anchor, "missing", None, f"lines {anchor.start}-{anchor.end} do not hold the expected text")


def check_anchors(anchors: Sequence[Anchor], tree: SourceTree, phase: str) -> list[AnchorResult]:
    """Every anchor that holds in ``phase``, checked against ``tree``."""
    cache: dict[str, bytes | None] = {}
    results = []
    for anchor in anchors:
        if not anchor.holds_in(phase):
            continue
        if anchor.file not in cache:
            cache[anchor.file] = tree.read(anchor.file)
        results.append(check_anchor(anchor, cache[anchor.file]))
    return results


def read_range(data: bytes, start: int, end: int) -> list[tuple[int, str]]:
    """Lines ``start..end`` (1-based, inclusive) with their numbers: ``sed -n A,Bp`` with ``cat -n``."""
    lines = split_lines(data)
    return [(n, lines[n - 1].decode("utf-8", "replace").rstrip("\n")) for n in range(start, min(end, len(lines)) + 1)]


# --------------------------------------------------------------------------- hunk landing


@dataclass(frozen=True, slots=True)
class LandingResult:
    """Where one hunk's added lines stand in the patched file, and in which scope."""

    patch: str
    path: str
    hunk: str
    ok: bool
    detail: str


_DEF = re.compile(r"^\s*(?:async\s+def|def|class)\s+([A-Za-z_][A-Za-z0-9_]*)")


def _scope_chain(tree: ast.Module, line: int) -> list[str]:
    """Names of the classes/functions enclosing ``line``, outermost first."""
    chain: list[str] = []
    body: Sequence[ast.stmt] = tree.body
    while True:
        for node in body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if first <= line <= (node.end_lineno or node.lineno):
                    chain.append(node.name)
                    body = node.body
                    break
        else:
            return chain


def _preceding_def(lines: Sequence[bytes], line: int) -> str | None:
    """The nearest def/class line above ``line``: what git's Python funcname reports."""
    for i in range(line - 2, -1, -1):
        m = _DEF.match(lines[i].decode("utf-8", "replace"))
        if m:
            return m.group(1)
    return None


def check_landing(patch: Patch, fp: FilePatch, data: bytes | None) -> list[LandingResult]:
    """Check every hunk of ``fp`` against the patched file ``data``."""
    results: list[LandingResult] = []
    if data is None:
        return [LandingResult(patch.name, fp.path, h.label, fp.deleted, "file is absent") for h in fp.hunks]
    lines = split_lines(data)
    try:
        module: ast.Module | None = parse_python(data, filename=fp.path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        module = None
    for h in fp.hunks:
        misplaced = [n for n, text in h.added if n > len(lines) or lines[n - 1] != text]
        if misplaced:
            results.append(
                LandingResult(
                    patch.name, fp.path, h.label, False, f"added line {misplaced[0]} is not where the hunk puts it"
                )
            )
            continue
        m = _DEF.match(h.section)
        if not m or not fp.path.endswith(".py"):
            results.append(LandingResult(patch.name, fp.path, h.label, True, "at its new-side lines"))
            continue
        named = m.group(1)
        first_change = h.added[0][0] if h.added else h.new_start
        chain = _scope_chain(module, first_change) if module else []
        preceding = _preceding_def(lines, h.new_start)
        if named in chain or named == preceding:
            where = ".".join(chain) or "module level"
            if named in chain:
                said = f"in {where}, the definition its hunk header names ({named})"
            else:  # git's hunk header names the last definition above the hunk: the one these lines follow
                said = f"in {where}, right after {named} (the definition the hunk header names)"
            results.append(LandingResult(patch.name, fp.path, h.label, True, said))
        else:
            where = ".".join(chain) or "module level"
            results.append(
                LandingResult(
                    patch.name,
                    fp.path,
                    h.label,
                    False,
                    f"header names {named} but the lines sit in {where} (after {preceding or 'no definition'})",
                )
            )
    return results
