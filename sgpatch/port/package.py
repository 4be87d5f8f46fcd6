"""The release's package as a port reads it: its files read once for the whole port (``moved.KeptFiles``), and
which of them name a name (the proofs that what a hunk changes is gone, or still needed, ask it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sgpatch.port.moved import KeptFiles, package
from sgpatch.port.rebase import Rebase
from sgpatch.series.gone import names_word
from sgpatch.series.needed import ReleaseNames


def release_files(run: Rebase) -> KeptFiles | None:
    """The release's files, read once for the whole port."""
    if run.release is not None and not isinstance(run.release, KeptFiles):
        run.release = KeptFiles(run.release.names, run.release.read)
    return run.release


def named_elsewhere(run: Rebase, path: str) -> Callable[[str], bool] | None:
    """Whether a file of the release (as the series so far left it) other than ``path`` names a name."""
    release = release_files(run)
    if release is None:
        return None
    return lambda name: release.names_elsewhere(name, path, run.current)


def naming_texts(run: Rebase, path: str) -> PackageNaming | None:
    """The Python files of the release (as the series so far left it) other than ``path`` that name a word, with
    their text; None for a word when the package is too large to read."""
    release = release_files(run)
    return PackageNaming(run, release, path) if release is not None else None


class PackageNaming:
    """``naming_texts``: called with a word, the files naming it; told the words about to be asked (``ahead``),
    those that begin alike are found in one pass of the package (``moved.KeptFiles.ask_words``)."""

    def __init__(self, run: Rebase, release: KeptFiles, path: str) -> None:
        self._run, self._release, self._path = run, release, path

    def __call__(self, name: str) -> dict[str, bytes] | None:
        current = self._run.current
        found = self._release.naming(name, self._path, current) - {self._path}
        if any(not p.endswith(".py") for p in found):
            return None  # the package itself, standing in: too large to read
        read = self._release.read([p for p in found if p not in current])
        texts = {p: current[p] if p in current else read[p] for p in found}
        return {p: t for p, t in texts.items() if t is not None}

    def ahead(self, names: Sequence[str]) -> None:
        self._release.ask_words(self._path, [name.encode() for name in names])


def release_names(run: Rebase) -> ReleaseNames:
    """Whether the release (as the series so far left it) names a name: in the file itself or in another file of
    its package (one scan of the package per name)."""
    release = release_files(run)
    seen: dict[tuple[str, str], bool] = {}

    def named(name: str, path: str) -> bool:
        needle = name.encode()
        own = run.current.get(path)
        if own is not None and names_word(own, needle):
            return True
        if release is None:
            return any(text is not None and names_word(text, needle) for text in run.current.values())
        if (name, package(path)) not in seen:
            seen[name, package(path)] = bool(release.naming(name, path, run.current, first=True))  # any will do
        return seen[name, package(path)]

    return named


def words_ahead(run: Rebase) -> Callable[[Sequence[tuple[str, str]]], None]:
    """Told the ``(name, path)`` pairs ``release_names`` is about to be asked: the package's files that name them
    found together (``moved.KeptFiles.ask_words``: names that begin alike in one pass)."""
    release = release_files(run)

    def ahead(pairs: Sequence[tuple[str, str]]) -> None:
        if release is None:
            return
        by_package: dict[str, tuple[str, set[bytes]]] = {}  # one pass per package, whichever of its files asks
        for name, path in pairs:
            by_package.setdefault(package(path), (path, set()))[1].add(name.encode())
        for path, needles in by_package.values():
            release.ask_words(path, needles)

    return ahead
