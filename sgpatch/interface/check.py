"""``check_interface``: required names from the tree's call sites against what the classes provide."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sgpatch.errors import ConfigError
from sgpatch.interface.algorithms import Algorithms, scan_sites
from sgpatch.interface.external import ExternalBases, provider
from sgpatch.interface.model import (
    DRAFT,
    MAX_FORWARD_DEPTH,
    NO_ALGORITHM,
    SPEC_INFO,
    TARGET,
    CallSite,
    ClassRef,
    DelegationGap,
    Gap,
    InterfaceReport,
    Location,
    OtherUse,
    Requirement,
    StaleName,
)
from sgpatch.interface.modules import (
    ClassNode,
    Modules,
    base_chain,
    class_info,
    delegates_of,
    provider_of,
    resolution_of,
)
from sgpatch.interface.sites import Site
from sgpatch.pyast import without_collector
from sgpatch.source.tree import SourceTree

if TYPE_CHECKING:
    from sgpatch.cache import Cache

# ---------------------------------------------------------------------------------------- check


@without_collector  # the ASTs and the tables built on them stay alive until the report is made
def check_interface(
    tree: SourceTree,
    *,
    target: ClassRef,
    draft: ClassRef | None = None,
    algorithm: str = "eagle3",
    declared_target: Sequence[str] = (),
    declared_draft: Sequence[str] = (),
    externals: ExternalBases | None = None,
    cache: Cache | None = None,
) -> InterfaceReport:
    """Every name ``algorithm`` uses on the target (and draft) model that the class does not provide.

    ``externals`` knows the members of bases outside the tree (``torch.nn.Module``); by default they are
    read from this interpreter's torch, else from the list sgpatch keeps.  ``cache`` (None: none) keeps
    each source file's facts (:mod:`sgpatch.interface.facts`) by its bytes; the check runs every time.
    Raises :class:`ConfigError` when a class, its file or the algorithm is not in the tree.
    """
    mods = Modules(tree, cache)
    externals = externals or ExternalBases(cache=cache)
    classes = {
        TARGET: mods.find_class(target),
        DRAFT: mods.find_class(draft) if draft else None,
    }
    algos = Algorithms(mods)
    algo = algorithm.upper()
    if algo not in algos.members or algo == NO_ALGORITHM:
        known = ", ".join(m.lower() for m in algos.members if m != NO_ALGORITHM)
        raise ConfigError(
            f"unknown speculative algorithm {algorithm!r} in {tree.label}",
            hint=f"known: {known}",
        )
    notes: list[str] = []
    if not algos.workers[algo]:
        notes.append(f"{SPEC_INFO}: create_worker names no worker class for {algo}; worker call sites not used")

    mine: dict[tuple[str, str], list[Site]] = {}
    others: dict[tuple[str, str], tuple[set[str], list[Site]]] = {}
    for s in scan_sites(mods, algos):
        if algos.runs(s, algo):
            mine.setdefault((s.role, s.name), []).append(s)
            continue
        users = {m for m in algos.members if m not in (algo, NO_ALGORITHM) and algos.runs(s, m)}
        if users:
            entry = others.setdefault((s.role, s.name), (set(), []))
            entry[0].update(users)
            entry[1].append(s)
    notes += algos.notes

    requirements: list[Requirement] = []
    gaps: list[Gap] = []
    forwards: list[DelegationGap] = []
    stale: list[StaleName] = []
    for role, declared in ((TARGET, declared_target), (DRAFT, declared_draft)):
        cls = classes[role]
        chain = base_chain(cls) if cls else []
        used = {name for r, name in mine if r == role}
        for name in (n for n in declared if n not in used):
            stale.append(StaleName(role, name, tuple(sorted(others.get((role, name), (set(), []))[0]))))
        for name in sorted(used | set(declared)):
            sites = _call_sites(mine.get((role, name), []))
            member = provider(chain, name, externals)
            req = Requirement(role, name, sites, name in declared, member)
            requirements.append(req)
            if cls is None or req.optional:
                continue
            if member is None:
                method = req.declared or any(s.access == "call" for s in sites)
                gaps.append(
                    Gap(
                        role,
                        name,
                        cls.name,
                        sites,
                        _fix(mods, cls, chain, name, externals, method=method),
                    )
                )
            else:
                forwards += _forwards(mods, chain, name, role, sites, notes, externals, set())
        if cls is None and used:
            notes.append(f"no {role} class given: {len(used)} {role} name(s) listed, not checked")

    refs = {TARGET: target, DRAFT: draft}
    resolutions = {role: resolution_of(mods, ref, c) for role, ref in refs.items() if ref and (c := classes[role])}
    for res in resolutions.values():
        notes += externals.notes(res.external_bases, res.ref.name)
    return InterfaceReport(
        tree=tree.label,
        algorithm=algorithm.lower(),
        workers=tuple(class_info(w) for w in algos.workers[algo]),
        target=resolutions[TARGET],
        draft=resolutions.get(DRAFT),
        requirements=tuple(requirements),
        gaps=tuple(gaps),
        delegation_gaps=tuple(dict.fromkeys(forwards)),
        stale=tuple(stale),
        other_uses=tuple(
            OtherUse(role, name, tuple(sorted(users)), _call_sites(found))
            for (role, name), (users, found) in sorted(others.items())
        ),
        notes=tuple(dict.fromkeys(notes)),
    )


def _call_sites(sites: list[Site]) -> tuple[CallSite, ...]:
    return tuple(sorted({s.call_site() for s in sites}, key=lambda c: (c.path, c.line, c.access)))


def _fix(
    mods: Modules, cls: ClassNode, chain: list[ClassNode], name: str, externals: ExternalBases, *, method: bool
) -> str:
    ways = [f"define {name}() on {cls.name}" if method else f"set self.{name} in {cls.name}.__init__"]
    for attr, _, delegate in delegates_of(mods, chain):
        found = provider(base_chain(delegate), name, externals) if delegate else None
        if delegate and found:
            via = "" if found.class_name == delegate.name else f" via {found.class_name}"
            ways.append(f"forward to self.{attr} ({delegate.name} provides it{via}, {found.location})")
    return ", or ".join(ways)


def _forwards(
    mods: Modules,
    chain: list[ClassNode],
    name: str,
    role: str,
    call_sites: tuple[CallSite, ...],
    notes: list[str],
    externals: ExternalBases,
    seen: set[tuple[int, str]],
) -> list[DelegationGap]:
    """Gaps behind a provided method that calls ``self.<attr>.<x>(...)`` when the delegate lacks ``x``."""
    found = provider_of(chain, name)
    if found is None or found[1] != "method" or (id(found[0]), name) in seen or len(seen) > MAX_FORWARD_DEPTH:
        return []
    seen.add((id(found[0]), name))
    owner = found[0]
    fn = mods.method(owner, name)
    if fn is None:  # the class's kept facts name a method its bytes do not define
        return []
    attrs = {attr for c in chain for attr, _, _, _ in c.inits}
    out: list[DelegationGap] = []
    for attr, called, line in (c for c in fn.calls if c[0] in attrs):
        for _, delegate, cls in delegates_of(mods, chain, attr):
            if cls is None:
                notes.append(f"{owner.path}:{line}: self.{attr} is {delegate.written}, outside the tree; not checked")
            elif provider(base_chain(cls), called, externals) is None:
                method = Location(owner.path, fn.line)
                out.append(
                    DelegationGap(
                        role,
                        name,
                        method,
                        attr,
                        cls.name,
                        called,
                        Location(owner.path, line),
                        call_sites,
                    )
                )
            else:
                out += _forwards(mods, base_chain(cls), called, role, call_sites, notes, externals, seen)
    return out
