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
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sgpatch.config import Artifact, Stack
from sgpatch.errors import CheckoutError, SourceError
from sgpatch.git.attributes import write_info_attributes
from sgpatch.git.clone import check_git_url, check_ref_name, clone
from sgpatch.git.pack import BlobPack, blob_pack
from sgpatch.git.repo import Git
from sgpatch.lock import Held, exclusive, pause
from sgpatch.results import Progress
from sgpatch.source.archive import WHEEL_CHECKOUT_EPOCH, Kind, open_archive
from sgpatch.source.artifacts import cache_root, fetch_artifact, trusted_dir

# Files an sdist or wheel has that upstream's git tree does not: packaging output.
_GENERATED_TOP = {"PKG-INFO", "setup.cfg"}
_GENERATED_SUFFIXES = (".egg-info", ".dist-info")
_VERSION_FILE = "sglang/_version.py"  # written by setuptools-scm at build time; upstream ignores it
# Compiled extension modules: the one part of a platform wheel that differs per CPython version and platform.
_EXTENSION = re.compile(r"\.(so|pyd|dylib)(\.[0-9.]+)?$")
# A checkout made from wheels has no date of its own (each platform's wheel was zipped at another
# time): its commit carries this fixed one, so the same files make the same commit from any wheel.


def is_extension(name: str) -> bool:
    """Whether a wheel member is a compiled extension (``_core.cpython-311-x86_64-linux-gnu.so``)."""
    return bool(_EXTENSION.search(name))


# --------------------------------------------------------------------------- reading archives


@dataclass(frozen=True, slots=True)
class Member:
    """One regular file of an artifact, mapped into upstream's layout (its bytes are on disk)."""

    path: str  # checkout-relative, e.g. python/sglang/__init__.py
    executable: bool


def _keep(rel: PurePosixPath, *, wheel: bool = False) -> bool:
    """Drop packaging output that upstream's git tree does not carry (and, from a wheel, compiled extensions)."""
    if wheel and is_extension(rel.name):
        return False
    parts = rel.parts
    if not parts:
        return False
    if len(parts) == 1 and parts[0] in _GENERATED_TOP:
        return False
    if parts[0].endswith(_GENERATED_SUFFIXES):
        return False
    return str(rel) != _VERSION_FILE


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def extract_archive(
    path: Path, dest: Path, kind: Kind | None = None, *, sha256: str | None = None, blobs: BlobPack | None = None
) -> tuple[list[Member], int]:
    """Write the regular files of an sdist or wheel under ``dest/python/`` (packaging output left out),
    member by member in chunks, so no member is ever held whole in memory; returns them and the newest
    member mtime.  Every member is checked by sgpatch.source.archive before anything is written, and each
    file is created anew (never through a link, never over another).  ``sha256``: the pin, checked on the
    bytes the members are then read from.  ``blobs``: each file written as a git blob too, in order."""
    with open_archive(path, kind, sha256=sha256) as archive:
        wheel = archive.kind == "wheel"
        keep = {e.name for e in archive.entries if _keep(PurePosixPath(e.name), wheel=wheel)}
        members: list[Member] = []
        made: set[Path] = set()  # the directories made so far: each is made once, not once per file in it
        for entry in archive.entries:
            if entry.name not in keep:
                continue
            # From wheels, no executable bits: they vary between the wheels of one release (each CPython
            # version's build sets its own), so the checkout is the same whichever wheel it was made from.
            member = Member(f"python/{entry.name}", entry.executable and not wheel)
            target = dest / member.path
            if target.parent not in made:
                target.parent.mkdir(parents=True, exist_ok=True)
                made.add(target.parent)
            fd = os.open(target, _NEW_FILE, 0o755 if member.executable else 0o644)
            with os.fdopen(fd, "wb") as out:
                # A wheel's deflated member goes into the pack as it is stored: its bytes inflated from it here.
                stored = archive.deflated(entry.name) if blobs is not None else None
                if blobs is not None:
                    blobs.begin(entry.size, stored[0] if stored is not None else None)
                for chunk in stored[1] if stored is not None else archive.chunks(entry.name):
                    out.write(chunk)
                    if blobs is not None:
                        blobs.write(chunk)
                if blobs is not None:
                    blobs.end()
            members.append(member)
        return members, WHEEL_CHECKOUT_EPOCH if wheel else archive.newest


def extract_artifact(path: Path, artifact: Artifact, dest: Path) -> tuple[list[Member], int]:
    """``extract_archive`` of a pinned artifact, its sha256 checked first (on the bytes then extracted)."""
    return extract_archive(path, dest, "sdist" if artifact.kind == "sdist" else "wheel", sha256=artifact.sha256)


def wheel_tree(path: Path, *, sha256: str | None = None) -> dict[str, bytes]:
    """What a checkout made from the wheel at ``path`` holds: each kept member's sha256 (``sha256``: the pin,
    checked on the bytes read)."""
    with open_archive(path, "wheel", sha256=sha256) as archive:
        return {e.name: archive.digest(e.name) for e in archive.entries if _keep(PurePosixPath(e.name), wheel=True)}


TreeOf = Callable[[Artifact, Path], dict[str, bytes]]


def check_wheels_agree(
    stack: Stack, *, progress: Progress | None = None, tree_of: TreeOf | None = None
) -> tuple[str, ...]:
    """Every pinned wheel downloaded (sha256-checked) and compared: their files other than
    compiled extensions must be the same, so the checkout is one whichever wheel a host makes it from.
    ``tree_of`` reads a wheel's ``wheel_tree`` (a cache may keep it, keyed by the wheel's sha256).

    Returns the wheels compared; SourceError naming the first file that differs (or is missing)."""
    wheels = sorted(stack.wheels, key=lambda a: a.filename)
    if len(wheels) < 2:
        return tuple(a.filename for a in wheels)
    first: tuple[Artifact, dict[str, bytes]] | None = None
    for artifact in wheels:
        path = fetch_artifact(artifact, stack.sglang_version, progress=progress)
        if progress:
            progress(f"comparing the files of {artifact.filename}")
        tree = tree_of(artifact, path) if tree_of is not None else wheel_tree(path, sha256=artifact.sha256)
        if first is None:
            first = (artifact, tree)
            continue
        ref_artifact, ref = first
        for name in sorted(set(ref) | set(tree)):
            if ref.get(name) != tree.get(name):
                ref_name = ref_artifact.filename
                if name not in tree:
                    what = f"lacks {name}, which {ref_name} carries"
                elif name not in ref:
                    what = f"carries {name}, which {ref_name} lacks"
                else:
                    what = f"{name} differs from {ref_name}'s"
                raise SourceError(
                    f"{artifact.filename}: {what}",
                    hint="the pinned wheels must carry the same files but for compiled extensions; "
                    "pin only wheels of one build",
                )
    return tuple(a.filename for a in wheels)


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
        g.read_tree(commit)  # the index, then the files' stat data read
        g.refresh_index()
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
