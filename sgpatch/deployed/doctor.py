"""doctor: the CUDA stack around sglang on an interpreter, against the stack's pins (SPEC §11).

Everything comes from installed metadata, read by the probe in the target
interpreter (here or over ssh): versions from each distribution's METADATA,
torch's CUDA version from its installed ``torch/version.py`` parsed as text.
Nothing is imported: torch takes seconds to import and needs the GPU stack
this command is checking.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from sgpatch.config import Stack
from sgpatch.config.requirements import parse_requirement
from sgpatch.deployed.answer import InstalledDist, ProbeResult, imported_failure
from sgpatch.deployed.remote import run_probe, target_for
from sgpatch.errors import ConfigError
from sgpatch.results import SCHEMA_VERSION

SGLANG = "sglang"
TORCH_VERSION_FILE = "torch/version.py"
_BUILD_TAG = re.compile(r"^(cu\d+|cpu|rocm[\d.]*|xpu)$")


@dataclass(frozen=True, slots=True)
class DoctorRow:
    """One line of the table: what the stack expects of a package, and what is installed."""

    name: str
    expected: str
    found: str | None  # None: not installed
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "expected": self.expected, "found": self.found, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """The stack's pins against one interpreter's installed packages."""

    stack: str
    cuda: str
    target: str
    python: str
    rows: tuple[DoctorRow, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def failures(self) -> tuple[str, ...]:
        return tuple(
            f"{r.name}: expected {r.expected}, found {r.found or 'nothing installed'}"
            + (f" ({r.detail})" if r.detail else "")
            for r in self.rows
            if not r.ok
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "stack": self.stack,
            "cuda": self.cuda,
            "target": self.target,
            "python": self.python,
            "ok": self.ok,
            "rows": [r.as_dict() for r in self.rows],
            "notes": list(self.notes),
            "failures": list(self.failures),
        }


def pins(stack: Stack) -> list[Requirement]:
    """The stack's install pins, parsed; ConfigError naming a malformed one."""
    parsed = []
    for text in stack.install.pins:
        try:
            parsed.append(parse_requirement(text))
        except InvalidRequirement as exc:
            raise ConfigError(f"{stack.name}: install pin {text!r} is not a requirement: {exc}") from exc
    return parsed


def _spelled(req: Requirement, text: str) -> str:
    """The pin's version part as VERSIONS.toml spells it (``>=13.0,<14``), not re-sorted."""
    rest = text.split(";", 1)[0].strip()
    match = re.match(r"^[A-Za-z0-9._-]+(\[[^\]]*\])?\s*", rest)
    spelled = rest[match.end() :].strip() if match else ""
    return spelled or str(req.specifier) or "any version"


def build_tag(version: str) -> str | None:
    """The CUDA/CPU build a version's local label names (``2.9.1+cu130`` -> ``cu130``), if any."""
    try:
        local = Version(version).local
    except InvalidVersion:
        return None
    head = (local or "").split(".")[0]
    return head if _BUILD_TAG.match(head) else None


def torch_cuda(source: bytes | None) -> str | None:
    """``cuda`` from torch's ``version.py``: ``'13.0'``, ``'rocm 6.4'``, ``'none'`` for a CPU build,
    None when the file is missing or says nothing; parsed as text, never imported."""
    if source is None:
        return None
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # NUL bytes, absurd nesting: not torch's file
        return None
    values: dict[str, object] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        else:
            continue
        if isinstance(value, ast.Constant):
            values[target] = value.value
    cuda, hip = values.get("cuda"), values.get("hip")
    if isinstance(cuda, str):
        return cuda
    if isinstance(hip, str):
        return f"rocm {hip}"
    return "none" if "cuda" in values else None


def _version_row(name: str, req: Requirement, dist: InstalledDist | None, stack: Stack, text: str) -> DoctorRow:
    expected = _spelled(req, text)
    if dist is None:
        return DoctorRow(name, expected, None, False, "not installed")
    try:
        found = Version(dist.version)
    except InvalidVersion:
        return DoctorRow(name, expected, dist.version, False, "not a valid version")
    problems = []
    if not req.specifier.contains(found, prereleases=True):
        problems.append(f"{found} is not {expected}")
    tag = build_tag(dist.version)
    if tag is not None and tag != stack.local_label:
        problems.append(f"built for {tag}, the stack is {stack.local_label}")
    return DoctorRow(name, expected, dist.version, not problems, "; ".join(problems))


def _cuda_row(dist: InstalledDist | None, stack: Stack) -> DoctorRow:
    name = "torch CUDA"
    if dist is None:
        return DoctorRow(name, stack.cuda, None, False, "torch is not installed")
    source = dist.files.get(TORCH_VERSION_FILE)
    found = torch_cuda(source)
    if found is None:
        why = f"no {TORCH_VERSION_FILE}" if source is None else f"{TORCH_VERSION_FILE} names no CUDA version"
        return DoctorRow(name, stack.cuda, None, False, why)
    if found == stack.cuda:
        return DoctorRow(name, stack.cuda, found, True, "")
    if found == "none":
        return DoctorRow(name, stack.cuda, found, False, f"a CPU build: {TORCH_VERSION_FILE} says cuda = None")
    return DoctorRow(name, stack.cuda, found, False, f"{TORCH_VERSION_FILE} says {found}")


def request(stack: Stack) -> dict[str, dict[str, Any]]:
    """What the probe reads: sglang and every pinned distribution; torch's version.py."""
    dists: dict[str, dict[str, Any]] = {SGLANG: {}}
    for req in pins(stack):
        dists.setdefault(canonicalize_name(req.name), {})
    dists["torch"] = {"package": "torch", "files": [TORCH_VERSION_FILE]}
    return dists


def check(stack: Stack, result: ProbeResult) -> DoctorReport:
    """The table for ``stack`` from one probe answer."""
    environment: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    environment.update(result.environment)
    dists: dict[str, InstalledDist | None] = {canonicalize_name(k): v for k, v in result.dists.items()}
    sglang = f"{SGLANG}=={stack.sglang_version}"
    rows = [_version_row(SGLANG, Requirement(sglang), dists.get(SGLANG), stack, sglang)]
    notes = []
    for req, text in zip(pins(stack), stack.install.pins, strict=True):
        key = canonicalize_name(req.name)
        if req.marker is not None and not req.marker.evaluate(dict(environment)):
            notes.append(f"{text}: not for this platform (marker {req.marker})")
            continue
        rows.append(_version_row(req.name, req, dists.get(key), stack, text))
        if key == "torch":
            rows.append(_cuda_row(dists.get(key), stack))
    if (imported := imported_failure(result.imported)) is not None:
        rows.append(DoctorRow("probe", "nothing imported", ", ".join(result.imported), False, imported))
    return DoctorReport(
        stack=stack.name,
        cuda=stack.cuda,
        target=result.target.label,
        python=f"{result.executable} (Python {result.python_version})",
        rows=tuple(rows),
        notes=tuple(notes),
    )


def doctor(stack: Stack, *, python: str | None = None, host: str | None = None) -> DoctorReport:
    """Check the packages around sglang on ``python`` (default: this interpreter; ``python3`` on ``host``)."""
    result = run_probe(target_for(python=python, host=host), request(stack))
    return check(stack, result)
