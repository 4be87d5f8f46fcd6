"""The user's cache directory for sgpatch (``$XDG_CACHE_HOME/sgpatch``): downloads, locks, cached reports.

Its own room, importing nothing, so a command that only reads a cached report does not load the downloader.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sgpatch"
