"""Pinned sources: a checkout made from the PyPI artifact (sgpatch.source.artifacts downloads it,
sgpatch.source.archive reads it) or cloned with git.

A ``pypi`` checkout is built deterministically from the pinned artifact: files
laid out under ``python/`` as upstream has them, written as blobs without
filters, committed with a fixed identity and the artifact's own newest
timestamp, so the commit SHA is the same on every machine.  A release PyPI
ships only as platform wheels pins one wheel per CPython version and platform;
a host makes the checkout from the one for its own tags (else any pinned one).
Such a checkout holds every file but the compiled extensions (``*.so``), without
executable bits and with a fixed date, since those are what differ between the
wheels: the same commit from any of them (``check_wheels_agree`` proves it at
``port`` time, ``pypi_commit`` at every fetch).

Nothing half-made is ever left where the user looks: a download enters the
cache only after its hash matched, and a checkout is built in a hidden
directory beside its target and renamed into place when complete.  Both steps
run under a lock; what a killed run left (``.download-*``, ``.<name>.sgpatch-new-*``)
is removed by the next one.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from sgpatch.checkout.extract import extract_archive, index_entry
from sgpatch.config import Artifact, Stack
from sgpatch.errors import CheckoutError, SourceError
from sgpatch.git.attributes import write_info_attributes
from sgpatch.git.clone import check_git_url, check_ref_name, clone
from sgpatch.git.index import index_file, write_index
from sgpatch.git.pack import blob_pack
from sgpatch.git.repo import Git
from sgpatch.lock import Held, exclusive, pause
from sgpatch.results import Progress
from sgpatch.source.archive import Kind
from sgpatch.source.artifacts import cache_root, fetch_artifact, trusted_dir

# --------------------------------------------------------------------------- checkouts


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What ``fetch`` made: the checkout, its commit and the artifact it came from."""

    stack: str
    source: str
    checkout: Path
    commit: str
    created: bool
    artifact: Path | None


def _prepare_target(into: Path) -> None:
    if into.is_symlink() or (into.exists() and (not into.is_dir() or any(into.iterdir()))):
        raise CheckoutError(
            f"{into}: exists and is not an empty directory",
            hint="pass --into DIR for a new checkout, or remove the directory",
        )


_STAGING = ".sgpatch-new-"


def target_lock_path(into: Path) -> Path:
    """Where the lock on creating ``into`` lives: in the user's cache, named by ``into``'s real path.

    Never beside ``into``: its parent may be shared (``/tmp``, a team directory)
    and anyone there could plant a link under a predictable name.
    """
    real = os.path.realpath(into)
    key = hashlib.sha256(os.fsencode(real)).hexdigest()[:32]
    return cache_root() / "locks" / f"fetch-{key}.lock"


def _target_lock(into: Path, progress: Progress | None = None) -> AbstractContextManager[Held]:
    """The lock on creating ``into`` (``target_lock_path``), removed on release."""
    into.parent.mkdir(parents=True, exist_ok=True)
    lock = target_lock_path(into)
    trusted_dir(lock.parent.name)  # the locks folder: 0700, the user's own, not a link (else exit 3)
    return exclusive(lock, what=str(into), command="fetch", notify=progress)


