"""Pinned sources: the PyPI artifact (download, sha256, safe extraction) and git clones.

A ``pypi`` checkout is built deterministically from the pinned artifact: files
laid out under ``python/`` as upstream has them, written as blobs without
filters, committed with a fixed identity and the artifact's own newest
timestamp, so the commit SHA is the same on every machine.

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
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sgpatch.checkout import CommitSpec, Git, check_git_url, check_ref_name, clone
from sgpatch.config import Artifact, Stack
from sgpatch.errors import CheckoutError, EnvironmentFailure, SourceError
from sgpatch.lock import Held, exclusive, pause, tie_to_parent
from sgpatch.results import Progress

# Files an sdist or wheel has that upstream's git tree does not: packaging output.
_GENERATED_TOP = {"PKG-INFO", "setup.cfg"}
_GENERATED_SUFFIXES = (".egg-info", ".dist-info")
_VERSION_FILE = "sglang/_version.py"  # written by setuptools-scm at build time; upstream ignores it


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sgpatch"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _cached_path(artifact: Artifact) -> Path:
    return cache_root() / "artifacts" / artifact.sha256 / artifact.filename


def fetch_artifact(
    artifact: Artifact,
    version: str,
    *,
    progress: Progress | None = None,
    show_pip: bool = False,
) -> Path:
    """The pinned artifact in the cache, downloaded through the user's pip if missing.

    pip does the download so that the user's index URL, mirrors, proxy and
    certificates apply; the sha256 pin is what makes any mirror trustworthy.
    The file enters the cache only after its hash matched; an interrupted or
    refused download leaves nothing behind (and what a killed one left, the
    next one removes).
    """
    cached = _cached_path(artifact)
    if cached.is_file() and sha256_file(cached) == artifact.sha256:
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(
        cached.parent / ".lock", what=f"the download of {artifact.filename}", command="fetch", notify=progress
    ):
        if cached.is_file():
            if sha256_file(cached) == artifact.sha256:
                return cached  # another sgpatch downloaded it while we waited
            cached.unlink()  # a corrupted cache entry is never trusted
        for stale in cached.parent.glob(".download-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a killed run: we hold the lock
        if progress:
            progress(f"downloading {artifact.filename} with pip")
        with tempfile.TemporaryDirectory(prefix=".download-", dir=cached.parent) as tmp:
            got = _pip_download(artifact, version, Path(tmp), show_pip=show_pip)
            pause("fetch:downloaded")
            actual = sha256_file(got)
            if actual != artifact.sha256:
                raise SourceError(
                    f"{artifact.filename}: sha256 mismatch: expected {artifact.sha256}, got {actual}",
                    hint="the index served a different file than the one pinned in VERSIONS.toml",
                )
            os.replace(got, cached)
    return cached


def _pip_download(artifact: Artifact, version: str, dest: Path, *, show_pip: bool) -> Path:
    binary = ["--no-binary", ":all:"] if artifact.kind == "sdist" else ["--only-binary", ":all:"]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        *binary,
        "--dest",
        str(dest),
        f"sglang=={version}",
    ]
    try:
        proc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr if show_pip else subprocess.PIPE,
            stderr=sys.stderr if show_pip else subprocess.PIPE,
            check=False,
            preexec_fn=tie_to_parent(own_group=False),  # pip dies with us; Ctrl-C still reaches it
        )
    except OSError as exc:
        raise EnvironmentFailure(f"cannot run pip: {exc}") from exc
    got = dest / artifact.filename
    if proc.returncode != 0 or not got.is_file():
        tail = [line for line in (proc.stderr or b"").decode("utf-8", "replace").strip().splitlines() if line.strip()]
        detail = tail[-1].strip() if tail else f"pip exited {proc.returncode}"
        if proc.returncode == 0:
            detail = f"pip did not produce {artifact.filename}"
        raise EnvironmentFailure(
            f"cannot download {artifact.filename}: {detail}",
            hint="check the package index configured for pip (pip config list)",
        )
    return got


def verify_artifact(path: Path, artifact: Artifact) -> None:
    """Refuse a local artifact whose sha256 is not the pinned one (before any extraction)."""
    actual = sha256_file(path)
    if actual != artifact.sha256:
        raise SourceError(f"{path}: sha256 mismatch: expected {artifact.sha256}, got {actual}")


# --------------------------------------------------------------------------- reading archives


@dataclass(frozen=True, slots=True)
class Member:
    """One regular file of an artifact, mapped into upstream's layout."""

    path: str  # checkout-relative, e.g. python/sglang/__init__.py
    data: bytes
    executable: bool


