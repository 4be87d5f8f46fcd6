"""Modules and classes of a tree: imports followed, bases resolved, members and delegates read, over each
file's facts (:mod:`sgpatch.interface.facts`), kept in the cache by the file's bytes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sgpatch.errors import ConfigError
from sgpatch.interface import facts
from sgpatch.interface.facts import Binding, EnumFacts, MethodFacts, ScanFacts
from sgpatch.interface.loader import Loader
from sgpatch.interface.model import (
    SPEC_INFO,
    Base,
    ClassInfo,
    ClassRef,
    ClassResolution,
    Delegate,
    Location,
)
from sgpatch.interface.syntax import Function, dotted_path
from sgpatch.pyast import parse_python
from sgpatch.source.tree import SourceTree

if TYPE_CHECKING:
    from sgpatch.cache import Cache

T = TypeVar("T")


class ClassFileMissing(ConfigError):
    """The file that should hold an interface's class is not in the tree (exit 2 for a checkout; an install
    whose file is gone reports it as a failed check)."""


@dataclass(eq=False)
class ClassNode:
    """A class of the tree as the module tables see it: its bases, members and ``__init__`` assignments."""

    name: str
    path: str
    line: int
    bases: list[tuple[str, ClassNode | str]]
    members: dict[str, tuple[str, int]]  # name -> (kind, line)
    inits: tuple[tuple[str, str, str, int], ...]  # self.<attr> = <callee>(...) in __init__: attr, dotted, written, line


class Modules:
    """The tree's modules, read on demand: each file's facts from the cache when its bytes are known there,
    else parsed (and kept); its top-level bindings and classes resolved across the tree."""

    def __init__(self, tree: SourceTree, cache: Cache | None = None) -> None:
        self.tree = tree
        self.cache = cache
        self._data: dict[str, bytes | None] = {}
        self._sha: dict[str, str] = {}
        self._asts: dict[str, facts.Parsed | None] = {}
        self._parts: dict[tuple[str, ...], Any] = {}
        self._classes: dict[tuple[str, int], ClassNode | None] = {}
        self.load = Loader()

    def data(self, path: str) -> bytes | None:
        if path not in self._data:
            self._data[path] = self.tree.read(path)
        return self._data[path]

    def parse(self, path: str) -> facts.Parsed | None:
        if path not in self._asts:
            data = self.data(path)
            try:
                self._asts[path] = None if data is None else facts.Parsed(path, parse_python(data, filename=path))
            except SyntaxError as exc:
                where = f"{path}:{exc.lineno}" if exc.lineno else path
                raise ConfigError(f"{where}: cannot parse ({exc.msg}) in {self.tree.label}") from exc
            except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
                raise ConfigError(f"{path}: cannot parse ({exc}) in {self.tree.label}") from exc
        return self._asts[path]

    def part(
        self, path: str, what: tuple[str, ...], compute: Callable[[facts.Parsed], Any], read: Callable[[Any], T]
    ) -> T:
        """One part of the facts of the file ``path`` (which exists): kept in the cache under the file's bytes
        (its sha256), its path and ``what``; computed from the parsed file on a miss.  ``read`` is the one
        reader of both (a kept part of the wrong shape is a miss)."""
        memo = (path, *what)
        if memo in self._parts:
            return self._parts[memo]  # type: ignore[no-any-return]
        entry = None
        if self.cache is not None:
            from sgpatch.cache import key

            data = self.data(path)
            assert data is not None
            sha = self._sha.get(path) or self._sha.setdefault(path, hashlib.sha256(data).hexdigest())
            entry = key(facts.KIND, path, sha, *what)
            kept = self.cache.get(facts.KIND, entry)
            if kept is not None:
                try:
                    value = read(kept)
                except facts.MALFORMED:
                    pass
                else:
                    self._parts[memo] = value
                    return value
        module = self.parse(path)
        assert module is not None
        doc = compute(module)
        value = read(doc)
        if self.cache is not None and entry is not None:
            self.cache.put(facts.KIND, entry, doc)
        self._parts[memo] = value
        return value

    def module(self, path: str) -> dict[str, tuple[Binding, ...]] | None:
        """The top-level bindings of ``path``; None when there is no such file."""
        if self.data(path) is None:
            return None
        return self.part(path, ("module",), facts.module_part, self.load.module)

    def scan(self, path: str, role: str) -> ScanFacts | None:
        """The uses on a model in ``path`` (see :func:`sgpatch.interface.facts.scan_part`); None if no such file."""
        if self.data(path) is None:
            return None
        return self.part(path, ("scan", role), lambda m: facts.scan_part(m, role), lambda d: self.load.scan(d, path))

    def method(self, c: ClassNode, name: str) -> MethodFacts | None:
        return self.part(
            c.path,
            ("method", str(c.line), name),
            lambda m: facts.method_part(m, c.line, name),
            self.load.method,
        )

    def enum(self) -> EnumFacts | None:
        """``SpeculativeAlgorithm`` as the tree defines it; None when it does not."""
        if self.data(SPEC_INFO) is None:
            return None
        from sgpatch.interface.spec_enum import read_enum

        return self.part(SPEC_INFO, ("enum",), lambda m: read_enum(m.module), self.load.enum)

    def path_of(self, dotted: str) -> str | None:
        base = "python/" + dotted.replace(".", "/")
        return next(
            (p for p in (base + ".py", base + "/__init__.py") if self.data(p) is not None),
            None,
        )

    def bindings(self, path: str) -> dict[str, tuple[Binding, ...]]:
        return self.module(path) or {}

    def imports(self, path: str, prefix: str) -> set[str]:
        """The tree's modules below ``prefix`` that ``path`` imports at run time, at module level."""
        package = dotted_path(prefix)
        out: set[str] = set()
        for b in (b for binds in self.bindings(path).values() for b in binds):
            if b.kind in ("from", "import") and not b.typing_only and b.module.startswith(package):
                found = (self.path_of(f"{b.module}.{b.attr}") if b.attr else None) or self.path_of(b.module)
                if found:
                    out.add(found)
        return out

    def resolve(self, path: str, name: str, before: int | None = None, depth: int = 0) -> ClassNode | str | None:
        """What ``name`` is in module ``path``: a class of the tree, a dotted name outside it, or ``None``."""
        table = self.bindings(path)
        binds = table.get(name)
        if depth > 16:
            return None
        if not binds:  # maybe through `from x import *`
            for star in table.get("*", ()):
                inner = self.path_of(star.module)
                found = self.resolve(inner, name, None, depth + 1) if inner else None
                if found is not None:
                    return found
            return None
        b = ([b for b in binds if before is None or b.line < before] or binds)[-1]
        if b.kind == "class" and b.cls is not None:
            return self.cls(path, b.cls)
        if b.kind == "import":
            return b.module
        if b.kind == "alias":
            return self.resolve_dotted(path, b.alias, b.line, depth + 1)
        if b.kind != "from":
            return None
        inner = self.path_of(b.module)
        return self.resolve(inner, b.attr, None, depth + 1) if inner else f"{b.module}.{b.attr}"

    def resolve_dotted(
        self, path: str, dotted: str, before: int | None = None, depth: int = 0
    ) -> ClassNode | str | None:
        """What the dotted name (subscripts stripped) means in module ``path``."""
        head, _, rest = dotted.partition(".")
        found = self.resolve(path, head, before, depth) if head else None
        if not rest or not isinstance(found, str):
            return found
        module, _, last = f"{found}.{rest}".rpartition(".")
        inner = self.path_of(module)
        return self.resolve(inner, last) if inner else f"{module}.{last}"

    def function(self, path: str, dotted: str, within: tuple[str, ...], depth: int = 0) -> tuple[str, Function] | None:
        """The module-level function ``dotted`` (``f`` or ``module.f``) names in ``path``, if it is defined
        in a module below one of the ``within`` prefixes (no other module is read to find it).  Its module
        is parsed: it is walked next."""
        head, _, rest = dotted.partition(".")
        binds = self.bindings(path).get(head) if head and depth <= 16 else None
        if not binds:
            return None
        b = binds[-1]
        if b.kind == "other" and b.fn is not None and not rest:
            parsed = self.parse(path)
            fn = parsed.function_node(*b.fn) if parsed else None
            return (path, fn) if fn is not None else None
        if b.kind not in ("from", "import") or (b.kind == "import" and not rest):
            return None
        module_name = f"{b.module}.{b.attr}" if b.kind == "from" and rest else b.module
        if rest:
            module_name, _, name = f"{module_name}.{rest}".rpartition(".")
        else:
            name = b.attr
        if not ("python/" + module_name.replace(".", "/")).startswith(within):
            return None
        inner = self.path_of(module_name)
        return self.function(inner, name, within, depth + 1) if inner else None

    def find_class(self, ref: ClassRef) -> ClassNode:
        if self.module(ref.path) is None:
            raise ClassFileMissing(
                f"{ref.path}: no such file in {self.tree.label}",
                hint=f"looking for class {ref.name}",
            )
        found = self.resolve(ref.path, ref.name)
        if not isinstance(found, ClassNode):
            raise ConfigError(f"{ref.path}: class {ref.name} not found in {self.tree.label}")
        return found

    def cls(self, path: str, line: int) -> ClassNode | None:
        key = (path, line)
        if key not in self._classes:
            found = self.part(path, ("class", str(line)), lambda m: facts.class_part(m, line), self.load.cls)
            if found is None:  # the module's kept facts name a class its bytes do not define
                self._classes[key] = None
                return None
            made = ClassNode(found.name, path, line, [], dict(found.members), found.inits)
            self._classes[key] = made  # registered before its bases: a cycle stops here
            for written, dotted in found.bases:
                resolved = self.resolve_dotted(path, dotted, line)
                made.bases.append((written, resolved if resolved is not None else written))
        return self._classes[key]


