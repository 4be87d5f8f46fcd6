"""Build the patched sglang wheel from a clean export of a patched checkout (SPEC §8).

Refuse anything but a clean patched checkout; export HEAD as a fresh git work
tree (never the checkout itself, whose ``build/lib`` a second build would pack,
and never ``git archive``, whose missing ``.git`` hides package data from
setuptools-scm); build it with PyPA ``build`` under a forced version and
``SOURCE_DATE_EPOCH``; rewrite ``Requires-Dist``, add the provenance, re-zip
deterministically; check the result; write the install recipe beside it.  The
same inputs reuse the previous wheel (and check it again: a check's result is never kept).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sgpatch.atomic import write_atomic
from sgpatch.cache import EXPORTS, Cache
from sgpatch.checkout.state import CheckoutState, check_base_files, inspect, open_checkout
from sgpatch.checkout.stop.here import refuse_stopped, stopped_in
from sgpatch.config import Config, Stack
from sgpatch.errors import BuildError, CheckoutError
from sgpatch.git.batch import blob_ids_at, read_blobs
from sgpatch.git.repo import Git
from sgpatch.results import Progress
from sgpatch.series.anchors import Anchor, load_anchors
from sgpatch.series.patch import Series
from sgpatch.source.archive import WHEEL_CHECKOUT_EPOCH
from sgpatch.wheel.cache import cache_key, cached_wheel, store_wheel
from sgpatch.wheel.check import check_wheel
from sgpatch.wheel.names import repacked_filename, wheel_filename
from sgpatch.wheel.placing import named_if_checked, unchecked_dir
from sgpatch.wheel.provenance import BuildInputs, wheel_version
from sgpatch.wheel.recipe import install_recipe, recipe_filename
from sgpatch.wheel.results import BuildResult
from sgpatch.wheel.upstream import PinnedWheel, upstream_wheel_for


def _noop(_: str) -> None:
    return None


def _refuse(checkout: Path, stack: Stack, series: Series, *, allow_unpatched: bool) -> tuple[Git, CheckoutState]:
    """The checkout's git and state (its base found); CheckoutError unless clean and patched."""
    g = open_checkout(checkout)
    refuse_stopped(stopped_in(g), f"sgpatch build {stack.name}")
    state = inspect(g, stack, series)
    if state.dirty:
        shown = ", ".join(e[3:] for e in state.dirty[:3]) + (" …" if len(state.dirty) > 3 else "")
        raise CheckoutError(
            f"{checkout}: the work tree has uncommitted changes ({len(state.dirty)}: {shown})",
            hint="build exports the committed tree only; commit, stash or remove the changes first",
        )
    if state.phase == "other" or state.base is None:
        raise CheckoutError(f"{checkout}: {state.problem}", hint="build needs the pinned base plus exactly the series")
    if state.phase == "pristine" and series.patches and not allow_unpatched:
        raise CheckoutError(
            f"{checkout}: is pristine: the series of {stack.name} is not applied",
            hint=f"run 'sgpatch apply {stack.name}' first",
        )
    check_base_files(g, stack, state.base, dict(state.base_blobs))  # read with the state: no git process each
    return g, state


def build_wheels(
    config: Config,
    stack: Stack,
    series: Series,
    checkout: Path,
    out_dir: Path,
    *,
    platforms: tuple[str, ...] = (),
    isolated: bool = True,
    progress: Progress | None = None,
    allow_unpatched: bool = False,
    cache_dir: Path | None = None,
    python: str | None = None,
    cache: Cache | None = None,
    anchors: Sequence[Anchor] | None = None,
) -> tuple[BuildResult, ...]:
    """The stack's patched wheels: built from the sdist (one pure wheel), or, for a release without
    an sdist, upstream's pinned wheels repacked (one per platform tag: all, or those in ``platforms``).
    ``cache`` (None: none): see :func:`build_wheel`.  ``anchors``: the stack's, as the caller read them with
    its series (None: read here, once for every wheel's check)."""
    if not stack.repacks:
        if platforms:
            raise BuildError(
                f"{stack.name}: builds one pure wheel from its sdist; --platform applies to wheel-only releases"
            )
        built = build_wheel(
            config,
            stack,
            series,
            checkout,
            out_dir,
            isolated=isolated,
            progress=progress,
            allow_unpatched=allow_unpatched,
            cache_dir=cache_dir,
            python=python,
            cache=cache,
            anchors=anchors,
        )
        return (built,)
    return repack_wheels(
        config,
        stack,
        series,
        checkout,
        out_dir,
        platforms=platforms,
        progress=progress,
        allow_unpatched=allow_unpatched,
        cache_dir=cache_dir,
        cache=cache,
        anchors=anchors,
    )