def _safe_relative(name: str, where: str) -> PurePosixPath:
    pure = PurePosixPath(name)
    if name.startswith("/") or pure.is_absolute() or ".." in pure.parts or "\\" in name or not pure.parts:
        raise SourceError(
            f"{where}: member {name!r} escapes the archive root", hint="the artifact is hostile or corrupt"
        )
    if any(part.lower() == ".git" for part in pure.parts):
        raise SourceError(
            f"{where}: member {name!r} is git metadata; refusing to extract", hint="the artifact is hostile"
        )
    return pure


def _check_members(members: list[Member], where: str) -> None:
    """Each path once, and never both a file and a directory (which would fail half-way)."""
    seen: set[str] = set()
    for m in members:
        if m.path in seen:
            raise SourceError(f"{where}: member {m.path!r} appears twice", hint="the artifact is hostile or corrupt")
        seen.add(m.path)
    dirs = {str(parent) for m in members for parent in PurePosixPath(m.path).parents}
    clash = sorted(seen & dirs)
    if clash:
        raise SourceError(
            f"{where}: member {clash[0]!r} is both a file and a directory", hint="the artifact is hostile or corrupt"
        )


def _keep(rel: PurePosixPath) -> bool:
    """Drop packaging output that upstream's git tree does not carry."""
    parts = rel.parts
    if not parts:
        return False
    if len(parts) == 1 and parts[0] in _GENERATED_TOP:
        return False
    if parts[0].endswith(_GENERATED_SUFFIXES):
        return False
    return str(rel) != _VERSION_FILE


def read_sdist(path: Path) -> tuple[list[Member], int]:
    """Regular files of an sdist under ``python/``, and the newest member mtime."""
    members: list[Member] = []
    newest = 0
    try:
        with tarfile.open(path, "r:gz") as tar:
            top: str | None = None
            for info in tar:
                pure = _safe_relative(info.name, str(path))
                if not (info.isfile() or info.isdir()):
                    raise SourceError(f"{path}: member {info.name!r} is a link or device; refusing to extract")
                if top is None:
                    top = pure.parts[0]
                if pure.parts[0] != top:
                    raise SourceError(f"{path}: member {info.name!r} is outside the top directory {top!r}")
                newest = max(newest, int(info.mtime))
                if info.isdir():
                    continue
                rel = PurePosixPath(*pure.parts[1:])
                if not _keep(rel):
                    continue
                fh = tar.extractfile(info)
                assert fh is not None
                members.append(Member(f"python/{rel}", fh.read(), bool(info.mode & 0o111)))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise SourceError(f"{path}: not a readable sdist: {exc}") from exc
    return members, newest


def read_wheel(path: Path) -> tuple[list[Member], int]:
    """Files of a wheel under ``python/`` (its top level is upstream's python/), newest mtime."""
    import calendar

    members: list[Member] = []
    newest = 0
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                pure = _safe_relative(info.filename, str(path))
                if info.is_dir():
                    continue
                mode = (info.external_attr >> 16) & 0o170000
                if mode not in (0, 0o100000):
                    raise SourceError(f"{path}: member {info.filename!r} is a link or device; refusing to extract")
                newest = max(newest, calendar.timegm((*info.date_time, 0, 0, 0)))
                if not _keep(pure):
                    continue
                executable = bool((info.external_attr >> 16) & 0o111)
                members.append(Member(f"python/{pure}", zf.read(info), executable))
    except (zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"{path}: not a readable wheel: {exc}") from exc
    return members, newest


def read_artifact(path: Path, artifact: Artifact) -> tuple[list[Member], int]:
    verify_artifact(path, artifact)
    members, newest = read_sdist(path) if artifact.kind == "sdist" else read_wheel(path)
    _check_members(members, str(path))
    return members, newest


# --------------------------------------------------------------------------- checkouts


@dataclass(frozen=True, slots=True)
class FetchResult:
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


