"""Which workers and branches belong to a speculative algorithm, read from ``create_worker``."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from sgpatch.errors import ConfigError
from sgpatch.interface.facts import FOLLOWED_WITHIN, SCAN_ROLES, ScanFacts
from sgpatch.interface.model import (
    ALGORITHM_ENUM,
    DRAFT,
    MODEL_EXECUTOR,
    NO_ALGORITHM,
    RUNNER,
    SPEC_INFO,
    SPECULATIVE,
    TARGET,
)
from sgpatch.interface.modules import ClassNode, Modules, base_chain
from sgpatch.interface.sites import (
    MAX_FOLLOWED,
    Collector,
    Guard,
    Site,
    final_name,
    guard_facts,
)
from sgpatch.interface.spec_enum import guard_value
from sgpatch.interface.syntax import Function

# ----------------------------------------------------------------------------------- algorithms


class Algorithms:
    """``SpeculativeAlgorithm`` as the tree defines it, and which code runs for which member."""

    def __init__(self, mods: Modules) -> None:
        self.mods = mods
        enum = mods.enum()
        if enum is None:
            raise ConfigError(f"{SPEC_INFO}: class {ALGORITHM_ENUM} not found in {mods.tree.label}")
        self.members = enum.members
        self.predicates = enum.predicates
        self.assigned: dict[str, list[tuple[Guard, ...]]] = {}
        self._flags: dict[tuple[str, str], bool | None] = {}
        self.workers = {m: self._workers(enum.workers[m]) for m in self.members}
        self._modules: dict[str, set[str]] = {}
        self.notes: list[str] = []

    def value(self, e: ast.expr, algo: str, *, flags: bool = True) -> bool | None:
        """Whether ``e`` holds when ``algo`` runs; ``None`` when that depends on something else."""
        return guard_value(e, algo, self.predicates, self.flag if flags else None)

    def holds(self, guards: tuple[Guard, ...], algo: str) -> bool | None:
        out: bool | None = True
        for gd in guards:
            v = self.value(gd.test, algo)
            v = v if v is None or gd.positive else not v
            if v is False:
                return False
            out = out if v else None
        return out

    def assign(self, assigned: Iterable[tuple[str, tuple[Guard, ...]]]) -> None:
        """Record assignments ``<obj>.<name> = <true value>`` under their guards."""
        for name, guards in assigned:
            self.assigned.setdefault(name, []).append(guards)
        self._flags.clear()

    def flag(self, name: str, algo: str) -> bool | None:
        """An attribute is false under ``algo`` when no assignment of a true value to it can run there."""
        key = (name, algo)
        if key not in self._flags:
            self._flags[key] = None  # a cycle reads "unknown"
            guards = self.assigned.get(name, [])
            self._flags[key] = False if guards and all(self.holds(g, algo) is False for g in guards) else None
        return self._flags[key]

    def _workers(self, named: tuple[tuple[str, str], ...]) -> list[ClassNode]:
        """The classes ``create_worker`` returns, named by ``(module, name)`` (module "": spec_info.py's own)."""
        out: list[ClassNode] = []
        for module, attr in named:
            path = self.mods.path_of(module) if module else SPEC_INFO
            found = self.mods.resolve(path, attr) if path else None
            if isinstance(found, ClassNode) and all(found is not c for c in out):
                out.append(found)
        return out

    def modules(self, algo: str) -> set[str]:
        """``speculative/`` modules of the algorithm's workers, their bases and what they import."""
        if algo not in self._modules:
            todo = [c.path for w in self.workers[algo] for c in base_chain(w) if c.path.startswith(SPECULATIVE)]
            seen: set[str] = set()
            while todo:
                path = todo.pop()
                if path not in seen:
                    seen.add(path)
                    todo += self.mods.imports(path, SPECULATIVE)
            self._modules[algo] = seen
        return self._modules[algo]

    def runs(self, site: Site, algo: str) -> bool:
        """Whether the use is made when ``algo`` runs, and because of it.

        Outside ``speculative/`` that means its guards can hold for ``algo`` and cannot for some other
        algorithm or without one: the use depends on the algorithm (a flag that a feature outside
        speculative decoding can also set, like 0.5.23's capture-only ``eagle_use_aux_hidden_state``,
        still counts).
        """
        if self.holds(site.guards, algo) is False:
            return False
        origin = site.origin or site.path
        if origin.startswith(SPECULATIVE):
            return origin in self.modules(algo)
        return any(self.holds(site.guards, m) is False for m in self.members if m != algo)


def scan_sites(mods: Modules, algos: Algorithms) -> list[Site]:
    """Every use on a model in ``speculative/``, and in the ``model_executor/`` modules that can hold one.

    A use in ``model_executor/`` counts only behind a predicate or a flag, so a module whose text names
    neither is skipped; each round adds the modules naming a flag the last round found.
    """
    sites: list[Site] = []

    def follow(path: str, dotted: str) -> tuple[str, Function] | None:
        return mods.function(path, dotted, FOLLOWED_WITHIN)

    def scan(path: str, role: str) -> None:
        found = mods.scan(path, role)
        if found is None:
            return
        uses = list(found.sites)
        assigned = list(found.assigned)
        capped = found.capped
        if found.deferred:
            uses_more, assigned_more, capped = _follow_deferred(path, role, found, follow)
            uses += uses_more
            assigned += assigned_more
        algos.assign(assigned)
        if capped:
            algos.notes.append(f"{path}: more than {MAX_FOLLOWED} helper calls given a model; the rest not followed")
        sites.extend(s._replace(role=_runner_role(s)) if s.role == RUNNER else s for s in uses)

    for path in mods.tree.list(SPECULATIVE):
        if path.endswith(".py"):
            scan(path, "worker")
    pending = [p for p in mods.tree.list(MODEL_EXECUTOR) if p.endswith(".py")]
    words = {f".{p}(".encode() for p in algos.predicates}
    while True:
        found = [p for p in pending if any(w in (mods.data(p) or b"") for w in words)]
        if not found:
            return sites
        pending = [p for p in pending if p not in found]
        for path in found:
            scan(path, "executor")
        words |= {n.encode() for n in algos.assigned if algos.flag(n, NO_ALGORITHM) is False}


def _follow_deferred(
    path: str, role: str, found: ScanFacts, follow: Callable[[str, str], tuple[str, Function] | None]
) -> tuple[list[Site], list[tuple[str, tuple[Guard, ...]]], bool]:
    """The calls into other modules' helpers a module's facts left, followed now (in the order met, counted
    after the module's own helpers), with the uses and assignments they add."""
    collector = Collector(path, SCAN_ROLES[role], frozenset({TARGET, DRAFT, RUNNER}), follow)
    collector.followed, collector.capped = found.followed, found.capped
    for d in found.deferred:
        collector.start_at(d.calls)
        collector.call(d.dotted, d.args, d.guards)
    return collector.sites, collector.assigned, collector.capped


def _runner_role(site: Site) -> str:
    draft = any(positive and final_name(test) == "is_draft_worker" for positive, test, _ in guard_facts(site.guards))
    return DRAFT if draft else TARGET