def base_chain(start: ClassNode) -> list[ClassNode]:
    out: list[ClassNode] = []
    todo = [start]
    while todo:
        c = todo.pop(0)
        if all(c is not seen for seen in out):
            out.append(c)
            todo[:0] = [b for _, b in c.bases if isinstance(b, ClassNode)]
    return out


def provider_of(chain: list[ClassNode], name: str) -> tuple[ClassNode, str, int] | None:
    return next(((c, *c.members[name]) for c in chain if name in c.members), None)


def class_info(c: ClassNode) -> ClassInfo:
    bases = tuple(
        Base(w, r.name, Location(r.path, r.line)) if isinstance(r, ClassNode) else Base(w, r, None) for w, r in c.bases
    )
    return ClassInfo(c.name, Location(c.path, c.line), bases)


def delegates_of(
    mods: Modules, chain: list[ClassNode], attr: str | None = None
) -> Iterator[tuple[str, Delegate, ClassNode | None]]:
    for c in chain:
        for name, callee, written, line in c.inits:
            if attr is None or name == attr:
                found = mods.resolve_dotted(c.path, callee)
                cls = found if isinstance(found, ClassNode) else None
                yield (
                    name,
                    Delegate(name, written, Location(c.path, line), class_info(cls) if cls else None),
                    cls,
                )


def resolution_of(mods: Modules, ref: ClassRef, start: ClassNode) -> ClassResolution:
    chain = base_chain(start)
    external = tuple(dict.fromkeys(r for c in chain for _, r in c.bases if isinstance(r, str)))
    delegates = tuple(d for _, d, _ in delegates_of(mods, chain))
    return ClassResolution(ref, tuple(class_info(c) for c in chain), external, delegates)
