"""The new stack's table and its checkout: what a port starts from."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from sgpatch.cache import Cache, key
from sgpatch.checkout.extract import check_wheels_agree, wheel_tree
from sgpatch.checkout.fetch import create_pypi_checkout
from sgpatch.config import Artifact, InstallRecipe, Stack
from sgpatch.config.pins import RENAMES, check_build_requires, port_pins
from sgpatch.errors import SourceError
from sgpatch.git.attributes import write_info_attributes
from sgpatch.git.batch import blob_ids
from sgpatch.git.clone import clone
from sgpatch.git.repo import Git
from sgpatch.port.outputs import new_stack_name
from sgpatch.port.parallel import Forked, Later, can_fork
from sgpatch.results import Progress
from sgpatch.source.archive import Archive
from sgpatch.source.artifacts import fetch_artifact, in_cache
from sgpatch.source.release import Release


def new_stack(
    old: Stack,
    version: str,
    release: Release,
    commit: str | None,
    series_dir: Path,
    config: tuple[Path, str],
    *,
    opened: Archive | None = None,
) -> tuple[Stack, tuple[str, ...]]:
    """The new stack's table: the old one's with the release's own pins (install, overrides, build backend),
    and how those pins changed.  ``opened``: the release's file the port holds open (``Release.metadata_file``)."""
    source, metadata = release.metadata_file(opened)
    carried = port_pins(old, version, metadata, config=config, source=source)
    declared = release.build_system_requires()
    if declared is not None:  # a source build: the pinned backend must be one the release accepts
        check_build_requires(old.build_requires, declared, where=f"{release.source[0].filename}: pyproject.toml")
    note = old.install.note
    for before, after in RENAMES.items():
        if any(c.startswith(f"{before} renamed") for c in carried.changes):
            note = note.replace(before, after)
    new = dataclasses.replace(
        renamed(old, version, commit),
        series_dir=series_dir,
        pypi_commit=None,
        artifacts=release.artifacts,
        files=(),
        requires=carried.requires,
        install=InstallRecipe(old.install.extra_index_urls, carried.pins, note),
        build_requires=old.build_requires if declared is not None else (),
        # Without upstream's commit a git checkout cannot be checked: the new stack defaults to PyPI.
        default_source=old.default_source if commit else "pypi",
    )
    return new, carried.changes


def renamed(old: Stack, version: str, commit: str | None) -> Stack:
    """The old stack under the new release's name, version, tag and upstream commit: all a checkout of the release
    is laid out by but its commit message (``new_stack`` adds the release's own pins)."""
    return dataclasses.replace(
        old, name=new_stack_name(old, version), sglang_version=version, tag=f"v{version}", commit=commit
    )


def lay_out_ahead(
    stack: Stack, artifact: Artifact, path: Path, into: Path, message: Later[str]
) -> tuple[str, str, str | None]:
    """``make_checkout`` from PyPI, started before the index answered (``port.ahead``): ``stack`` is ``renamed``,
    ``artifact`` the file the cache guessed; the commit waits for its message (``message``), which names every
    pinned wheel: the port hands it over once the index named the same file, or stops this call."""
    commit = create_pypi_checkout(stack, path, into, artifact, message=message.get)
    return commit, commit, stack.commit


T = TypeVar("T")


