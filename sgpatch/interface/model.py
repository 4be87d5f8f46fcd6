"""The interface report: what is required, what provides it, and the gaps."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sgpatch.errors import ConfigError

if TYPE_CHECKING:
    from sgpatch.config import InterfaceSpec

SPECULATIVE = "python/sglang/srt/speculative/"
MODEL_EXECUTOR = "python/sglang/srt/model_executor/"
SPEC_INFO = SPECULATIVE + "spec_info.py"
ALGORITHM_ENUM = "SpeculativeAlgorithm"
NO_ALGORITHM = "NONE"
TARGET, DRAFT, RUNNER = "target", "draft", "runner"
TARGET_WORKERS = frozenset({"target_worker", "_target_worker"})
MAX_FORWARD_DEPTH = 4


# ------------------------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True)
class ClassRef:
    """A class named by its file in upstream's layout: ``python/sglang/srt/models/x.py:Cls``."""

    path: str
    name: str

    @classmethod
    def parse(cls, spec: str) -> ClassRef:
        path, sep, name = spec.strip().rpartition(":")
        if not sep or not path.endswith(".py") or path.startswith("/") or ".." in path.split("/"):
            raise ConfigError(
                f"bad class reference {spec!r}",
                hint="write 'python/sglang/.../module.py:ClassName'",
            )
        if not name.isidentifier():
            raise ConfigError(
                f"bad class name in {spec!r}",
                hint="write 'python/sglang/.../module.py:ClassName'",
            )
        return cls(path, name)

    def __str__(self) -> str:
        return f"{self.path}:{self.name}"


@dataclass(frozen=True, slots=True)
class Location:
    """A line of a file in upstream's layout."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class CallSite:
    """One use of a name on a model; ``access`` is ``call``, ``attribute`` or ``getattr``."""

    path: str
    line: int
    access: str
    optional: bool

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class Base:
    """A base class as written, and what it is; ``location`` is ``None`` outside the tree."""

    written: str
    resolved: str
    location: Location | None


@dataclass(frozen=True, slots=True)
class ClassInfo:
    """A class the check resolved: where it is defined and its bases."""

    name: str
    location: Location
    bases: tuple[Base, ...]


@dataclass(frozen=True, slots=True)
class Delegate:
    """``self.<attr> = <written>(...)`` in an ``__init__``; ``resolved`` is ``None`` outside the tree."""

    attr: str
    written: str
    assigned_at: Location
    resolved: ClassInfo | None


@dataclass(frozen=True, slots=True)
class ClassResolution:
    """The class and its bases inside the tree (depth first), and the bases outside it."""

    ref: ClassRef
    chain: tuple[ClassInfo, ...]
    external_bases: tuple[str, ...]
    delegates: tuple[Delegate, ...]


@dataclass(frozen=True, slots=True)
class Member:
    """What provides a required name: a method, an attribute or a nested class of a class."""

    class_name: str
    kind: str  # "method" | "attribute" | "class"
    location: Location


@dataclass(frozen=True, slots=True)
class Requirement:
    """A name a role (target or draft) must have: where it is used and what provides it."""

    role: str
    name: str
    call_sites: tuple[CallSite, ...]
    declared: bool
    provided_by: Member | None

    @property
    def optional(self) -> bool:
        return not self.declared and all(site.optional for site in self.call_sites)


@dataclass(frozen=True, slots=True)
class Gap:
    """A required name nothing provides, with the fix to write."""

    role: str
    name: str
    class_name: str
    call_sites: tuple[CallSite, ...]
    fix: str


@dataclass(frozen=True, slots=True)
class DelegationGap:
    """``name`` is provided by ``method``, which forwards to ``self.<attr>.<missing>``; the delegate lacks it."""

    role: str
    name: str
    method: Location
    attr: str
    delegate: str
    missing: str
    forward_at: Location
    call_sites: tuple[CallSite, ...]


@dataclass(frozen=True, slots=True)
class StaleName:
    """A declared name no call site of the algorithm uses; ``used_by`` lists other algorithms using it."""

    role: str
    name: str
    used_by: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OtherUse:
    """Uses of a name by other algorithms only: not a requirement of this one."""

    role: str
    name: str
    algorithms: tuple[str, ...]
    call_sites: tuple[CallSite, ...]


@dataclass(frozen=True, slots=True)
class InterfaceReport:
    """The interface check of one tree: what is required, what provides it, and the gaps."""

    tree: str
    algorithm: str
    workers: tuple[ClassInfo, ...]
    target: ClassResolution
    draft: ClassResolution | None
    requirements: tuple[Requirement, ...]
    gaps: tuple[Gap, ...]
    delegation_gaps: tuple[DelegationGap, ...]
    stale: tuple[StaleName, ...]
    other_uses: tuple[OtherUse, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.gaps and not self.delegation_gaps

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (tuples become lists), with ``ok``."""
        out: dict[str, Any] = _plain(self)
        out["ok"] = self.ok
        return out


def _plain(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Requirement):
            out["optional"] = value.optional
        return out
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def interface_of(spec: InterfaceSpec) -> dict[str, Any]:
    """``check_interface`` keyword arguments from a stack's ``[interface]`` table."""
    return {
        "target": ClassRef.parse(spec.target),
        "draft": ClassRef.parse(spec.draft) if spec.draft else None,
        "algorithm": spec.algorithm,
        "declared_target": spec.declared_target,
        "declared_draft": spec.declared_draft,
    }