@contextmanager
def _staged(into: Path) -> Iterator[Path]:
    """A path beside ``into`` to build the checkout in; removed unless ``_publish`` moved it.

    Call under ``_target_lock``: staging directories a killed run left are removed first.
    """
    for stale in into.parent.glob(f".{into.name}{_STAGING}*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = into.parent / f".{into.name}{_STAGING}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        yield staging
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def remove_staging(into: Path, pid: int) -> None:
    """What a layout into ``into`` by process ``pid`` left beside it, once that process is gone: one killed before
    it could unwind (SIGKILL) leaves its staging directory."""
    for stale in into.parent.glob(f".{into.name}{_STAGING}{pid}-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _publish(staging: Path, into: Path) -> None:
    """Rename the complete checkout into place (``into`` is absent or an empty directory)."""
    pause("fetch:staged")
    try:
        os.rename(staging, into)
    except OSError as exc:
        raise CheckoutError(
            f"{into}: cannot move the new checkout into place: {exc.strerror}",
            hint="pass --into DIR for a new checkout, or remove the directory",
        ) from None


def pypi_commit_message(stack: Stack, artifact: Artifact) -> str:
    if artifact.kind == "wheel":
        wheels = sorted(stack.wheels or (artifact,), key=lambda a: a.filename)
        pins = "".join(f"Sgpatch-Source: pypi {a.filename}\nSgpatch-Source-Sha256: {a.sha256}\n" for a in wheels)
        return (
            f"sglang {stack.sglang_version} from PyPI wheels\n\n"
            f"Laid out under python/ as upstream {stack.tag} has it; packaging output\n"
            f"(*.dist-info, sglang/_version.py) and compiled extensions (*.so) left out:\n"
            f"the files every pinned wheel carries alike, so any of them makes this commit.\n\n"
            + pins
            + (f"Upstream-Commit: {stack.commit}\n" if stack.commit else "")
        )
    return (
        f"sglang {stack.sglang_version} from PyPI {artifact.filename}\n\n"
        f"Laid out under python/ as upstream {stack.tag} has it; packaging output\n"
        f"(PKG-INFO, setup.cfg, *.egg-info, sglang/_version.py) left out.\n\n"
        f"Sgpatch-Source: pypi {artifact.filename}\n"
        f"Sgpatch-Source-Sha256: {artifact.sha256}\n" + (f"Upstream-Commit: {stack.commit}\n" if stack.commit else "")
    )


Check = Callable[[Git, str], None]


def create_pypi_checkout(
    stack: Stack,
    archive: Path,
    into: Path,
    artifact: Artifact,
    *,
    check: Check | None = None,
    message: Callable[[], str] | None = None,
) -> str:
    """Lay the artifact out as a git checkout in ``into``; returns the deterministic commit.

    The checkout is built beside ``into`` and renamed into place only when
    complete and accepted by ``check`` (called with the new repository and
    commit), so a failure or a kill never leaves a half-made checkout at ``into``.
    ``message``: the commit's message, asked for when the commit is made (by default
    ``pypi_commit_message``; a port laying the checkout out before the index answered
    is handed it then).
    """
    check_ref_name(stack.tag)
    _prepare_target(into)
    with _target_lock(into), _staged(into) as staging:
        _prepare_target(into)
        g = Git(staging)
        g.init(branch=f"sgpatch/{stack.name}")
        try:
            kind: Kind = "sdist" if artifact.kind == "sdist" else "wheel"
            with blob_pack(g) as pack:  # one pack, not a loose object per file; the commit's trees in it too
                members, newest = extract_archive(archive, staging, kind, sha256=artifact.sha256, blobs=pack)
                modes = [("100755" if m.executable else "100644", m.path) for m in members]
                text = message() if message is not None else pypi_commit_message(stack, artifact)
                pack.commit(modes, text, f"{newest} +0000")
        except OSError as exc:
            raise SourceError(f"{archive}: cannot lay out {artifact.filename}: {exc}") from None
        commit = pack.commit_id
        if commit is None:  # the pack is done and its commit was asked for: never
            raise CheckoutError(f"{staging}: the checkout's commit was not written")
        # the index, with each file's stat data as it was written (git's read-tree and refresh would hash them again)
        entries = [index_entry(m, oid) for m, oid in zip(members, pack.ids, strict=True)]
        write_index(g.git_dir(), index_file(entries, pack.trees))
        g.set_ref("HEAD", commit)
        g.tag(stack.tag, commit)
        if check is not None:
            check(g, commit)
        _publish(staging, into)
    return commit


def create_git_checkout(stack: Stack, url: str, into: Path, *, check: Check | None = None) -> str:
    """Clone ``url`` at the stack's tag; the tag must name the pinned commit.

    Only https, ssh and file URLs (or a local path) are accepted; the clone is
    made beside ``into`` and renamed into place when verified.
    """
    if stack.commit is None:
        raise SourceError(f"stack {stack.name} pins no upstream commit to check a clone against; use --source pypi")
    target = check_git_url(url, cwd=Path.cwd())
    check_ref_name(stack.tag)
    _prepare_target(into)
    with _target_lock(into), _staged(into) as staging:
        _prepare_target(into)
        g, commit = clone(target, staging, tag=stack.tag)
        if stack.commit is None:
            raise CheckoutError(
                f"{stack.name} pins no upstream commit, so a git checkout cannot be checked against it",
                hint="use the pypi source, or add the commit of the tag to VERSIONS.toml",
            )
        if commit != stack.commit:
            raise CheckoutError(
                f"{url}: tag {stack.tag} is commit {commit}, but {stack.name} pins {stack.commit}",
                hint="the repository is not upstream's, or the tag moved",
            )
        g.checkout_branch(f"sgpatch/{stack.name}", commit)
        write_info_attributes(g.git_dir())
        if check is not None:
            check(g, commit)
        _publish(staging, into)
    return commit


def fetch(
    stack: Stack,
    into: Path,
    *,
    source: str | None = None,
    url: str | None = None,
    progress: Progress | None = None,
) -> FetchResult:
    """Create the stack's checkout in ``into`` (or accept the one there) from the pinned source."""
    kind = source or stack.default_source
    if kind not in ("git", "pypi"):
        raise SourceError(f"unknown source {kind!r}: use pypi or git")
    if into.is_dir() and (into / ".git").exists():
        return _existing(stack, into, kind, explicit=source is not None)  # checkouts appear whole: no lock to read one
    with _target_lock(into, progress):
        return _fetch_locked(stack, into, kind, url=url, progress=progress, explicit=source is not None)


def _existing(stack: Stack, into: Path, kind: str, *, explicit: bool = False) -> FetchResult:
    """Accept the checkout already at ``into`` if its tag is the pinned commit; reports the source it was made from.

    With ``--source`` given (``explicit``), a checkout made from the other source is refused.
    """
    from sgpatch.checkout.state import check_base_files

    g = Git(into)
    g.locate()  # git's own refusal (another user's repository) is said as such, not as a missing tag
    head = g.head()
    expected = stack.pypi_commit if kind == "pypi" else stack.commit
    tagged = g.rev_parse(f"refs/tags/{stack.tag}^{{commit}}")
    if tagged is not None and tagged in (stack.commit, stack.pypi_commit) and head is not None:
        made = "git" if tagged == stack.commit else "pypi"
        if explicit and made != kind:
            raise CheckoutError(
                f"{into}: is a checkout made from {made} (tag {stack.tag} is {tagged[:12]}), not from {kind}",
                hint=f"pass --into DIR for a fresh {kind} checkout, or --source {made}",
            )
        check_base_files(g, stack, tagged)
        return FetchResult(stack.name, made, into, tagged, False, None)
    raise CheckoutError(
        f"{into}: is a git repository, but its tag {stack.tag} is {tagged or 'missing'}, not {expected}",
        hint="pass --into DIR for a fresh checkout",
    )


def _fetch_locked(
    stack: Stack,
    into: Path,
    kind: str,
    *,
    url: str | None,
    progress: Progress | None,
    explicit: bool = False,
) -> FetchResult:
    from sgpatch.checkout.state import check_base_files

    if into.is_dir() and (into / ".git").exists():
        return _existing(stack, into, kind, explicit=explicit)  # made by the fetch we waited for

    def accept(g: Git, commit: str) -> None:
        if kind == "pypi" and stack.pypi_commit and commit != stack.pypi_commit:
            assert artifact is not None
            raise SourceError(
                f"{artifact.filename} produced commit {commit}, but {stack.name} pins pypi_commit {stack.pypi_commit}",
                hint="the artifact or sgpatch's layout changed; re-pin deliberately",
            )
        check_base_files(g, stack, commit)

    artifact: Artifact | None = None
    artifact_path: Path | None = None
    if kind == "git":
        target = url or stack.git_url
        if not target:
            raise SourceError(f"stack {stack.name} has no git_url; pass --url URL")
        if progress:
            progress(f"cloning {target} at {stack.tag}")
        commit = create_git_checkout(stack, target, into, check=accept)
    else:
        artifact = stack.source_artifact
        assert artifact is not None
        artifact_path = fetch_artifact(artifact, stack.sglang_version, progress=progress)
        if progress:
            progress(f"laying out {artifact.filename} as a git checkout in {into}")
        commit = create_pypi_checkout(stack, artifact_path, into, artifact, check=accept)
    return FetchResult(stack.name, kind, into, commit, True, artifact_path)