def repack_wheels(
    config: Config,
    stack: Stack,
    series: Series,
    checkout: Path,
    out_dir: Path,
    *,
    platforms: tuple[str, ...] = (),
    progress: Progress | None = None,
    allow_unpatched: bool = False,
    cache_dir: Path | None = None,
    cache: Cache | None = None,
    anchors: Sequence[Anchor] | None = None,
) -> tuple[BuildResult, ...]:
    """Upstream's pinned wheels repacked with the checkout's patched files (sgpatch.wheel.repack), checked
    against the wheel each was made from; with ``cache``, the same inputs reuse the wheel kept in
    ``cache_dir`` (checked again all the same)."""
    # the repacking and the download are kept off a sdist stack's rebuild's imports (tests/test_startup.py)
    from sgpatch.source.artifacts import fetch_artifact
    from sgpatch.wheel.repack import repack_wheel, select_wheels

    say = progress or _noop
    checkout, out_dir = _dirs(checkout, out_dir)
    g, state = _refuse(checkout, stack, series, allow_unpatched=allow_unpatched)
    base, head = _based(state), state.head
    out_dir.mkdir(parents=True, exist_ok=True)
    version = wheel_version(stack, series)
    wanted = select_wheels(stack, platforms)
    if not wanted:
        raise BuildError(f"{stack.name}: pins no wheel to repack", hint="pin the release's wheels (sgpatch port)")
    paths = series.touched
    patched = read_blobs(g, head, paths)
    if anchors is None:  # read once for every wheel's check
        anchors = load_anchors(stack.series_dir / "anchors.toml")
    builds = (cache_dir or config.root / ".sgpatch" / "builds").resolve()
    recipe = out_dir / recipe_filename(stack)
    results: list[BuildResult] = []
    before, after = _blob_ids(g, state, paths)
    common = BuildInputs(
        stack=stack,
        series=series,
        version=version,
        phase=state.phase,
        base=base,
        head=head,
        tree=state.head_tree,
        source_date_epoch=WHEEL_CHECKOUT_EPOCH,
        isolated=True,
        before=before,
        after=after,
    )
    for artifact in wanted:
        inputs = dataclasses.replace(common, repacked=artifact)
        name = repacked_filename(artifact, version)
        entry = builds / cache_key(inputs)[:24]
        upstream = fetch_artifact(artifact, stack.sglang_version, progress=say)
        cached = None if cache is None else cached_wheel(entry, name)
        candidate = unchecked_dir(out_dir) / name
        if cached is not None:
            say(f"reusing the cached {name} (inputs unchanged)")
            write_atomic(candidate, cached)
        else:
            say(f"repacking {artifact.filename} as {name}")
            with tempfile.TemporaryDirectory(prefix="sgpatch-repack-") as tmp:
                final = Path(tmp) / name
                repack_wheel(upstream, artifact, final, inputs, patched)
                write_atomic(candidate, final)
        recipe.write_text(install_recipe(stack, version))
        say(f"checking {name} against {artifact.filename}")
        pinned = PinnedWheel(artifact=artifact, release=stack.sglang_version, progress=say)
        report = check_wheel(
            stack,
            series,
            candidate,
            upstream=pinned,
            checkout=checkout,
            cache=cache,
            anchors=anchors,
            head_blobs=dict(after),
        )
        wheel, report = named_if_checked(candidate, out_dir / name, report)
        if report.ok and cached is None and cache is not None:
            store_wheel(entry, wheel, checked=report.sha256)
        done = BuildResult(wheel=wheel, recipe=recipe, version=version, cached=cached is not None, checks=report)
        results.append(done)
    return tuple(results)


def _blob_ids(
    g: Git, state: CheckoutState, paths: Sequence[str]
) -> tuple[tuple[tuple[str, str | None], ...], tuple[tuple[str, str | None], ...]]:
    """``(path, blob id)`` of ``paths`` at the base and at HEAD: as the state read them (the pinned files are
    the files a series touches), else asked of git in one process."""
    at_base, at_head = dict(state.base_blobs), dict(state.head_blobs)
    if all(p in at_base and p in at_head for p in paths):
        return tuple((p, at_base[p]) for p in paths), tuple((p, at_head[p]) for p in paths)
    before, after = blob_ids_at(g, (_based(state), state.head), paths)
    return before, after


