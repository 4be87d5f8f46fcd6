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

import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from packaging.utils import canonicalize_name

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
from sgpatch.source.archive import WHEEL_CHECKOUT_EPOCH, Archive
from sgpatch.source.artifacts import fetch_artifact
from sgpatch.wheel.cache import cache_key, cached_wheel, store_wheel
from sgpatch.wheel.check import check_wheel
from sgpatch.wheel.export import clean_export_of
from sgpatch.wheel.names import DIST_NAME, wheel_filename
from sgpatch.wheel.placing import named_if_checked, unchecked_dir
from sgpatch.wheel.provenance import (
    PROVENANCE_NAME,
    BuildInputs,
    dump_provenance,
    make_provenance,
    rewrite_requires,
    wheel_version,
)
from sgpatch.wheel.recipe import install_recipe, recipe_filename
from sgpatch.wheel.repack import repack_wheel, repacked_filename, select_wheels
from sgpatch.wheel.results import BuildResult
from sgpatch.wheel.upstream import PinnedWheel, upstream_wheel_for
from sgpatch.wheel.writer import rezip_wheel


def _noop(_: str) -> None:
    return None


def build_environment(version: str, epoch: int) -> dict[str, str]:
    """The build's environment: the forced version and date; no inherited git or scm overrides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SETUPTOOLS_SCM_"))}
    normalized = canonicalize_name(DIST_NAME).replace("-", "_").upper()
    env.update(
        {
            f"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_{normalized}": version,
            "SOURCE_DATE_EPOCH": str(epoch),
            "PYTHONHASHSEED": "0",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    return env


def _last_line(stderr: bytes) -> str:
    """The backend's last word: the line before build's generic 'Backend subprocess exited',
    else build's own last ERROR line (with its indented details)."""
    lines = [ln.rstrip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("TIP ")]
    generic = [i for i, ln in enumerate(lines) if ln.startswith("ERROR Backend subprocess exited")]
    if generic and generic[-1] > 0:
        return lines[generic[-1] - 1].strip()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("ERROR ")]
    if not errors:
        return lines[-1].strip() if lines else "no output"
    first = errors[-1]
    detail = [ln.strip() for ln in lines[first + 1 :] if ln[:1] in (" ", "\t") and ":" not in ln.strip()[:7]]
    text = lines[first][len("ERROR ") :].strip()
    return f"{text} {', '.join(detail)}".strip() if detail else text


def _run_build(src: Path, dist: Path, log: Path, env: Mapping[str, str], *, isolated: bool, python: str) -> None:
    # -P and a neutral cwd: a ``build`` module in the source tree can never shadow PyPA build.
    cmd = [python, "-P", "-m", "build", "--wheel", "--outdir", str(dist)]
    if not isolated:
        cmd.append("--no-isolation")
    cmd.append(str(src))
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        try:
            proc = subprocess.run(
                cmd,
                cwd=dist.parent,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                check=False,
            )
        except OSError as exc:
            raise BuildError(f"cannot run {python} -m build: {exc}") from exc
        out.write(b"\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        needs = "" if isolated else "; without isolation the current environment needs sglang's build requirements"
        raise BuildError(
            f"building the wheel failed (python -m build exited {proc.returncode}): {_last_line(proc.stderr)}",
            hint=f"the full build log is {log}{needs}",
        )


def _postprocess(built: Path, dest: Path, inputs: BuildInputs) -> None:
    """Rewrite METADATA, add the provenance, re-zip deterministically with a fresh RECORD.

    The other members' deflated bytes are copied as the pinned backend wrote them (zlib level 6,
    as sgpatch compresses), not recompressed, with the sha256 its RECORD lists: the same wheel as a
    full re-zip, in a fraction of the time."""
    dist_info = f"{DIST_NAME}-{inputs.version}.dist-info"
    metadata_name = f"{dist_info}/METADATA"

    def replaced(archive: Archive) -> dict[str, bytes]:
        if metadata_name not in archive:
            raise BuildError(f"{built.name}: has no {metadata_name}")
        metadata, changes = rewrite_requires(archive.read(metadata_name), inputs.stack)
        provenance = dump_provenance(make_provenance(inputs, changes))
        return {metadata_name: metadata, f"{dist_info}/{PROVENANCE_NAME}": provenance}

    # The backend's RECORD rows are reused (no member inflated twice): check_wheel, which every built
    # wheel goes through, recomputes each sha256 against the new RECORD.
    rezip_wheel(built, dest, dist_info, inputs.source_date_epoch, replaced, hashes_from_record=True)


def _in_background(work: Callable[[], None]) -> Callable[[], None]:
    """Start ``work`` in a thread; the returned function waits for it and raises what it raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the waiter
            failed.append(exc)

    thread = threading.Thread(target=run, name="sgpatch-rezip")
    thread.start()

    def wait() -> None:
        thread.join()
        if failed:
            raise failed[0]

    return wait


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
        with tempfile.TemporaryDirectory(prefix="sgpatch-build-") as tmp:
            work = Path(tmp)
            say(f"exporting {head[:12]} to a clean work tree")
            rezipped: Callable[[], None] | None = None
            try:
                with clean_export_of(checkout, head, exports) as src:
                    log = builds / "logs" / f"{stack.name}-{key[:12]}.log"
                    say(f"building {name} ({'isolated' if isolated else 'current environment'}); log: {log}")
                    env = build_environment(version, inputs.source_date_epoch)
                    if isolated and stack.build_requires:
                        # The isolated environment gets exactly the pinned backend, so a later
                        # setuptools cannot change the wheel (WHEEL's Generator line included).
                        constraints = work / "build-constraints.txt"
                        constraints.write_text("".join(f"{r}\n" for r in stack.build_requires))
                        env["PIP_CONSTRAINT"] = str(constraints)
                    _run_build(src / "python", work / "dist", log, env, isolated=isolated, python=inputs.python)
                    built = sorted((work / "dist").glob("*.whl"))
                    if [b.name for b in built] != [name]:
                        found = ", ".join(b.name for b in built) or "nothing"
                        raise BuildError(
                            f"the build produced {found}, expected {name}",
                            hint=f"the version was not forced as expected; see {log}",
                        )
                    say("rewriting Requires-Dist, adding provenance, re-zipping deterministically")
                    final = work / "final" / name
                    final.parent.mkdir()
                    # Re-zipped while the export's build output is removed (on leaving this block).
                    rezipped = _in_background(lambda: _postprocess(built[0], final, inputs))
            except BaseException:
                if rezipped is not None:
                    with contextlib.suppress(BaseException):
                        rezipped()  # waited for (the work directory goes next), its own error dropped
                raise
            if rezipped is not None:
                rezipped()
            write_atomic(fresh, final)
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
