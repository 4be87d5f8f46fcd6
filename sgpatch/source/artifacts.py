"""The download cache and pip: SGLang's PyPI files fetched by pin, checked by sha256.

pip does every download, so the user's index URL, mirrors, proxy and
certificates apply; the sha256 pin is what makes any mirror trustworthy.  A
file enters the cache (``$XDG_CACHE_HOME/sgpatch/artifacts/<sha256>/<name>``)
only after its hash was checked, so anything found there can be reused.  pip
runs tied to sgpatch (it dies with it; Ctrl-C still reaches it); what a killed
download left (``.download-*``) is removed by the next one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from sgpatch.cache import cache_root as cache_root
from sgpatch.config import Artifact
from sgpatch.errors import EnvironmentFailure, SourceError
from sgpatch.lock import exclusive, pause, tie_to_parent
from sgpatch.results import Progress

PACKAGE = "sglang"


def artifacts_root() -> Path:
    return cache_root() / "artifacts"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_artifact(path: Path, artifact: Artifact) -> None:
    """Refuse a local artifact whose sha256 is not the pinned one (before any extraction)."""
    actual = sha256_file(path)
    if actual != artifact.sha256:
        raise SourceError(f"{path}: sha256 mismatch: expected {artifact.sha256}, got {actual}")


class NoDistribution(SourceError):
    """The index has no file of the asked kind for the release (e.g. no sdist from 0.5.11 on)."""


# pip says so in these words when the index has no file of the asked kind (and exits 1, as for any failure).
_NO_DISTRIBUTION = ("No matching distribution", "Could not find a version")


def target_options(filename: str) -> list[str]:
    """pip's options that make it download the wheel ``filename`` whatever this host is
    (``--platform``, ``--python-version``, ``--implementation``, ``--abi``); none for a pure wheel."""
    try:
        tags = sorted(parse_wheel_filename(filename)[3], key=str)
    except InvalidWheelFilename:
        return []
    if not tags or all(t.platform == "any" for t in tags):
        return []
    out: list[str] = []
    for platform in sorted({t.platform for t in tags}):
        out += ["--platform", platform]
    interpreter = tags[0].interpreter
    digits = interpreter[2:]
    if interpreter.startswith("cp") and digits.isdigit():
        out += ["--python-version", f"{digits[0]}.{digits[1:]}", "--implementation", "cp"]
    for abi in sorted({t.abi for t in tags}):
        out += ["--abi", abi]
    return out


def pip_download(
    version: str, kind: str, dest: Path, *, show_pip: bool = False, label: str = "", wheel: str | None = None
) -> Path:
    """The one file (sdist or wheel) of ``sglang==version`` that pip downloads into ``dest``;
    with ``wheel`` (a file name), that wheel whatever the host's own tags are.

    ``NoDistribution`` when the index has none of that kind; ``EnvironmentFailure``
    (exit 3, naming ``label``) when pip cannot download.
    """
    binary = ["--no-binary", ":all:"] if kind == "sdist" else ["--only-binary", ":all:"]
    if kind != "sdist" and wheel:
        binary += target_options(wheel)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", *binary]
    cmd += ["--dest", str(dest), f"{PACKAGE}=={version}"]
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
    err = (proc.stderr or b"").decode("utf-8", "replace")
    got = [p for p in dest.iterdir() if p.is_file()]
    if proc.returncode == 0 and len(got) == 1:
        return got[0]
    if proc.returncode != 0 and any(words in err for words in _NO_DISTRIBUTION):
        raise NoDistribution(f"the package index has no {kind} of {PACKAGE} {version}")
    tail = [line.strip() for line in err.strip().splitlines() if line.strip()]
    detail = tail[-1] if tail else f"pip exited {proc.returncode}"
    if proc.returncode == 0:
        detail = f"pip produced {len(got)} files, expected 1"
    raise EnvironmentFailure(
        f"cannot download {label or f'{PACKAGE} {version} ({kind})'}: {detail}",
        hint="check the package index configured for pip (pip config list)",
    )


def _cached_path(artifact: Artifact) -> Path:
    return artifacts_root() / artifact.sha256 / artifact.filename


def fetch_artifact(
    artifact: Artifact,
    version: str,
    *,
    progress: Progress | None = None,
    show_pip: bool = False,
) -> Path:
    """The pinned artifact in the cache, downloaded through the user's pip if missing.

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
            try:
                got = pip_download(
                    version,
                    artifact.kind,
                    Path(tmp),
                    show_pip=show_pip,
                    label=artifact.filename,
                    wheel=artifact.filename if artifact.kind == "wheel" else None,
                )
            except NoDistribution as exc:
                raise EnvironmentFailure(
                    f"cannot download {artifact.filename}: {exc.message}",
                    hint="check the package index configured for pip (pip config list)",
                ) from None
            if got.name != artifact.filename:
                raise EnvironmentFailure(
                    f"cannot download {artifact.filename}: pip did not produce {artifact.filename} (got {got.name})",
                    hint="check the package index configured for pip (pip config list)",
                )
            pause("fetch:downloaded")
            actual = sha256_file(got)
            if actual != artifact.sha256:
                raise SourceError(
                    f"{artifact.filename}: sha256 mismatch: expected {artifact.sha256}, got {actual}",
                    hint="the index served a different file than the one pinned in VERSIONS.toml",
                )
            os.replace(got, cached)
    return cached
