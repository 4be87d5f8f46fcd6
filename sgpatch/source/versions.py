"""Which releases the package index lists: what ``watch`` compares with the newest stack.

The project page is asked for and checked exactly as for one release's files
(sgpatch.source.index: the index pip is configured with, PEP 691 JSON or PEP 503
HTML, bounded, every file's fields checked).  A version counts when it has at
least one file a port can use: the sdist or a wheel a Linux x86_64/aarch64
CPython host installs, not yanked (port downloads no yanked file).  Versions are
compared as PEP 440 says (``packaging``): ``1.0`` and ``1.0.0`` are one release (named by its
longest spelling).  A file whose version is not PEP 440 is left out and named, as are local
versions (``0.6.0+mirror.1``: a rebuild, not a release), pre-releases (unless asked for) and
wholly yanked releases.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from sgpatch.errors import EnvironmentFailure
from sgpatch.source.failures import NotFound
from sgpatch.source.http import shown
from sgpatch.source.index import IndexFile, listing, served
from sgpatch.source.pipconfig import pip_settings


@dataclass(frozen=True, slots=True)
class Listed:
    """The releases an index lists, oldest first, and what was left out and why."""

    index: str  # the index asked, as messages show it (no credentials)
    versions: tuple[str, ...]  # normalized PEP 440 versions, ascending
    skipped: tuple[str, ...] = ()  # one line each: "0.6.0rc1: a pre-release (--pre takes it)"


def _usable(f: IndexFile) -> bool:
    if f.yanked:
        return False
    return f.kind == "sdist" or served(parse_wheel_filename(f.filename)[3])


def listed_versions(project: str, *, pre: bool = False) -> Listed:
    """Every release of ``project`` on pip's index with a file a port can use (see the module docstring)."""
    settings = pip_settings()
    base = settings.index_url
    try:
        files = listing(project, None, base, settings.client())
    except NotFound as exc:
        raise EnvironmentFailure(exc.message, hint=exc.hint) from None
    by_version: dict[Version, list[IndexFile]] = {}  # equal under PEP 440 (1.0 and 1.0.0): one release
    texts: dict[Version, str] = {}
    skipped: list[str] = []
    for f in files:
        if not f.version:
            skipped.append(f"{f.filename}: its version is not PEP 440; left out")
            continue
        version = Version(f.version)
        by_version.setdefault(version, []).append(f)
        texts[version] = max(texts.get(version, f.version), f.version, key=lambda t: (len(Version(t).release), t))
    kept: list[Version] = []
    for version, group in by_version.items():
        text = texts[version]
        if version.local is not None:
            skipped.append(f"{text}: a local version (a rebuild, not a release of {project}); left out")
        elif version.is_prerelease and not pre:
            skipped.append(f"{text}: a pre-release (--pre takes it)")
        elif not any(_usable(f) for f in group):
            why = "every file is yanked" if all(f.yanked for f in group) else "no sdist or Linux CPython wheel"
            skipped.append(f"{text}: {why}; left out")
        else:
            kept.append(version)
    return Listed(shown(base), tuple(texts[v] for v in sorted(kept)), tuple(skipped))
