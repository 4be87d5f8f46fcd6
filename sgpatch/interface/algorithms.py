"""Which workers and branches belong to a speculative algorithm, read from ``create_worker``."""

from __future__ import annotations

import ast
import dataclasses

from sgpatch.errors import ConfigError
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
from sgpatch.interface.modules import (
    ClassNode,
    Function,
    Modules,
    absolute_module,
    base_chain,
    is_name,
    methods_of,
)
from sgpatch.interface.sites import (
    MAX_FOLLOWED,
    Collector,
    Guard,
    RoleOf,
    Site,
    executor_role,
    final_name,
    guard_facts,
    worker_role,
)

# ----------------------------------------------------------------------------------- algorithms


class Algorithms:
    """``SpeculativeAlgorithm`` as the tree defines it, and which code runs for which member."""

    def __init__(self, mods: Modules) -> None:
        self.mods = mods
        module = mods.parse(SPEC_INFO)
        node = (
            next(
                (s for s in module.body if isinstance(s, ast.ClassDef) and s.name == ALGORITHM_ENUM),
                None,
            )
            if module
            else None
        )
        if node is None:
            raise ConfigError(f"{SPEC_INFO}: class {ALGORITHM_ENUM} not found in {mods.tree.label}")
        self.members = tuple(
            t.id
            for s in node.body
            if isinstance(s, ast.Assign)
            for t in s.targets
            if isinstance(t, ast.Name) and t.id.isupper()
        )
        self.predicates: dict[str, frozenset[str]] = {}
        for _ in range(3):  # predicates calling predicates
            for fn in methods_of(node):
                body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                if len(fn.args.args) == 1 and len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value:
                    found = self._members_of(body[0].value)
                    if found is not None:
                        self.predicates[fn.name] = found
        self.assigned: dict[str, list[tuple[Guard, ...]]] = {}
        self._flags: dict[tuple[str, str], bool | None] = {}
        create = next((f for f in methods_of(node) if f.name == "create_worker"), None)
        self.workers = {m: self._workers(create, m) if create else [] for m in self.members}
        self._modules: dict[str, set[str]] = {}
        self.notes: list[str] = []

    def _members_of(self, e: ast.expr) -> frozenset[str] | None:
        """The members for which a predicate body (``self == X``, ``self in (X, Y)``, ...) holds."""
        everything = frozenset(self.members)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            inner = self._members_of(e.operand)
            return None if inner is None else everything - inner
        if isinstance(e, ast.BoolOp):
            parts = [self._members_of(v) for v in e.values]
            sets = [p for p in parts if p is not None]
            if len(sets) != len(parts):
                return None
            return frozenset.union(*sets) if isinstance(e.op, ast.Or) else frozenset.intersection(*sets)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and is_name(e.func.value, "self"):
            return self.predicates.get(e.func.attr)
        if isinstance(e, ast.Compare) and len(e.ops) == 1 and is_name(e.left, "self"):
            right = e.comparators[0]
            elts = right.elts if isinstance(right, ast.Tuple | ast.List | ast.Set) else [right]
            named = frozenset(x.attr for x in elts if isinstance(x, ast.Attribute) and is_name(x.value, ALGORITHM_ENUM))
            if len(named) != len(elts):
                return None
            return everything - named if isinstance(e.ops[0], ast.NotEq | ast.IsNot | ast.NotIn) else named
        return None

    def value(self, e: ast.expr, algo: str, *, flags: bool = True) -> bool | None:
        """Whether ``e`` holds when ``algo`` runs; ``None`` when that depends on something else."""
        if isinstance(e, ast.BoolOp):
            values = [self.value(v, algo, flags=flags) for v in e.values]
            decisive = isinstance(e.op, ast.Or)
            return decisive if decisive in values else None if None in values else not decisive
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            inner = self.value(e.operand, algo, flags=flags)
            return None if inner is None else not inner
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and not e.args:
            holders, owner = self.predicates.get(e.func.attr), final_name(e.func.value)
            if holders is not None and (owner == "self" or "algo" in owner):
                return algo in holders
        if isinstance(e, ast.Compare) and len(e.ops) == 1 and "algo" in final_name(e.left):
            right = e.comparators[0]
            if isinstance(right, ast.Attribute) and is_name(right.value, ALGORITHM_ENUM):
                return (algo == right.attr) == isinstance(e.ops[0], ast.Eq | ast.Is)
        if flags and isinstance(e, ast.Attribute):
            return self.flag(e.attr, algo)
        return None

    def holds(self, guards: tuple[Guard, ...], algo: str) -> bool | None:
        out: bool | None = True
        for gd in guards:
            v = self.value(gd.test, algo)
            v = v if v is None or gd.positive else not v
            if v is False:
                return False
            out = out if v else None
        return out

    def assign(self, assigned: list[tuple[str, tuple[Guard, ...]]]) -> None:
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

    def _workers(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, algo: str) -> list[ClassNode]:
        imported = {
            a.asname or a.name: (absolute_module(SPEC_INFO, n), a.name)
            for n in ast.walk(fn)
            if isinstance(n, ast.ImportFrom)
            for a in n.names
        }
        out: list[ClassNode] = []
        for name in self._returns(fn.body, algo)[0]:
            module, attr = imported.get(name, ("", name))
            path = self.mods.path_of(module) if module else SPEC_INFO
            found = self.mods.resolve(path, attr) if path else None
            if isinstance(found, ClassNode) and all(found is not c for c in out):
                out.append(found)
        return out

    def _returns(self, stmts: list[ast.stmt], algo: str) -> tuple[list[str], bool]:
        """Names ``stmts`` can return under ``algo``, and whether they can fall through."""
        names: list[str] = []
        for st in stmts:
            if isinstance(st, ast.Return | ast.Raise):
                names += [st.value.id] if isinstance(st, ast.Return) and isinstance(st.value, ast.Name) else []
                return names, False
            if isinstance(st, ast.If):
                v = self.value(st.test, algo, flags=False)
                through = False
                for branch in [st.body] if v is True else [st.orelse] if v is False else [st.body, st.orelse]:
                    found, falls = self._returns(branch, algo)
                    names, through = names + found, through or falls
                if not through:
                    return names, False
        return names, True

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

    def follow(path: str, expr: ast.expr) -> tuple[str, Function] | None:
        return mods.function(path, expr, (SPECULATIVE, MODEL_EXECUTOR))

    def scan(path: str, role_of: RoleOf) -> None:
        module = mods.parse(path)
        collector = Collector(path, role_of, frozenset({TARGET, DRAFT, RUNNER}), follow)
        collector.body(module.body if module else [], (), {})
        algos.assign(collector.assigned)
        if collector.capped:
            algos.notes.append(f"{path}: more than {MAX_FOLLOWED} helper calls given a model; the rest not followed")
        sites.extend(dataclasses.replace(s, role=_runner_role(s)) if s.role == RUNNER else s for s in collector.sites)

    for path in mods.tree.list(SPECULATIVE):
        if path.endswith(".py"):
            scan(path, worker_role)
    pending = [p for p in mods.tree.list(MODEL_EXECUTOR) if p.endswith(".py")]
    words = {f".{p}(".encode() for p in algos.predicates}
    while True:
        found = [p for p in pending if any(w in (mods.data(p) or b"") for w in words)]
        if not found:
            return sites
        pending = [p for p in pending if p not in found]
        for path in found:
            scan(path, executor_role)
        words |= {n.encode() for n in algos.assigned if algos.flag(n, NO_ALGORITHM) is False}


def _runner_role(site: Site) -> str:
    draft = any(positive and final_name(test) == "is_draft_worker" for positive, test, _ in guard_facts(site.guards))
    return DRAFT if draft else TARGET
