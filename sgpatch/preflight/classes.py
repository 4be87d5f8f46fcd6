"""An ``architectures`` entry's class in the release: through the registry (``EntryClass``) to the class that
defines it, followed through the model file's imports (read with :mod:`ast`, never imported)."""

from __future__ import annotations

from sgpatch.interface.modules import ClassNode, Modules
from sgpatch.preflight.release import RegistryEntry, ReleaseRules
from sgpatch.source.tree import DirTree


def release_modules(release: ReleaseRules) -> Modules:
    return Modules(DirTree(release.root, label=release.label))


def defining_class(release: ReleaseRules, entry: RegistryEntry) -> ClassNode | None:
    """The class ``entry`` names, followed through the file's imports (None: not a class of the tree)."""
    found = release_modules(release).resolve(entry.file, entry.name)
    return found if isinstance(found, ClassNode) else None


def entry_class(release: ReleaseRules, architecture: str) -> tuple[str, str] | None:
    """``(relative model file, class name)`` for an ``architectures`` entry, through the release's registry:
    the file that defines the class (followed through an import), or None when no ``EntryClass`` lists it."""
    entry = release.registry.get(architecture)
    if entry is None:
        return None
    found = defining_class(release, entry)
    return (found.path, found.name) if found is not None else (entry.file, entry.name)
