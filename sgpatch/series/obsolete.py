"""When upstream makes a patch unnecessary, in the patch's own words: its ``Obsolete-If`` DEP-3 field.

One claim a field, about one Python file of the release (checkout-relative, as in the diff)::

    Obsolete-If: FILE: FUNCTION calls NAME
    Obsolete-If: FILE: FUNCTION calls NAME(KEYWORD=)
    Obsolete-If: FILE: defines QUALNAME

``FUNCTION`` and ``QUALNAME`` are dotted names from the module down (``Class.method``, ``function``,
``Class``), each part a ``def``/``class`` directly in the one before.  ``calls NAME``: somewhere in that
function's body a call whose callee is ``NAME`` or ends in ``.NAME``; with ``(KEYWORD=)`` that call also
passes ``KEYWORD`` by name.  ``defines QUALNAME``: the definition exists.  A patch may carry several
fields; it is obsolete in a release where every one holds.  ``port`` reads them in the release's own
files (as ASTs, never run) before it tries to carry the patch; a malformed claim is refused where the
series is read, with its file and line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sgpatch.errors import PatchError
from sgpatch.pyast import parse_python
from sgpatch.series.paths import path_refusal

FIELD = "Obsolete-If"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_NAME}(?:\.{_NAME})*"
_CALLS = re.compile(rf"(?P<scope>{_DOTTED}) calls (?P<name>{_NAME})(?:\((?P<keyword>{_NAME})=\))?")
_DEFINES = re.compile(rf"defines (?P<scope>{_DOTTED})")
_SYNTAX = "FILE.py: FUNCTION calls NAME, FILE.py: FUNCTION calls NAME(KEYWORD=) or FILE.py: defines QUALNAME"

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True, slots=True)
class Evidence:
    """One ``Obsolete-If`` claim, parsed."""

    path: str  # checkout-relative, e.g. python/sglang/srt/models/deepseek_v2.py
    kind: str  # "calls" or "defines"
    scope: str  # calls: the function searched; defines: the definition
    name: str = ""  # calls: the callee's name
    keyword: str = ""  # calls: a keyword the call passes ("" for any call)
    line: int = 0  # the field's line in the patch file

    @property
    def claim(self) -> str:
        """The claim as it is written after the file name."""
        if self.kind == "defines":
            return f"defines {self.scope}"
        return f"{self.scope} calls {self.name}" + (f"({self.keyword}=)" if self.keyword else "")


@dataclass(frozen=True, slots=True)
class Finding:
    """One claim read in a release: whether it holds, and where (``file:line``) or why not."""

    path: str
    claim: str
    holds: bool
    line: int | None  # the line of the call or definition that proves it
    detail: str  # why it does not hold ("" when it does)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else self.path

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.path, "claim": self.claim, "holds": self.holds, "line": self.line, "detail": self.detail}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        line = d.get("line")
        return cls(
            path=str(d["file"]),
            claim=str(d["claim"]),
            holds=bool(d["holds"]),
            line=int(line) if line is not None else None,
            detail=str(d.get("detail", "")),
        )


def parse_evidence(value: str, where: str, line: int) -> Evidence:
    """One ``Obsolete-If`` value; PatchError (exit 2) naming ``where:line`` when it is not a claim."""
    at = f"{where}:{line}"
    if "\n" in value:
        raise PatchError(f"{at}: {FIELD} is one claim on one line", hint=f"write one {FIELD} field per claim")
    path, sep, claim = value.partition(": ")
    if not sep or not path:
        raise PatchError(f"{at}: {FIELD}: {value[:80]!r} is not 'FILE: CLAIM'", hint=f"write {_SYNTAX}")
    problem = path_refusal(path)
    if problem is not None or not path.endswith(".py"):
        raise PatchError(f"{at}: {FIELD}: {problem or f'{path!r} is not a Python file'}", hint=f"write {_SYNTAX}")
    calls = _CALLS.fullmatch(claim.strip())
    if calls is not None:
        return Evidence(
            path=path,
            kind="calls",
            scope=calls["scope"],
            name=calls["name"],
            keyword=calls["keyword"] or "",
            line=line,
        )
    defines = _DEFINES.fullmatch(claim.strip())
    if defines is not None:
        return Evidence(path=path, kind="defines", scope=defines["scope"], line=line)
    raise PatchError(f"{at}: {FIELD}: {claim[:80]!r} is not a claim sgpatch reads", hint=f"write {_SYNTAX}")


def evidence_of(fields: Sequence[tuple[str, str, int]], where: str) -> tuple[Evidence, ...]:
    """Every ``Obsolete-If`` claim of a patch header (``parse_dep3_lines``' fields), in order."""
    return tuple(parse_evidence(v, where, line) for k, v, line in fields if k.lower() == FIELD.lower())


def read_claim(evidence: Evidence, data: bytes | None) -> Finding:
    """Whether ``evidence`` holds in ``data`` (the release's file; None: the release has no such file)."""

    def fails(detail: str) -> Finding:
        return Finding(path=evidence.path, claim=evidence.claim, holds=False, line=None, detail=detail)

    if data is None:
        return fails("the release has no such file")
    try:
        tree = parse_python(data, filename=evidence.path)
    except (SyntaxError, ValueError) as exc:
        return fails(f"it does not parse as Python ({type(exc).__name__})")
    node = _definition(tree, evidence.scope.split("."))
    if node is None:
        return fails(f"no definition {evidence.scope}")
    if evidence.kind == "defines":
        return Finding(path=evidence.path, claim=evidence.claim, holds=True, line=node.lineno, detail="")
    if isinstance(node, ast.ClassDef):
        return fails(f"{evidence.scope} is a class, not a function")
    for call in _calls(node):
        if _callee(call) == evidence.name and (
            not evidence.keyword or any(k.arg == evidence.keyword for k in call.keywords)
        ):
            return Finding(path=evidence.path, claim=evidence.claim, holds=True, line=call.lineno, detail="")
    keyword = f" passing {evidence.keyword}=" if evidence.keyword else ""
    return fails(f"{evidence.scope} (line {node.lineno}) makes no call to {evidence.name}{keyword}")


def read_claims(
    evidence: Sequence[Evidence], read: Callable[[Sequence[str]], Mapping[str, bytes | None]]
) -> tuple[Finding, ...]:
    """Every claim read in the release whose files ``read`` returns (each file read once)."""
    if not evidence:
        return ()
    files = read(sorted({e.path for e in evidence}))
    return tuple(read_claim(e, files.get(e.path)) for e in evidence)


def _definition(tree: ast.Module, parts: Sequence[str]) -> Definition | None:
    body: Sequence[ast.stmt] = tree.body
    node: Definition | None = None
    for part in parts:
        node = next(
            (
                n
                for n in reversed(body)  # Python keeps the last of two definitions of one name
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        body = node.body
    return node


def _calls(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    return sorted(
        (n for stmt in function.body for n in ast.walk(stmt) if isinstance(n, ast.Call)),
        key=lambda c: (c.lineno, c.col_offset),
    )


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None