def _target_lock(into: Path, progress: Progress | None = None) -> AbstractContextManager[Held]:
    """The lock on creating ``into``: a hidden file beside it, removed on release."""
    into.parent.mkdir(parents=True, exist_ok=True)
    return exclusive(into.parent / f".{into.name}.sgpatch-lock", what=str(into), command="fetch", notify=progress)


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
    return (
        f"sglang {stack.sglang_version} from PyPI {artifact.filename}\n\n"
        f"Laid out under python/ as upstream {stack.tag} has it; packaging output\n"
        f"(PKG-INFO, setup.cfg, *.egg-info, sglang/_version.py) left out.\n\n"
        f"Sgpatch-Source: pypi {artifact.filename}\n"
        f"Sgpatch-Source-Sha256: {artifact.sha256}\n" + (f"Upstream-Commit: {stack.commit}\n" if stack.commit else "")
    )


Check = Callable[[Git, str], None]


def create_pypi_checkout(
    stack: Stack, archive: Path, into: Path, artifact: Artifact, *, check: Check | None = None
) -> str:
    """Lay the artifact out as a git checkout in ``into``; returns the deterministic commit.

    The checkout is built beside ``into`` and renamed into place only when
    complete and accepted by ``check`` (called with the new repository and
    commit), so a failure or a kill never leaves a half-made checkout at ``into``.
    """
    members, newest = read_artifact(archive, artifact)  # sha256 checked before reading members
    check_ref_name(stack.tag)
    _prepare_target(into)
    with _target_lock(into), _staged(into) as staging:
        _prepare_target(into)
        g = Git(staging)
        g.init(branch=f"sgpatch/{stack.name}")
        try:
            for m in members:
                target = staging / m.path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(m.data)
                if m.executable:
                    target.chmod(0o755)
        except OSError as exc:
            raise SourceError(f"{archive}: cannot lay out {artifact.filename}: {exc}") from None
        blobs = g.hash_files([m.path for m in members])
        g.add_index_entries(
            [("100755" if m.executable else "100644", blob, m.path) for m, blob in zip(members, blobs, strict=True)]
        )
        g.refresh_index()
        tree = g.out("write-tree")
        commit = g.commit_tree(CommitSpec(tree, (), pypi_commit_message(stack, artifact), f"{newest} +0000"))
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
        g = clone(target, staging, tag=stack.tag)
        commit = g.rev_parse(f"refs/tags/{stack.tag}^{{commit}}")
        if commit is None:
            raise CheckoutError(f"{url}: has no tag {stack.tag}")
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
        g.run("checkout", "-q", "-B", f"sgpatch/{stack.name}", commit)
        g.write_info_attributes()
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
    show_pip: bool = False,
) -> FetchResult:
    """Create the stack's checkout in ``into`` (or accept the one there) from the pinned source."""
    kind = source or stack.default_source
    if kind not in ("git", "pypi"):
        raise SourceError(f"unknown source {kind!r}: use pypi or git")
    if into.is_dir() and (into / ".git").exists():
        return _existing(stack, into, kind)  # checkouts appear whole (renamed into place): no lock to read one
    with _target_lock(into, progress):
        return _fetch_locked(stack, into, kind, url=url, progress=progress, show_pip=show_pip)


def _existing(stack: Stack, into: Path, kind: str) -> FetchResult:
    """Accept the checkout already at ``into`` if its tag is the pinned commit."""
    from sgpatch.state import check_base_files

    g = Git(into)
    head = g.head()
    expected = stack.pypi_commit if kind == "pypi" else stack.commit
    tagged = g.rev_parse(f"refs/tags/{stack.tag}^{{commit}}")
    if tagged is not None and tagged in (stack.commit, stack.pypi_commit) and head is not None:
        check_base_files(g, stack, tagged)
        return FetchResult(stack.name, kind, into, tagged, False, None)
    raise CheckoutError(
        f"{into}: is a git repository, but its tag {stack.tag} is {tagged or 'missing'}, not {expected}",
        hint="pass --into DIR for a fresh checkout",
    )


def _fetch_locked(
    stack: Stack, into: Path, kind: str, *, url: str | None, progress: Progress | None, show_pip: bool
) -> FetchResult:
    from sgpatch.state import check_base_files

    if into.is_dir() and (into / ".git").exists():
        return _existing(stack, into, kind)  # made by the fetch we waited for

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
        artifact_path = fetch_artifact(artifact, stack.sglang_version, progress=progress, show_pip=show_pip)
        if progress:
            progress(f"laying out {artifact.filename} as a git checkout in {into}")
        commit = create_pypi_checkout(stack, artifact_path, into, artifact, check=accept)
    return FetchResult(stack.name, kind, into, commit, True, artifact_path)