def _based(state: CheckoutState) -> str:
    """The base ``_refuse`` found (it refuses a state without one)."""
    assert state.base is not None
    return state.base


def _dirs(checkout: Path, out_dir: Path) -> tuple[Path, Path]:
    checkout = checkout.resolve()
    out_dir = out_dir.resolve()
    if out_dir == checkout or out_dir.is_relative_to(checkout):
        raise BuildError(
            f"{out_dir}: is inside the checkout {checkout}", hint="pass an --out directory outside the checkout"
        )
    return checkout, out_dir


def build_wheel(
    config: Config,
    stack: Stack,
    series: Series,
    checkout: Path,
    out_dir: Path,
    *,
    isolated: bool = True,
    progress: Progress | None = None,
    allow_unpatched: bool = False,
    cache_dir: Path | None = None,
    python: str | None = None,
    cache: Cache | None = None,
    anchors: Sequence[Anchor] | None = None,
    exports: Path | None = None,
) -> BuildResult:
    """Build (or reuse) the patched wheel of ``checkout`` into ``out_dir`` and check it.

    ``isolated=False`` builds with the current environment's setuptools and
    setuptools-scm (offline); ``python`` is the interpreter whose environment that is
    (default: this one).  With ``cache`` (None: none), a wheel built from the same inputs is
    reused from ``cache_dir`` (default ``.sgpatch/builds`` beside VERSIONS.toml), the build
    runs in a persistent export of the checkout (in ``exports``, default the cache's
    ``exports/``), and the checks keep their expensive parts in it; without it, a fresh export
    and nothing kept (``exports`` ignored).  Every check runs on every call: the result's ``checks`` say whether the
    wheel passed.
    """
    if cache is None:
        exports = None  # nothing kept: a fresh export
    elif exports is None:
        exports = cache.directory(EXPORTS)
    say = progress or _noop
    checkout, out_dir = _dirs(checkout, out_dir)
    g, state = _refuse(checkout, stack, series, allow_unpatched=allow_unpatched)
    base, head = _based(state), state.head
    version = wheel_version(stack, series)
    paths = series.touched
    before, after = _blob_ids(g, state, paths)
    inputs = BuildInputs(
        stack=stack,
        series=series,
        version=version,
        phase=state.phase,
        base=base,
        head=head,
        tree=state.head_tree,  # HEAD's tree and the base's date: read with the state, no git process each
        source_date_epoch=int(state.base_date.split()[0]),
        isolated=isolated,
        python=python or sys.executable,
        before=before,
        after=after,
    )
    key = cache_key(inputs)
    builds = (cache_dir or config.root / ".sgpatch" / "builds").resolve()
    entry = builds / key[:24]
    name = wheel_filename(version)
    wheel = out_dir / name
    recipe = out_dir / recipe_filename(stack)

    fresh = unchecked_dir(out_dir) / name  # the wheel takes its name in out_dir only once its checks pass
    cached = None if cache is None else cached_wheel(entry, name)
    if cached is not None:
        say(f"reusing the cached {name} (inputs unchanged)")
        write_atomic(fresh, cached)
        recipe.write_text(install_recipe(stack, version))
    upstream = upstream_wheel_for(stack, Path(name), say)
    if cached is None:
        if upstream is not None:
            upstream.fetch()  # downloaded before the build, not after it (a rebuild may need none: see the check)
        from sgpatch.wheel.fresh import build_fresh  # kept off a rebuild's imports (tests/test_startup.py)

        build_fresh(checkout, exports, builds / "logs" / f"{stack.name}-{key[:12]}.log", inputs, fresh, say)
        recipe.write_text(install_recipe(stack, version))

    say(f"checking {name}")
    report = check_wheel(
        stack,
        series,
        fresh,
        upstream=upstream,
        checkout=checkout,
        cache=cache,
        anchors=anchors,
        head_blobs=dict(after),  # HEAD's blob ids, asked above: the wheel must carry exactly those files
    )
    wheel, report = named_if_checked(fresh, wheel, report)
    if report.ok and cached is None and cache is not None:
        store_wheel(entry, wheel, checked=report.sha256)
    return BuildResult(wheel=wheel, recipe=recipe, version=version, cached=cached is not None, checks=report)