class Background(Generic[T]):
    """``func(*args, **kwargs)`` in a daemon thread; ``result`` waits for it and returns or raises what it did.

    Only for work that takes no lock another thread may take and runs no git command that moves a checkout
    (those have a ``preexec_fn``, unsafe beside threads)."""

    def __init__(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = func(*args, **kwargs)
            except BaseException as exc:  # handed to the caller by result()
                self._error = exc

        self._thread = threading.Thread(target=run, name=f"sgpatch-{func.__name__}", daemon=True)
        self._thread.start()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def close(self) -> None:
        """Nothing to stop: a daemon thread ends with the process."""


def in_background(func: Callable[..., T], *args: Any, **kwargs: Any) -> Forked[T] | Background[T]:
    """``func(*args, **kwargs)`` beside this process: in a forked child where one may be forked
    (``port.parallel.can_fork``: then no thread of ours holds the interpreter lock while the series is judged,
    and the judging may fork workers of its own), else in a thread.  ``result`` and ``close`` as above."""
    return Forked(func, *args, **kwargs) if can_fork() else Background(func, *args, **kwargs)


class WheelsAgree:
    """``check_wheels_agree`` beside the port (``in_background``: a forked child, else a thread), while the port
    lays out the checkout and judges the series: it reads every pinned wheel whole.  A wheel not in the cache
    yet is downloaded first, here, where its progress is shown (and every wheel, where no child can be forked:
    a download runs from the main thread only); the child checks each wheel's sha256 as it reads it (on an
    SGLang release, 8 wheels of 7 MB each: read here, 0.1 to 0.4 s before the series is judged).  With a
    ``cache`` each wheel's file digests are kept under its sha256 (work, not an answer: the comparison runs every
    time)."""

    def __init__(self, stack: Stack, *, cache: Cache | None = None, progress: Progress | None = None) -> None:
        self._check: Forked[tuple[str, ...]] | Background[tuple[str, ...]] | None = None
        if len(stack.wheels) > 1:
            forked = can_fork()
            for artifact in stack.wheels:
                if not forked or not in_cache(artifact):
                    fetch_artifact(artifact, stack.sglang_version, progress=progress)

            def tree_of(artifact: Artifact, path: Path) -> dict[str, bytes]:
                return _cached_tree(cache, artifact, path)

            self._check = in_background(check_wheels_agree, stack, tree_of=tree_of)

    def result(self) -> None:
        """Wait for the comparison; SourceError if two wheels differ."""
        if self._check is not None:
            self._check.result()

    def close(self) -> None:
        """Stop a comparison whose answer is no longer wanted (the port failed before it)."""
        if self._check is not None:
            self._check.close()


def _cached_tree(cache: Cache | None, artifact: Artifact, path: Path) -> dict[str, bytes]:
    """``wheel_tree`` of a pinned wheel (its sha256 checked by the download), kept in ``cache`` under it."""
    entry = key("wheel-trees", artifact.sha256)
    doc = cache.get("wheel-trees", entry) if cache is not None else None
    try:
        if isinstance(doc, dict) and isinstance(doc["members"], dict):
            return {str(name): bytes.fromhex(value) for name, value in doc["members"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        pass  # an entry of another shape: a miss
    tree = wheel_tree(path, sha256=artifact.sha256)  # the cache keeps what was read from checked bytes
    if cache is not None:
        cache.put("wheel-trees", entry, {"members": {name: value.hex() for name, value in tree.items()}})
    return tree


def make_checkout(
    stack: Stack, release: Release, into: Path, paths: Sequence[str], *, source: str, progress: Progress | None
) -> tuple[str, str, str | None]:
    """The new release as a git checkout in ``into``: (base commit, pypi commit, upstream commit).

    With the git source the base is upstream's tag; the PyPI artifact is still
    laid out (the new stack pins it) and must hold the same ``paths``.  That the
    pinned wheels agree is the caller's to check (``WheelsAgree``).
    """
    artifact, path = release.source
    if source == "pypi":
        if progress:
            progress(f"laying out {artifact.filename} as a git checkout")
        pypi_commit = create_pypi_checkout(stack, path, into, artifact)
        return pypi_commit, pypi_commit, stack.commit
    url = stack.git_url
    if not url:
        raise SourceError(f"stack {stack.name} has no git_url for --source git")
    if progress:
        progress(f"cloning {url} at {stack.tag}")
    into.parent.mkdir(parents=True, exist_ok=True)
    g, commit = clone(url, into, tag=stack.tag)
    if stack.commit and commit != stack.commit:
        raise SourceError(f"{url}: tag {stack.tag} is {commit}, not the given --commit {stack.commit}")
    g.checkout_branch(f"sgpatch/{stack.name}", commit)
    write_info_attributes(g.git_dir())
    with tempfile.TemporaryDirectory(prefix="sgpatch-pypi-") as tmp:
        laid_out = Path(tmp) / "co"
        pypi_commit = create_pypi_checkout(dataclasses.replace(stack, commit=commit), path, laid_out, artifact)
        other = Git(laid_out)
        for (p, laid), (_, tagged) in zip(blob_ids(other, pypi_commit, paths), blob_ids(g, commit, paths), strict=True):
            if laid != tagged:
                raise SourceError(
                    f"{p}: {artifact.filename} and {url} at {stack.tag} differ",
                    hint="the new stack would pin two different sources; port with --source pypi",
                )
    return commit, pypi_commit, commit
